"""Partitioned state: a ``parallelism_hint`` on a Trident state (or a committer's tasks) makes
partitions, each its own LMDB directory, giving the answers one directory gives, on every
executor; a lost partition stops the run and fails the queries that need it, typed."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from drpc import Fields
from drpc.errors import DRPCExecutionException, StateError, TransactionalError
from drpc.executors.resident.partition_reads import PLACEMENTS
from drpc.executors.resident.routing import place
from drpc.model.grouping import KeyGroupGrouping
from drpc.state import StateEnvironment
from drpc.state.env import MAPS_DB
from drpc.state.keygroups import partition_of
from drpc.state.partition import partition_path, partition_root
from drpc.state.partitioned import group_of, layouts
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder, run
from drpc.transactional.cli import status
from drpc.transactional.partitions import partition_layouts
from drpc.trident import (
    Count,
    LMDBMapState,
    LMDBWindowsStoreFactory,
    MapList,
    TridentTopology,
    drpc_topologies,
    drpc_topology,
    transactional_topology,
)
from drpc.trident import run as run_trident

from ..transactional import bolts
from ..transactional.bolts import ReadsEveryWord
from .ops import PutLatest, Split
from .test_word_count import DATA, WORDS, committed, word_count


def listing(topology: TridentTopology, state_dir: Path, executor: str, limit: int) -> list[object]:
    """Every entry of the ``list`` function's pages, page after page."""
    entries: list[object] = []
    after = None
    with LocalDRPC(executor=executor, timeout=60.0) as drpc:
        for compiled in drpc_topologies(topology, str(state_dir)):
            drpc.register(compiled)
        while True:
            request = {"limit": limit} if after is None else {"limit": limit, "after": after}
            [[_, page, after]] = json.loads(drpc.execute("list", json.dumps(request)))
            assert len(page) <= limit
            entries.extend(page)
            if after is None:
                return entries


def listed(partitions: int) -> TridentTopology:
    """The tutorial's word count and its ``words`` query, and ``list``: pages of the counts."""
    topology = word_count(
        MemoryTransactionalSpout(DATA, Fields("sentence"), 3),
        LMDBMapState.transactional("word-counts"),
        Split(),
        Count(),
        partitions,
    )
    counts = topology.new_static_state(LMDBMapState.transactional("word-counts"))
    topology.new_drpc_stream("list").state_query(counts, ["args"], MapList(), ["page", "next"])
    return topology


def test_partitions_live_in_directories_of_their_own_and_the_global_record_holds_no_keys(
    every_tx_executor: str, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    topology = listed(3)
    run_trident(topology, state_dir=str(state_dir), executor=every_tx_executor)
    env = StateEnvironment.open(state_dir)
    [layout] = layouts(env).values()
    assert (layout.group, layout.partitions, layout.key_groups) == ("word-counts", 3, 128)
    assert group_of(env, "word-counts") == "word-counts"
    with env.read() as txn:
        assert txn.entries(MAPS_DB) == 0  # every key is in a partition
    holders: Counter[int] = Counter()
    for index in range(3):
        path = partition_path(partition_root(str(state_dir)), "word-counts", index)
        partition = StateEnvironment.open(path)
        with partition.read() as txn:
            keys = [key for key, _ in txn.scan(MAPS_DB, b"")]
        holders[index] = len(keys)
    assert sum(holders.values()) == len(WORDS) and all(holders.values())
    assert committed(state_dir, LMDBMapState.transactional("word-counts")) == dict(WORDS)
    report = status(str(state_dir))
    assert [(entry["group"], entry["index"], entry["txid"]) for entry in report["partitions"]] == [
        ("word-counts", index, 4) for index in range(3)
    ]
    assert sum(entry["keys"] for entry in report["partitions"]) == len(WORDS)


def test_a_listing_pages_across_partitions_in_key_order(executor: str, tmp_path: Path) -> None:
    one, three = tmp_path / "one", tmp_path / "three"
    run_trident(listed(1), state_dir=str(one))
    run_trident(listed(3), state_dir=str(three))
    expected = [[word, WORDS[word]] for word in sorted(WORDS)]
    for limit in (1, 4, 100):
        assert listing(listed(1), one, executor, limit) == expected
        assert listing(listed(3), three, executor, limit) == expected


def test_a_committer_writing_another_partition_s_key_is_refused_by_name(tmp_path: Path) -> None:
    builder = TransactionalTopologyBuilder(
        "misrouted", "spout", MemoryTransactionalSpout({0: [["cat"], ["dog"]]}, Fields("word"), 2)
    )
    builder.set_bolt("partial", bolts.PartialWordCount(), 1).shuffle_grouping("spout")
    # every word to task 0, which writes them all: some belong to partition 1
    builder.set_committer_bolt("commit", bolts.CommitWordCounts(), 2).global_grouping("partial")
    with pytest.raises(TransactionalError, match="PartitionKeyError") as raised:
        run(builder, state_dir=str(tmp_path), max_attempts=2)
    wrong = "cat" if partition_of("cat", 2) == 1 else "dog"
    assert f"key {wrong!r} belongs to partition 1 of 'commit', not to partition 0" in str(
        raised.value
    )


def test_a_state_keeps_its_partitions(tmp_path: Path) -> None:
    run_trident(listed(3), state_dir=str(tmp_path))
    with pytest.raises(StateError, match=r"holds state 'word-counts' in 3 partition\(s\)"):
        run_trident(listed(2), state_dir=str(tmp_path))


def test_a_lost_partition_stops_the_run_and_fails_its_queries_typed(
    executor: str, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    topology = listed(3)
    run_trident(topology, state_dir=str(state_dir))
    lost = partition_of("the", 3)
    path = partition_path(partition_root(str(state_dir)), "word-counts", lost)
    for env in StateEnvironment.open_environments():
        if env.path.startswith(str(tmp_path)):
            env.close()
    shutil.rmtree(path)
    with pytest.raises(StateError, match=f"partition {lost} of state 'word-counts'.* is lost"):
        run_trident(topology, state_dir=str(state_dir))
    with LocalDRPC(executor=executor, timeout=60.0) as drpc:
        for compiled in drpc_topologies(topology, str(state_dir)):
            drpc.register(compiled)
        with pytest.raises(DRPCExecutionException) as raised:
            drpc.execute("words", "the cow")
        assert raised.value.type.name == "FAILED_REQUEST"
        assert f"partition {lost} of state 'word-counts'" in raised.value.msg
        assert "is lost" in raised.value.msg


def sums(partitioned_by: bool) -> TridentTopology:
    """The last amount of each user, by ``partition_persist`` over 2 partitions (after a
    ``partition_by`` on the user when ``partitioned_by``)."""
    data = {p: [[f"u{(p * 5 + i) % 7}", i] for i in range(6)] for p in range(2)}
    topology = TridentTopology()
    stream = topology.new_stream("amounts", MemoryTransactionalSpout(data, Fields("user", "n"), 3))
    if partitioned_by:
        stream = stream.partition_by(["user"])
    stream.partition_persist(
        LMDBMapState.transactional("latest"), ["user", "n"], PutLatest()
    ).parallelism_hint(2)
    return topology


def test_partition_persist_after_partition_by_writes_each_key_in_its_partition(
    tx_executor: str, tmp_path: Path
) -> None:
    run_trident(sums(True), state_dir=str(tmp_path), executor=tx_executor)
    latest = committed(tmp_path, LMDBMapState.transactional("latest"))
    assert sorted(latest) == [f"u{n}" for n in range(7)]
    env = StateEnvironment.open(tmp_path)
    assert [(layout.group, layout.partitions) for layout in layouts(env).values()] == [
        ("latest", 2)
    ]


def test_partition_persist_without_a_grouping_by_its_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TransactionalError, match=r"PartitionKeyError.*group the committer's input"):
        run_trident(sums(False), state_dir=str(tmp_path), max_attempts=2)


def test_a_query_grouped_by_its_key_runs_a_task_per_partition_where_the_partitions_are(
    tmp_path: Path,
) -> None:
    """Storm's routing: ``group_by(key).state_query(partitioned state, key)`` compiles to a
    segment of one task per partition, keyed as the partitions are, and the resident
    executor places task i with partition i's owner once the run placed the partitions."""
    topology = listed(3)
    compiled = drpc_topology(topology, "words", str(tmp_path))
    [query] = [
        spec
        for spec in compiled.components.values()
        if getattr(spec.user_component, "reads_partitions", None) == "word-counts"
    ]
    assert query.parallelism == 3
    [grouping] = [g for stream, g in query.inputs.items() if stream.stream_id.startswith("s")]
    assert isinstance(grouping, KeyGroupGrouping) and list(grouping.fields) == ["word"]
    # each word reaches the task whose index is its partition's
    source_fields = compiled.components[next(iter(query.inputs)).component_id].outputs
    [fields] = [f.fields for sid, f in source_fields.items() if sid.startswith("s")]
    partitioner = grouping.partitioner(fields, 0, 1, 3)
    for word in WORDS:
        values = [None] * len(fields)
        values[fields.field_index("word")] = word
        assert partitioner.choose(values) == (partition_of(word, 3),)
    tasks = compiled.component_task_ids[query.id]
    assert {place(compiled, 2)[task] for task in tasks} == {1, 2}  # dealt: not placed yet
    root = partition_root(str(tmp_path))
    PLACEMENTS[(root, "word-counts")] = (2, 1, 2)
    try:
        assert [place(compiled, 2)[task] for task in tasks] == [2, 1, 2]
        assert [place(compiled, 1)[task] for task in tasks] == [1, 1, 1]  # not these workers
    finally:
        del PLACEMENTS[(root, "word-counts")]
    # a query not keyed by the state's key keeps one task
    listing_query = drpc_topology(topology, "list", str(tmp_path))
    assert not any(
        getattr(spec.user_component, "reads_partitions", None)
        for spec in listing_query.components.values()
    )


def test_a_window_with_several_tasks_shares_the_directory(tmp_path: Path) -> None:
    """A window's committer writes a window store, which a partition could not revert on
    a replay: however many tasks it has, it is never a partitioned state."""
    topology = TridentTopology()
    data = {p: [["a"], ["b"], ["c"]] for p in range(2)}
    topology.new_stream(
        "windowed", MemoryTransactionalSpout(data, Fields("word"), 2), 2
    ).tumbling_window(2, LMDBWindowsStoreFactory("w"), ["word"], Count(), ["n"]).each(
        ["n"], Split(), ["m"]
    )
    compiled = transactional_topology(topology, str(tmp_path))
    windows = [c for c in compiled.transactional.committers if c.startswith("window")]
    assert [compiled.components[c].parallelism for c in windows] == [2]
    assert partition_layouts(compiled) == {}


def test_a_committer_reading_another_partition_s_key_is_refused_too(tmp_path: Path) -> None:
    """Its own partition would answer the default for a key another one holds."""
    builder = TransactionalTopologyBuilder(
        "misread", "spout", MemoryTransactionalSpout({0: [["cat"], ["dog"]]}, Fields("word"), 2)
    )
    builder.set_bolt("partial", bolts.PartialWordCount(), 1).shuffle_grouping("spout")
    builder.set_committer_bolt("commit", ReadsEveryWord(), 2).fields_grouping(
        "partial", Fields("word")
    )
    with pytest.raises(TransactionalError, match="PartitionKeyError") as raised:
        run(builder, state_dir=str(tmp_path), max_attempts=2)
    assert "belongs to partition" in str(raised.value)
