"""The gatherer of count reports (``drpc.executors.local.gathering``): pure, then in an engine."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from drpc import (
    DRPCExecutionException,
    FailedException,
    Fields,
    LinearDRPCTopologyBuilder,
    TopologyBuilder,
)
from drpc.examples.reach import EXPECTED_REACH, TWEETERS_DB, build_reach
from drpc.executors.local.gathering import (
    IdleFinish,
    IdleGiveUp,
    ReportGatherer,
    gathered_senders,
    idle_finishes,
    idle_giveups,
)
from drpc.executors.local.messages import ReportMessage
from drpc.model.partitioners import ByFields
from drpc.model.streams import COORDINATED_STREAM_ID, DEFAULT_STREAM_ID, GlobalStreamId
from drpc.model.topology import CoordinatedBolt, SourceArgs
from drpc.semantics.coordination import CoordinationConfig
from drpc.semantics.routing import IdOwner
from drpc.testing import LocalDRPC

from .topologies import bolts
from .waiting import wait_until

ROOT, OTHER_ROOT = 1 << 63 | 5, 1 << 62 | 9
URL = "foo.com/blog/1"


def xor(values: list[int]) -> int:
    return functools.reduce(lambda a, b: a ^ b, values, 0)


def test_reach_gathers_the_steps_every_task_of_which_reports_to_every_task_of_the_next() -> None:
    topology = build_reach().create_topology()
    # bolt0's reports are single (only the task given the request knows the id), and bolt3
    # waits for the id tuple: only its owner reports to join-result.
    assert gathered_senders(topology) == {"bolt1": 12, "bolt2": 6}
    bolt1, bolt2 = topology.component_task_ids["bolt1"], topology.component_task_ids["bolt2"]
    # a share of the topology gathers what its own tasks report; one task gathers nothing
    hosted = {*bolt1[:5], bolt2[0]}
    assert gathered_senders(topology, hosted) == {"bolt1": 5}


def test_nothing_is_sent_until_the_last_sender_then_one_report_per_receiving_task() -> None:
    gatherer = ReportGatherer({"step": 3}, timeout=30.0)
    senders = [(10, {20: 2, 21: 0}, {ROOT: 111}), (11, {20: 1, 21: 0}, {ROOT: 222})]
    for task, counts, edges in senders:
        assert gatherer.add("step", task, "req", counts, edges, now=1.0) == []
    assert len(gatherer) == 1
    sent = gatherer.add("step", 12, "req", {20: 0, 21: 4}, {ROOT: 333}, now=2.0)
    assert len(gatherer) == 0
    assert [(task, report.source, report.source_task, report.id) for task, report in sent] == [
        (20, "step", 12, "req"),
        (21, "step", 12, "req"),
    ]
    assert [(report.tuples, report.reports) for _, report in sent] == [(3, 3), (4, 3)]
    edges = [report.message_id[ROOT] for _, report in sent]
    assert all(set(report.message_id) == {ROOT} for _, report in sent)
    # the receivers' acks cancel exactly the senders' edges, and each receiver has its own
    assert xor(edges) == 111 ^ 222 ^ 333
    assert len(set(edges)) == 2 and 0 not in edges


def test_the_reports_of_several_senders_are_added_at_once() -> None:
    gatherer = ReportGatherer({"step": 4}, timeout=30.0)
    assert gatherer.add("step", 10, "req", {20: 1, 21: 0}, {ROOT: 111}, 1.0) == []
    # three idle senders, anchored together with one edge
    sent = gatherer.add("step", 13, "req", {20: 0, 21: 0}, {ROOT: 333}, 1.0, senders=3)
    assert [(task, report.tuples, report.reports) for task, report in sent] == [
        (20, 1, 4),
        (21, 0, 4),
    ]
    assert xor([report.message_id[ROOT] for _, report in sent]) == 111 ^ 333
    # counts are multiplied by the senders they stand for; a first add may stand for many
    many = ReportGatherer({"step": 2}, timeout=30.0)
    ((_, report),) = many.add("step", 11, "req", {20: 2}, {ROOT: 5}, 1.0, senders=2)
    assert (report.tuples, report.reports) == (4, 2)
    # ...and so is a later add's
    later = ReportGatherer({"step": 3}, timeout=30.0)
    assert later.add("step", 10, "req", {20: 1}, {ROOT: 5}, 1.0) == []
    ((_, report),) = later.add("step", 11, "req", {20: 2}, {ROOT: 6}, 1.0, senders=2)
    assert (report.tuples, report.reports) == (5, 3) and type(report.tuples) is int


def test_a_sender_reporting_to_other_tasks_than_the_others_is_refused_naming_it() -> None:
    gatherer = ReportGatherer({"step": 2}, timeout=30.0)
    assert gatherer.add("step", 10, "req", {20: 1, 21: 0}, {ROOT: 5}, 1.0) == []
    with pytest.raises(ValueError, match=r"task 11 of 'step' reported to 1 tasks, its other"):
        gatherer.add("step", 11, "req", {20: 1}, {ROOT: 6}, 1.0)


def test_ids_and_components_are_gathered_apart() -> None:
    gatherer = ReportGatherer({"a": 2, "b": 2}, timeout=30.0)
    assert gatherer.add("a", 1, "x", {9: 1}, {ROOT: 1}, 0.0) == []
    assert gatherer.add("a", 2, "y", {9: 1}, {ROOT: 2}, 0.0) == []
    assert gatherer.add("b", 3, "x", {9: 1}, {ROOT: 3}, 0.0) == []
    assert len(gatherer) == 3
    ((task, report),) = gatherer.add("a", 2, "x", {9: 5}, {ROOT: 4}, 0.0)
    assert (task, report.tuples, report.reports, report.message_id) == (9, 6, 2, {ROOT: 1 ^ 4})
    assert len(gatherer) == 2


def test_edges_of_several_roots_are_combined_root_by_root() -> None:
    gatherer = ReportGatherer({"step": 2}, timeout=30.0)
    gatherer.add("step", 1, "x", {7: 1, 8: 1, 9: 1}, {ROOT: 5}, 0.0)
    sent = gatherer.add("step", 2, "x", {7: 0, 8: 0, 9: 0}, {ROOT: 6, OTHER_ROOT: 7}, 0.0)
    for root, senders_edges in ((ROOT, 5 ^ 6), (OTHER_ROOT, 7)):
        assert xor([report.message_id[root] for _, report in sent]) == senders_edges


def test_unanchored_reports_are_sent_on_unanchored() -> None:
    gatherer = ReportGatherer({"step": 2}, timeout=30.0)
    gatherer.add("step", 1, "x", {7: 1}, {}, 0.0)
    assert gatherer.add("step", 2, "x", {7: 2}, {}, 0.0) == [
        (7, ReportMessage("step", 2, "x", 3, {}, 2))
    ]


def test_an_id_whose_senders_do_not_all_report_expires_at_its_deadline_and_not_before() -> None:
    gatherer = ReportGatherer({"step": 2}, timeout=5.0)
    gatherer.add("step", 1, "early", {7: 1}, {}, now=10.0)
    gatherer.add("step", 1, "late", {7: 1}, {}, now=12.0)
    assert gatherer.expire(14.999) == 0
    assert gatherer.expire(15.0) == 1
    assert len(gatherer) == 1
    assert gatherer.expire(17.0) == 1
    assert len(gatherer) == 0


def test_a_failed_root_drops_its_ids_and_its_reports_to_come_until_its_deadline() -> None:
    gatherer = ReportGatherer({"step": 2}, timeout=5.0)
    gatherer.add("step", 1, "doomed", {7: 1}, {ROOT: 1}, 0.0)
    gatherer.add("step", 1, "spared", {7: 1}, {OTHER_ROOT: 2}, 0.0)
    assert gatherer.drop_root(ROOT, now=1.0) == 1
    assert len(gatherer) == 1
    # a sender that finished before it heard of the failure: dropped as it comes
    assert gatherer.add("step", 3, "late", {7: 1}, {ROOT: 3}, 2.0) == []
    assert gatherer.add("step", 2, "late", {7: 1}, {ROOT: 4}, 2.0) == []
    assert len(gatherer) == 1 and gatherer.failed_roots == 1
    # a report of a failed root and a live one is not the failed root's alone
    assert gatherer.add("step", 3, "both", {7: 1}, {ROOT: 5, OTHER_ROOT: 6}, 2.0) == []
    assert len(gatherer) == 2
    assert gatherer.expire(5.999) == 1  # "spared", due at 5.0
    assert len(gatherer) == 1 and gatherer.failed_roots == 1
    assert gatherer.expire(6.0) == 0
    assert gatherer.failed_roots == 0
    assert gatherer.add("step", 3, "after", {7: 1}, {ROOT: 7}, 6.0) == []
    assert len(gatherer) == 2  # "both" and "after" wait for their other sender


def test_one_sender_is_sent_on_at_once() -> None:
    gatherer = ReportGatherer({"step": 1}, timeout=1.0)
    assert gatherer.add("step", 4, "x", {7: 2}, {}, 0.0) == [
        (7, ReportMessage("step", 4, "x", 2, {}, 1))
    ]


def test_expiry_drops_the_oldest_first_and_counts_every_id_it_drops() -> None:
    gatherer = ReportGatherer({"step": 2, "other": 2}, timeout=5.0)
    for component, id, now in [("step", "a", 0.0), ("step", "b", 1.0), ("step", "c", 9.0)]:
        gatherer.add(component, 1, id, {7: 1}, {}, now)
    gatherer.add("other", 1, "a", {7: 1}, {}, 0.5)
    assert gatherer.expire(6.0) == 3
    assert gatherer.add("step", 2, "c", {7: 1}, {}, 9.5) != []  # "c" waited on


def test_failed_roots_are_forgotten_oldest_first_a_root_failing_again_counting_anew() -> None:
    gatherer = ReportGatherer({"step": 2, "other": 2}, timeout=5.0)
    gatherer.add("step", 1, "x", {7: 1}, {ROOT: 1}, 0.0)
    gatherer.add("other", 1, "x", {7: 1}, {ROOT: 2}, 0.0)
    assert gatherer.drop_root(ROOT, now=0.0) == 2
    gatherer.drop_root(OTHER_ROOT, now=1.0)
    gatherer.drop_root(ROOT, now=4.0)  # until 9.0 now, after OTHER_ROOT's 6.0
    gatherer.expire(7.0)
    assert gatherer.failed_roots == 1
    assert gatherer.add("step", 1, "y", {7: 1}, {ROOT: 3}, 7.0) == []
    assert gatherer.add("step", 1, "z", {7: 1}, {OTHER_ROOT: 4}, 7.0) == []
    assert len(gatherer) == 1  # "z": OTHER_ROOT's reports count again


@pytest.mark.parametrize(
    ("senders", "timeout", "message"),
    [
        ({"step": 0}, 1.0, "component 'step' needs >= 1 sending task, got 0"),
        ({"step": 2}, 0.0, "timeout must be positive, got 0"),
    ],
)
def test_the_gatherer_checks_its_arguments(
    senders: dict[str, int], timeout: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ReportGatherer(senders, timeout)


def test_each_reach_step_task_handles_one_count_report_per_request_in_an_engine() -> None:
    calls = 20
    with LocalDRPC(timeout=30) as drpc:
        engine = drpc.register(build_reach())
        before = {task.task_id: task.reports_received for task in engine.coordinated_tasks}
        handled = {
            task.task_id: task.messages_handled.get("ReportMessage", 0)
            for task in engine.bolt_tasks
        }
        for url, reach in list(EXPECTED_REACH.items()) * (calls // len(EXPECTED_REACH)):
            assert drpc.execute("reach", url) == reach
        owners_reports = 0
        for task in engine.coordinated_tasks:
            if task.component_id not in ("bolt2", "bolt3"):
                continue
            received = task.reports_received - before[task.task_id]
            messages = task.messages_handled.get("ReportMessage", 0) - handled[task.task_id]
            if task.component_id == "bolt2":
                assert (received, messages) == (12 * calls, calls), task.name
            else:
                # only the task owning a request's id hears of it (``idle_giveups``)
                assert received == 6 * messages, task.name
                owners_reports += messages
        assert owners_reports == calls
        assert engine.gathered_ids() == 0


def test_a_task_with_one_report_to_wait_for_and_no_finish_callback_is_finished_idle() -> None:
    gatherer = ReportGatherer({"step": 2, "other": 2}, timeout=30.0)
    one_report = CoordinationConfig(expected_reports=1, downstream_tasks=(7, 8))
    candidates = [
        (1, "step", one_report, False),
        (2, "step", one_report, True),  # its finish callback must run
        (3, "step", CoordinationConfig(expected_reports=2, downstream_tasks=(7, 8)), False),
        (4, "step", CoordinationConfig(1, (7, 8), waits_for_commit=True), False),
        (5, "step", CoordinationConfig(1, (7, 8), waits_for_id=True), False),
        (6, "ungathered", one_report, False),
        (9, "other", CoordinationConfig(1, (10,)), False),
    ]
    finishes = idle_finishes(gatherer, candidates)
    assert sorted(finishes) == [1, 9]
    assert (finishes[1].component, finishes[1].counts) == ("step", {7: 0, 8: 0})
    assert (finishes[9].component, finishes[9].counts) == ("other", {10: 0})


def _owner_of(mine: str, theirs: str) -> IdOwner:
    """The id ownership of the task that a 2-task fields grouping sends ``mine`` to, and
    ``theirs`` not."""
    partitioner = ByFields((0,), 2)
    [index] = partitioner.choose([mine])
    assert partitioner.choose([theirs]) != (index,)
    return IdOwner(partitioner, index, 1)


def test_a_zero_report_skips_a_task_that_gives_up_an_id_it_does_not_own() -> None:
    owns = _owner_of("mine", "yours")
    assert owns("mine") and not owns("yours")
    giveups = {21: IdleGiveUp(owns, expected_reports=2)}
    gatherer = ReportGatherer({"step": 2}, timeout=30.0)
    senders = [(10, {20: 1, 21: 0, 22: 0}, {ROOT: 111}), (11, {20: 2, 21: 0, 22: 0}, {ROOT: 222})]

    def gathered(id: str) -> list[tuple[int, ReportMessage]]:
        first, second = senders
        assert gatherer.add("step", first[0], id, first[1], dict(first[2]), 1.0, giveups) == []
        return gatherer.add("step", second[0], id, second[1], dict(second[2]), 1.0, giveups)

    # task 21 does not own "yours": it is skipped, task 22 (no give-up) is not
    sent = gathered("yours")
    assert [(task, report.tuples, report.reports) for task, report in sent] == [
        (20, 3, 2),
        (22, 0, 2),
    ]
    # the edges given on still cover the senders' edges
    assert xor([report.message_id[ROOT] for _, report in sent]) == 111 ^ 222
    # the id's owner gets its report of 0
    assert [task for task, _ in gathered("mine")] == [20, 21, 22]
    # a task that does not own the id but was sent tuples of it gets its report
    assert gatherer.add("step", 10, "yours", {20: 0, 21: 1, 22: 0}, {ROOT: 1}, 1.0, giveups) == []
    sent = gatherer.add("step", 11, "yours", {20: 0, 21: 2, 22: 0}, {ROOT: 2}, 1.0, giveups)
    assert [(task, report.tuples) for task, report in sent] == [(20, 0), (21, 3), (22, 0)]
    # a report that is not the task's last is sent
    early = {21: IdleGiveUp(owns, expected_reports=3)}
    gatherer.add("step", 10, "x", {21: 0}, {ROOT: 1}, 1.0, early)
    assert [task for task, _ in gatherer.add("step", 11, "x", {21: 0}, {ROOT: 2}, 1.0, early)] == [
        21
    ]


def test_the_tasks_given_up_idle_wait_for_the_id_alone_and_do_nothing_on_giving_up() -> None:
    gatherer = ReportGatherer({"step": 2}, timeout=30.0)
    owns = _owner_of("mine", "yours")
    by_id = CoordinationConfig(expected_reports=2, waits_for_id=True)
    candidates = [
        (1, by_id, owns, True),
        (2, by_id, None, True),  # owns every id
        (3, by_id, owns, False),  # its bolt hears of a given-up id (failed_id)
        (4, CoordinationConfig(2, waits_for_id=True, waits_for_commit=True), owns, True),
        (5, CoordinationConfig(expected_reports=2), owns, True),
    ]
    giveups = idle_giveups(gatherer, candidates)
    assert sorted(giveups) == [1]
    assert giveups[1].expected_reports == 2
    assert idle_giveups(ReportGatherer({}, timeout=30.0), candidates) == {}


def test_reach_s_countaggregator_tasks_hear_only_of_the_requests_they_own() -> None:
    calls = 12
    with LocalDRPC(timeout=30) as drpc:
        engine = drpc.register(build_reach())
        bolt3 = [task for task in engine.bolt_tasks if task.component_id == "bolt3"]
        assert all(task.task_id in engine.idle_giveups for task in bolt3)
        for _ in range(calls):
            assert drpc.execute("reach", URL) == EXPECTED_REACH[URL]
        reports = sum(task.messages_handled.get("ReportMessage", 0) for task in bolt3)
        assert reports == calls  # one per request, to its owner
        assert engine.gathered_ids() == 0 and engine.tracked_ids() == 0


def test_reach_s_idle_getfollowers_tasks_never_hear_of_a_request() -> None:
    calls = 20
    with LocalDRPC(timeout=30) as drpc:
        engine = drpc.register(build_reach())
        bolt1 = [task for task in engine.bolt_tasks if task.component_id == "bolt1"]
        assert all(isinstance(engine.idle_finishes.get(task.task_id), IdleFinish) for task in bolt1)
        for _ in range(calls):
            assert drpc.execute("reach", URL) == EXPECTED_REACH[URL]
        tuples = [task.messages_handled.get("Tuple", 0) for task in bolt1]
        reports = [task.messages_handled.get("ReportMessage", 0) for task in bolt1]
        # a report only where a tweeter went (shuffled over the 12 tasks): one per tuple
        assert reports == tuples
        assert sum(reports) == len(TWEETERS_DB[URL]) * calls
        assert engine.gathered_ids() == 0 and engine.tracked_ids() == 0


class FailsWhereItSawZero(bolts.DoneWhenAllArrived):
    """The task that got tuple 0 fails its finish; the others finish as usual."""

    def finish_batch(self) -> None:
        if 0 in self.seen:
            raise FailedException("saw tuple 0")
        super().finish_batch()


def test_a_sender_that_fails_its_finish_fails_the_request_and_leaves_nothing_gathered() -> None:
    builder = LinearDRPCTopologyBuilder("fails")
    builder.add_bolt(bolts.EmitN())
    builder.add_bolt(FailsWhereItSawZero(), 4).shuffle_grouping()
    builder.add_bolt(bolts.CountPerRequest(), 2).fields_grouping(Fields("id"))
    with LocalDRPC(timeout=30) as drpc:
        engine = drpc.register(builder)
        assert engine.gatherer.senders == {"bolt1": 4}
        for _ in range(5):
            with pytest.raises(DRPCExecutionException, match="saw tuple 0"):
                drpc.execute("fails", "8")
        wait_until(lambda: engine.gathered_ids() == 0 and engine.tracked_ids() == 0)
        assert engine.gatherer.failed_roots == 5
        assert engine.expire_gathered(float("inf")) == 0
        assert engine.gatherer.failed_roots == 0


def coordinated(sources: dict[str, SourceArgs], **kwargs: Any) -> CoordinatedBolt:
    return CoordinatedBolt(bolts.Identity(), sources, **kwargs)


def test_only_a_step_every_task_of_which_reports_to_every_receiver_is_gathered() -> None:
    builder = TopologyBuilder()
    builder.set_spout("s", bolts.Silent())
    builder.set_bolt("no-receivers", coordinated({}), 3).shuffle_grouping("s")
    builder.set_bolt("a", coordinated({}), 2).shuffle_grouping("s")
    (
        builder.set_bolt("b", coordinated({"a": SourceArgs.all()}), 3)
        .shuffle_grouping("a")
        .direct_grouping("a", COORDINATED_STREAM_ID)
    )
    # b reports to c as one of many, but to d as the single task knowing the id
    (
        builder.set_bolt("c", coordinated({"b": SourceArgs.all()}), 2)
        .shuffle_grouping("b")
        .direct_grouping("b", COORDINATED_STREAM_ID)
    )
    (
        builder.set_bolt("d", coordinated({"b": SourceArgs.one()}), 2)
        .shuffle_grouping("b")
        .direct_grouping("b", COORDINATED_STREAM_ID)
    )
    # e's reports go to a bolt that is not coordinated, f's to one not declaring f
    builder.set_bolt("e", coordinated({}), 2).shuffle_grouping("s")
    builder.set_bolt("plain", bolts.Identity()).direct_grouping("e", COORDINATED_STREAM_ID)
    builder.set_bolt("f", coordinated({}), 2).shuffle_grouping("s")
    (
        builder.set_bolt("not-declaring", coordinated({"a": SourceArgs.all()}), 2)
        .shuffle_grouping("f")
        .direct_grouping("f", COORDINATED_STREAM_ID)
    )
    # only the owner of an id gets its id tuple: g's other tasks never finish it
    by_id = GlobalStreamId("s", DEFAULT_STREAM_ID)
    builder.set_bolt("g", coordinated({}, id_stream=by_id), 2).fields_grouping("s", Fields("id"))
    (
        builder.set_bolt("after-g", coordinated({"g": SourceArgs.all()}), 2)
        .shuffle_grouping("g")
        .direct_grouping("g", COORDINATED_STREAM_ID)
    )
    topology = builder.create_topology("reports")
    assert gathered_senders(topology) == {"a": 2}
    (first, second) = topology.component_task_ids["a"]
    assert gathered_senders(topology, {first}) == {}
    assert gathered_senders(topology, {first, second}) == {"a": 2}
