"""``Dashboard`` fed events directly on a fake clock: what the page is given, and every
buffer on both sides of its bound; the state directories over real LMDB directories,
commits and pins. ``/api/status`` over a real server at the end."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from array import array
from pathlib import Path
from typing import Any

import pytest
from drpc.client import DRPCClient, DRPCExecutionException
from drpc.server.dashboard import LATENCY_BINS, Dashboard, latency_bin, percentile
from drpc.server.metrics import OTHER

from drpc.errors import AuthorizationException, DRPCExceptionType, ServerBusyError
from drpc.executors.stats import ComponentStats
from drpc.requests import PendingRequest, ReturnInfo
from drpc.state import StateEnvironment
from drpc.topologies import TopologyInfo
from tests.ops.test_metrics import commit, commit_around_a_pin
from tests.server.helpers import HOST, exclamation, failing_topology, running_server

FAILED = DRPCExceptionType.FAILED_REQUEST


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def dashboard(clock: Clock, **options: Any) -> Dashboard:
    return Dashboard(clock=clock, **options)


def call(
    board: Dashboard,
    clock: Clock,
    request_id: str,
    function: str = "f",
    *,
    seconds: float = 0.01,
    error: DRPCExecutionException | None = None,
) -> PendingRequest:
    """A request submitted now and settled ``seconds`` later (the clock moves on)."""
    pending = PendingRequest(request_id, function, "", clock.now, clock.now + 600, 600)
    board.request_submitted(pending)
    clock.now += seconds
    pending.error = error
    board.request_settled(pending, clock.now)
    return pending


def function_status(board: Dashboard, name: str) -> dict[str, Any]:
    (entry,) = [f for f in board.status()["functions"] if f["name"] == name]
    return entry


def test_percentiles_are_within_ten_percent() -> None:
    bins = array("I", bytes(4 * LATENCY_BINS))
    for ms in range(1, 101):
        bins[latency_bin(ms / 1000)] += 1
    assert percentile(bins, 0.5) == pytest.approx(0.050, rel=0.1)
    assert percentile(bins, 0.99) == pytest.approx(0.099, rel=0.1)
    assert percentile(None, 0.5) is None
    assert latency_bin(0.0) == 0
    assert latency_bin(1e9) == LATENCY_BINS - 1


def test_totals_rate_percentiles_and_series() -> None:
    clock = Clock()
    board = dashboard(clock, resolution=1.0, window=10.0, summary=5.0)
    clock.now += 10  # up for longer than the summary: the rate is over its 5 s
    for i in range(4):
        call(board, clock, str(i), seconds=0.1)
    call(board, clock, "4", seconds=0.2, error=DRPCExecutionException("boom", FAILED))
    status = function_status(board, "f")
    assert status["totals"] == {"ok": 4, "failed": 1}
    assert status["total"] == 5
    assert status["rate"] == pytest.approx(5 / 5.0)
    assert status["p50"] == pytest.approx(0.1, rel=0.1)
    assert status["p99"] == pytest.approx(0.2, rel=0.1)
    assert len(status["series"]) == 10
    counted = [slot["outcomes"] for slot in status["series"] if slot is not None]
    assert sum(sum(outcomes.values()) for outcomes in counted) == 5


def test_just_after_start_the_rate_is_over_the_time_up() -> None:
    clock = Clock()
    board = dashboard(clock, resolution=1.0, summary=60.0)
    clock.now += 4.0
    for i in range(8):
        call(board, clock, str(i), seconds=0.0)
    assert function_status(board, "f")["rate"] == pytest.approx(8 / 4.0)
    clock.now += 0.5 - 4.0  # never over less than one slot
    assert function_status(board, "f")["rate"] == pytest.approx(8 / 1.0)


def test_the_window_keeps_slots_up_to_its_length_and_no_longer() -> None:
    clock = Clock()
    board = dashboard(clock, resolution=1.0, window=10.0, summary=10.0)
    call(board, clock, "old", seconds=0.0)
    clock.now += 9.0  # the old slot is the oldest of the ten
    call(board, clock, "new", seconds=0.0)
    status = function_status(board, "f")
    assert status["series"][0] is not None and status["series"][-1] is not None
    assert status["recent"] == {"ok": 2}
    clock.now += 1.0  # now it is eleven slots old: gone from the charts, still in totals
    call(board, clock, "newer", seconds=0.0)
    status = function_status(board, "f")
    assert sum(slot is not None for slot in status["series"]) == 2
    assert status["recent"] == {"ok": 2}
    assert status["totals"] == {"ok": 3}
    assert all(len(f.series.slots) <= 10 for f in board._functions.values())


def test_the_summary_covers_only_its_last_seconds() -> None:
    clock = Clock()
    board = dashboard(clock, resolution=1.0, window=60.0, summary=5.0)
    call(board, clock, "1", seconds=0.0)
    clock.now += 4.0
    assert function_status(board, "f")["recent"] == {"ok": 1}
    clock.now += 1.0
    assert function_status(board, "f")["recent"] == {}
    assert function_status(board, "f")["rate"] == 0


def test_functions_past_max_functions_share_other() -> None:
    clock = Clock()
    board = dashboard(clock, max_functions=2)
    for name in ("a", "b", "c", "d"):
        call(board, clock, name, name)
    names = {f["name"]: f["totals"] for f in board.status()["functions"]}
    assert names == {"a": {"ok": 1}, "b": {"ok": 1}, OTHER: {"ok": 2}}
    board.request_refused(
        "nobody-serves-this", ServerBusyError("server busy: x", FAILED), False, 1.0
    )
    assert function_status(board, OTHER)["totals"] == {"ok": 2, "busy": 1}


def test_in_flight_tracking_queued_running_steps_and_its_bounds() -> None:
    clock = Clock()
    board = dashboard(clock, max_tracked=3, max_in_flight_shown=2)
    held = [PendingRequest(str(i), "f", "", clock.now + i, clock.now + 600, 600) for i in range(4)]
    for pending in held:
        board.request_submitted(pending)
    assert board.untracked == 1  # the fourth: past max_tracked
    board.request_fetched(held[1], clock.now)
    board.step_started(ReturnInfo("2"), "bolt1", clock.now + 2)
    clock.now += 10
    status = board.status()
    assert status["in_flight_total"] == 3
    shown = status["in_flight"]
    assert [r["id"] for r in shown] == ["0", "1"]  # the oldest, max_in_flight_shown of them
    assert shown[0]["state"] == "queued" and shown[0]["age"] == pytest.approx(10)
    assert shown[1]["state"] == "running" and shown[1]["step"] is None
    assert function_status(board, "f")["queued"] == 1
    assert function_status(board, "f")["running"] == 2
    board = dashboard(clock, max_in_flight_shown=3)
    for pending in held[:3]:
        board.request_submitted(pending)
    assert [r["id"] for r in board.status()["in_flight"]] == ["0", "1", "2"]  # at the bound
    board.step_started(ReturnInfo("2"), "join-result", clock.now - 3)  # first: shown
    (third,) = [r for r in board.status()["in_flight"] if r["id"] == "2"]
    assert (third["state"], third["step"], third["step_age"]) == ("running", "join-result", 3)
    board.step_started(ReturnInfo("2"), "bolt1", clock.now - 1)
    board.step_started(ReturnInfo("2"), "join-result", clock.now)  # waits for bolt1: ignored
    (third,) = [r for r in board.status()["in_flight"] if r["id"] == "2"]
    assert (third["state"], third["step"], third["step_age"]) == ("running", "bolt1", 1)
    assert board.untracked == 0


def test_failures_name_their_type_message_and_step() -> None:
    clock = Clock()
    board = dashboard(clock)
    pending = PendingRequest("9", "reach", "", clock.now, clock.now + 1, 1)
    board.request_submitted(pending)
    board.request_failed_in(ReturnInfo("9"), "bolt2", "ValueError: nope")
    pending.error = DRPCExecutionException("Request failed: ValueError: nope", FAILED)
    board.request_settled(pending, clock.now + 0.5)
    timed_out = PendingRequest("10", "reach", "", clock.now, clock.now + 1, 1)
    board.request_submitted(timed_out)
    board.step_started(ReturnInfo("10"), "bolt3", clock.now)
    timed_out.error = DRPCExecutionException("Timed Out", DRPCExceptionType.SERVER_TIMEOUT)
    board.request_settled(timed_out, clock.now + 1)
    queued = PendingRequest("11", "reach", "", clock.now, clock.now + 1, 1)
    board.request_submitted(queued)
    queued.error = DRPCExecutionException("Timed Out", DRPCExceptionType.SERVER_TIMEOUT)
    board.request_settled(queued, clock.now + 1)
    late = PendingRequest("12", "reach", "", clock.now, clock.now + 1, 1)
    board.request_submitted(late)
    late.error = DRPCExecutionException("Request failed", FAILED)
    board.request_settled(late, clock.now + 1)
    board.request_failed_in(ReturnInfo("12"), "bolt0", "reported after the failure settled")
    board.request_refused("reach", AuthorizationException("not for you"), True, clock.now)
    failures = board.status()["failures"]
    assert [(f["id"], f["outcome"], f["type"], f["step"]) for f in failures] == [
        (None, "unauthorized", "AuthorizationException", "refused"),
        ("12", "failed", "FAILED_REQUEST", "bolt0"),
        ("11", "timeout", "SERVER_TIMEOUT", "queued"),
        ("10", "timeout", "SERVER_TIMEOUT", "in bolt3"),
        ("9", "failed", "FAILED_REQUEST", "bolt2"),
    ]
    assert failures[-1]["message"] == "Request failed: ValueError: nope"
    assert failures[0]["message"] == "not for you"


def test_failures_keep_the_newest_max_failures() -> None:
    clock = Clock()
    board = dashboard(clock, max_failures=3)
    for i in range(3):
        call(board, clock, str(i), error=DRPCExecutionException(f"boom {i}", FAILED))
    assert [f["id"] for f in board.status()["failures"]] == ["2", "1", "0"]
    call(board, clock, "3", error=DRPCExecutionException("boom 3", FAILED))
    assert [f["id"] for f in board.status()["failures"]] == ["3", "2", "1"]


def test_messages_and_names_are_cut_at_their_limits() -> None:
    clock = Clock()
    board = dashboard(clock, max_message=10, max_name=5)
    call(board, clock, "1", "fives", error=DRPCExecutionException("x" * 10, FAILED))
    call(board, clock, "2", "sixsix", error=DRPCExecutionException("x" * 11, FAILED))
    second, first = board.status()["failures"]
    assert (first["message"], first["function"]) == ("x" * 10, "fives")
    assert (second["message"], second["function"]) == ("x" * 9 + "…", "sixs…")


def test_transactional_progress_in_flight_and_replays() -> None:
    clock = Clock()
    board = dashboard(clock, resolution=1.0, window=60.0, summary=10.0)
    clock.now += 20  # up for longer than the summary
    for txid in (1, 2, 3):
        board.tx_started("words", txid, 1, clock.now)
    board.tx_replayed("words", 2, "processing")
    board.tx_started("words", 2, 2, clock.now)
    clock.now += 1
    board.tx_committed("words", 1, 0.02, 9)
    board.tx_committed("words", 2, 0.04, 7)
    (words,) = board.status()["transactional"]
    assert words["last_committed"] == 2
    assert words["commits"] == 2
    assert words["tuples"] == 16
    assert words["tuples_per_second"] == pytest.approx(16 / 10)
    assert words["commit_p50"] == pytest.approx(0.02, rel=0.1)
    assert [(b["txid"], b["attempt"]) for b in words["in_flight"]] == [(3, 1)]
    assert words["replays"] == {"processing": 1}
    assert [(r["txid"], r["cause"]) for r in words["recent_replays"]] == [(2, "processing")]


def test_transactional_bounds_on_both_sides() -> None:
    clock = Clock()
    board = dashboard(
        clock, max_topologies=1, max_tx_in_flight=2, max_replays_shown=2, max_causes=1
    )
    for txid in (1, 2):
        board.tx_started("words", txid, 1, clock.now)
    (words,) = board.status()["transactional"]
    assert [b["txid"] for b in words["in_flight"]] == [1, 2]
    board.tx_started("words", 3, 1, clock.now)  # past max_tx_in_flight: the oldest goes
    (words,) = board.status()["transactional"]
    assert [b["txid"] for b in words["in_flight"]] == [2, 3]
    board.tx_replayed("words", 2, "processing")
    board.tx_replayed("words", 3, "processing")
    (words,) = board.status()["transactional"]
    assert [r["txid"] for r in words["recent_replays"]] == [3, 2]
    board.tx_replayed("words", 4, "commit")  # a second cause: past max_causes
    (words,) = board.status()["transactional"]
    assert [r["txid"] for r in words["recent_replays"]] == [4, 3]
    assert words["replays"] == {"processing": 2, OTHER: 1}
    board.tx_committed("other-topology", 1, 0.01, 1)  # past max_topologies
    names = [t["topology"] for t in board.status()["transactional"]]
    assert names == [OTHER, "words"]


def test_hosted_runs_show_their_state_even_before_their_first_event() -> None:
    clock = Clock()
    board = dashboard(clock, max_message=20)
    runs = {
        "quiet": {"running": True, "executor": "local", "last_txid": 7, "error": None},
        "words": {
            "running": False,
            "executor": "spark",
            "error": "TransactionalError: " + "x" * 30,
        },
    }
    board.watch_transactional(lambda: runs)
    board.tx_committed("words", 3, 0.01, 5)
    quiet, words = board.status()["transactional"]
    assert (quiet["topology"], quiet["running"], quiet["last_committed"]) == ("quiet", True, 7)
    assert quiet["commits"] == 0 and quiet["error"] is None
    assert len(quiet["series"]) == board.slot_count
    assert (words["topology"], words["running"], words["last_committed"]) == ("words", False, 3)
    assert words["error"] == "TransactionalError:…"  # cut at max_message
    assert words["executor"] == "spark"


def state_status(board: Dashboard, env: StateEnvironment) -> dict[str, Any] | None:
    """``env``'s entry in the page's state list, None when it is not shown."""
    found = [entry for entry in board.status()["state"] if entry["state_dir"] == env.path]
    assert len(found) <= 1
    return found[0] if found else None


ALL_OPEN = 100_000
"""A ``max_state_dirs`` above what the run has open: earlier tests leave directories open in
this process, and the first few by path need not be this test's."""


def test_state_directories_show_versions_txids_and_the_oldest_pin(tmp_path: Path) -> None:
    board = dashboard(Clock(), max_name=4096, max_state_dirs=ALL_OPEN)  # whole paths
    env = StateEnvironment.open(tmp_path / "state")
    try:
        pin = commit_around_a_pin(env)
        held, status = state_status(board, env), env.version_status()
        assert held is not None and held.pop("oldest_pin_age") > 0
        assert held == {
            "state_dir": env.path,
            "version": env.latest_version(),
            "horizon": status.horizon,
            "txids": {"counts": 1, "words": 2},
            "oldest_pinned": pin.version,
            "pins": 1,
            "undo_logs": status.undo_logs,
        }
        assert status.undo_logs == 2 and status.horizon is not None
        env.release(pin)
        commit(env, "words", 3)
        released, status = state_status(board, env), env.version_status()
        assert released == {
            "state_dir": env.path,
            "version": env.latest_version(),
            "horizon": status.horizon,
            "txids": {"counts": 1, "words": 3},
            "oldest_pinned": None,
            "oldest_pin_age": None,
            "pins": 0,
            "undo_logs": status.undo_logs,
        }
        assert status.undo_logs == 1
    finally:
        env.close()
    assert state_status(board, env) is None  # closed: gone


def test_state_directories_past_the_bound_are_left_out(tmp_path: Path) -> None:
    board = dashboard(Clock(), max_state_dirs=1, max_name=4096, max_topologies=1)
    first, second = (StateEnvironment.open(tmp_path / name) for name in ("a", "b"))
    try:
        for env in (first, second):
            commit(env, "words", 1)
            commit(env, "counts", 1)
        status = board.status()
        # the first open directory by path (partitions are shown with their state instead)
        open_now = [env for env in StateEnvironment.open_environments() if not env.is_partition]
        assert [entry["state_dir"] for entry in status["state"]] == [open_now[0].path]
        assert status["state_total"] == len(open_now) >= 2
        assert state_status(board, second) is None
        if open_now[0] is first:  # no other test left a directory open before ours
            assert status["state"][0]["txids"] == {"counts": 1}  # max_topologies, by name
    finally:
        first.close()
        second.close()


def test_state_names_are_cut_at_max_name(tmp_path: Path) -> None:
    board = dashboard(Clock(), max_name=12, max_state_dirs=ALL_OPEN)
    env = StateEnvironment.open(tmp_path / "state")
    try:
        commit(env, "a-topology-named-at-length", 1)
        shown = [entry for entry in board.status()["state"] if "a-topology-…" in entry["txids"]]
        assert [(entry["state_dir"], entry["txids"]) for entry in shown] == [
            (env.path[:11] + "…", {"a-topology-…": 1})
        ]
    finally:
        env.close()


@pytest.mark.parametrize(
    "name", ["window", "resolution", "max_failures", "max_tracked", "max_state_dirs"]
)
def test_limits_must_be_positive(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Dashboard(**{name: 0})


def test_api_status_over_a_real_server() -> None:
    with running_server(exclamation(), failing_topology()) as server:
        with DRPCClient(HOST, server.port) as client:
            assert client.execute("exclamation", "a") == "a!"
            with pytest.raises(DRPCExecutionException):
                client.execute("failing", "bad")
        base = f"http://{HOST}:{server.http_port}"
        with urllib.request.urlopen(base + "/api/status", timeout=10) as reply:
            assert reply.headers["Cache-Control"] == "no-store"
            status = json.load(reply)
        with urllib.request.urlopen(base + "/", timeout=10) as page:
            csp = page.headers["Content-Security-Policy"]
            html = page.read().decode()
        with urllib.request.urlopen(base + "/ui/dashboard.js", timeout=10) as script:
            assert script.headers["Content-Type"].startswith("text/javascript")
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/ui/secrets.txt", timeout=10)
        assert missing.value.code == 404
    totals = {f["name"]: f["totals"] for f in status["functions"]}
    assert totals == {"exclamation": {"ok": 1}, "failing": {"failed": 1}}
    assert status["server"]["served"] == ["exclamation", "failing"]
    (failure,) = status["failures"]
    assert failure["function"] == "failing"
    assert failure["type"] == "FAILED_REQUEST"
    assert "cannot handle 'bad'" in failure["message"]
    assert isinstance(status["state"], list) and status["state_total"] >= len(status["state"])
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert '<script src="/ui/dashboard.js"' in html


def test_plain_topologies_show_each_components_figures_and_names_are_cut() -> None:
    dashboard = Dashboard(max_name=8)
    assert dashboard.status()["topologies"] == []  # nothing watched
    components = {
        "sentences": ComponentStats("sentences", "spout", 1, 21, 20, 1, 0.25),
        "split": ComponentStats("split", "bolt", 2, 126, 21, 0),
    }
    info = TopologyInfo("word-count-topology", "local", 3.0, components)
    dashboard.watch_plain(lambda: {info.name: info})
    (shown,) = dashboard.status()["topologies"]
    assert shown["name"] == "word-co…"  # max_name characters, the last an ellipsis
    assert shown["executor"] == "local" and shown["uptime_secs"] == 3.0
    assert shown["components"] == [
        {"component": "sentenc…", "kind": "spout", "tasks": 1, "emitted": 21, "acked": 20,
         "failed": 1, "complete_latency_ms": 0.25},
        {"component": "split", "kind": "bolt", "tasks": 2, "emitted": 126, "acked": 21,
         "failed": 0, "complete_latency_ms": None},
    ]  # fmt: skip
