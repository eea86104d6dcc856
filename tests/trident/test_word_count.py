"""Storm's Trident tutorial word count: counted exactly once into LMDB under replays, queried
over DRPC, on both executors of transactional runs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from drpc import Fields
from drpc.state import StateEnvironment
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    Count,
    FilterNull,
    LMDBMapState,
    MapGet,
    MapStateFactory,
    Sum,
    TridentTopology,
    drpc_topologies,
    run,
    transactional_topology,
)

from .ops import ChangingOpaqueSpout, CountFailingCommits, Split, SplitFailingOnce

SENTENCES = [
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
]
DATA = {p: [[SENTENCES[(p * 2 + i) % 5]] for i in range(7 + p)] for p in range(3)}
WORDS = Counter(word for rows in DATA.values() for (sentence,) in rows for word in sentence.split())


def word_count(
    spout: object, state: MapStateFactory, split: object, count: object, partitions: int = 1
) -> TridentTopology:
    """The tutorial's word count (``partitions``: of its state, by a hint on the state)."""
    topology = TridentTopology()
    counts = (
        topology.new_stream("word-count", spout, parallelism=2)
        .each(["sentence"], split, ["word"])
        .group_by(["word"])
        .persistent_aggregate(state, count, ["count"])
    )
    if partitions > 1:
        counts.parallelism_hint(partitions)
    (
        topology.new_drpc_stream("words")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .aggregate(["count"], Sum(), ["sum"])
    )
    return topology


def committed(state_dir: Path, factory: MapStateFactory) -> dict[object, object]:
    """Every committed key of ``factory``'s map, from its partitions when it has some."""
    return dict(factory.query(StateEnvironment.open(state_dir)).items())


def ask(topology: TridentTopology, state_dir: Path, executor: str, *args: str) -> list[str]:
    with LocalDRPC(executor=executor, timeout=60.0) as drpc:
        for compiled in drpc_topologies(topology, str(state_dir)):
            drpc.register(compiled)
        return [drpc.execute("words", arg) for arg in args]


def expected_sum(words: str) -> str:
    return json.dumps([[sum(WORDS[word] for word in words.split())]])


PARTITIONS = pytest.mark.parametrize("partitions", [1, 3], ids=["one directory", "3 partitions"])


@PARTITIONS
def test_word_count_is_exact_under_replays_in_both_phases(
    tx_executor: str, tmp_path: Path, partitions: int
) -> None:
    """With partitions, a commit failing in one partition after others applied its txid
    replays it: they revert and apply it again, so nothing counts twice."""
    markers = tmp_path / "markers"
    markers.mkdir()
    state = LMDBMapState.transactional("word-counts", cache_size=32)
    topology = word_count(
        MemoryTransactionalSpout(DATA, Fields("sentence"), 2),
        state,
        SplitFailingOnce(str(markers)),
        CountFailingCommits(str(markers)),
        partitions,
    )
    state_dir = tmp_path / "state"
    result = run(topology, state_dir=str(state_dir), executor=tx_executor, max_spout_pending=3)
    assert committed(state_dir, state) == dict(WORDS)
    if partitions == 1:
        cache = state.open(StateEnvironment.open(state_dir)).cache
        assert cache is not None and cache.hits > 0  # commits read hot words from memory
    assert result.replays["processing"] > 0 and result.replays["commit"] > 0
    assert result.tuples == sum(len(rows) for rows in DATA.values())
    questions = ["cat the dog jumped", "the", "zebra", "", "to be or not to be"]
    answers = ask(topology, state_dir, "local", *questions)
    assert answers == [expected_sum(question) for question in questions]
    assert answers[:3] == ["[[30]]", "[[25]]", "[[0]]"]


@PARTITIONS
def test_opaque_word_count_is_exact_when_replays_emit_other_batches(
    tx_executor: str, tmp_path: Path, partitions: int
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    state = LMDBMapState.opaque("word-counts")
    topology = word_count(
        ChangingOpaqueSpout(DATA, Fields("sentence"), 1, str(markers)),
        state,
        SplitFailingOnce(str(markers), percent=50),
        Count(),
        partitions,
    )
    state_dir = tmp_path / "state"
    result = run(topology, state_dir=str(state_dir), executor=tx_executor, max_spout_pending=2)
    assert result.replays["processing"] > 0
    assert committed(state_dir, state) == dict(WORDS)
    assert result.tuples == sum(len(rows) for rows in DATA.values())
    assert ask(topology, state_dir, "local", "the moon") == [expected_sum("the moon")]


def test_a_second_run_over_the_same_state_counts_nothing_twice(tmp_path: Path) -> None:
    state = LMDBMapState.transactional("word-counts")
    topology = word_count(
        MemoryTransactionalSpout(DATA, Fields("sentence"), 2), state, Split(), Count()
    )
    state_dir = tmp_path / "state"
    first = run(topology, state_dir=str(state_dir), max_batches=2)
    assert len(first.commits) == 2
    run(topology, state_dir=str(state_dir))
    run(topology, state_dir=str(state_dir))
    assert committed(state_dir, state) == dict(WORDS)


@PARTITIONS
def test_the_query_is_served_on_every_drpc_executor(
    executor: str, tmp_path: Path, partitions: int
) -> None:
    state = LMDBMapState.transactional("word-counts")
    topology = word_count(
        MemoryTransactionalSpout(DATA, Fields("sentence"), 3), state, Split(), Count(), partitions
    )
    state_dir = tmp_path / "state"
    run(topology, state_dir=str(state_dir))
    assert ask(topology, state_dir, executor, "the cow", "nothing here") == [
        expected_sum("the cow"),
        "[[0]]",
    ]


def test_a_hint_after_new_stream_sets_the_spout_parallelism(tmp_path: Path) -> None:
    topology = TridentTopology()
    spout = MemoryTransactionalSpout(DATA, Fields("sentence"), 3)
    topology.new_stream("hinted", spout).parallelism_hint(3).each(["sentence"], Split(), ["w"])
    compiled = transactional_topology(topology, str(tmp_path))
    assert compiled.components["spout"].parallelism == 3
    assert compiled.components["b0"].parallelism == 3


def test_only_per_word_partial_counts_reach_the_committer(tmp_path: Path) -> None:
    state = LMDBMapState.transactional("word-counts")
    topology = word_count(
        MemoryTransactionalSpout(DATA, Fields("sentence"), 3), state, Split(), Count()
    )
    compiled = transactional_topology(topology, str(tmp_path))
    assert compiled.components["spout"].parallelism == 2
    assert compiled.components["b0"].parallelism == 2
    info = compiled.transactional
    assert info is not None
    [committer] = info.committers
    [stream] = [s for s in compiled.components[committer].inputs if s.stream_id == "s0"]
    declared = compiled.components[stream.component_id].outputs[stream.stream_id].fields
    assert list(declared) == ["$batch", "word", "$partial"]


def test_a_partial_count_feeding_two_states_counts_every_word_into_each(
    tx_executor: str, tmp_path: Path
) -> None:
    """A per-batch-partition count with two steps after it: each gets every group's
    tuple (the processor builds them once for both)."""
    topology = TridentTopology()
    counted = (
        topology.new_stream("word-count", MemoryTransactionalSpout(DATA, Fields("sentence"), 2))
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .partition_aggregate(["word"], Count(), ["n"])
    )
    states = [LMDBMapState.transactional(name) for name in ("first", "second")]
    for state in states:
        counted.group_by(["word"]).persistent_aggregate(state, ["n"], Sum(), ["total"])
    state_dir = tmp_path / "state"
    run(topology, state_dir=str(state_dir), executor=tx_executor)
    assert [committed(state_dir, state) for state in states] == [dict(WORDS)] * 2


def test_a_spout_stream_queries_the_state_another_run_committed(
    tx_executor: str, tmp_path: Path
) -> None:
    counts = LMDBMapState.transactional("word-counts")
    state_dir = tmp_path / "state"
    run(
        word_count(MemoryTransactionalSpout(DATA, Fields("sentence"), 3), counts, Split(), Count()),
        state_dir=str(state_dir),
        executor=tx_executor,
    )
    by_count = LMDBMapState.opaque("words-by-count")
    topology = TridentTopology()
    questions = {0: [["the"], ["moon"], ["zebra"]], 1: [["the"], ["to"]]}
    (
        topology.new_stream("lookups", MemoryTransactionalSpout(questions, Fields("word"), 2))
        .state_query(topology.new_static_state(counts), ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .group_by(["count"])
        .persistent_aggregate(by_count, Count(), ["words"])
    )
    run(topology, state_dir=str(state_dir), executor=tx_executor)
    assert committed(state_dir, by_count) == {WORDS["the"]: 2, WORDS["moon"]: 1, WORDS["to"]: 1}
