"""``ServerMetrics`` fed events directly, as the service, executors and transactional runs
report them; each label bound and buffer on both sides."""

from __future__ import annotations

import pytest
from drpc.server.metrics import OTHER, BoundedLabels, RecentRequests, ServerMetrics

from drpc.errors import AuthorizationException, DRPCExceptionType, DRPCExecutionException
from drpc.requests import PendingRequest, ReturnInfo
from tests.ops.test_metrics import Samples, parse, requests_by_outcome, value


def samples(metrics: ServerMetrics) -> Samples:
    return parse(metrics.exposition().decode("utf-8"))


def request(request_id: str, function: str, submitted: float = 100.0) -> PendingRequest:
    return PendingRequest(request_id, function, "args", submitted, submitted + 600, 600)


def fetch(metrics: ServerMetrics, pending: PendingRequest, now: float) -> None:
    """What the service does when a runtime takes the request: only then can it run steps."""
    pending.fetched = True
    metrics.request_fetched(pending, now)


def settle(
    metrics: ServerMetrics,
    pending: PendingRequest,
    now: float,
    error: DRPCExecutionException | None = None,
) -> None:
    pending.error = error
    metrics.request_settled(pending, now)


def test_outcomes_and_latencies_of_settled_and_refused_calls() -> None:
    metrics = ServerMetrics()
    ok, failed, timed_out = request("1", "f"), request("2", "f"), request("3", "f")
    for pending in (ok, failed, timed_out):
        metrics.request_submitted(pending)
    metrics.request_fetched(ok, 100.5)
    ok.fetched = True
    assert value(samples(metrics), "drpc_requests_in_flight", function="f") == 1
    settle(metrics, ok, 101.0)
    failed_error = DRPCExecutionException("Request failed", DRPCExceptionType.FAILED_REQUEST)
    settle(metrics, failed, 100.25, failed_error)
    timeout = DRPCExecutionException("Timed Out", DRPCExceptionType.SERVER_TIMEOUT)
    settle(metrics, timed_out, 700.0, timeout)
    internal = DRPCExecutionException("lost", DRPCExceptionType.INTERNAL_ERROR)
    lost = request("4", "f")
    settle(metrics, lost, 100.1, internal)
    metrics.request_refused("f", AuthorizationException("no"), True, 100.0)
    got = samples(metrics)
    assert requests_by_outcome(got) == {
        ("f", "ok"): 1,
        ("f", "failed"): 1,
        ("f", "timeout"): 1,
        ("f", "internal_error"): 1,
        ("f", "unauthorized"): 1,
    }
    assert value(got, "drpc_requests_in_flight", function="f") == 0
    assert value(got, "drpc_request_duration_seconds_count", function="f") == 4
    assert value(got, "drpc_request_duration_seconds_sum", function="f") == pytest.approx(
        1.0 + 0.25 + 600.0 + 0.1
    )
    assert value(got, "drpc_request_duration_seconds_bucket", function="f", le="0.5") == 2
    assert value(got, "drpc_queue_wait_seconds_sum", function="f") == pytest.approx(0.5)


def test_function_labels_are_bounded_on_both_sides() -> None:
    metrics = ServerMetrics(max_functions=2)
    for name in ("a", "b", "c"):  # at the bound: a and b; past it: c
        pending = request(name, name)
        metrics.request_submitted(pending)
        settle(metrics, pending, 101.0)
    metrics.request_refused("never-served", AuthorizationException("no"), False, 100.0)
    metrics.request_refused(
        "a", AuthorizationException("no"), False, 100.0
    )  # has its label already
    assert requests_by_outcome(samples(metrics)) == {
        ("a", "ok"): 1,
        ("b", "ok"): 1,
        (OTHER, "ok"): 1,
        (OTHER, "unauthorized"): 1,
        ("a", "unauthorized"): 1,
    }


def test_bounded_labels() -> None:
    labels = BoundedLabels(2)
    assert labels("x", admit=False) == OTHER
    assert [labels("x"), labels("y"), labels("z"), labels("x")] == ["x", "y", OTHER, "x"]
    assert len(labels) == 2
    with pytest.raises(ValueError, match="bound"):
        BoundedLabels(0)


def test_label_values_are_cut_at_their_length_and_stay_apart() -> None:
    labels = BoundedLabels(10, length=32)
    at, over, other = "a" * 32, "a" * 33, "a" * 32 + "b"
    assert labels(at) == at  # at the limit: whole
    cut = labels(over)
    assert len(cut) == 32 and cut.startswith("a" * 23 + "~") and cut != at
    assert labels(other) != cut and len(labels(other)) == 32  # same start, another value
    assert labels(over) == cut  # the same name keeps its value
    assert BoundedLabels(1, length=None)("n" * 5000) == "n" * 5000
    with pytest.raises(ValueError, match="length"):
        BoundedLabels(1, length=9)


def test_executor_events_feed_batch_job_and_step_metrics() -> None:
    metrics = ServerMetrics()
    metrics.batch_coalesced("reach", 1)
    metrics.batch_coalesced("reach", 31)
    metrics.job_started("reach", "job-1", 31, 10.0)
    metrics.job_started("reach", "job-2", 1, 10.1)
    assert value(samples(metrics), "drpc_spark_jobs_in_flight", function="reach") == 2
    metrics.job_finished("reach", "job-1", True, 0.8)
    metrics.job_finished("reach", "job-2", False, 0.2)
    pending = request("7", "reach")
    metrics.request_submitted(pending)
    fetch(metrics, pending, 100.1)
    settle(metrics, pending, 101.0)  # a span reported after its request settled still counts
    metrics.step_finished(ReturnInfo("7"), "bolt1", 100.2, 100.5, {"spark_job_id": 3})
    metrics.step_finished(ReturnInfo("unknown-id"), "bolt1", 100.2, 100.5, {})
    got = samples(metrics)
    assert value(got, "drpc_batch_size_count", function="reach") == 2
    assert value(got, "drpc_batch_size_sum", function="reach") == 32
    assert value(got, "drpc_batch_size_bucket", function="reach", le="1.0") == 1
    assert value(got, "drpc_spark_jobs_in_flight", function="reach") == 0
    assert value(got, "drpc_spark_job_duration_seconds_sum", function="reach") == pytest.approx(1)
    assert value(got, "drpc_spark_jobs_total", function="reach", outcome="ok") == 1
    assert value(got, "drpc_spark_jobs_total", function="reach", outcome="failed") == 1
    step = {"function": "reach", "step": "bolt1"}
    assert value(got, "drpc_step_duration_seconds_count", **step) == 1
    assert value(got, "drpc_step_duration_seconds_sum", **step) == pytest.approx(0.3)


def test_steps_of_requests_older_than_max_recent_are_not_attributed() -> None:
    metrics = ServerMetrics(max_recent=2)
    for request_id in ("1", "2", "3"):
        pending = request(request_id, "f")
        metrics.request_submitted(pending)
        fetch(metrics, pending, 100.1)
        settle(metrics, pending, 101.0)
    for request_id in ("1", "2", "3"):  # "1" fell out; "2" and "3" are the last two
        metrics.step_finished(ReturnInfo(request_id), "s", 100.0, 100.1, {})
    assert value(samples(metrics), "drpc_step_duration_seconds_count", function="f", step="s") == 2


def test_recent_requests_bound() -> None:
    recent = RecentRequests(2)
    for request_id in ("1", "2", "3"):
        recent.add(request_id, f"f{request_id}")
    assert (recent.get("1"), recent.get("2"), recent.get("3"), len(recent)) == (None, "f2", "f3", 2)


def test_step_labels_are_bounded() -> None:
    metrics = ServerMetrics(max_steps=1)
    pending = request("1", "f")
    metrics.request_submitted(pending)
    fetch(metrics, pending, 100.1)
    settle(metrics, pending, 101.0)
    for step in ("bolt0", "bolt1"):
        metrics.step_finished(ReturnInfo("1"), step, 100.0, 100.1, {})
    got = samples(metrics)
    assert value(got, "drpc_step_duration_seconds_count", function="f", step="bolt0") == 1
    assert value(got, "drpc_step_duration_seconds_count", function="f", step=OTHER) == 1


def test_transactional_events() -> None:
    metrics = ServerMetrics()
    for txid in (1, 2, 3):
        metrics.tx_started("words", txid, 1, 10.0)
    got = samples(metrics)
    assert value(got, "drpc_tx_batches_in_flight", topology="words") == 3
    metrics.tx_replayed("words", 2, "processing")
    metrics.tx_replayed("words", 3, "processing")
    metrics.tx_started("words", 2, 2, 11.0)  # the replay of 2: still one batch in flight
    metrics.tx_committed("words", 1, 0.02, 9)
    metrics.tx_committed("words", 2, 0.04, 7)
    got = samples(metrics)
    assert value(got, "drpc_tx_last_committed_txid", topology="words") == 2
    assert value(got, "drpc_tx_batches_in_flight", topology="words") == 1
    assert value(got, "drpc_tx_commits_total", topology="words") == 2
    assert value(got, "drpc_tx_tuples_total", topology="words") == 16
    assert value(got, "drpc_tx_replays_total", topology="words", cause="processing") == 2
    assert value(got, "drpc_tx_commit_duration_seconds_sum", topology="words") == pytest.approx(
        0.06
    )


def test_topology_and_cause_labels_are_bounded() -> None:
    metrics = ServerMetrics(max_topologies=1, max_causes=1)
    metrics.tx_replayed("first", 1, "processing")
    metrics.tx_replayed("first", 1, "commit")
    metrics.tx_replayed("second", 1, "processing")
    got = samples(metrics)
    assert value(got, "drpc_tx_replays_total", topology="first", cause="processing") == 1
    assert value(got, "drpc_tx_replays_total", topology="first", cause=OTHER) == 1
    assert value(got, "drpc_tx_replays_total", topology=OTHER, cause="processing") == 1
    assert value(got, "drpc_tx_replays_total", topology="second", cause="processing") is None
