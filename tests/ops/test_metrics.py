"""``GET /metrics`` end to end: a real server, real sockets and the real clients; the
Prometheus text parses with prometheus-client's parser and its counters match, outcome by
outcome, the calls this test made. The state gauges over real LMDB directories, commits
and pins."""

from __future__ import annotations

import asyncio
import logging
import threading
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from drpc.client import (
    AuthorizationException,
    DRPCClient,
    DRPCExecutionException,
    DRPCInvocationsClient,
    HTTPDRPCClient,
)
from drpc.server import DRPCServer
from drpc.server.identity import TokenTable
from drpc.server.limits import Limits
from drpc.server.metrics import OTHER, ServerMetrics
from drpc.server.service import PendingRequest
from prometheus_client.parser import text_string_to_metric_families

from drpc.errors import DRPCExceptionType
from drpc.state import CoordinatorState, StateEnvironment, StateTxn, TransactionalMap
from drpc.state.pins import Pin
from tests.server.helpers import HOST, exclamation, failing_topology, running_server, wait_until

ALICE_TOKEN = "alice-token-0123456789"
MALLORY_TOKEN = "mallory-token-0123456789"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(server: DRPCServer) -> tuple[str, Samples]:
    with urllib.request.urlopen(f"http://{HOST}:{server.http_port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain; version=")
        text = reply.read().decode("utf-8")
    return text, parse(text)


def requests_by_outcome(samples: Samples) -> dict[tuple[str, str], float]:
    return {
        (labels["function"], labels["outcome"]): value
        for (name, items), value in samples.items()
        if name == "drpc_requests_total" and (labels := dict(items))
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def refuse_mallory(identity: str | None, operation: str, function: str) -> None:
    if identity == "mallory":
        raise AuthorizationException(f"DRPC request {operation!r} for 'mallory' is refused")


class Call(threading.Thread):
    """One execute call on a thread of its own; ``error`` is how it failed."""

    def __init__(self, port: int, function: str, args: str) -> None:
        super().__init__(daemon=True)
        self.port, self.function, self.args = port, function, args
        self.error: DRPCExecutionException | None = None
        self.start()

    def run(self) -> None:
        with DRPCClient(HOST, self.port, timeout=20) as client:
            try:
                client.execute(self.function, self.args)
            except DRPCExecutionException as error:
                self.error = error

    def failed_with(self) -> DRPCExceptionType | None:
        self.join(20)
        assert not self.is_alive()
        return None if self.error is None else self.error.type


def test_counters_match_the_calls_sent_by_outcome() -> None:
    tokens = TokenTable({"alice": ALICE_TOKEN, "mallory": MALLORY_TOKEN})
    options = {
        "wait_for_unserved": True,  # "held" queues until it times out, as in Storm
        "timeout": 2.0,
        "limits": Limits(max_queue_depth=2),
        "tokens": tokens,
        "authorizer": refuse_mallory,
    }
    with running_server(exclamation(), failing_topology(), **options) as server:
        port, url = server.port, f"http://{HOST}:{server.http_port}"
        # two calls wait in the queue of "held" (the limit), a third is refused at once
        held = [Call(port, "held", "x") for _ in range(2)]
        wait_until(lambda: server.service.queue_depth("held") == 2)
        with DRPCClient(HOST, port, timeout=20) as client:
            with pytest.raises(DRPCExecutionException, match=r"^server busy: "):
                client.execute("held", "refused")
            for i in range(5):
                assert client.execute("exclamation", str(i)) == f"{i}!"
            assert client.execute("failing", "fine") == "fine!"
            for _ in range(2):
                with pytest.raises(DRPCExecutionException) as failed:
                    client.execute("failing", "bad")
                assert failed.value.type is DRPCExceptionType.FAILED_REQUEST
        with HTTPDRPCClient(url, token=ALICE_TOKEN, timeout=20) as alice:
            assert alice.execute("exclamation", "http") == "http!"
        for token in (MALLORY_TOKEN, "no-such-token-at-all"):  # refused by the ACL; unknown
            with (
                HTTPDRPCClient(url, token=token, timeout=20) as caller,
                pytest.raises(AuthorizationException),
            ):
                caller.execute("exclamation", "denied")
        with DRPCInvocationsClient(HOST, server.invocations_port, timeout=20) as runner:
            runner.result("999999", "too late")  # an id the server never issued
        assert [call.failed_with() for call in held] == [DRPCExceptionType.SERVER_TIMEOUT] * 2

        text, samples = scrape(server)
        assert requests_by_outcome(samples) == {
            ("exclamation", "ok"): 6,
            ("exclamation", "unauthorized"): 2,
            ("failing", "ok"): 1,
            ("failing", "failed"): 2,
            ("held", "busy"): 1,
            ("held", "timeout"): 2,
        }
        # latencies of queued calls only: refusals never queued
        assert value(samples, "drpc_request_duration_seconds_count", function="exclamation") == 6
        assert value(samples, "drpc_request_duration_seconds_count", function="held") == 2
        assert value(samples, "drpc_request_duration_seconds_sum", function="held") >= 2 * 2.0
        assert value(samples, "drpc_queue_wait_seconds_count", function="exclamation") == 6
        assert value(samples, "drpc_queue_wait_seconds_count", function="held") is None
        assert value(samples, "drpc_late_results_total") == 1
        assert value(samples, "drpc_requests_outstanding") == 0
        assert value(samples, "drpc_requests_in_flight", function="exclamation") == 0
        assert "# TYPE drpc_requests_total counter" in text
        assert "# TYPE drpc_request_duration_seconds histogram" in text

        # a call held when the server stops ends with SERVER_SHUTDOWN
        last = Call(port, "held", "until shutdown")
        wait_until(lambda: server.service.queue_depth("held") == 1)
        _, samples = scrape(server)
        assert value(samples, "drpc_queue_depth", function="held") == 1
        assert value(samples, "drpc_requests_outstanding") == 1
    assert last.failed_with() is DRPCExceptionType.SERVER_SHUTDOWN
    samples = parse(server.metrics.exposition().decode("utf-8"))
    assert requests_by_outcome(samples)[("held", "shutdown")] == 1


def test_names_nobody_serves_share_one_series() -> None:
    with running_server(exclamation()) as server, DRPCClient(HOST, server.port) as client:
        for i in range(20):
            with pytest.raises(DRPCExecutionException) as refused:
                client.execute(f"random-{i}", "x")
            assert "is not served" in refused.value.msg
        assert client.execute("exclamation", "x") == "x!"
        text, samples = scrape(server)
    assert requests_by_outcome(samples) == {(OTHER, "failed"): 20, ("exclamation", "ok"): 1}
    assert "random-" not in text


def test_each_server_has_its_own_registry() -> None:
    with running_server(exclamation()) as first, running_server(exclamation()) as second:
        with DRPCClient(HOST, first.port) as client:
            assert client.execute("exclamation", "one") == "one!"
        _, first_samples = scrape(first)
        _, second_samples = scrape(second)
    assert requests_by_outcome(first_samples) == {("exclamation", "ok"): 1}
    assert requests_by_outcome(second_samples) == {}


def test_long_function_names_get_short_label_values() -> None:
    at, over = "f" * 40, "g" * 41
    with running_server(exclamation(), limits=Limits(max_label_length=40)) as server:
        with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as runner:
            for name in (at, over):
                assert runner.fetch_request(name) is None  # served from now on
            calls = [Call(server.port, name, "x") for name in (at, over)]
            wait_until(lambda: server.service.outstanding() == 2)
            for name in (at, over):
                request = runner.fetch_request(name)
                assert request is not None
                runner.result(request.return_info.request_id, "done")
        assert [call.failed_with() for call in calls] == [None, None]
        text, samples = scrape(server)
    labels = {function for function, _ in requests_by_outcome(samples)}
    assert at in labels  # at the limit: the name itself
    assert over not in text
    [cut] = labels - {at}
    assert len(cut) == 40 and cut.startswith("g" * 31 + "~")


class Recorder:
    """A collector that notes the thread every scrape renders on and can hold a scrape."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.release = threading.Event()

    def describe(self) -> list[object]:
        return []

    def collect(self) -> list[object]:
        self.threads.append(threading.get_ident())
        self.release.wait(10)
        return []


async def test_metrics_render_off_the_event_loop_one_at_a_time() -> None:
    recorder = Recorder()
    with running_server(exclamation()) as server:
        server.metrics.registry.register(recorder)
        url = f"http://{HOST}:{server.http_port}/metrics"
        async with aiohttp.ClientSession() as session:

            async def scrape_once() -> int:
                async with session.get(url) as response:
                    await response.read()
                    return response.status

            scrapes = [asyncio.ensure_future(scrape_once()) for _ in range(3)]
            while not recorder.threads:
                await asyncio.sleep(0.01)
            # While a rendering is held, the loop still answers calls.
            with DRPCClient(HOST, server.port, timeout=10) as client:
                assert await asyncio.to_thread(client.execute, "exclamation", "x") == "x!"
            await asyncio.sleep(0.2)  # the other scrapes arrive and wait for this rendering
            recorder.release.set()
            assert await asyncio.gather(*scrapes) == [200, 200, 200]
        loop_thread = server.service._loop_thread
    assert len(recorder.threads) == 1  # three scrapes, one rendering
    assert recorder.threads[0] != loop_thread


def test_step_spans_are_attributed_through_fetched_requests_only() -> None:
    # A request withdrawn unfetched (its caller closed) runs no step: remembering it would
    # only keep one entry per abandoned call alive after its burst.
    metrics = ServerMetrics(max_recent=8)
    abandoned, fetched = (PendingRequest(str(i), "f", "x", 0.0, 30.0, 30.0) for i in (1, 2))
    for request in (abandoned, fetched):
        metrics.request_submitted(request)
    metrics.request_fetched(fetched, 1.0)
    assert metrics.recent.get(abandoned.id) is None
    assert metrics.recent.get(fetched.id) == "f"


def commit(env: StateEnvironment, topology: str, txid: int) -> None:
    """One real commit of ``topology``'s ``txid``: an update of its map and its commit record."""
    counts = TransactionalMap(env, f"{topology}-counts", default=0)
    coordinator = CoordinatorState(env, topology)

    def write(txn: StateTxn) -> None:
        counts.handle(txn, txid).update("word", lambda n: n + 1)
        coordinator.record_commit(txn, txid)

    env.run_write(write)


def commit_around_a_pin(env: StateEnvironment) -> Pin:
    """words commits 1, its version is pinned, then words 2 and counts 1 commit: the pin
    keeps the undo logs of both."""
    commit(env, "words", 1)
    pin = env.pin()
    commit(env, "words", 2)
    commit(env, "counts", 1)
    return pin


def state_samples(metrics: ServerMetrics, env: StateEnvironment) -> dict[str, float]:
    """``env``'s ``drpc_state_*`` samples by name (with ``:topology`` for txids)."""
    found: dict[str, float] = {}
    for (name, items), sample in parse(metrics.exposition().decode("utf-8")).items():
        labels = dict(items)
        if name.startswith("drpc_state_") and labels["state_dir"] == env.path:
            found[name + (f":{labels['topology']}" if "topology" in labels else "")] = sample
    return found


def test_state_gauges_follow_commits_and_pins(tmp_path: Path) -> None:
    # whole paths as label values; room for every directory earlier tests left open
    metrics = ServerMetrics(max_label_length=4096, max_state_dirs=100_000)
    env = StateEnvironment.open(tmp_path / "state")
    try:
        pin = commit_around_a_pin(env)
        held, status = state_samples(metrics, env), env.version_status()
        assert held.pop("drpc_state_oldest_pin_age_seconds") > 0
        assert held == {
            "drpc_state_version": env.latest_version(),
            "drpc_state_committed_txid:words": 2,
            "drpc_state_committed_txid:counts": 1,
            "drpc_state_pins": 1,
            "drpc_state_undo_logs": status.undo_logs,
        }
        assert status.undo_logs == 2  # the pinned version needs both writes since undone
        env.release(pin)
        commit(env, "words", 3)
        released, status = state_samples(metrics, env), env.version_status()
        assert released == {
            "drpc_state_version": env.latest_version(),
            "drpc_state_committed_txid:words": 3,
            "drpc_state_committed_txid:counts": 1,
            "drpc_state_oldest_pin_age_seconds": 0,
            "drpc_state_pins": 0,
            "drpc_state_undo_logs": status.undo_logs,
        }
        assert status.undo_logs == 1
    finally:
        env.close()
    assert state_samples(metrics, env) == {}  # closed: gone, and the scrape still works


def test_state_directories_past_the_bound_are_left_out(tmp_path: Path) -> None:
    metrics = ServerMetrics(max_state_dirs=1, max_label_length=4096)
    first, second = (StateEnvironment.open(tmp_path / name) for name in ("a", "b"))
    try:
        for env in (first, second):
            commit(env, "words", 1)
        # The first directory open at the first scrape, by path, keeps the one label.
        expected = StateEnvironment.open_environments()[0].path
        shown = {
            dict(labels)["state_dir"]
            for (name, labels), _ in parse(metrics.exposition().decode("utf-8")).items()
            if name == "drpc_state_version"
        }
        assert shown == {expected}
        assert state_samples(metrics, second) == {}
        if expected == first.path:  # no other test left a directory open before ours
            assert state_samples(metrics, first)["drpc_state_committed_txid:words"] == 1
    finally:
        first.close()
        second.close()


def test_a_directory_closed_during_the_scrape_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = ServerMetrics(max_label_length=4096, max_topologies=1)
    closed, live = (StateEnvironment.open(tmp_path / name) for name in ("closed", "live"))
    try:
        closed.close()
        commit(live, "words", 1)
        commit(live, "counts", 1)  # past max_topologies: no txid series of its own
        metrics.topologies("words")
        # as if it closed between the listing and its read
        monkeypatch.setattr(StateEnvironment, "open_environments", lambda: [closed, live])
        with caplog.at_level(logging.DEBUG, logger="drpc.server.metrics"):
            assert state_samples(metrics, closed) == {}
        assert f"state directory {closed.path!r} left out of the status" in caplog.text
        assert state_samples(metrics, live) == {
            "drpc_state_version": live.latest_version(),
            "drpc_state_committed_txid:words": 1,
            "drpc_state_oldest_pin_age_seconds": 0,
            "drpc_state_pins": 0,
            "drpc_state_undo_logs": live.version_status().undo_logs,
        }
    finally:
        live.close()
