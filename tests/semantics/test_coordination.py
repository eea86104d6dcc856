"""CoordinatedBolt rules as exact traces, plus randomized interleavings."""

from __future__ import annotations

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from drpc.errors import DRPCExceptionType, Failure
from drpc.semantics.coordination import (
    Abandoned,
    Completed,
    CoordinationConfig,
    CoordinationTracker,
    Failed,
    FinishBatch,
    Ignored,
    SendReports,
    TrackStatus,
    is_ignored,
)

BOOM = Failure(DRPCExceptionType.FAILED_REQUEST, "boom")


def tracker(
    expected_reports: int, downstream: tuple[int, ...] = (5, 6), **options: object
) -> CoordinationTracker:
    return CoordinationTracker(
        CoordinationConfig(expected_reports, downstream, component="bolt1", task=3, **options)  # type: ignore[arg-type]
    )


def test_first_step_finishes_when_its_request_tuple_is_acked() -> None:
    t = tracker(0)
    assert t.tuple_received(1, 0) == []
    t.tuple_emitted(1, 5)
    t.tuple_emitted(1, 5)
    t.tuple_emitted(1, 6)
    assert t.tuple_acked(1, 0) == [FinishBatch(1)]
    assert t.finish_done(1) == [SendReports(1, {5: 2, 6: 1}), Completed(1)]
    assert len(t) == 0


def test_reports_go_to_every_downstream_task_in_its_order_and_to_no_other_receiver() -> None:
    t = tracker(0, downstream=(5, 6, 8))
    assert t.tuple_received(1, 0) == []
    t.tuple_emitted(1, 9)  # a receiver that takes no reports
    t.tuple_emitted(1, 8)
    t.tuple_emitted(1, 5)
    t.tuple_emitted(1, 9)
    assert t.tuple_acked(1, 0) == [FinishBatch(1)]
    [reports, completed] = t.finish_done(1)
    assert isinstance(reports, SendReports) and completed == Completed(1)
    assert list(reports.counts.items()) == [(5, 1), (6, 0), (8, 1)]


def test_middle_step_waits_for_every_report_and_matching_count() -> None:
    t = tracker(2)
    assert t.tuple_received(7, 0) == []
    assert t.tuple_acked(7, 0) == []
    assert t.report_received(7, 1, 0) == []  # one report of two
    assert t.report_received(7, 2, 0) == []  # all reports, but 1 of 3 tuples acked
    assert t.tuple_received(7, 0) == []
    assert t.tuple_acked(7, 0) == []
    assert t.tuple_received(7, 0) == []
    assert t.tuple_acked(7, 0) == [FinishBatch(7)]
    assert t.finish_done(7) == [SendReports(7, {5: 0, 6: 0}), Completed(7)]


def test_tuples_received_and_acked_in_bulk_count_as_many_single_events() -> None:
    t = tracker(1)
    assert t.tuple_received(7, 0, 2) == []
    assert t.tuple_received(7, 0) == []
    assert t.tuple_acked(7, 0, 2) == []
    assert t.report_received(7, 4, 0) == []  # 2 of 4 acked
    assert t.status(7) == TrackStatus(1, 1, 4, 2, False, False, 3)
    assert t.tuple_acked(7, 0) == []
    assert t.tuple_received(7, 0) == []
    assert t.tuple_acked(7, 0) == [FinishBatch(7)]
    t.finish_done(7)
    assert t.tuple_failed(8, BOOM, 0) == []
    assert t.tuple_received(9, 0, 2) == []
    assert t.tuple_failed(9, BOOM, 0)[0] == Failed(9, BOOM)
    assert t.tuple_received(9, 0, 5) == [Ignored(9)]
    assert t.tuple_acked(9, 0, 5) == [Ignored(9)]


def test_reports_received_in_bulk_count_as_many_single_reports() -> None:
    one_by_one, folded = tracker(3), tracker(3)
    for t in (one_by_one, folded):
        assert t.tuple_received(7, 0, 3) == []
        assert t.tuple_acked(7, 0, 3) == []
    assert one_by_one.report_received(7, 1, 0) == []
    assert one_by_one.report_received(7, 0, 0) == []
    assert one_by_one.report_received(7, 2, 0) == [FinishBatch(7)]
    assert folded.report_received(7, 3, 0, reports=3) == [FinishBatch(7)]
    assert folded.report_received(8, 1, 0, reports=2) == []  # two of three: waits
    assert folded.status(8) == TrackStatus(2, 3, 1, 0, False, False, 0)
    assert folded.report_received(9, 0, 0, reports=4)[0] == Failed(
        9,
        Failure(
            DRPCExceptionType.INTERNAL_ERROR,
            "Internal error: step 'bolt1' (task 3) received 4 count reports for one id, expected 3",
            "bolt1",
            3,
        ),
    )
    with pytest.raises(ValueError, match="reports must be >= 1, got 0"):
        folded.report_received(10, 0, 0, reports=0)


def test_reports_may_arrive_before_any_data() -> None:
    t = tracker(1)
    assert t.report_received(4, 2, 0) == []
    assert t.tuple_received(4, 0) == []
    assert t.tuple_acked(4, 0) == []
    assert t.tuple_received(4, 0) == []
    assert t.tuple_acked(4, 0) == [FinishBatch(4)]


def test_a_step_reading_two_branches_waits_for_the_reports_of_both() -> None:
    # A join point of a DRPC DAG reading a 3-task and a 2-task step expects 3 + 2 reports
    # (Topology.expected_reports sums them): one complete branch is not enough.
    t = tracker(5)
    for count in (1, 0, 2):  # the first branch: every task reported, its 3 tuples acked
        assert t.report_received(8, count, 0) == []
    for _ in range(3):
        assert t.tuple_received(8, 0) == []
        assert t.tuple_acked(8, 0) == []
    assert t.status(8) == TrackStatus(3, 5, 3, 3, False, False, 3)
    assert t.report_received(8, 0, 0) == []  # the second branch's first task: nothing sent
    assert t.report_received(8, 1, 0) == []  # its second: one tuple, not acked yet
    assert t.tuple_received(8, 0) == []
    assert t.tuple_acked(8, 0) == [FinishBatch(8)]
    assert t.finish_done(8) == [SendReports(8, {5: 0, 6: 0}), Completed(8)]
    assert len(t) == 0


def test_a_last_step_finishes_with_no_reports_to_send() -> None:
    t = tracker(1, downstream=())
    assert t.report_received(4, 0, 0) == [FinishBatch(4)]
    assert t.finish_done(4) == [Completed(4)]


def test_counts_of_zero_still_finish_and_are_reported_to_every_downstream_task() -> None:
    t = tracker(3, downstream=(10, 11, 12))
    assert t.report_received(9, 0, 0) == []
    assert t.report_received(9, 0, 0) == []
    assert t.report_received(9, 0, 0) == [FinishBatch(9)]
    decisions = t.finish_done(9)
    assert decisions == [SendReports(9, {10: 0, 11: 0, 12: 0}), Completed(9)]
    report = decisions[0]
    assert isinstance(report, SendReports)
    assert list(report.counts) == [10, 11, 12]  # the downstream tasks' order


def test_emits_during_finish_are_counted_in_the_reports() -> None:
    t = tracker(1)
    assert t.report_received(2, 0, 0) == [FinishBatch(2)]
    t.tuple_emitted(2, 6)  # finish_batch emitted its result
    assert t.finish_done(2) == [SendReports(2, {5: 0, 6: 1}), Completed(2)]


def test_last_step_owner_waits_for_the_id_tuple() -> None:
    t = tracker(1, waits_for_id=True)
    assert t.report_received(3, 1, 0) == []
    assert t.tuple_received(3, 0) == []
    assert t.tuple_acked(3, 0) == []  # everything but the id tuple
    assert t.id_received(3, 0) == [FinishBatch(3)]


def test_id_tuple_may_arrive_first() -> None:
    t = tracker(1, waits_for_id=True)
    assert t.id_received(3, 0) == []
    assert t.report_received(3, 0, 0) == [FinishBatch(3)]


def test_non_owner_gives_the_id_up_without_finishing() -> None:
    t = CoordinationTracker(
        CoordinationConfig(2, (5,), waits_for_id=True), owns_id=lambda id: False
    )
    assert t.report_received(3, 0, 0) == []
    assert t.report_received(3, 0, 0) == [Abandoned(3)]
    assert len(t) == 0


def test_non_owner_that_received_data_fails_the_id_as_an_internal_error() -> None:
    t = CoordinationTracker(
        CoordinationConfig(1, (5,), waits_for_id=True), owns_id=lambda id: False
    )
    t.tuple_received(3, 0)
    t.tuple_acked(3, 0)
    assert t.report_received(3, 1, 0) == [
        Failed(
            3,
            Failure(
                DRPCExceptionType.INTERNAL_ERROR,
                "Internal error: a step received 1 tuples for an id owned by another task: "
                "the last step's input must be fields-grouped on the id",
            ),
        )
    ]


def test_ownership_is_asked_of_each_id() -> None:
    t = CoordinationTracker(
        CoordinationConfig(1, (5,), waits_for_id=True), owns_id=lambda id: id == "mine"
    )
    assert t.report_received("theirs", 0, 0) == [Abandoned("theirs")]
    assert t.report_received("mine", 0, 0) == []  # owned: waits for its id tuple
    assert t.id_received("mine", 0) == [FinishBatch("mine")]


def test_committer_waits_for_the_commit_tuple() -> None:
    t = tracker(1, waits_for_commit=True)
    assert t.report_received(8, 0, 0) == []
    assert t.commit_received(8, 0) == [FinishBatch(8)]


def test_commit_tuple_may_arrive_first_and_starts_the_deadline() -> None:
    t = tracker(1, waits_for_commit=True, timeout=10)
    assert t.commit_received(8, 2) == []
    assert t.expire(now=11.9) == []
    [failed] = t.expire(now=12)
    assert isinstance(failed, Failed) and failed.id == 8


def test_an_extra_ack_while_waiting_for_the_commit_fails_the_id() -> None:
    t = tracker(1, waits_for_commit=True, timeout=10)
    t.report_received(1, 1, 0)
    t.tuple_received(1, 0)
    assert t.tuple_acked(1, 0) == []  # every tuple in: waits for the commit tuple
    t.tuple_received(1, 4)
    assert t.tuple_acked(1, 4) == [
        Failed(
            1,
            Failure(
                DRPCExceptionType.INTERNAL_ERROR,
                "Internal error: step 'bolt1' (task 3) received 2 tuples for an id but "
                "upstream reported 1",
                "bolt1",
                3,
            ),
        )
    ]
    assert t.commit_received(1, 5) == [Ignored(1)]
    assert t.expire(now=13.9) == [] and t.tombstones == 1  # buried when the ack came
    assert t.expire(now=14) == [] and t.tombstones == 0


def test_finish_happens_exactly_once() -> None:
    t = tracker(1, waits_for_id=True)
    assert t.report_received(3, 0, 0) == []
    assert t.id_received(3, 0) == [FinishBatch(3)]
    assert t.id_received(3, 0) == []  # finishing: a duplicate id tuple does not finish again
    assert t.finish_done(3)[-1] == Completed(3)
    with pytest.raises(RuntimeError, match="not finishing"):
        t.finish_done(3)


def test_more_tuples_than_reported_is_an_internal_error_not_an_answer() -> None:
    t = tracker(1)
    for _ in range(3):
        t.tuple_received(1, 0)
        t.tuple_acked(1, 0)
    [failed] = t.report_received(1, 2, 0)
    assert isinstance(failed, Failed)
    assert failed.failure.type is DRPCExceptionType.INTERNAL_ERROR
    assert "received 3 tuples" in failed.failure.message and "reported 2" in failed.failure.message


def test_more_reports_than_upstream_tasks_is_an_internal_error() -> None:
    t = tracker(1)
    t.report_received(1, 5, 0)
    [failed] = t.report_received(1, 0, 0)
    assert isinstance(failed, Failed) and failed.failure.type is DRPCExceptionType.INTERNAL_ERROR


def test_a_failed_tuple_fails_the_id_and_later_events_are_ignored() -> None:
    t = tracker(1)
    t.tuple_received(1, 0)
    assert t.tuple_failed(1, BOOM, 0) == [Failed(1, BOOM)]
    assert len(t) == 0
    assert t.report_received(1, 1, 0) == [Ignored(1)]
    assert t.tuple_received(1, 0) == [Ignored(1)]
    assert t.tuple_acked(1, 0) == [Ignored(1)]
    assert len(t) == 0


def test_finish_failed_fails_the_id() -> None:
    t = tracker(1)
    assert t.report_received(1, 0, 0) == [FinishBatch(1)]
    assert t.finish_failed(1, BOOM, 0) == [Failed(1, BOOM)]
    assert len(t) == 0 and t.tombstones == 1


def test_abandon_drops_the_id_and_blocks_its_resurrection() -> None:
    t = tracker(2)
    t.report_received(1, 0, 0)
    assert t.abandon(1, 0) == [Abandoned(1)]
    assert t.report_received(1, 0, 0) == [Ignored(1)]  # the report that would have finished it
    assert t.abandon(2, 0) == []  # unknown id: nothing to drop, but tombstoned
    assert t.tuple_received(2, 0) == [Ignored(2)]


def test_timeout_fails_tracked_ids_then_tombstones_expire() -> None:
    t = tracker(2, timeout=10)
    t.report_received(1, 0, now=0)
    t.report_received(2, 0, now=5)
    assert t.expire(now=9) == []
    [failed] = t.expire(now=10)
    assert failed.id == 1
    assert failed.failure.type is DRPCExceptionType.FAILED_REQUEST
    assert failed.failure.message.startswith(
        "Request failed: the tuple tree did not complete within 10 s "
        "(topology.message.timeout.secs); stuck in step 'bolt1' (task 3): "
    )
    assert "1/2 reports" in failed.failure.message
    assert (failed.failure.component, failed.failure.task) == ("bolt1", 3)
    assert t.report_received(1, 0, now=11) == [Ignored(1)]  # no finish after a timeout
    assert [d.id for d in t.expire(now=15)] == [2]
    assert t.expire(now=100) == []
    assert len(t) == 0 and t.tombstones == 0


def test_no_tracking_left_after_ten_thousand_requests() -> None:
    t = tracker(2, downstream=(5,))
    finished = 0
    for request in range(10_000):
        t.tuple_received(request, 0)
        t.tuple_emitted(request, 5)
        t.tuple_acked(request, 0)
        t.report_received(request, 1, 0)
        for decision in t.report_received(request, 0, 0):
            if isinstance(decision, FinishBatch):
                finished += 1
                assert t.finish_done(request) == [SendReports(request, {5: 1}), Completed(request)]
    assert finished == 10_000
    assert len(t) == 0 and t.tombstones == 0


def test_invalid_configuration_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match=r"^expected_reports must be >= 0, got -1$"):
        CoordinationConfig(-1)
    with pytest.raises(ValueError, match=r"^timeout must be positive, got 0$"):
        CoordinationConfig(1, timeout=0)
    # just inside each bound
    assert CoordinationConfig(0).expected_reports == 0
    assert CoordinationConfig(1, timeout=1e-9).timeout == 1e-9


# -- randomized interleavings ----------------------------------------------------------------


def _events(counts: list[int], rng: random.Random) -> list[tuple[str, int]]:
    """Upstream task u sends counts[u] tuples then reports counts[u]; any interleaving."""
    events: list[tuple[str, int]] = []
    for count in counts:
        events.extend([("data", 0)] * count)
        events.append(("report", count))
    rng.shuffle(events)
    return events


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=6),
    st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=4),
    st.randoms(use_true_random=False),
)
def test_random_interleavings_finish_exactly_once_after_the_last_event(
    counts: list[int], downstream_emits: list[int], rng: random.Random
) -> None:
    downstream = tuple(range(100, 100 + len(downstream_emits)))
    t = tracker(len(counts), downstream=downstream)
    events = _events(counts, rng)
    finishes = []
    for position, (kind, count) in enumerate(events):
        if kind == "data":
            assert t.tuple_received("id", 0) == []
            target = rng.choice(downstream)
            t.tuple_emitted("id", target)
            decisions = t.tuple_acked("id", 0)
        else:
            decisions = t.report_received("id", count, 0)
        if decisions:
            assert decisions == [FinishBatch("id")]
            finishes.append(position)
    assert finishes == [len(events) - 1]
    reports, completed = t.finish_done("id")
    assert completed == Completed("id")
    assert isinstance(reports, SendReports)
    assert list(reports.counts) == list(downstream)  # every task, zero counts too
    assert sum(reports.counts.values()) == sum(counts)
    assert len(t) == 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=5),
    st.sampled_from(["fail", "abandon", "timeout"]),
    st.data(),
    st.randoms(use_true_random=False),
)
def test_no_finish_after_a_failure_or_timeout_whenever_it_happens(
    counts: list[int], how: str, data: st.DataObject, rng: random.Random
) -> None:
    t = tracker(len(counts), timeout=10)
    events = _events(counts, rng)
    # A timeout can only concern an id the task has already seen.
    first = 1 if how == "timeout" else 0
    assume(len(events) > first)
    cut = data.draw(st.integers(min_value=first, max_value=len(events) - 1))
    for kind, count in events[:cut]:
        if kind == "data":
            t.tuple_received("id", 0)
            t.tuple_acked("id", 0)
        else:
            t.report_received("id", count, 0)
    if how == "fail":
        t.tuple_received("id", 0)
        t.tuple_failed("id", BOOM, 0)
    elif how == "abandon":
        t.abandon("id", 0)
    else:
        [timed_out] = t.expire(now=10)
        assert isinstance(timed_out, Failed)
    for kind, count in events[cut:]:
        if kind == "data":
            decisions = t.tuple_received("id", 1) + t.tuple_acked("id", 1)
        else:
            decisions = t.report_received("id", count, 1)
        assert not any(isinstance(d, FinishBatch) for d in decisions)
    assert len(t) == 0
    t.expire(now=100)
    assert t.tombstones == 0


def test_a_failed_id_ignores_every_late_event_until_its_tombstone_expires() -> None:
    t = tracker(1, timeout=10, waits_for_id=True, waits_for_commit=True)
    assert t.tuple_received(1, now=0) == []
    assert t.tuple_failed(1, BOOM, now=1) == [Failed(1, BOOM)]  # tombstone until 11
    assert t.tuple_failed(1, BOOM, now=2) == [Ignored(1)]  # a second fail
    assert t.id_received(1, now=2) == [Ignored(1)]
    assert t.commit_received(1, now=2) == [Ignored(1)]
    t.tuple_emitted(1, 5)
    assert t.emitted_counts(1) == {} and len(t) == 0
    assert t.abandon(2, now=4) == []  # tombstone until 14
    assert t.expire(now=10.9) == [] and t.tombstones == 2
    assert t.id_received(1, now=10.9) == [Ignored(1)]
    assert t.expire(now=11) == [] and t.tombstones == 1
    assert t.tuple_received(2, now=11) == [Ignored(2)]
    assert t.tuple_received(1, now=11) == [] and 1 in t  # forgotten: tracked afresh
    assert t.expire(now=14) == [] and t.tombstones == 0 and len(t) == 1


def test_a_fail_for_an_id_never_seen_leaves_no_trace() -> None:
    t = tracker(1, timeout=10)
    assert t.tuple_failed(9, BOOM, now=0) == []
    assert t.tuple_acked(9, now=0) == []
    assert len(t) == 0 and t.tombstones == 0
    assert t.report_received(9, 0, now=1) == [FinishBatch(9)]


def test_burying_an_id_again_moves_its_tombstone_to_the_back() -> None:
    t = tracker(1, timeout=10)
    t.tuple_received(1, now=0)
    assert t.tuple_failed(1, BOOM, now=1) == [Failed(1, BOOM)]  # until 11
    assert t.abandon(2, now=2) == []  # until 12
    assert t.abandon(1, now=5) == []  # 1 again: until 15, behind 2
    assert t.expire(now=12) == [] and t.tombstones == 1
    assert t.tuple_received(2, now=12) == [] and t.tuple_received(1, now=12) == [Ignored(1)]
    assert t.expire(now=15) == [] and t.tombstones == 0


def test_internal_errors_name_the_step_and_task_where_they_are_known() -> None:
    t = tracker(1)
    t.report_received(1, 5, 0)
    assert t.report_received(1, 0, 0) == [
        Failed(
            1,
            Failure(
                DRPCExceptionType.INTERNAL_ERROR,
                "Internal error: step 'bolt1' (task 3) received 2 count reports for one id, "
                "expected 1",
                "bolt1",
                3,
            ),
        )
    ]
    anonymous = CoordinationTracker(CoordinationConfig(1))
    for _ in range(2):
        anonymous.tuple_received(2, 0)
        assert anonymous.tuple_acked(2, 0) == []
    [failed] = anonymous.report_received(2, 1, 0)
    assert failed == Failed(
        2,
        Failure(
            DRPCExceptionType.INTERNAL_ERROR,
            "Internal error: a step received 2 tuples for an id but upstream reported 1",
        ),
    )
    unnumbered = CoordinationTracker(CoordinationConfig(1, component="bolt2"))
    unnumbered.report_received(3, 0, 0)
    [failed] = unnumbered.report_received(3, 0, 0)
    assert isinstance(failed, Failed)
    assert failed.failure.message.startswith("Internal error: step 'bolt2' received 2 count")


def test_status_and_emitted_counts_describe_a_tracked_id() -> None:
    t = tracker(2, waits_for_id=True, waits_for_commit=True)
    assert t.status(1) is None and t.emitted_counts(1) == {} and 1 not in t
    t.report_received(1, 5, 0)
    t.tuple_received(1, 0)
    t.tuple_received(1, 0)
    t.tuple_acked(1, 0)
    t.commit_received(1, 0)
    t.tuple_emitted(1, 5)
    t.tuple_emitted(1, 5, count=2)
    t.tuple_emitted(1, 6)
    assert 1 in t and list(t.tracked_ids()) == [1]
    assert t.emitted_counts(1) == {5: 3, 6: 1}
    status = t.status(1)
    assert status is not None
    assert (status.reports, status.expected_reports, status.reported_tuples) == (1, 2, 5)
    assert (status.acked, status.received, status.id_received, status.commit_received) == (
        1,
        2,
        False,
        True,
    )
    assert status.describe() == "1/2 count reports, 1 of 5 reported tuples acked"
    assert not status.waits_upstream  # a tuple received here is not acked yet
    t.tuple_acked(1, 0)
    assert t.status(1).waits_upstream  # type: ignore[union-attr]
    first = tracker(0)
    first.tuple_received(4, 0)
    assert first.status(4) == TrackStatus(0, 0, 0, 0, False, False, received=1)
    assert first.status(4).describe() == "0/0 count reports, 0 tuples acked"  # type: ignore[union-attr]


def test_finish_calls_for_an_id_not_finishing_are_refused() -> None:
    t = tracker(1)
    t.report_received(1, 1, 0)
    with pytest.raises(RuntimeError, match=r"^finish_failed for id 1 that is not finishing$"):
        t.finish_failed(1, BOOM, 0)
    with pytest.raises(RuntimeError, match=r"^finish_failed for id 2 that is not finishing$"):
        t.finish_failed(2, BOOM, 0)
    assert 1 in t and t.tombstones == 0
    with pytest.raises(RuntimeError, match=r"^finish_done for id 1 that is not finishing$"):
        t.finish_done(1)
    # a refused call changes nothing: the id is still tracked and finishes as before
    assert 1 in t and t.tombstones == 0
    t.tuple_emitted(1, 6)
    assert t.tuple_acked(1, 0) == [FinishBatch(1)]
    assert t.finish_done(1) == [SendReports(1, {5: 0, 6: 1}), Completed(1)]
    assert 1 not in t and len(t) == 0


def test_a_timeout_says_what_each_id_still_lacked() -> None:
    t = tracker(2, waits_for_id=True, waits_for_commit=True, timeout=10)
    t.report_received(1, 3, 0)
    t.tuple_received(1, 0)
    t.tuple_acked(1, 0)
    t.commit_received(1, 0)
    t.id_received(2, 1)
    first = tracker(0, timeout=10)
    first.tuple_received(7, 0)

    def timed_out(id: object, detail: str, status: TrackStatus) -> Failed:
        return Failed(id, Failure.tree_timed_out(10, "bolt1", 3, detail), True, status)

    # Each failure carries where its id stood, read before the id was dropped.
    assert t.expire(now=11) == [
        timed_out(
            1,
            "it did not receive every tuple of the id (1/2 reports, 1 tuples of 3 "
            "reported, id tuple missing, commit received)",
            TrackStatus(1, 2, 3, 1, False, True, 1),
        ),
        timed_out(
            2,
            "it did not receive every tuple of the id (0/2 reports, 0 tuples of 0 "
            "reported, id tuple received, commit missing)",
            TrackStatus(0, 2, 0, 0, True, False, 0),
        ),
    ]
    assert first.expire(now=10) == [
        timed_out(
            7,
            "it did not receive every tuple of the id (0/0 reports, 0 tuples)",
            TrackStatus(0, 0, 0, 0, False, False, 1),
        )
    ]


def test_is_ignored_looks_at_the_first_decision() -> None:
    assert is_ignored([Ignored(1)])
    assert not is_ignored([])
    assert not is_ignored([Failed(1, BOOM), Ignored(1)])
