"""Broker connections without a broker: settings from URLs, secrets kept out of reprs, logs and
errors, backoff, reconnecting and the waiting status, and the extras named when a client
library is missing."""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys

import pytest

from drpc.errors import BrokerError, BrokerUnavailableError, MissingExtraError
from drpc.transactional.brokers import (
    TLS,
    Backoff,
    BrokerLink,
    Secret,
    waiting_for,
)
from drpc.transactional.jetstream import JetStreamTransactionalSpout, nats_settings
from drpc.transactional.redis_streams import (
    OpaqueRedisStreamsTransactionalSpout,
    RedisStreamsTransactionalSpout,
    redis_settings,
)
from tests.brokers import free_port

PASSWORD = "s3cret-Pa55"


def test_urls_give_address_database_tls_and_credentials() -> None:
    settings = redis_settings(f"rediss://reader:{PASSWORD}@cache.example:6380/2")
    assert (settings.host, settings.port, settings.database) == ("cache.example", 6380, 2)
    assert settings.tls == TLS() and settings.username == "reader"
    assert settings.password == Secret(PASSWORD) and settings.description == (
        "redis at cache.example:6380"
    )
    assert redis_settings("redis://h").port == 6379 and redis_settings("redis://h").tls is None
    nats = nats_settings("nats://tok3n@h", username="u", password="p")
    assert (nats.port, nats.token, nats.username) == (4222, Secret("tok3n"), "u")
    assert nats_settings("tls://h:1").tls == TLS()
    beside = redis_settings(f"redis://u:{PASSWORD}@h", password="other")
    assert beside.password == Secret("other")  # an argument beside the URL wins
    with pytest.raises(ValueError) as caught:
        redis_settings(f"http://u:{PASSWORD}@h")
    assert PASSWORD not in str(caught.value)


def test_secrets_never_show_in_reprs_or_errors_and_travel_pickled() -> None:
    spout = RedisStreamsTransactionalSpout(
        f"redis://user:{PASSWORD}@127.0.0.1:1", "words:{}", ("word",), 10
    )
    nats = JetStreamTransactionalSpout("nats://127.0.0.1:1", "W_{}", token=PASSWORD)
    for shown in (repr(spout), str(spout.options), repr(nats), repr(nats.options.settings)):
        assert PASSWORD not in shown and "***" in shown
    assert repr(Secret(PASSWORD)) == str(Secret(PASSWORD)) == "'***'"
    copy = pickle.loads(pickle.dumps(spout))  # how a spout reaches Spark executors
    assert copy.options.settings.password.reveal() == PASSWORD
    settings = spout.options.settings
    assert settings.scrub(f"auth {PASSWORD} failed") == "auth *** failed"


def test_backoff_doubles_up_to_its_maximum() -> None:
    backoff = Backoff(initial=0.05, maximum=2.0)
    assert [backoff.delay(n) for n in (1, 2, 3, 6, 7, 20)] == [0.05, 0.1, 0.2, 1.6, 2.0, 2.0]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_link_retries_with_backoff_then_raises_a_typed_error_and_says_it_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    settings = redis_settings(f"redis://:{PASSWORD}@127.0.0.1:7")
    attempts: list[str] = []

    def connect() -> str:
        attempts.append("connect")
        raise ConnectionRefusedError(f"refused for {PASSWORD}")

    link: BrokerLink[str] = BrokerLink(
        settings,
        connect,
        lambda client: None,
        (OSError,),
        retry_for=1.0,
        clock=lambda: clock.now,
        sleep=clock.sleep,
    )
    caplog.set_level(logging.INFO, logger="drpc.transactional.brokers")
    with pytest.raises(BrokerUnavailableError) as caught:
        link.call(lambda client: client)
    assert str(caught.value) == (
        "redis at 127.0.0.1:7 is unreachable: ConnectionRefusedError: refused for *** "
        "(retried for 1 s)"
    )
    assert clock.slept[:4] == [0.05, 0.1, 0.2, 0.4] and sum(clock.slept) == pytest.approx(1.0)
    assert waiting_for("redis at 127.0.0.1:7") == "waiting for redis at 127.0.0.1:7"
    assert not link.probe(lambda client: None)  # backing off: no try now
    tries = len(attempts)
    clock.now += 5
    assert not link.probe(lambda client: None) and len(attempts) == tries + 1
    link.close()
    assert waiting_for("redis at 127.0.0.1:7") is None
    assert [r.getMessage() for r in caplog.records] == [
        "waiting for redis at 127.0.0.1:7: ConnectionRefusedError: refused for ***; "
        "retrying with backoff"
    ]


def test_a_link_recovers_and_stops_waiting(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    up = [False]

    def connect() -> str:
        if not up[0]:
            raise ConnectionResetError("reset")
        return "client"

    settings = nats_settings("nats://127.0.0.1:8")
    link: BrokerLink[str] = BrokerLink(
        settings, connect, lambda c: None, (OSError,), retry_for=60, sleep=clock.sleep
    )
    caplog.set_level(logging.INFO, logger="drpc.transactional.brokers")
    assert not link.probe(lambda client: None)
    assert waiting_for(settings.description) == "waiting for nats at 127.0.0.1:8"
    up[0] = True
    assert link.call(lambda client: client.upper()) == "CLIENT"
    assert waiting_for(settings.description) is None
    assert caplog.records[-1].getMessage() == "nats at 127.0.0.1:8 answers again"


def test_an_unreachable_redis_is_a_typed_error_after_retrying(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()  # nothing listens there
    spout = OpaqueRedisStreamsTransactionalSpout(
        f"redis://:{PASSWORD}@127.0.0.1:{port}", "k", ("word",), 5, retry_for=0.3
    )
    reader = spout.get_emitter({}, None)
    caplog.set_level(logging.DEBUG)
    try:
        assert not reader.is_ready()
        assert reader.waiting_for() == f"waiting for redis at 127.0.0.1:{port}"
        with pytest.raises(BrokerUnavailableError) as caught:
            reader.read_new(0, None)
        assert f"redis at 127.0.0.1:{port} is unreachable" in str(caught.value)
    finally:
        reader.close()
    assert reader.waiting_for() is None
    assert all(PASSWORD not in record.getMessage() for record in caplog.records)


def test_a_wrong_password_is_refused_not_retried(redis_server: object) -> None:
    url = redis_server.url  # type: ignore[attr-defined]
    spout = RedisStreamsTransactionalSpout(url, "k", ("word",), 5, password=PASSWORD)
    reader = spout.get_coordinator({}, None)
    try:
        with pytest.raises(BrokerError) as caught:
            reader.next_range(0, None)
        assert "refused the connection" in str(caught.value)
        assert PASSWORD not in str(caught.value)
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("module", "extra", "make"),
    [
        ("redis", "redis", lambda: RedisStreamsTransactionalSpout("redis://h:1", "k")),
        ("nats", "nats", lambda: JetStreamTransactionalSpout("nats://h:1", "S")),
    ],
)
def test_a_missing_client_library_names_the_extra_to_install(
    module: str, extra: str, make: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # an import of it now fails
    spout = make()  # type: ignore[operator]  # building the spout needs no client library
    reader = spout.get_coordinator({}, None)
    with pytest.raises(MissingExtraError) as caught:
        reader.is_ready()
    assert f"pip install 'drpc-spark[{extra}]'" in str(caught.value)
    assert isinstance(caught.value, ImportError)


def test_bad_arguments_are_refused_when_the_spout_is_built() -> None:
    for bad in ({"take_per_batch": 0}, {"codec": "xml"}, {"invalid": "ignore"}):
        with pytest.raises(ValueError):
            RedisStreamsTransactionalSpout("redis://h", "k", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RedisStreamsTransactionalSpout("redis://h", "k:{}:{}")
    with pytest.raises(ValueError):
        JetStreamTransactionalSpout("nats://h", "S", ("a", "b"))  # several fields need JSON


def test_drpc_imports_without_the_client_libraries() -> None:
    code = (
        "import sys; sys.modules['redis'] = sys.modules['nats'] = None; "
        "import drpc, drpc.transactional.redis_streams, drpc.transactional.jetstream, "
        "drpc.trident, drpc.server.app"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
