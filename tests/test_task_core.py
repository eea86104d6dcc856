"""The engine core's task rules (``drpc.executors.task``) as exact effect traces.

A ``TaskCore`` is driven directly, the way an executor drives it, with effects that
record every call as one line; each test asserts the whole trace.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import pytest

from drpc import (
    BaseBatchBolt,
    BaseRichSpout,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    Topology,
    TopologyBuilder,
    config,
)
from drpc.errors import DRPCExceptionType, Failure, InvalidTopologyError, InvalidTupleError
from drpc.examples.transactional_global_count import build_global_count
from drpc.executors.task import (
    EMIT_CHUNK,
    InputKind,
    TaskCore,
    TaskEffects,
    coordination_config,
)
from drpc.model.components import CURRENT_ANCHOR
from drpc.model.context import TopologyContext
from drpc.model.tuples import Tuple
from drpc.semantics.coordination import CoordinationConfig, Failed, Ignored
from drpc.state.versions import READS, PinnedRequest, pinned_version
from drpc.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder

from .topologies import bolts
from .transactional.bolts import AckFirstBatchLate, SumOfSecondField


class Recorder(TaskEffects):
    """``TaskEffects`` that write each call as a line of ``trace``."""

    def __init__(self) -> None:
        self.trace: list[str] = []

    def deliver(
        self, stream: str, values: Sequence[Any], targets: list[int], anchors: tuple[Tuple, ...]
    ) -> None:
        anchored = [anchor.values for anchor in anchors]
        self.trace.append(f"deliver {stream} {list(values)} to {list(targets)} anchored {anchored}")

    def report(self, id: Hashable, counts: dict[int, int], trigger: Tuple | None) -> None:
        for task, count in counts.items():
            self.trace.append(f"report {id} to {task}: {count} on {_values(trigger)}")

    def settle(self, done: Tuple, failure: Failure | None) -> None:
        done._done = True  # as every executor's settle does
        self.trace.append(f"settle {done.values} " + (failure.message if failure else "acked"))

    def completed(self, id: Hashable) -> None:
        self.trace.append(f"completed {id}")

    def failed(self, failed: Failed) -> Failure:
        self.trace.append(
            f"failed {failed.id} (timed_out={failed.timed_out}): {failed.failure.message}"
        )
        return failed.failure

    def abandoned(self, id: Hashable) -> None:
        self.trace.append(f"abandoned {id}")


def _values(received: Tuple | None) -> list[Any] | None:
    return None if received is None else received.values


def drpc(first: Any, middle: Any, last_tasks: int = 1) -> Topology:
    """bolt0 (task 1) -> bolt1 (tasks 2, 3, shuffled) -> bolt2 (fields-grouped on the id)."""
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(first, 1)
    builder.add_bolt(middle, 2).shuffle_grouping()
    builder.add_bolt(bolts.CountPerRequest(), last_tasks).fields_grouping(Fields("id"))
    return builder.create_topology()


def core_of(
    topology: Topology,
    component: str,
    task: int,
    conf: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[TaskCore, Recorder]:
    recorder = Recorder()
    core = TaskCore(
        topology,
        component,
        task,
        conf=config.resolve(conf),
        effects=recorder,
        clock=lambda: 0.0,
        **options,
    )
    core.prepare(None)
    return core, recorder


def request(core: TaskCore, id: int, argument: str) -> Tuple:
    """The request tuple of ``id`` reaching a first step, as an executor hands it over."""
    received = core.make_tuple("prepare-request", "default", 7, [id, argument])
    assert core.tracker is not None and core.tracker.tuple_received(id, 0) == []
    core.execute_data(received)
    return received


def test_a_batch_task_finishes_an_id_on_its_last_report_and_reports_what_it_sent() -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt1", 2)
    assert core.tracker is not None
    data = core.make_tuple("bolt0", "default", 1, [7, "A"])
    assert core.is_data(data)
    assert core.tracker.tuple_received(7, 0) == []
    core.execute_data(data)
    report = core.make_tuple("bolt0", "__coord", 1, [7, 1])
    assert not core.is_data(report)
    outer = core.current = core.make_tuple("bolt0", "default", 1, [6, "outer"])
    assert core.apply(core.tracker.report_received(7, 1, 0), report) is None
    assert core.current is outer  # restored after the finish
    core.current = None
    assert recorder.trace == [
        "settle [7, 'A'] acked",
        "deliver default [7, 1] to [4] anchored [[7, 1]]",  # finish's emit anchors to its trigger
        "report 7 to 4: 1 on [7, 1]",
        "completed 7",
    ]
    assert 7 not in core.tracker and core.current is None
    assert (core.index, core_of(core.topology, "bolt1", 3)[0].index) == (0, 1)


def test_a_first_step_finishes_when_its_request_is_acked_and_reports_to_every_next_task() -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt0", 1)
    begun: list[Hashable] = []

    def on_finish(id: Hashable) -> Any:
        begun.append(id)
        return lambda: recorder.trace.append(f"finish of {id} ended")

    core.on_finish = on_finish
    request(core, 7, "ab")
    [target] = [int(line.split(" to [")[1][0]) for line in recorder.trace[:1]]
    assert begun == [7]
    assert recorder.trace == [
        f"deliver default [7, 'AB'] to [{target}] anchored [[7, 'ab']]",
        "finish of 7 ended",
        f"report 7 to 2: {int(target == 2)} on [7, 'ab']",
        f"report 7 to 3: {int(target == 3)} on [7, 'ab']",
        "completed 7",
        "settle [7, 'ab'] acked",
    ]


def test_a_failed_tuple_fails_its_id_then_a_late_ack_of_the_id_is_dropped() -> None:
    core, recorder = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    first = request(core, 7, "a")
    second = request(core, 7, "b")
    core.collector.fail(first, "no")
    core.collector.ack(second)  # its id failed here: nothing finishes nor settles
    assert second._done
    failure = "Request failed: step 'bolt0' (task 1) failed the tuple: no"
    assert recorder.trace[2:] == [
        f"failed 7 (timed_out=False): {failure}",
        f"settle [7, 'a'] {failure}",
    ]
    core.collector.fail(first, "again")  # already failed: ignored
    assert len(recorder.trace) == 4


def test_failing_a_tuple_that_is_not_data_leaves_its_id_alone() -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt2", 4)
    assert core.tracker is not None
    assert core.tracker.report_received(7, 0, 0) == []
    id_tuple = core.make_tuple("prepare-request", "id", 7, [7, "host"])
    assert not core.is_data(id_tuple)
    core.collector.fail(id_tuple, "no")
    assert recorder.trace == [
        "settle [7, 'host'] Request failed: step 'bolt2' (task 4) failed the tuple: no"
    ]
    assert 7 in core.tracker
    ret = core.make_tuple("prepare-request", "id", 7, [7, "again"])
    core.collector.ack(ret)
    assert recorder.trace[-1] == "settle [7, 'again'] acked"
    assert core.tracker.status(7).acked == 0  # type: ignore[union-attr]


def test_a_finish_that_raises_fails_the_id_and_its_trigger() -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), bolts.FailInFinish()), "bolt1", 3)
    assert core.tracker is not None
    report = core.make_tuple("bolt0", "__coord", 1, [7, 0])
    failure = core.apply(core.tracker.report_received(7, 0, 0), report)
    assert failure is not None and failure.type is DRPCExceptionType.FAILED_REQUEST
    assert recorder.trace == [f"failed 7 (timed_out=False): {failure.message}"]
    assert failure.message == (
        "Request failed: step 'bolt1' (task 3) raised FailedException: the batch is "
        "incomplete in finish_batch"
    )
    del recorder.trace[:]
    assert core.tracker.tuple_received(9, 0) == []
    [timed_out] = core.tracker.expire(now=30)
    assert core.apply([timed_out], None) == timed_out.failure  # type: ignore[union-attr]
    assert recorder.trace == [f"failed 9 (timed_out=True): {timed_out.failure.message}"]  # type: ignore[union-attr]
    assert core.tracker.tombstones == 1 and core.current is None


def test_an_id_owned_by_another_task_is_abandoned() -> None:
    topology = drpc(bolts.RichUpper(), bolts.CountPerRequest(), last_tasks=2)
    traces: dict[int, list[str]] = {}
    for task in topology.component_task_ids["bolt2"]:
        core, recorder = core_of(topology, "bolt2", task)
        assert core.tracker is not None
        for upstream in (2, 3):
            report = core.make_tuple("bolt1", "__coord", upstream, [7, 0])
            core.apply(core.tracker.report_received(7, 0, 0), report)
        traces[task] = recorder.trace
    # the task that owns the id waits for the id tuple; the other gives the id up
    assert sorted(traces.values()) == [[], ["abandoned 7"]]


def test_the_coordination_configuration_comes_from_the_topology() -> None:
    topology = drpc(bolts.RichUpper(), bolts.CountPerRequest())
    assert coordination_config(topology, "bolt2", 4, 5.0) == CoordinationConfig(
        2, (6,), waits_for_id=True, timeout=5.0, component="bolt2", task=4
    )
    core, _ = core_of(topology, "bolt1", 2, {config.TOPOLOGY_MESSAGE_TIMEOUT_SECS: 9})
    assert core.tracker is not None and core.tracker.config.timeout == 9
    assert core.tracker.config == coordination_config(topology, "bolt1", 2, 9)
    core, _ = core_of(topology, "bolt1", 2, coordination_timeout=3.0)
    assert core.tracker is not None and core.tracker.config.timeout == 3.0
    assert core.message_timeout == 30.0


def test_a_committer_waits_for_the_commit_tuple_and_knows_its_input_streams() -> None:
    topology = build_global_count().create_topology()
    assert coordination_config(topology, "sum", 10, 5.0) == CoordinationConfig(
        5, (), waits_for_id=False, waits_for_commit=True, timeout=5.0, component="sum", task=10
    )
    core, _ = core_of(topology, "sum", 10)
    kinds = [
        core.input_kind("spout/coordinator", "commit"),
        core.input_kind("partial-count", "default"),
        core.input_kind("partial-count", "__coord"),
        core.input_kind("spout/coordinator", "commit"),  # asked again: the same answer
        # a stream's kind is its source's and its name's: the same name from elsewhere is data
        core.input_kind("partial-count", "commit"),
        core.input_kind("spout/coordinator", "commit"),
        core.input_kind("commit", "commit"),
    ]
    assert kinds == [
        InputKind.COMMIT,
        InputKind.DATA,
        InputKind.REPORT,
        InputKind.COMMIT,
        InputKind.DATA,
        InputKind.COMMIT,
        InputKind.DATA,
    ]


def test_execute_restores_the_tuple_being_executed_around_it() -> None:
    core, _ = core_of(drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt1", 2)
    outer = core.current = core.make_tuple("bolt0", "default", 1, [6, "outer"])
    core.execute(core.make_tuple("bolt0", "default", 1, [7, "A"]))
    assert core.current is outer


def test_an_ack_past_the_reported_count_fails_the_id_and_drops_its_batch() -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt2", 4)
    assert core.tracker is not None
    for upstream, count in ((2, 1), (3, 0)):
        report = core.make_tuple("bolt1", "__coord", upstream, [7, count])
        assert core.apply(core.tracker.report_received(7, count, 0), report) is None
    for _ in range(2):  # one tuple more than reported; the id tuple has not come yet
        assert core.tracker.tuple_received(7, 0) == []
        core.execute_data(core.make_tuple("bolt1", "default", 2, [7, 1]))
    message = (
        "Internal error: step 'bolt2' (task 4) received 2 tuples for an id but upstream reported 1"
    )
    assert recorder.trace == [
        "settle [7, 1] acked",
        f"failed 7 (timed_out=False): {message}",
        f"settle [7, 1] {message}",
    ]
    assert core.runner.open_batches == 0  # type: ignore[attr-defined]
    assert core.tracker.tombstones == 1
    core.tracker.expire(now=core.message_timeout + 1)  # the tombstone's deadline is a number
    assert core.tracker.tombstones == 0


def test_a_first_step_whose_finish_raises_fails_the_request_it_acks() -> None:
    core, recorder = core_of(drpc(bolts.FailInFinish(), bolts.CountPerRequest()), "bolt0", 1)
    request(core, 7, "a")
    failure = (
        "Request failed: step 'bolt0' (task 1) raised FailedException: the batch is "
        "incomplete in finish_batch"
    )
    assert recorder.trace[-2:] == [
        f"failed 7 (timed_out=False): {failure}",
        f"settle [7, 'a'] {failure}",
    ]


def test_an_abandoned_id_drops_its_open_batch() -> None:
    topology = drpc(bolts.RichUpper(), bolts.CountPerRequest(), last_tasks=2)
    gave_up: list[bool] = []
    for task in topology.component_task_ids["bolt2"]:
        core, recorder = core_of(topology, "bolt2", task)
        assert core.tracker is not None
        core.execute(core.make_tuple("bolt1", "default", 2, [7, "A"]))  # opens id 7's batch
        assert core.runner.open_batches == 1  # type: ignore[attr-defined]
        for upstream in (2, 3):
            report = core.make_tuple("bolt1", "__coord", upstream, [7, 0])
            core.apply(core.tracker.report_received(7, 0, 0), report)
        abandoned = "abandoned 7" in recorder.trace
        assert core.runner.open_batches == (0 if abandoned else 1)  # type: ignore[attr-defined]
        gave_up.append(abandoned)
    assert sorted(gave_up) == [False, True]


class RemembersPrepare(bolts.Identity):
    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.prepared = (conf, context.conf)
        context.request_wakeup()


def test_prepare_hands_the_bolt_the_conf_and_the_wakeup() -> None:
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(RemembersPrepare(), 1)
    topology = builder.create_topology()
    wakeups: list[str] = []
    core = TaskCore(
        topology,
        "bolt0",
        1,
        conf=config.resolve({config.TOPOLOGY_MESSAGE_TIMEOUT_SECS: 9}),
        effects=Recorder(),
        clock=lambda: 0.0,
    )
    core.prepare(None, wakeup=lambda: wakeups.append("woken"))
    conf, context_conf = core.runner.bolt.prepared  # type: ignore[attr-defined]
    assert (
        conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
        == 9
        == context_conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
    )
    assert wakeups == ["woken"]


def test_unacked_tuples_are_kept_until_acked_or_failed() -> None:
    core, recorder = core_of(
        drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1, track_unacked=True
    )
    first = request(core, 7, "a")
    second = request(core, 8, "b")
    assert core.unacked == {id(first): first, id(second): second}
    core.collector.fail(first, "no")
    assert core.unacked == {id(second): second}
    with core.lock:
        core.wait_for_acks(time.time() + 0.01)  # nobody acks: returns at the deadline
        assert core.unacked == {id(second): second}
        acker = threading.Thread(target=core.collector.ack, args=(second,))
        acker.start()  # blocks on the lock until the wait releases it
        core.wait_for_acks(time.time() + 3600)  # woken by the ack, or the test times out
        assert core.unacked == {}
    acker.join()
    assert recorder.trace[-1] == "settle [8, 'b'] acked"


def _collector_call_pair(
    call: str,
) -> tuple[TaskCore, Recorder, Callable[[], object], Callable[[], object], list[str]]:
    """A core, its recorder, the same collector call made by a turn and by another thread,
    and the trace lines each one leaves, in that order."""
    if call == "emit_direct":
        core, recorder = core_of(direct_drpc(), "bolt0", 1)
        anchor = core.make_tuple("prepare-request", "default", 7, [8, "b"])
        return (
            core,
            recorder,
            lambda: core.collector.emit_direct(3, [8, "turn"], anchors=anchor),
            lambda: core.collector.emit_direct(2, [8, "other"], anchors=anchor),
            [
                "deliver default [8, 'turn'] to [3] anchored [[8, 'b']]",
                "deliver default [8, 'other'] to [2] anchored [[8, 'b']]",
            ],
        )
    core, recorder = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    first, second = request(core, 7, "a"), request(core, 8, "b")
    del recorder.trace[:]
    collector = core.collector
    if call in ("emit", "emit_many"):
        emit = (
            collector.emit
            if call == "emit"
            else lambda values, anchors: collector.emit_many([values], anchors=anchors)
        )
        return (
            core,
            recorder,
            lambda: emit([7, "turn"], anchors=[first]),
            lambda: emit([8, "other"], anchors=[second]),
            [
                f"deliver default [7, 'turn'] to {core.router.targets('default', [7, 'turn'])} "
                "anchored [[7, 'a']]",
                f"deliver default [8, 'other'] to {core.router.targets('default', [8, 'other'])} "
                "anchored [[8, 'b']]",
            ],
        )
    if call == "ack":
        return (
            core,
            recorder,
            lambda: collector.ack(first),
            lambda: collector.ack(second),
            ["settle [7, 'a'] acked", "settle [8, 'b'] acked"],
        )
    assert call == "fail"
    return (
        core,
        recorder,
        lambda: collector.fail(first, "turn"),
        lambda: collector.fail(second, "other"),
        [
            "settle [7, 'a'] Request failed: step 'bolt0' (task 1) failed the tuple: turn",
            "settle [8, 'b'] Request failed: step 'bolt0' (task 1) failed the tuple: other",
        ],
    )


@pytest.mark.parametrize("call", ["emit", "emit_many", "emit_direct", "ack", "fail"])
def test_a_turn_s_own_collector_calls_skip_the_lock_and_other_threads_wait_for_the_turn(
    call: str,
) -> None:
    core, recorder, by_turn, by_other, lines = _collector_call_pair(call)

    def settles_and_delivers() -> list[str]:
        return [line for line in recorder.trace if line.startswith(("deliver", "settle"))]

    with core.lock:
        core.begin_turn()
        by_turn()
        other = threading.Thread(target=by_other)
        other.start()
        other.join(0.2)  # it waits for the lock: its call is not made during the turn
        assert settles_and_delivers() == lines[:1]
        core.end_turn()
    other.join(5.0)
    assert not other.is_alive()
    assert settles_and_delivers() == lines


def test_acked_tuples_are_not_kept() -> None:
    core, _ = core_of(
        drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt0", 1, track_unacked=True
    )
    request(core, 7, "a")
    assert core.unacked == {}
    untracked, _ = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    request(untracked, 7, "a")
    assert untracked.unacked is None


def test_collector_calls_after_the_end_are_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core, recorder = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    first = request(core, 7, "a")
    second = request(core, 7, "b")
    del recorder.trace[:]
    core.end()
    with caplog.at_level(logging.WARNING, logger="drpc.executors.task"):
        assert core.collector.emit([7, "x"]) == []
        core.collector.emit_direct(2, [7, "x"])
        core.collector.ack(first)
        core.collector.fail(second)
    assert recorder.trace == []
    assert first._done and second._done
    assert [record.getMessage() for record in caplog.records] == [
        f"step 'bolt0' task 1 {what} a tuple after its batch ended (past its deadline); ignored"
        for what in ("emitted", "emitted", "acked", "failed")
    ]


def test_a_second_ack_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    core, recorder = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    received = request(core, 7, "a")
    core.collector.ack(received)
    settled = len(recorder.trace)
    with caplog.at_level(logging.WARNING, logger="drpc.executors.task_collector"):
        core.collector.ack(received)
    assert len(recorder.trace) == settled
    assert [record.getMessage() for record in caplog.records] == [
        "step 'bolt0' acked a tuple twice; ignoring the second ack"
    ]


def direct_drpc() -> Topology:
    """bolt0 (task 1) emits directly to each task of bolt1 (tasks 2, 3)."""
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(bolts.DirectToEveryTask(), 1)
    builder.add_bolt(bolts.RecordTask(), 2).direct_grouping()
    builder.add_bolt(bolts.CountPerRequest(), 1).fields_grouping(Fields("id"))
    return builder.create_topology()


def test_emits_anchor_to_what_the_bolt_names() -> None:
    core, recorder = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    first = request(core, 7, "a")
    second = request(core, 7, "b")
    del recorder.trace[:]
    core.collector.emit([7, "none"], anchors=None)
    core.collector.emit([7, "both"], anchors=[first, second])
    core.current = second
    core.collector.emit([7, "current"])
    core.current = None
    assert [line.split(" anchored ")[1] for line in recorder.trace] == [
        "[]",
        "[[7, 'a'], [7, 'b']]",
        "[]",  # the default anchors to the tuple being executed, and none is
    ]
    core.collector.ack(first)
    core.collector.emit([7, "current"], anchors=CURRENT_ANCHOR)
    assert recorder.trace[-1].endswith(" anchored []")
    core.current = second
    core.collector.emit([7, "current"], anchors=CURRENT_ANCHOR)
    assert recorder.trace[-1].endswith(" anchored [[7, 'b']]")
    core.current = None
    with pytest.raises(
        InvalidTupleError,
        match=r"^step 'bolt0' anchored an emit to a tuple it had already acked or failed$",
    ):
        core.collector.emit([7, "late"], anchors=[second, first])


def test_direct_emits_go_to_the_named_task_anchored_and_counted() -> None:
    core, recorder = core_of(direct_drpc(), "bolt0", 1)
    assert core.tracker is not None
    received = request(core, 7, "a")
    assert recorder.trace[:2] == [
        "deliver default [7, 2] to [2] anchored [[7, 'a']]",
        "deliver default [7, 3] to [3] anchored [[7, 'a']]",
    ]
    assert recorder.trace[2:] == [
        "report 7 to 2: 1 on [7, 'a']",
        "report 7 to 3: 1 on [7, 'a']",
        "completed 7",
        "settle [7, 'a'] acked",
    ]
    pending = core.make_tuple("prepare-request", "default", 7, [8, "b"])
    del recorder.trace[:]
    core.collector.emit_direct(3, [8, "anchored"], anchors=pending)
    core.collector.emit_direct(2, [8, "bare"])
    assert recorder.trace == [
        "deliver default [8, 'anchored'] to [3] anchored [[8, 'b']]",
        "deliver default [8, 'bare'] to [2] anchored []",
    ]
    assert received._done


def test_emits_are_counted_for_the_reports_except_on_the_coordination_stream() -> None:
    core, recorder = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    assert core.tracker is not None
    request(core, 7, "a")
    core.collector.emit([7, "more"])
    core.collector.emit((7, "a tuple of values"))  # counted by its id too, not only a list's
    core.send("__coord", [7, 5], [2], ())
    targets = [int(line.split(" to [")[1][0]) for line in recorder.trace[:3]]
    assert core.tracker.emitted_counts(7) == {target: targets.count(target) for target in targets}
    assert sum(core.tracker.emitted_counts(7).values()) == 3
    assert recorder.trace[3] == "deliver __coord [7, 5] to [2] anchored []"


def test_a_debug_topology_logs_each_emit(caplog: pytest.LogCaptureFixture) -> None:
    topology = drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest())
    core, _ = core_of(topology, "bolt0", 1, {config.TOPOLOGY_DEBUG: True})
    with caplog.at_level(logging.DEBUG, logger="drpc.executors.task"):
        request(core, 7, "a")
    [target] = core.tracker.emitted_counts(7) if core.tracker else [0]
    assert [record.getMessage() for record in caplog.records] == [
        f"bolt0[1] emitted [7, 'never acked'] on default to [{target}]"
    ]
    quiet, _ = core_of(topology, "bolt0", 1)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="drpc.executors.task"):
        request(quiet, 7, "a")
    assert caplog.records == []


def test_reported_errors_are_logged_with_the_task(caplog: pytest.LogCaptureFixture) -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt1", 3)
    with caplog.at_level(logging.ERROR, logger="drpc.executors.task_collector"):
        core.collector.report_error(ValueError("odd"))
    assert [(record.levelno, record.getMessage()) for record in caplog.records] == [
        (logging.ERROR, "step 'bolt1' task 3 reported: ValueError('odd')")
    ]
    assert recorder.trace == []


def test_tuples_carry_the_declared_fields_of_their_stream() -> None:
    core, _ = core_of(drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt1", 2)
    made = core.make_tuple("bolt0", "default", 1, [7, "A"], {5: 6})
    again = core.make_tuple("bolt0", "default", 1, [8, "B"])
    report = core.make_tuple("bolt0", "__coord", 1, [7, 1])
    assert (made.source_component, made.source_stream, made.source_task) == ("bolt0", "default", 1)
    assert made.fields == Fields("id", "result") and again.fields is made.fields
    assert made.message_id == {5: 6} and again.message_id == {}
    assert report.fields != made.fields
    # a count report made without looking its fields up: the same tuple as make_tuple's
    quick = core.make_report_tuple("bolt0", 1, 7, 1, {3: 4})
    assert (quick.values, quick.fields, quick.message_id) == ([7, 1], report.fields, {3: 4})
    assert (quick.source_component, quick.source_stream, quick.source_task) == (
        "bolt0",
        "__coord",
        1,
    )


class EchoBatch(bolts.CountPerRequest):
    """Emits each tuple it executes (anchored to it by default); raises on "bad"."""

    def execute(self, tuple: Tuple) -> None:
        if tuple[1] == "bad":
            raise ValueError("bad input")
        self.count += 1
        self.collector.emit([self.id, tuple[1]])


def test_a_run_of_one_id_is_executed_in_order_then_acked_with_one_event() -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), EchoBatch(), 2), "bolt1", 2)
    assert core.tracker is not None and core.acks_in_bulk
    run = [core.make_tuple("bolt0", "default", 1, [7, word]) for word in "ab"]
    outer = core.current = core.make_tuple("bolt0", "default", 1, [6, "outer"])
    assert core.tracker.tuple_received(7, 0, 2) == []
    core.execute_id_run(7, run)
    assert core.current is outer
    core.current = None
    targets = [line.split(" to ")[1].split(" ")[0] for line in recorder.trace[:2]]
    assert recorder.trace == [
        f"deliver default [7, 'a'] to {targets[0]} anchored [[7, 'a']]",
        f"deliver default [7, 'b'] to {targets[1]} anchored [[7, 'b']]",
        "settle [7, 'a'] acked",
        "settle [7, 'b'] acked",
    ]
    assert all(received._done for received in run)
    status = core.tracker.status(7)
    assert status is not None and (status.received, status.acked) == (2, 2)
    del recorder.trace[:]
    # The last report: the finish runs with the run's last ack as trigger when they meet.
    assert core.apply(core.tracker.report_received(7, 3, 0), None) is None
    assert recorder.trace == []  # 2 of 3 acked
    last = [core.make_tuple("bolt0", "default", 1, [7, "c"])]
    assert core.tracker.tuple_received(7, 0) == []
    core.execute_id_run(7, last)
    assert recorder.trace[1] == "deliver default [7, 3] to [4] anchored [[7, 'c']]"
    assert recorder.trace[-2:] == ["completed 7", "settle [7, 'c'] acked"]


def test_a_run_stops_at_the_tuple_that_raises_after_acking_the_ones_before() -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), EchoBatch()), "bolt1", 2)
    assert core.tracker is not None
    words = ("a", "b", "bad", "c", "d")
    run = [core.make_tuple("bolt0", "default", 1, [7, word]) for word in words]
    assert core.tracker.tuple_received(7, 0, 5) == []
    core.execute_id_run(7, run)
    failure = "Request failed: step 'bolt1' (task 2) raised ValueError: bad input in execute"
    assert recorder.trace[2:] == [
        "settle [7, 'a'] acked",
        "settle [7, 'b'] acked",
        f"failed 7 (timed_out=False): {failure}",
        f"settle [7, 'bad'] {failure}",
    ]
    assert [received._done for received in run] == [True, True, True, False, False]
    assert core.current is None and 7 not in core.tracker
    assert core.tracker.tuple_received(7, 0, 5) == [Ignored(7)]  # its late tuples are not run


def test_emit_many_routes_checks_and_counts_each_row(caplog: pytest.LogCaptureFixture) -> None:
    core, recorder = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    assert core.tracker is not None
    received = request(core, 7, "a")
    del recorder.trace[:]
    core.current = received
    core.collector.emit_many([[7, "x"], (7, "y")], anchors=CURRENT_ANCHOR)
    core.current = None
    targets = [int(line.split(" to [")[1][0]) for line in recorder.trace]
    assert recorder.trace == [
        f"deliver default [7, 'x'] to [{targets[0]}] anchored [[7, 'a']]",
        f"deliver default [7, 'y'] to [{targets[1]}] anchored [[7, 'a']]",
    ]
    counts = core.tracker.emitted_counts(7)
    assert sum(counts.values()) == 3  # the request's own emit and these two
    assert all(counts[target] >= targets.count(target) for target in targets)
    with pytest.raises(InvalidTupleError, match="emitted 3 values on stream 'default'"):
        core.collector.emit_many([[7, "z"], [7, "too", "many"], [7, "never"]])
    assert sum(core.tracker.emitted_counts(7).values()) == 4  # the row before it counted
    with pytest.raises(InvalidTupleError, match="emitted str on stream"):
        core.collector.emit_many(["7z"])
    with pytest.raises(InvalidTupleError, match="which is declared direct"):
        core.collector.emit_many([[7, 1]], stream="__coord")
    with pytest.raises(InvalidTupleError, match="undeclared stream 'nope'"):
        core.collector.emit_many([], stream="nope")
    core.end()
    with caplog.at_level(logging.WARNING, logger="drpc.executors.task"):
        core.collector.emit_many([[7, "after"]])
    assert sum(core.tracker.emitted_counts(7).values()) == 4
    assert [record.getMessage() for record in caplog.records] == [
        "step 'bolt0' task 1 emitted a tuple after its batch ended (past its deadline); ignored"
    ]


def test_emit_many_counts_interleaved_ids_each_for_itself() -> None:
    core, recorder = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    assert core.tracker is not None
    big = 10**6
    equal = int(str(big))  # equal to ``big``, another object: a run is not told by identity
    assert equal is not big
    request(core, big, "a")
    request(core, 8, "b")
    before = {id: core.tracker.emitted_counts(id) for id in (big, 8)}
    del recorder.trace[:]
    core.collector.emit_many([[big, "x"], [8, "y"], [equal, "z"], [big, "w"], [8, "v"]])
    sent: dict[int, dict[int, int]] = {big: {}, 8: {}}
    for line in recorder.trace:
        id, target = int(line.split("[")[1].split(",")[0]), int(line.split(" to [")[1][0])
        sent[id][target] = sent[id].get(target, 0) + 1
    assert sum(sent[big].values()) == 3 and sum(sent[8].values()) == 2
    for id in (big, 8):
        after = core.tracker.emitted_counts(id)
        assert {target: after[target] - before[id].get(target, 0) for target in after} == {
            target: sent[id].get(target, 0) for target in after
        }


def test_emit_many_counts_a_none_id_as_any_other() -> None:
    core, _ = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    assert core.tracker is not None
    request(core, None, "a")  # type: ignore[arg-type]  # an id is any hashable
    request(core, 7, "b")
    before = {id: sum(core.tracker.emitted_counts(id).values()) for id in (None, 7)}
    core.collector.emit_many([[None, "x"], [7, "y"], [None, "z"], [None, "w"]])
    after = {id: sum(core.tracker.emitted_counts(id).values()) for id in (None, 7)}
    assert {id: after[id] - before[id] for id in (None, 7)} == {None: 3, 7: 1}


class PairSpout(BaseRichSpout):
    def next_tuple(self) -> None:
        pass

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "word"))


def test_emit_many_on_an_uncoordinated_bolt_counts_nothing() -> None:
    builder = TopologyBuilder()
    builder.set_spout("words", PairSpout())
    builder.set_bolt("echo", bolts.RichForgetsToAck(), 1).shuffle_grouping("words")
    builder.set_bolt("sink", bolts.Identity(), 1).shuffle_grouping("echo")
    topology = builder.create_topology()
    core, recorder = core_of(topology, "echo", topology.component_task_ids["echo"][0])
    assert core.tracker is None
    core.collector.emit_many([[1, "x"], [2, "y"]])
    sink = topology.component_task_ids["sink"]
    assert [line.split(" anchored")[0] for line in recorder.trace] == [
        f"deliver default [1, 'x'] to {sink}",
        f"deliver default [2, 'y'] to {sink}",
    ]


def test_emit_many_across_chunks_delivers_and_counts_each_row_before_a_raise() -> None:
    core, recorder = core_of(drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest()), "bolt0", 1)
    assert core.tracker is not None
    request(core, 7, "a")
    del recorder.trace[:]
    rows = 2 * EMIT_CHUNK + 5  # two whole chunks and part of a third

    def emits() -> Iterator[list[Any]]:
        for n in range(rows):
            yield [7, f"w{n}"]
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        core.collector.emit_many(emits())
    delivered = [line.split(" anchored")[0] for line in recorder.trace]
    assert len(delivered) == rows and delivered[-1].startswith(
        f"deliver default [7, 'w{rows - 1}']"
    )
    assert sum(core.tracker.emitted_counts(7).values()) == rows + 1  # and the request's own
    del recorder.trace[:]
    bad = [[7, f"v{n}"] for n in range(EMIT_CHUNK + 3)]
    bad[EMIT_CHUNK + 1] = [7, "too", "many"]  # in the second chunk
    with pytest.raises(InvalidTupleError, match="emitted 3 values"):
        core.collector.emit_many(bad)
    assert len(recorder.trace) == EMIT_CHUNK + 1
    assert sum(core.tracker.emitted_counts(7).values()) == rows + 1 + EMIT_CHUNK + 1


def test_emit_many_routes_to_every_subscriber_as_emit_does() -> None:
    def topology() -> Topology:
        builder = TopologyBuilder()
        builder.set_spout("words", PairSpout())
        builder.set_bolt("echo", bolts.RichForgetsToAck(), 1).shuffle_grouping("words")
        builder.set_bolt("by-word", bolts.Identity(), 3).fields_grouping("echo", Fields("result"))
        builder.set_bolt("any", bolts.Identity(), 2).shuffle_grouping("echo")
        builder.set_bolt("all", bolts.Identity(), 2).all_grouping("echo")
        return builder.create_topology()

    rows = [[n % 3, f"w{n % 11}"] for n in range(EMIT_CHUNK + 50)]
    one, one_trace = core_of(topology(), "echo", topology().component_task_ids["echo"][0])
    for row in rows:
        one.collector.emit(row)
    many, many_trace = core_of(topology(), "echo", topology().component_task_ids["echo"][0])
    many.collector.emit_many(rows)
    assert many_trace.trace == one_trace.trace
    assert all(
        len(line.split(" to [")[1].split("]")[0].split(",")) == 4 for line in many_trace.trace
    )


def test_a_debug_topology_logs_each_row_of_emit_many(caplog: pytest.LogCaptureFixture) -> None:
    topology = drpc(bolts.RichForgetsToAck(), bolts.CountPerRequest())
    core, recorder = core_of(topology, "bolt0", 1, {config.TOPOLOGY_DEBUG: True})
    with caplog.at_level(logging.DEBUG, logger="drpc.executors.task"):
        core.collector.emit_many([[8, "x"], [8, "y"]], anchors=None)
    targets = [line.split(" to ")[1].split(" ")[0] for line in recorder.trace]
    assert [record.getMessage() for record in caplog.records] == [
        f"bolt0[1] emitted [8, 'x'] on default to {targets[0]}",
        f"bolt0[1] emitted [8, 'y'] on default to {targets[1]}",
    ]


def test_a_run_whose_acks_finish_an_id_that_fails_in_finish_fails_its_last_tuple() -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), bolts.FailInFinish()), "bolt1", 2)
    assert core.tracker is not None
    assert core.apply(core.tracker.report_received(7, 2, 0), None) is None
    run = [core.make_tuple("bolt0", "default", 1, [7, word]) for word in "ab"]
    assert core.tracker.tuple_received(7, 0, 2) == []
    core.execute_id_run(7, run)
    failure = (
        "Request failed: step 'bolt1' (task 2) raised FailedException: the batch is "
        "incomplete in finish_batch"
    )
    assert recorder.trace == [
        f"failed 7 (timed_out=False): {failure}",
        "settle [7, 'a'] acked",
        f"settle [7, 'b'] {failure}",
    ]


def test_a_run_acking_more_tuples_than_reported_fails_the_id() -> None:
    core, recorder = core_of(drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt1", 2)
    assert core.tracker is not None
    assert core.apply(core.tracker.report_received(7, 1, 0), None) is None
    run = [core.make_tuple("bolt0", "default", 1, [7, word]) for word in "ab"]
    assert core.tracker.tuple_received(7, 0, 2) == []
    core.execute_id_run(7, run)
    assert recorder.trace[0].startswith("failed 7 (timed_out=False): Internal error:")
    assert recorder.trace[1:] == [
        "settle [7, 'a'] acked",
        "settle [7, 'b'] " + recorder.trace[0].split(": ", 1)[1],
    ]
    assert 7 not in core.tracker and core.tracker.tombstones == 1


def test_emit_many_counts_a_task_each_row_reaches_whatever_route_it_took() -> None:
    # "a"'s stream goes to "b" by word (two tasks) and to "c" (one task) as a whole: rows
    # for different "b" tasks all reach "c", which must be counted once per row.
    spout = MemoryTransactionalSpout({0: [["x"]]}, Fields("word"), 10)
    builder = TransactionalTopologyBuilder("two-routes", "spout", spout, 1)
    builder.set_bolt("a", AckFirstBatchLate(0.0), 1).none_grouping("spout")
    builder.set_bolt("b", SumOfSecondField(), 2).fields_grouping("a", Fields("word"))
    builder.set_bolt("c", SumOfSecondField(), 1).global_grouping("a")
    topology = builder.create_topology()
    (a_task,) = topology.component_task_ids["a"]
    (c_task,) = topology.component_task_ids["c"]
    b_tasks = topology.component_task_ids["b"]
    core, _ = core_of(topology, "a", a_task)
    assert core.tracker is not None and core.tracker.tuple_received(1, 0) == []
    words = ["w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"]
    core.collector.emit_many([[1, word] for word in words])
    counts = core.tracker.emitted_counts(1)
    assert all(counts.get(task, 0) > 0 for task in b_tasks)  # both routes to "b" were taken
    assert sum(counts.get(task, 0) for task in b_tasks) == len(words)
    assert counts[c_task] == len(words)


PINNED_DIR = "/pinned/state"
SEEN_VERSIONS: list[tuple[str, int | None]] = []


class ReadsAnywhere(BaseBatchBolt):
    """Notes the version its thread reads ``PINNED_DIR`` at, in execute and in finish."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:
        self.collector, self.id = collector, id

    def execute(self, tuple: Tuple) -> None:
        SEEN_VERSIONS.append(("execute", pinned_version(PINNED_DIR)))

    def finish_batch(self) -> None:
        SEEN_VERSIONS.append(("finish", pinned_version(PINNED_DIR)))
        self.collector.emit([self.id, 0])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


class ReadsInFinish(ReadsAnywhere):
    state_reads = "finish"


class ReadsNowhere(ReadsAnywhere):
    state_reads = "nowhere"


@pytest.mark.parametrize(
    ("bolt", "expected"),
    [
        (ReadsAnywhere, [("execute", 41), ("execute", 41), ("execute", 41), ("finish", 41)]),
        (ReadsInFinish, [("execute", None), ("execute", None), ("execute", None), ("finish", 41)]),
        (ReadsNowhere, [("execute", None)] * 3 + [("finish", None)]),
    ],
)
def test_a_pinned_request_s_versions_are_the_thread_s_where_the_bolt_reads_state(
    bolt: type[ReadsAnywhere], expected: list[tuple[str, int | None]]
) -> None:
    core, _ = core_of(drpc(bolts.RichUpper(), bolt()), "bolt1", 2)
    assert core.tracker is not None
    request = PinnedRequest(7, ((PINNED_DIR, 41),))
    SEEN_VERSIONS.clear()
    data = [core.make_tuple("bolt0", "default", 1, [request, word]) for word in "abc"]
    # what the thread read before, and the input it was working on, come back after each
    outer = core.make_tuple("bolt0", "default", 1, [8, "outer"])
    core.current = outer
    READS.reads = ((PINNED_DIR, 40),)
    try:
        core.tracker.tuple_received(request, 0)
        core.execute_data(data[0])
        assert core.current is outer and pinned_version(PINNED_DIR) == 40
        for _ in data[1:]:
            core.tracker.tuple_received(request, 0)
        core.execute_id_run(request, data[1:])
        assert core.current is outer and pinned_version(PINNED_DIR) == 40
        report = core.make_tuple("bolt0", "__coord", 1, [request, 3])
        core.apply(core.tracker.report_received(request, 3, 0), report)
        assert core.current is outer and pinned_version(PINNED_DIR) == 40
    finally:
        READS.reads = None
    assert [(where, 40 if version is None else version) for where, version in expected] == (
        SEEN_VERSIONS
    )


def test_a_bolt_s_state_reads_must_be_one_of_the_three() -> None:
    class ReadsSometimes(ReadsAnywhere):
        state_reads = "sometimes"

    with pytest.raises(
        InvalidTopologyError,
        match="component 'bolt1': state_reads must be one of anywhere, finish",
    ):
        core_of(drpc(bolts.RichUpper(), ReadsSometimes()), "bolt1", 2)


def test_tracker_events_carry_the_turn_s_time_in_a_turn_and_the_clock_s_outside() -> None:
    core, _ = core_of(drpc(bolts.RichUpper(), bolts.CountPerRequest()), "bolt1", 2)
    core.clock = lambda: 100.0
    assert core.now() == 100.0
    core.begin_turn(5.0)
    assert core.now() == 5.0
    core.end_turn()
    assert core.now() == 100.0
    core.begin_turn()  # a turn that gives no time takes the clock's
    assert core.now() == 100.0
    core.end_turn()
