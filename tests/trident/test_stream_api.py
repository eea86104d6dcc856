"""Trident stream operations as Storm has them: batch-global aggregations answering each batch
once whatever their tasks, local_or_shuffle, chained_agg, min/max/min_by/max_by and the
parallelism of a state's committer; on DRPC streams (every DRPC executor) and spout streams
(both executors of transactional runs)."""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from drpc import Fields, InvalidTopologyError
from drpc.model.grouping import FieldsGrouping, GlobalGrouping
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout, TransactionAttempt
from drpc.transactional.filelog import FileLogTransactionalSpout
from drpc.trident import (
    Count,
    FirstN,
    LMDBMapState,
    Max,
    Min,
    Stream,
    Sum,
    TridentTopology,
    drpc_topologies,
    run,
    transactional_topology,
)
from drpc.trident.bolts import SegmentBolt
from drpc.trident.compiler import drpc_topology
from drpc.trident.fused import fused_plan
from drpc.trident.processors import BATCH_GLOBAL, chosen_task

from .ops import Concat, CountFailingCommits, RecordsBatchRows, Split, WritersOfKey
from .test_word_count import committed


def serve(drpc: LocalDRPC, topology: TridentTopology, state_dir: Path) -> None:
    for compiled in drpc_topologies(topology, str(state_dir)):
        drpc.register(compiled)


def words(topology: TridentTopology, function: str, tasks: int = 1) -> Stream:
    """A request's words and their lengths, over ``tasks`` tasks."""
    return (
        topology.new_drpc_stream(function)
        .each(["args"], Split(), ["word"])
        .each(["word"], lambda t, collector: collector.emit([len(t[0])]), ["n"])
        .project(["word", "n"])
        .parallelism_hint(tasks)
    )


def rows(answer: str) -> list[list[Any]]:
    return sorted(json.loads(answer))


# -- batch-global semantics ---------------------------------------------------------------------


def test_global_aggregations_answer_each_request_once(drpc: LocalDRPC, tmp_path: Path) -> None:
    """Storm's [[1]] where drpc used to answer one row per task ([[1], [0]])."""
    topology = TridentTopology()
    for tasks in (2, 3):
        words(topology, f"count{tasks}", tasks).aggregate(Count(), ["n"]).parallelism_hint(tasks)
        (
            words(topology, f"concat{tasks}", tasks)
            .aggregate(["word"], Concat(), ["joined"])
            .parallelism_hint(tasks)
        )
        (
            words(topology, f"batch{tasks}", tasks)
            .batch_global()
            .partition_aggregate(Count(), ["n"])
            .parallelism_hint(tasks)
        )
        (
            words(topology, f"global{tasks}", tasks)
            .global_()
            .filter(["n"], lambda t: t["n"] > 0)
            .partition_aggregate(["n"], Sum(), ["total"])
            .parallelism_hint(tasks)
        )
    serve(drpc, topology, tmp_path)
    for tasks in (2, 3):
        for args, count, joined in (("x x x", 3, "xxx"), ("", 0, "")):
            assert drpc.execute(f"count{tasks}", args) == f"[[{count}]]"
            assert drpc.execute(f"concat{tasks}", args) == json.dumps([[joined]])
            assert drpc.execute(f"batch{tasks}", args) == f"[[{count}]]"
            assert drpc.execute(f"global{tasks}", args) == f"[[{count}]]"
    # requests at once: batches that run together, each answered once by its own task
    asked = ["x " * n for n in range(8)]
    with ThreadPoolExecutor(len(asked)) as pool:
        answers = list(pool.map(lambda args: drpc.execute("count3", args), asked))
    assert answers == [f"[[{n}]]" for n in range(8)]


def test_batch_global_spreads_batches_over_the_tasks_by_batch_id(tmp_path: Path) -> None:
    chosen = [chosen_task(BATCH_GLOBAL, batch, 3) for batch in range(1, 31)]
    assert set(chosen) == {0, 1, 2}
    assert chosen == [chosen_task(BATCH_GLOBAL, batch, 3) for batch in range(1, 31)]
    assert {chosen_task(GlobalGrouping(), batch, 3) for batch in range(1, 31)} == {0}
    # the grouping whose choice decides is the one the compiler subscribes with
    topology = TridentTopology()
    words(topology, "f", 2).aggregate(Count(), ["n"]).parallelism_hint(3)
    compiled = drpc_topology(topology, "f", str(tmp_path))
    (aggregate,) = [spec for spec in compiled.components.values() if spec.parallelism == 3]
    assert BATCH_GLOBAL in aggregate.inputs.values()
    # its choice is a fields grouping's on the batch id (field 0), hashed once per batch
    by_fields = FieldsGrouping(Fields("$batch")).partitioner(Fields("$batch", "x"), 0, 1, 3)
    by_batch = BATCH_GLOBAL.partitioner(Fields("$batch", "x"), 0, 1, 3)
    tuples = [(TransactionAttempt(txid, 7), x) for txid in (1, 1, 2, 3, 3, 3, 4) for x in (0, 1)]
    assert by_batch.choose_many(tuples) == by_fields.choose_many(tuples)


def test_global_aggregations_of_a_spout_stream_answer_each_batch_once(
    tx_executor: str, tmp_path: Path
) -> None:
    data = {p: [[f"w{p}{i}", i] for i in range(4 + p)] for p in range(3)}
    topology = TridentTopology()
    stream = topology.new_stream(
        "numbers", MemoryTransactionalSpout(data, Fields("word", "x"), 2), parallelism=2
    )
    counts = LMDBMapState.transactional("counts")
    (
        stream.aggregate(Count(), ["n"])
        .parallelism_hint(3)
        .partition_persist(counts, ["n"], RecordsBatchRows())
    )
    chains = LMDBMapState.transactional("chains")
    (
        stream.chained_agg()
        .aggregate(Count(), ["n"])
        .aggregate(["x"], Sum(), ["sum"])
        .chain_end()
        .parallelism_hint(2)
        .partition_persist(chains, ["n", "sum"], RecordsBatchRows())
    )
    largest = LMDBMapState.transactional("largest")
    (
        stream.max_by("x")
        .parallelism_hint(3)
        .project(["x"])
        .partition_persist(largest, ["x"], RecordsBatchRows())
    )
    state_dir = tmp_path / "state"
    result = run(topology, state_dir=str(state_dir), executor=tx_executor, max_spout_pending=2)
    batches = {commit.txid: commit.tuples for commit in result.commits}
    assert [tuples for tuples in batches.values() if tuples] == [6, 6, 3]
    assert 0 in batches.values()  # the batches of an idle spout: Count answers [0]

    def answers(factory: Any) -> dict[int, list[list[Any]]]:
        by_txid: dict[int, list[list[Any]]] = {}
        for (txid, _task), values in committed(state_dir, factory).items():
            assert txid not in by_txid, f"batch {txid} answered by two tasks"
            by_txid[txid] = values
        return by_txid

    assert answers(counts) == {txid: [[tuples]] for txid, tuples in batches.items()}
    sums = {txid: sum(row[1] for row in _batch_rows(data, txid, 2)) for txid in batches}
    assert answers(chains) == {txid: [[batches[txid], sums[txid]]] for txid in batches}
    assert answers(largest) == {
        txid: [[max(row[1] for row in _batch_rows(data, txid, 2))]]
        for txid, tuples in batches.items()
        if tuples
    }


def _batch_rows(data: dict[int, list[list[Any]]], txid: int, take: int) -> list[list[Any]]:
    """The rows of batch ``txid`` of a MemoryTransactionalSpout taking ``take`` a partition."""
    return [row for rows in data.values() for row in rows[(txid - 1) * take : txid * take]]


# -- local_or_shuffle ---------------------------------------------------------------------------


def test_local_or_shuffle_keeps_tuples_in_their_task(drpc: LocalDRPC, tmp_path: Path) -> None:
    topology = TridentTopology()
    (
        words(topology, "local", 2)
        .local_or_shuffle()
        .partition_aggregate(Count(), ["n"])
        .parallelism_hint(2)
    )
    words(topology, "shuffle", 2).shuffle().partition_aggregate(Count(), ["n"]).parallelism_hint(2)
    (
        words(topology, "more-tasks", 2)
        .local_or_shuffle()
        .partition_aggregate(Count(), ["n"])
        .parallelism_hint(3)
    )
    serve(drpc, topology, tmp_path)
    # one task of the first step gets the request: its words stay there, or spread
    assert rows(drpc.execute("local", "a b c d")) == [[0], [4]]
    assert rows(drpc.execute("shuffle", "a b c d")) == [[2], [2]]
    assert rows(drpc.execute("more-tasks", "a b c d")) == [[1], [1], [2]]


# -- chained_agg --------------------------------------------------------------------------------


def test_chained_aggregators_run_in_one_pass(drpc: LocalDRPC, tmp_path: Path) -> None:
    topology = TridentTopology()
    (
        words(topology, "combiners", 2)
        .chained_agg()
        .aggregate(Count(), ["count"])
        .aggregate(["n"], Sum(), ["letters"])
        .chain_end()
        .parallelism_hint(3)
    )
    (
        words(topology, "cross", 2)
        .chained_agg()
        .aggregate(Count(), ["count"])
        .aggregate(["word", "n"], FirstN(2, "n", reverse=True), ["longest", "length"])
        .chain_end()
        .parallelism_hint(2)
    )
    (
        words(topology, "partitions")
        .broadcast()
        .chained_agg()
        .partition_aggregate(Count(), ["count"])
        .partition_aggregate(["word"], Concat(), ["joined"])
        .chain_end()
        .parallelism_hint(2)
    )
    (
        words(topology, "grouped", 2)
        .group_by(["n"])
        .chained_agg()
        .aggregate(Count(), ["count"])
        .aggregate(["word"], Concat(), ["joined"])
        .chain_end()
        .parallelism_hint(2)
    )
    serve(drpc, topology, tmp_path)
    assert drpc.execute("combiners", "a bb ccc") == "[[3, 6]]"
    assert drpc.execute("combiners", "") == "[[0, 0]]"
    # Count's one tuple times FirstN's two: the cross product
    assert drpc.execute("cross", "a ccc bb") == '[[3, "ccc", 3], [3, "bb", 2]]'
    assert drpc.execute("cross", "") == "[]"  # FirstN emits nothing: no row
    assert rows(drpc.execute("partitions", "a bb")) == [[2, "abb"], [2, "abb"]]
    assert rows(drpc.execute("grouped", "a a bb")) == [[1, 2, "aa"], [2, 1, "bb"]]
    assert drpc.execute("grouped", "") == "[]"


# -- min, max, min_by, max_by ----------------------------------------------------------------


def by_length(a: Any, b: Any) -> int:
    return (a["n"] > b["n"]) - (a["n"] < b["n"])


def test_min_and_max_answer_the_winning_tuple_once(drpc: LocalDRPC, tmp_path: Path) -> None:
    topology = TridentTopology()
    for name, make in {
        "min_by": lambda s: s.min_by("n"),
        "max_by": lambda s: s.max_by("n"),
        "min_by_comparator": lambda s: s.min_by("word", lambda a, b: (a < b) - (a > b)),
        "min": lambda s: s.min(by_length),
        "max": lambda s: s.max(by_length),
        "max_field": lambda s: s.max("n"),
    }.items():
        make(words(topology, name, 2).shuffle().parallelism_hint(3)).parallelism_hint(2)
    serve(drpc, topology, tmp_path)
    request = "bb a dddd ccc ee"
    expected = {
        "min_by": [["a", 1]],
        "max_by": [["dddd", 4]],
        "min_by_comparator": [["ee", 2]],  # the least by a reversed order: the last word
        "min": [["a", 1]],
        "max": [["dddd", 4]],
        "max_field": [["dddd", 4]],
    }
    for name, answer in expected.items():
        assert json.loads(drpc.execute(name, request)) == answer, name
    assert drpc.execute("min_by", "") == drpc.execute("max", "") == "[]"


def test_min_and_max_skip_none_and_let_the_last_of_equals_win() -> None:
    from drpc.trident import TridentCollector, TridentTuple

    def winner(aggregator: Any, values: list[Any]) -> list[tuple[Any, ...]]:
        collector = TridentCollector(2, "test")
        state = aggregator.init(1, collector)
        for i, value in enumerate(values):
            aggregator.aggregate(state, TridentTuple.of(["v", "i"], [value, i]), collector)
        aggregator.complete(state, collector)
        return collector.take()

    assert winner(Min("v"), [3, None, 1, 2, 1]) == [(1, 4)]
    assert winner(Max("v"), [3, None, 3, 1]) == [(3, 2)]
    assert winner(Max("v"), [None]) == []
    assert winner(Min(comparator=lambda a, b: b["v"] - a["v"]), [1, 5, 2]) == [(5, 1)]
    with pytest.raises(ValueError, match="give a field, a comparator or both"):
        Min()


# -- parallelism of a state's committer -------------------------------------------------------


def test_persistent_aggregate_keys_are_spread_over_its_committer_tasks(
    tx_executor: str, tmp_path: Path
) -> None:
    data = {p: [[f"w{(p * 7 + i) % 11}"] for i in range(9)] for p in range(3)}
    topology = TridentTopology()
    stream = topology.new_stream("words", MemoryTransactionalSpout(data, Fields("word"), 3))
    counts = LMDBMapState.transactional("counts")
    writers = LMDBMapState.transactional("writers")
    markers = tmp_path / "markers"
    markers.mkdir()
    grouped = stream.group_by(["word"])
    failing = CountFailingCommits(str(markers))  # the first commit of txid 3 fails
    grouped.persistent_aggregate(counts, failing, ["count"]).parallelism_hint(3)
    grouped.persistent_aggregate(writers, ["word"], WritersOfKey(), ["tasks"]).parallelism_hint(3)
    compiled = transactional_topology(topology, str(tmp_path))
    committers = compiled.transactional.committers if compiled.transactional else ()
    assert [len(compiled.component_task_ids[c]) for c in sorted(committers)] == [3, 3]
    state_dir = tmp_path / "state"
    result = run(topology, state_dir=str(state_dir), executor=tx_executor, max_spout_pending=2)
    assert result.replays["commit"] > 0
    assert [commit.txid for commit in result.commits] == sorted(c.txid for c in result.commits)
    words = Counter(word for rows in data.values() for (word,) in rows)
    assert committed(state_dir, counts) == dict(words)
    tasks = committed(state_dir, writers)
    assert set(tasks) == set(words)
    assert all(len(indexes) == 1 for indexes in tasks.values())  # one writer per key
    assert {index for indexes in tasks.values() for index in indexes} == {0, 1, 2}


def test_committer_hints_on_the_compiled_path_and_partition_persist(tmp_path: Path) -> None:
    topology = TridentTopology()
    log = FileLogTransactionalSpout(tmp_path / "log", Fields("sentence"), 2)
    state = LMDBMapState.transactional("counts")
    (
        topology.new_stream("log", log)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(state, Count(), ["count"])
        .parallelism_hint(3)
    )
    compiled = transactional_topology(topology, str(tmp_path))
    plan = fused_plan(compiled)  # the compiled path still takes it: a partition per task
    assert plan is not None
    (target,) = plan.targets
    (committer,) = compiled.transactional.committers if compiled.transactional else ()
    assert target.tasks == tuple(compiled.component_task_ids[committer])
    assert len(compiled.component_task_ids[committer]) == 3
    assert target.persist.partitioned_state == "counts"
    # a global aggregation is a step after a repartition: the general path runs it
    whole = TridentTopology()
    total = whole.new_stream("log", log).aggregate(Count(), ["n"]).parallelism_hint(2)
    total.partition_persist(LMDBMapState.transactional("n"), ["n"], RecordsBatchRows())
    assert fused_plan(transactional_topology(whole, str(tmp_path))) is None

    other = TridentTopology()
    stream = other.new_stream(
        "numbers", MemoryTransactionalSpout({0: [[1]]}, Fields("x"), 1), parallelism=3
    )
    persisted = stream.partition_persist(LMDBMapState.transactional("x"), ["x"], RecordsBatchRows())
    persisted.parallelism_hint(1)
    compiled = transactional_topology(other, str(tmp_path))
    tasks = {c: len(ids) for c, ids in compiled.component_task_ids.items()}
    assert compiled.transactional is not None
    assert [tasks[c] for c in compiled.transactional.committers] == [1]
    assert tasks["b0"] == 3  # the hint is the committer's, not its input segment's


# -- misuse ---------------------------------------------------------------------------------


def test_misuse_of_the_new_operations_is_named_when_declared(tmp_path: Path) -> None:
    topology = TridentTopology()
    stream = words(topology, "f")
    with pytest.raises(InvalidTopologyError, match="all partition aggregates or all"):
        stream.chained_agg().aggregate(Count(), ["a"]).partition_aggregate(Count(), ["b"])
    with pytest.raises(InvalidTopologyError, match="repeat one another"):
        stream.chained_agg().aggregate(Count(), ["a"]).aggregate(Count(), ["a"]).chain_end()
    with pytest.raises(InvalidTopologyError, match="repeat one another or a group field"):
        stream.group_by(["n"]).chained_agg().aggregate(Count(), ["n"]).chain_end()
    with pytest.raises(InvalidTopologyError, match="no aggregator"):
        stream.chained_agg().chain_end()
    with pytest.raises(InvalidTopologyError, match="one out field"):
        stream.chained_agg().aggregate(Count(), ["a", "b"])
    with pytest.raises(InvalidTopologyError, match="no field"):
        stream.chained_agg().aggregate(["nope"], Sum(), ["a"])
    with pytest.raises(InvalidTopologyError, match="no field"):
        stream.min_by("nope")
    with pytest.raises(InvalidTopologyError, match="comparator"):
        stream.max_by("n", 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidTopologyError, match="comparator"):
        stream.min(None)  # type: ignore[arg-type]
    static = topology.new_static_state(LMDBMapState.transactional("s"))
    with pytest.raises(InvalidTopologyError, match="static state"):
        static.parallelism_hint(2)
    with pytest.raises(InvalidTopologyError, match="int >= 1"):
        stream.group_by(["word"]).persistent_aggregate(
            LMDBMapState.transactional("t"), Count(), ["c"]
        ).parallelism_hint(0)


def test_a_chain_reads_state_where_its_aggregators_may(tmp_path: Path) -> None:
    topology = TridentTopology()
    builtins = topology.new_drpc_stream("builtins").chained_agg()
    builtins.partition_aggregate(Count(), ["c"]).partition_aggregate(FirstN(1), ["a"]).chain_end()
    users = topology.new_drpc_stream("users").chained_agg()
    users.partition_aggregate(Count(), ["c"]).partition_aggregate(Concat(), ["a"]).chain_end()

    def reads(function: str) -> str:
        compiled = drpc_topology(topology, function, str(tmp_path))
        (segment,) = [
            spec.user_component
            for spec in compiled.components.values()
            if isinstance(spec.user_component, SegmentBolt)
        ]
        return str(segment.state_reads)

    assert reads("builtins") == "nowhere"
    assert reads("users") == "anywhere"  # the user's reducer may read a map when it runs
