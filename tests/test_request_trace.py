"""``RequestTrace.timeline``: contiguous entries that sum to the total, and the collector."""

from __future__ import annotations

from pathlib import Path

import pytest

from drpc.requests import LOCAL_ORIGIN, RequestTrace, ReturnInfo, Span, TraceCollector
from drpc.state import CoordinatorState, StateEnvironment

SUBMITTED = 1000.0
"""The monotonic clock at submission: every time below is relative to it."""


def trace_of(
    spans: list[tuple[str, float, float]], *, fetched: float | None = 1.0, settled: float = 10.0
) -> RequestTrace:
    trace = RequestTrace("f")
    trace.request_id = "7"
    trace.submitted = SUBMITTED
    trace.fetched = None if fetched is None else SUBMITTED + fetched
    trace.settled = SUBMITTED + settled
    for step, start, end in spans:
        trace.add(step, SUBMITTED + start, SUBMITTED + end, {"busy_ms": 1.0})
    return trace


def steps_and_ms(trace: RequestTrace) -> list[tuple[str, float]]:
    return [(entry["step"], entry["ms"]) for entry in trace.timeline()]


def test_each_step_takes_the_time_since_the_previous_end() -> None:
    # b overlaps a (streaming): it is charged only the time it added after a ended
    trace = trace_of([("b", 2.0, 6.0), ("a", 1.5, 4.0), ("c", 6.5, 9.0)])
    assert steps_and_ms(trace) == [
        ("queue", 1000.0),
        ("a", 3000.0),
        ("b", 2000.0),
        ("c", 3000.0),
        ("return", 1000.0),
    ]
    answer = trace.as_json()
    assert (answer["request_id"], answer["function"]) == ("7", "f")
    assert answer["total_ms"] == 10_000.0
    assert "failed_in" not in answer
    assert sum(entry["ms"] for entry in answer["trace"]) == pytest.approx(10_000.0)
    b = answer["trace"][2]
    assert (b["start_ms"], b["end_ms"], b["busy_ms"]) == (2000.0, 6000.0, 1.0)


def test_spans_outside_the_request_are_clamped_for_ms_but_shown_as_measured() -> None:
    trace = trace_of([("early", -5.0, 0.5), ("late", 3.0, 12.0)])
    timeline = trace.timeline()
    assert [(e["step"], e["ms"]) for e in timeline] == [
        ("queue", 1000.0),
        ("early", 0.0),
        ("late", 9000.0),
        ("return", 0.0),
    ]
    assert timeline[2]["end_ms"] == 12_000.0  # the raw span reveals the bad clock
    assert sum(e["ms"] for e in timeline) == pytest.approx(trace.total * 1000)


def test_never_fetched_and_remote_requests() -> None:
    assert steps_and_ms(trace_of([], fetched=None)) == [("queue", 10_000.0), ("return", 0.0)]
    remote = trace_of([], fetched=4.0)
    remote.remote = True
    assert steps_and_ms(remote) == [("queue", 4000.0), ("runner", 6000.0), ("return", 0.0)]


def test_the_collector_fills_only_watched_requests_of_its_origin() -> None:
    collector = TraceCollector()
    trace = RequestTrace("f")
    collector.watch("1", trace)
    collector.step_finished(ReturnInfo("1", LOCAL_ORIGIN), "a", 1.0, 2.0, {})
    collector.step_finished(ReturnInfo("1", "other:3773"), "b", 1.0, 2.0, {})
    collector.step_finished(ReturnInfo("2", LOCAL_ORIGIN), "c", 1.0, 2.0, {})
    collector.request_failed_in(ReturnInfo("1", LOCAL_ORIGIN), "a", "FAILED_REQUEST: x")
    collector.request_failed_in(ReturnInfo("1", LOCAL_ORIGIN), "later", "INTERNAL_ERROR: y")
    assert [span.step for span in trace.spans] == ["a"]
    assert trace.failed_in == ("a", "FAILED_REQUEST: x")  # the first failure is where
    collector.unwatch("1")
    collector.step_finished(ReturnInfo("1", LOCAL_ORIGIN), "d", 1.0, 2.0, {})
    assert [span.step for span in trace.spans] == ["a"]
    assert collector.watching == 0


def test_an_unstamped_trace_is_empty_and_a_failed_one_says_where() -> None:
    assert RequestTrace().function == ""  # named once the request is
    trace = RequestTrace("f")
    assert (trace.function, trace.request_id, trace.remote, trace.spans) == ("f", None, False, [])
    assert (trace.submitted, trace.fetched, trace.settled, trace.failed_in) == (None,) * 4
    assert trace.total == 0.0 and trace.timeline() == []
    trace.submitted = SUBMITTED
    assert trace.total == 0.0  # not settled yet
    assert steps_and_ms(trace) == [("queue", 0.0), ("return", 0.0)]
    trace.settled = SUBMITTED - 1.0  # a clock that went back: nothing negative
    assert trace.total == 0.0 and steps_and_ms(trace) == [("queue", 0.0), ("return", 0.0)]
    trace.settled = SUBMITTED + 2.0
    trace.failed_in = ("a", "FAILED_REQUEST: x")
    assert trace.as_json() == {
        "request_id": None,
        "function": "f",
        "total_ms": 2000.0,
        "trace": [{"step": "queue", "ms": 2000.0}, {"step": "return", "ms": 0.0}],
        "failed_in": {"step": "a", "reason": "FAILED_REQUEST: x"},
    }


def test_milliseconds_are_rounded_to_three_decimals() -> None:
    trace = trace_of([], fetched=0.25, settled=0.0012345678)
    assert trace.as_json()["total_ms"] == 1.235
    assert steps_and_ms(trace) == [("queue", 1.235), ("return", 0.0)]


def test_the_collector_keeps_each_span_whole_and_ignores_what_it_cannot_place() -> None:
    collector = TraceCollector()
    collector.unwatch("404")  # never watched: nothing to drop
    trace = RequestTrace("f")
    collector.watch("1", trace)
    collector.step_finished("1", "no origin", 1.0, 2.0, {})  # not a ReturnInfo
    collector.step_finished(ReturnInfo("1", LOCAL_ORIGIN), "a", 1.5, 2.5, {"busy_ms": 0.5})
    assert trace.spans == [Span("a", 1.5, 2.5, {"busy_ms": 0.5})]
    assert collector.watching == 1


def test_the_collector_describes_the_reads_of_watched_requests_only(tmp_path: Path) -> None:
    env = StateEnvironment.open(tmp_path / "state")
    try:
        coordinator = CoordinatorState(env, "words")
        for txid in (1, 2, 3):
            env.run_write(lambda txn, txid=txid: coordinator.record_commit(txn, txid))
            if txid == 1:
                pin = env.pin()
        collector, trace = TraceCollector(), RequestTrace("f")
        collector.watch("1", trace)
        reads = ((env.path, pin.version), (str(tmp_path / "not-open"), 7))
        collector.state_pinned(ReturnInfo("1", LOCAL_ORIGIN), reads)
        assert trace.reads == [
            {"state_dir": env.path, "version": pin.version, "txids": {"words": 1}},
            {"state_dir": str(tmp_path / "not-open"), "version": 7, "txids": {}},
        ]
        assert trace.as_json()["reads"] == trace.reads
        # an unwatched request's reads are not looked at: this version is long reclaimed
        collector.state_pinned(ReturnInfo("2", LOCAL_ORIGIN), ((env.path, 1),))
    finally:
        env.close()
