"""Real log brokers for tests: Debian's redis-server and nats-server on free loopback ports.

``RedisServer(directory)`` and ``NatsServer(directory)`` start a server on
127.0.0.1 at a free port, with a password (the spouts log in: credentials
are tested on every run), and ``stop()`` (SIGKILL with ``kill=True``) /
``start()`` it again on the same port and data directory: a restart.
Redis keeps no data by default (``--save "" --appendonly no``); with
``durable=True`` it writes an append-only file synced at every write, so a
restarted server still has its streams. JetStream stores its streams in the
directory, so a restart keeps them.

Fixtures (a plugin of ``tests/conftest.py``): ``redis_server`` and
``nats_server`` are one server each for the whole session, torn down after
it; a test that needs one skips, saying why, where the binary is missing
(``.ci/run`` installs both from Debian, as it does chromium). Helpers write
words: ``add_words`` (Redis, ``XADD`` pipelined), ``NatsServer.create_streams``
and ``NatsServer.publish``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from drpc.transactional.loop_thread import LoopThread

START_TIMEOUT = 20.0
PUBLISH_CHUNK = 5_000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def require_binary(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")
    if path is None:
        pytest.skip(f"{name} is not installed here (.ci/run installs Debian's {name} with apt)")
    return path


class _Server:
    binary = ""

    def __init__(self, directory: Path) -> None:
        self.path = require_binary(self.binary)
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.password = secrets.token_hex(12)
        self.process: subprocess.Popen[bytes] | None = None
        self.log = self.directory / "server.log"
        self._log_start = 0

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self._log_start = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.binary} did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)

    def ready(self) -> bool:
        return _listening(self.port)

    def stop(self, kill: bool = False) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            self.process.wait(30)
        self.process = None


class RedisServer(_Server):
    binary = "redis-server"

    def __init__(self, directory: Path, durable: bool = False, tls: bool = False) -> None:
        super().__init__(directory)
        self.durable = durable
        self.certificate = self.directory / "server.crt" if tls else None
        if self.certificate is not None:
            self_signed(self.certificate, self.directory / "server.key")

    @property
    def url(self) -> str:
        scheme = "rediss" if self.certificate is not None else "redis"
        return f"{scheme}://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.durable
            else ["--appendonly", "no"]
        )
        ports = ["--port", str(self.port)]
        if self.certificate is not None:  # TLS only, no client certificate asked for
            ports = [
                "--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no",
                "--tls-cert-file", str(self.certificate),
                "--tls-key-file", str(self.directory / "server.key"),
                "--tls-ca-cert-file", str(self.certificate),
            ]  # fmt: skip
        return [
            self.path, *ports, "--bind", "127.0.0.1", "--save", "",
            *persistence, "--dir", str(self.directory), "--requirepass", self.password,
        ]  # fmt: skip

    def client(self) -> Any:
        import redis

        tls: dict[str, Any] = {}
        if self.certificate is not None:
            tls = {"ssl": True, "ssl_ca_certs": str(self.certificate)}
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, **tls)

    def ready(self) -> bool:
        if not _listening(self.port):
            return False
        try:
            with self.client() as client:
                return bool(client.ping())
        except Exception:  # loading its data, or not answering yet
            return False


def self_signed(certificate: Path, key: Path) -> None:
    """A certificate for 127.0.0.1 signed by its own key (openssl), or skip saying why."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed here: no certificate for the TLS test")
    command = [
        openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-keyout", str(key), "-out", str(certificate), "-subj", "/CN=127.0.0.1",
        "-addext", "subjectAltName=IP:127.0.0.1",
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def add_words(client: Any, key: str, words: Iterable[str], field: str = "word") -> None:
    """``XADD key * field word`` for each word, pipelined."""
    pipe = client.pipeline(transaction=False)
    for count, word in enumerate(words, 1):
        pipe.xadd(key, {field: word})
        if count % PUBLISH_CHUNK == 0:
            pipe.execute()
    pipe.execute()


class NatsServer(_Server):
    binary = "nats-server"
    user = "drpc"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        """Listening, and JetStream is up (its log says the server is ready)."""
        with self.log.open("rb") as log:
            log.seek(self._log_start)
            return b"Server is ready" in log.read() and _listening(self.port)

    def command(self) -> list[str]:
        return [
            self.path, "-a", "127.0.0.1", "-p", str(self.port), "-js",
            "-sd", str(self.directory / "jetstream"), "--user", self.user, "--pass", self.password,
        ]  # fmt: skip

    def _run(self, work: Any) -> Any:
        import nats

        async def connected() -> Any:
            nc = await nats.connect(self.url, user=self.user, password=self.password)
            try:
                return await work(nc, nc.jetstream())
            finally:
                await nc.close()

        loop = LoopThread("test-nats")
        try:
            return loop.run(connected(), 120.0)
        finally:
            loop.close()

    def create_streams(self, *names: str) -> None:
        """Streams ``NAME`` capturing subject ``NAME`` (file storage: kept over a restart)."""
        from nats.js.api import StreamConfig

        async def create(nc: Any, js: Any) -> None:
            for name in names:
                await js.add_stream(StreamConfig(name=name, subjects=[name]))

        self._run(create)

    def publish(self, stream: str, payloads: Iterable[str]) -> None:
        """Publish each payload to ``stream``'s subject and wait until the stream holds them."""

        async def publish(nc: Any, js: Any) -> None:
            before = (await js.stream_info(stream)).state.last_seq
            sent = 0
            for payload in payloads:
                await nc.publish(stream, payload.encode())
                sent += 1
                if sent % PUBLISH_CHUNK == 0:
                    await nc.flush()
            await nc.flush()
            while (await js.stream_info(stream)).state.last_seq < before + sent:
                await asyncio.sleep(0.01)

        self._run(publish)

    def delete_messages(self, stream: str, sequences: Iterable[int]) -> None:
        async def delete(nc: Any, js: Any) -> None:
            for sequence in sequences:
                await js.delete_msg(stream, sequence)

        self._run(delete)

    def purge(self, stream: str, keep: int = 0) -> None:
        """Remove the stream's oldest messages, keeping the last ``keep``."""

        async def purge(nc: Any, js: Any) -> None:
            await js.purge_stream(stream, keep=keep)

        self._run(purge)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


class Broker:
    """One broker as the spout tests use it: numbered partitions named from ``names``
    (a fresh prefix per test), words appended, entries trimmed, spouts made."""

    kind = ""

    def __init__(self, server: Any, names: str) -> None:
        self.server = server
        self.names = names

    def name(self, partition: int) -> str:
        return self.names.format(partition)

    def spout_options(self) -> dict[str, Any]:
        raise NotImplementedError

    def create(self, partition: int) -> None:
        """Make ``partition`` exist (empty)."""

    def append(self, partition: int, words: Iterable[str], field: str = "word") -> None:
        """Append one entry per word (Redis: in ``field``; JetStream: the payload)."""
        raise NotImplementedError

    def trim(self, partition: int) -> None:
        """Remove every entry ``partition`` holds now."""
        raise NotImplementedError

    def spout(self, take: int, opaque: bool = False, field: str = "word", **options: Any) -> Any:
        from drpc.transactional.jetstream import (
            JetStreamTransactionalSpout,
            OpaqueJetStreamTransactionalSpout,
        )
        from drpc.transactional.redis_streams import (
            OpaqueRedisStreamsTransactionalSpout,
            RedisStreamsTransactionalSpout,
        )

        kinds = {
            ("redis", False): RedisStreamsTransactionalSpout,
            ("redis", True): OpaqueRedisStreamsTransactionalSpout,
            ("nats", False): JetStreamTransactionalSpout,
            ("nats", True): OpaqueJetStreamTransactionalSpout,
        }
        kind = kinds[(self.kind, opaque)]
        return kind(self.server.url, self.names, (field,), take, **self.spout_options(), **options)

    def environment(self) -> dict[str, str]:
        """What ``tests.transactional.broker_faults`` reads to make the same spout."""
        return {
            "DRPC_TEST_BROKER": self.kind,
            "DRPC_TEST_BROKER_URL": self.server.url,
            "DRPC_TEST_BROKER_PASSWORD": self.server.password,
            "DRPC_TEST_BROKER_NAMES": self.names,
        }


class RedisBroker(Broker):
    kind = "redis"

    def spout_options(self) -> dict[str, Any]:
        return {"password": self.server.password}

    def create(self, partition: int) -> None:
        with self.server.client() as client:
            client.xgroup_create(self.name(partition), "drpc-tests", mkstream=True)

    def append(self, partition: int, words: Iterable[str], field: str = "word") -> None:
        with self.server.client() as client:
            add_words(client, self.name(partition), words, field)

    def trim(self, partition: int) -> None:
        with self.server.client() as client:
            client.xtrim(self.name(partition), maxlen=0, approximate=False)


class NatsBroker(Broker):
    kind = "nats"

    def spout_options(self) -> dict[str, Any]:
        return {"username": self.server.user, "password": self.server.password}

    def create(self, partition: int) -> None:
        self.server.create_streams(self.name(partition))

    def append(self, partition: int, words: Iterable[str], field: str = "word") -> None:
        self.server.publish(self.name(partition), words)

    def trim(self, partition: int) -> None:
        self.server.purge(self.name(partition))


def make_broker(kind: str, server: Any) -> Broker:
    """A broker of ``kind`` on ``server`` with partition names no other test uses."""
    prefix = f"t{secrets.token_hex(4)}"
    if kind == "redis":
        return RedisBroker(server, prefix + ":{}")
    return NatsBroker(server, prefix.upper() + "_{}")


BROKERS = ["redis", "nats"]


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> Broker:
    """Each broker in turn, on its session server."""
    server = request.getfixturevalue(f"{request.param}_server")
    return make_broker(str(request.param), server)


@dataclass(frozen=True)
class _Remote:
    """A server another process started: what a spout needs to reach it."""

    url: str
    password: str
    user: str = NatsServer.user


def broker_from_environment() -> Broker:
    """The broker ``Broker.environment()`` described (for runs in a subprocess)."""
    server = _Remote(os.environ["DRPC_TEST_BROKER_URL"], os.environ["DRPC_TEST_BROKER_PASSWORD"])
    kind = RedisBroker if os.environ["DRPC_TEST_BROKER"] == "redis" else NatsBroker
    return kind(server, os.environ["DRPC_TEST_BROKER_NAMES"])
