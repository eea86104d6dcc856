"""Tuples that their receiver's coordination keeps in their tree carry no edge ids.

A coordinated step without an id stream holds the count reports of the steps it waits
for until it has received and acked every tuple they count, so those reports' edges keep
the request's tree open while such tuples travel: the tuples themselves need no edges,
and their acks (0 when they have no children of their own) are never sent.
(``drpc.executors.task.counts_to_completion``, ``drpc.executors.local.tasks.roots_of``.)
"""

from __future__ import annotations

import threading
import time

import pytest

from drpc import (
    BaseBasicBolt,
    BasicOutputCollector,
    DRPCExecutionException,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    TopologyBuilder,
    Tuple,
    config,
)
from drpc.builders.coordinated_drpc import JOIN_ID, PREPARE_ID
from drpc.builders.drpc_components import RETURN_STREAM
from drpc.examples.reach import build_reach
from drpc.executors.local.messages import Outbox
from drpc.executors.local.tasks import BoltTask, roots_of
from drpc.executors.task import TaskCore, TaskEffects, counts_to_completion
from drpc.model.streams import COORDINATED_STREAM_ID, DEFAULT_STREAM_ID, GlobalStreamId
from drpc.model.topology import CoordinatedBolt, SourceArgs
from drpc.testing import LocalDRPC

from .topologies import bolts
from .waiting import wait_until

ROOT = 1 << 63 | 5


def test_a_step_holding_its_sources_reports_keeps_their_data_tuples_in_the_tree() -> None:
    topology = build_reach().create_topology()
    assert counts_to_completion(topology, "bolt0", DEFAULT_STREAM_ID, "bolt1")  # single source
    assert counts_to_completion(topology, "bolt1", DEFAULT_STREAM_ID, "bolt2")  # every task
    # the last step and the join wait for an id tuple: only its owner holds anything
    assert not counts_to_completion(topology, "bolt2", DEFAULT_STREAM_ID, "bolt3")
    assert not counts_to_completion(topology, "bolt3", DEFAULT_STREAM_ID, JOIN_ID)
    # the request's arguments come from no step whose reports bolt0 waits for
    assert not counts_to_completion(topology, PREPARE_ID, DEFAULT_STREAM_ID, "bolt0")
    assert not counts_to_completion(topology, PREPARE_ID, RETURN_STREAM, JOIN_ID)
    # the reports themselves keep their edges
    assert not counts_to_completion(topology, "bolt0", COORDINATED_STREAM_ID, "bolt1")


class WithCommits(bolts.Identity):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        super().declare_output_fields(declarer)
        declarer.declare_stream("commit", Fields("id"))


def test_a_commit_stream_and_an_uncoordinated_receiver_keep_their_edges() -> None:
    builder = TopologyBuilder()
    builder.set_spout("s", bolts.Silent())
    builder.set_bolt("a", CoordinatedBolt(WithCommits(), {}), 2).shuffle_grouping("s")
    (
        builder.set_bolt(
            "b",
            CoordinatedBolt(
                bolts.Identity(),
                {"a": SourceArgs.all()},
                commit_stream=GlobalStreamId("a", "commit"),
            ),
            2,
        )
        .shuffle_grouping("a")
        .all_grouping("a", "commit")
        .direct_grouping("a", COORDINATED_STREAM_ID)
    )
    builder.set_bolt("plain", bolts.Identity()).shuffle_grouping("a")
    topology = builder.create_topology("t")
    assert counts_to_completion(topology, "a", DEFAULT_STREAM_ID, "b")
    assert not counts_to_completion(topology, "a", "commit", "b")
    assert not counts_to_completion(topology, "a", DEFAULT_STREAM_ID, "plain")
    core = TaskCore(
        topology,
        "a",
        topology.component_task_ids["a"][0],
        conf=config.resolve(None),
        effects=TaskEffects(),
    )
    assert core.counted_targets(DEFAULT_STREAM_ID) == frozenset(topology.component_task_ids["b"])
    assert core.counted_targets("commit") == frozenset()


def test_an_emit_to_a_counted_task_takes_no_edge_and_one_to_another_task_does() -> None:
    with LocalDRPC() as drpc:
        engine = drpc.register(build_reach())
        tasks = engine.topology.component_task_ids
        sender = engine.tasks[tasks["bolt0"][0]]
        assert isinstance(sender, BoltTask)
        assert sender.core.counted_targets(DEFAULT_STREAM_ID) == frozenset(tasks["bolt1"])
        anchor = sender.core.make_tuple(PREPARE_ID, DEFAULT_STREAM_ID, 1, [7, "url"], {ROOT: 99})
        counted, other = tasks["bolt1"][0], tasks["bolt2"][0]  # bolt2: a stand-in receiver
        outbox = Outbox()
        with sender.lock:
            sender.turn_outbox = outbox
            try:
                sender.deliver(DEFAULT_STREAM_ID, [7, "sally"], [counted, other], (anchor,))
                sender.ack_to_acker(ROOT, 0)
            finally:
                sender.turn_outbox = None
        [to_counted] = outbox.to(counted)
        [to_other] = outbox.to(other)
        assert isinstance(to_counted, Tuple) and isinstance(to_other, Tuple)
        assert to_counted.message_id == {ROOT: 0}
        [edge] = to_other.message_id.values()
        assert edge != 0 and anchor._ack_val == edge  # only the other tuple's edge is owed
        assert outbox.ack_values() == []  # an ack of 0 is not sent


def test_an_edgeless_anchor_lends_its_roots_and_an_edged_one_is_copied_without_edges() -> None:
    edgeless = Tuple([7, "a"], Fields("id", "x"), "bolt0", DEFAULT_STREAM_ID, 1, {ROOT: 0})
    edged = Tuple([7, "b"], Fields("id", "x"), "bolt0", DEFAULT_STREAM_ID, 1, {ROOT: 3, 11: 4})
    assert roots_of((edgeless,)) is edgeless.message_id
    assert roots_of((edged,)) == {ROOT: 0, 11: 0} and edged.message_id == {ROOT: 3, 11: 4}
    assert roots_of((edgeless, edged)) == {ROOT: 0, 11: 0}
    assert roots_of(()) == {}
    assert edged._ack_val == 0  # anchoring edgelessly owes the anchor nothing


class SlowFollowers(BaseBasicBolt):
    """[id, n] -> n tuples [id, i], each after a pause, from the counted step."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for index in range(int(tuple[1])):
            time.sleep(0.01)
            collector.emit([tuple[0], index])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "i"))


class Fanout(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for _ in range(3):
            collector.emit([tuple[0], tuple[1]])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "n"))


class SlowCount(bolts.CountPerRequest):
    """Counts its tuples, slowly."""

    def execute(self, tuple: Tuple) -> None:
        time.sleep(0.005)
        super().execute(tuple)


def slow_chain() -> LinearDRPCTopologyBuilder:
    builder = LinearDRPCTopologyBuilder("slow")
    builder.add_bolt(Fanout(), 2)
    builder.add_bolt(SlowFollowers(), 3).shuffle_grouping()
    builder.add_bolt(SlowCount(), 2).fields_grouping(Fields("id"))
    return builder


@pytest.mark.timeout(60)
def test_slow_counted_steps_are_waited_for_and_every_tree_completes_only_then() -> None:
    with LocalDRPC() as drpc:
        engine = drpc.register(slow_chain())
        answers: list[str] = []
        callers = [
            threading.Thread(target=lambda n=n: answers.append(drpc.execute("slow", str(n))))
            for n in (2, 3, 4, 5)
        ]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join()
        # every tuple was counted before its step finished, and every tree completed
        assert sorted(answers, key=int) == ["6", "9", "12", "15"]
        wait_until(lambda: engine.pending_roots() == 0 and engine.held_tuples() == 0)


class FailsOnTwo(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        if tuple[1] == 2:
            raise ValueError("two is not allowed")
        collector.emit([tuple[0], tuple[1]])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "i"))


def test_a_counted_tuple_that_fails_fails_its_request() -> None:
    builder = LinearDRPCTopologyBuilder("failing")
    builder.add_bolt(SlowFollowers(), 1)
    builder.add_bolt(FailsOnTwo(), 3).shuffle_grouping()
    builder.add_bolt(SlowCount(), 1).fields_grouping(Fields("id"))
    with LocalDRPC() as drpc:
        engine = drpc.register(builder)
        with pytest.raises(DRPCExecutionException, match="two is not allowed"):
            drpc.execute("failing", "4")
        assert drpc.execute("failing", "2") == "2"  # indices 0 and 1 only
        wait_until(lambda: engine.pending_roots() == 0 and engine.held_tuples() == 0)


def test_a_task_finds_each_root_of_an_id_whose_tuples_shared_or_differed_in_message_ids() -> None:
    with LocalDRPC() as drpc:
        engine = drpc.register(build_reach())
        task = engine.tasks[engine.topology.component_task_ids["bolt2"][0]]
        assert isinstance(task, BoltTask)
        shared = {ROOT: 0}
        task.note_roots(7, shared)
        task.note_roots(7, shared)  # the same message id again: nothing new
        task.note_roots(7, {ROOT: 5})  # another dict, the same root
        task.note_roots(7, {ROOT: 0, 11: 0})  # a second root
        task.note_roots(8, {11: 3})
        assert task.ids_of_root(ROOT) == [7]
        assert task.ids_of_root(11) == [7, 8]
        assert task.ids_of_root(12) == []
        task.forget_roots(7)
        assert task.ids_of_root(ROOT) == [] and task.ids_of_root(11) == [8]
        task.note_roots(7, shared)  # noted again after it was forgotten
        assert task.ids_of_root(ROOT) == [7]
        task.forget_roots(7)
        task.forget_roots(8)
        assert task.roots_of_id == {} and task.more_roots_of_id == {}
