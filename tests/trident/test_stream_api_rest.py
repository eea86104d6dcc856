"""The rest of Storm's Trident stream API: ``partition(grouping)``, ``identity_partition()``,
``name()`` and the resource hints ``set_cpu_load``/``set_memory_load``; on every DRPC executor
and every executor of transactional runs."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from drpc import Fields, InvalidTopologyError
from drpc.model.fields import Fields as FieldsType
from drpc.model.grouping import (
    AllGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    KeyGroupGrouping,
    ShuffleGrouping,
)
from drpc.model.partitioners import Fixed, Partitioner
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    Aggregator,
    Count,
    Function,
    LMDBMapState,
    MapStateFactory,
    Stream,
    TridentCollector,
    TridentTopology,
    TridentTuple,
    drpc_topologies,
    run,
    transactional_topology,
)
from drpc.trident.compiler import drpc_topology
from drpc.trident.plan import CPU_LOAD_CONF, OFF_HEAP_CONF, ON_HEAP_CONF

from .ops import Split
from .test_word_count import committed

TEXT = "a b c d e f g h a b c a"


class LastTask(Grouping):
    """A grouping of the user's own (Storm's custom grouping): every tuple to the last task."""

    def partitioner(
        self, source_fields: FieldsType, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        return Fixed((target_tasks - 1,))


class TaskOf(Function):
    """Appends the index of the task that ran it."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.task = context.this_task_index

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        collector.emit([self.task])


class WhereAmI(Function):
    """Appends its component's id and the CPU load and memory its configuration holds."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.where = [context.this_component_id, conf.get(CPU_LOAD_CONF), conf.get(ON_HEAP_CONF)]

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        collector.emit(self.where)


class RowsOfTask(Aggregator[list[Any]]):
    """One row per task that saw tuples: its index, then its input values sorted."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.task = context.this_task_index

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        return []

    def aggregate(self, state: list[Any], tuple: TridentTuple, collector: TridentCollector) -> None:
        state.append(tuple.get_value(0))

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        if state:
            collector.emit([self.task, sorted(state)])


def words(topology: TridentTopology, function: str) -> Stream:
    return topology.new_drpc_stream(function).each(["args"], Split(), ["word"]).project(["word"])


def by_task(stream: Stream, tasks: int = 3) -> None:
    stream.partition_aggregate(["word"], RowsOfTask(), ["task", "words"]).parallelism_hint(tasks)


def answer(drpc: LocalDRPC, function: str, args: str = TEXT) -> list[list[Any]]:
    return sorted(json.loads(drpc.execute(function, args)))


def serve(drpc: LocalDRPC, topology: TridentTopology, state_dir: Path) -> None:
    for compiled in drpc_topologies(topology, str(state_dir)):
        drpc.register(compiled)


def test_partition_and_identity_partition_on_drpc_streams(executor: str, tmp_path: Path) -> None:
    topology = TridentTopology()
    by_task(words(topology, "fields").partition(FieldsGrouping(Fields("word"))))
    by_task(words(topology, "partition-by").partition_by(["word"]))
    by_task(words(topology, "global").partition(GlobalGrouping()))
    by_task(words(topology, "all").partition(AllGrouping()))
    by_task(words(topology, "shuffle").partition(ShuffleGrouping()))
    by_task(words(topology, "custom").partition(LastTask()))
    for function, repartition in (
        ("identity", Stream.identity_partition),
        ("mixed", Stream.shuffle),
    ):
        spread = words(topology, function).shuffle().each(["word"], TaskOf(), ["from"])
        pairs = repartition(spread.parallelism_hint(3)).each(["from"], TaskOf(), ["to"])
        pairs.project(["from", "to"]).parallelism_hint(3)
    (
        words(topology, "named")
        .name("where")
        .each(["word"], WhereAmI(), ["component", "cpu", "heap"])
        .set_cpu_load(50)
        .set_memory_load(256, 16)
        .project(["component", "cpu", "heap"])
    )
    with LocalDRPC(executor=executor, timeout=60.0) as drpc:
        serve(drpc, topology, tmp_path)
        fields = answer(drpc, "fields")
        # each word's tuples all meet in one task, the one partition_by chooses
        assert fields == answer(drpc, "partition-by")
        tasks_of = [task for task, seen in fields for _ in set(seen)]
        assert sorted(word for _, seen in fields for word in seen) == sorted(TEXT.split())
        assert len(tasks_of) == len(set(TEXT.split())) and len(fields) > 1
        assert answer(drpc, "global") == [[0, sorted(TEXT.split())]]
        assert answer(drpc, "all") == [[task, sorted(TEXT.split())] for task in range(3)]
        assert [len(seen) for _, seen in answer(drpc, "shuffle")] == [4, 4, 4]
        assert answer(drpc, "custom") == [[2, sorted(TEXT.split())]]
        identity = json.loads(drpc.execute("identity", TEXT))
        assert len(identity) == 12 and all(source == target for source, target in identity)
        assert {source for source, _ in identity} == {0, 1, 2}
        mixed = json.loads(drpc.execute("mixed", TEXT))
        assert any(source != target for source, target in mixed)
        assert answer(drpc, "named", "x") == [["b0-where", 50.0, 256.0]]


def test_identity_partition_needs_as_many_tasks_on_each_side(tmp_path: Path) -> None:
    topology = TridentTopology()
    words(topology, "f").parallelism_hint(2).identity_partition().each(
        ["word"], TaskOf(), ["to"]
    ).parallelism_hint(3)
    with pytest.raises(InvalidTopologyError, match="identity_partition from 2 tasks to 3"):
        drpc_topology(topology, "f", str(tmp_path))


def test_partition_refuses_what_is_not_a_repartition() -> None:
    stream = words(TridentTopology(), "f")
    for grouping in (DirectGrouping(), KeyGroupGrouping(Fields("word"))):
        with pytest.raises(InvalidTopologyError, match="never emit direct"):
            stream.partition(grouping)
    with pytest.raises(InvalidTopologyError, match="takes a Grouping"):
        stream.partition("fields")  # type: ignore[arg-type]
    with pytest.raises(InvalidTopologyError, match="no field"):
        stream.partition(FieldsGrouping(Fields("nope")))


SENTENCES = {
    0: [["the cow jumped over the moon"], ["the man went to the store"]],
    1: [["four score and seven years ago"], ["how many apples can you eat"]],
}
WORDS = Counter(word for rows in SENTENCES.values() for (s,) in rows for word in s.split())


def counted(topology: TridentTopology, name: str) -> MapStateFactory:
    spout = MemoryTransactionalSpout(SENTENCES, Fields("sentence"), 1)
    state = LMDBMapState.transactional(name)
    (
        topology.new_stream(name, spout, parallelism=2)
        .set_cpu_load(20)
        .name("split")
        .each(["sentence"], Split(), ["word"])
        .set_cpu_load(30)
        .each(["word"], TaskOf(), ["task"])
        .set_cpu_load(45)
        .set_memory_load(100)
        .partition(FieldsGrouping(Fields("word")))
        .name("count")
        .identity_partition()
        .group_by(["word"])
        .persistent_aggregate(state, Count(), ["count"])
        .set_memory_load(64, 0)
    )
    return state


def test_a_named_partitioned_spout_stream_counts_exactly(
    every_tx_executor: str, tmp_path: Path
) -> None:
    topology = TridentTopology()
    state = counted(topology, "rest")
    run(topology, state_dir=str(tmp_path), executor=every_tx_executor)
    assert committed(tmp_path, state) == dict(WORDS)


def test_names_and_resource_hints_are_on_the_built_components(tmp_path: Path) -> None:
    topology = TridentTopology()
    counted(topology, "hints")
    components = transactional_topology(topology, str(tmp_path)).components
    ids = [cid for cid in components if cid.startswith(("b", "persist"))]
    assert ids == ["b0-split", "b1", "b2-count", "persist3-count"]
    assert components["spout"].conf[CPU_LOAD_CONF] == 20.0
    # a component's hints are the sum of its steps' (Storm's)
    assert components["b0-split"].conf[CPU_LOAD_CONF] == 75.0
    assert components["b0-split"].conf[ON_HEAP_CONF] == 100.0
    assert OFF_HEAP_CONF not in components["b0-split"].conf
    assert CPU_LOAD_CONF not in components["b2-count"].conf
    assert components["persist3-count"].conf[ON_HEAP_CONF] == 64.0
    assert components["persist3-count"].conf[OFF_HEAP_CONF] == 0.0
    assert components["b2-count"].inputs  # fed by b1, renamed with the rest


def test_a_name_carries_on_until_the_next_and_is_listed_once_in_a_row(tmp_path: Path) -> None:
    topology = TridentTopology()
    (
        words(topology, "f")
        .name("one")
        .each(["word"], TaskOf(), ["a"])
        .each(["word"], TaskOf(), ["b"])
        .name("two")
        .project(["word"])
        .name("one")
        .each(["word"], TaskOf(), ["c"])
        .shuffle()
        .group_by(["word"])
        .name("grouped")
        .aggregate(Count(), ["n"])
    )
    compiled = drpc_topology(topology, "f", str(tmp_path))
    assert [cid for cid in compiled.components if cid.startswith("b")] == [
        "b0-one-two-one",
        "b1-grouped",
        "b2-grouped",
    ]


@pytest.mark.parametrize("bad", [0, -1, -0.5, math.nan, math.inf, "10", True, None])
def test_resource_hints_take_positive_numbers(bad: Any) -> None:
    topology = TridentTopology()
    stream = words(topology, "f")
    with pytest.raises(InvalidTopologyError, match="CPU load"):
        stream.set_cpu_load(bad)
    with pytest.raises(InvalidTopologyError, match="on-heap"):
        stream.set_memory_load(bad)
    if bad is not None and bad != 0:  # None: not set; 0: none, Storm's default
        with pytest.raises(InvalidTopologyError, match="off-heap"):
            stream.set_memory_load(128, bad)
    state = topology.new_static_state(LMDBMapState.transactional("s"))
    with pytest.raises(InvalidTopologyError, match="static state"):
        state.set_cpu_load(10)


@pytest.mark.parametrize("bad", ["", None, 3])
def test_a_name_is_a_non_empty_str(bad: Any) -> None:
    with pytest.raises(InvalidTopologyError, match="non-empty str"):
        words(TridentTopology(), "f").name(bad)
