"""Trident's stream operations and built-ins, observed through DRPC streams on LocalDRPC."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drpc import DRPCExecutionException, InvalidTopologyError
from drpc.testing import LocalDRPC
from drpc.trident import (
    Count,
    Debug,
    FirstN,
    LMDBMapState,
    Stream,
    Sum,
    TridentTopology,
    drpc_topologies,
)

from .ops import Concat, EmitsTwoValues, Split, WriteLines


@pytest.fixture
def drpc() -> Iterator[LocalDRPC]:
    with LocalDRPC(timeout=30.0) as server:
        yield server


def serve(drpc: LocalDRPC, topology: TridentTopology, state_dir: Path) -> None:
    for compiled in drpc_topologies(topology, str(state_dir)):
        drpc.register(compiled)


def words(topology: TridentTopology, function: str = "f") -> Stream:
    return topology.new_drpc_stream(function).each(["args"], Split(), ["word"])


def rows(answer: str) -> list[list[Any]]:
    return sorted(json.loads(answer))


def test_per_tuple_steps_fuse_in_order(drpc: LocalDRPC, tmp_path: Path) -> None:
    topology = TridentTopology()
    seen = tmp_path / "peeked"
    (
        words(topology)
        .each(["word"], lambda t, collector: collector.emit([len(t[0])]), ["length"])
        .filter(["length"], lambda t: t["length"] > 2)
        .peek(WriteLines(str(seen)))
        .map(lambda t: [t["word"].upper(), t["length"]], ["shout", "length"])
        .flat_map(lambda t: [[t["shout"]]] * (t["length"] - 2), ["shout"])
        .project(["shout"])
    )
    serve(drpc, topology, tmp_path)
    assert json.loads(drpc.execute("f", "a cow jumps in")) == [["COW"], ["JUMPS"]] + [["JUMPS"]] * 2
    assert seen.read_text().splitlines() == ["a cow jumps in cow 3", "a cow jumps in jumps 5"]


def test_group_aggregates_with_each_aggregator_kind(drpc: LocalDRPC, tmp_path: Path) -> None:
    topology = TridentTopology()
    grouped = words(topology, "count").parallelism_hint(2).group_by(["word"])
    grouped.aggregate(Count(), ["n"]).parallelism_hint(3)
    (
        words(topology, "concat")
        .each(["word"], lambda t, collector: collector.emit([t[0][0]]), ["initial"])
        .group_by(["initial"])
        .aggregate(["word"], Concat(), ["joined"])
    )
    (
        words(topology, "longest")
        .each(["word"], lambda t, collector: collector.emit([len(t[0])]), ["length"])
        .aggregate(["word", "length"], FirstN(2, "length", reverse=True), ["word", "length"])
    )
    serve(drpc, topology, tmp_path)
    assert rows(drpc.execute("count", "a b a c a b")) == [["a", 3], ["b", 2], ["c", 1]]
    assert rows(drpc.execute("concat", "ab cd ax")) == [["a", "abax"], ["c", "cd"]]
    assert rows(drpc.execute("longest", "aa bbbb c ddd")) == [["bbbb", 4], ["ddd", 3]]
    assert rows(drpc.execute("count", "")) == []


def test_whole_batch_aggregates_answer_even_an_empty_request(
    drpc: LocalDRPC, tmp_path: Path
) -> None:
    topology = TridentTopology()
    words(topology, "count").aggregate(Count(), ["n"])
    (
        words(topology, "partitions")
        .partition_aggregate(Count(), ["n"])
        .each(["n"], Debug("partition"))
        .aggregate(["n"], Sum(), ["total"])
    )
    serve(drpc, topology, tmp_path)
    assert drpc.execute("count", "a b c") == "[[3]]"
    assert drpc.execute("count", "") == "[[0]]"
    assert drpc.execute("partitions", "x y") == "[[2]]"


def test_repartitions_send_tuples_where_they_say(drpc: LocalDRPC, tmp_path: Path) -> None:
    topology = TridentTopology()
    (
        words(topology, "broadcast")
        .broadcast()
        .partition_aggregate(Count(), ["n"])
        .parallelism_hint(3)
    )
    (
        words(topology, "global")
        .parallelism_hint(2)
        .shuffle()
        .partition_aggregate(Count(), ["n"])
        .parallelism_hint(2)
        .batch_global()
        .aggregate(["n"], Sum(), ["total"])
    )
    (
        words(topology, "by-word")
        .partition_by(["word"])
        .group_by(["word"])
        .partition_aggregate(["word"], Concat(), ["joined"])
        .parallelism_hint(4)
        .filter(["joined"], lambda t: len(t[0]) > 1)
    )
    words(topology, "ends-shuffled").project(["word"]).shuffle()
    serve(drpc, topology, tmp_path)
    assert rows(drpc.execute("ends-shuffled", "b a")) == [["a"], ["b"]]
    assert rows(drpc.execute("broadcast", "a b c d")) == [[4], [4], [4]]
    assert drpc.execute("global", "a b c d e") == "[[5]]"
    assert rows(drpc.execute("by-word", "a b a c b a")) == [["a", "aaa"], ["b", "bb"]]


def test_an_operation_that_emits_the_wrong_width_fails_the_request(
    drpc: LocalDRPC, tmp_path: Path
) -> None:
    topology = TridentTopology()
    words(topology).each(["word"], EmitsTwoValues(), ["one"])
    serve(drpc, topology, tmp_path)
    with pytest.raises(DRPCExecutionException):
        drpc.execute("f", "a")


def test_misuse_is_refused_when_declared(tmp_path: Path) -> None:
    topology = TridentTopology()
    stream = words(topology)
    with pytest.raises(InvalidTopologyError, match="no field"):
        stream.each(["nope"], Split(), ["x"])
    with pytest.raises(InvalidTopologyError, match="repeat"):
        stream.each(["word"], Split(), ["word"])
    with pytest.raises(InvalidTopologyError, match="CombinerAggregator or a ReducerAggregator"):
        stream.group_by(["word"]).persistent_aggregate(
            LMDBMapState.opaque("m"), FirstN(1), ["first"]
        )
    with pytest.raises(InvalidTopologyError, match="Filter"):
        stream.each(["word"], Split())
    with pytest.raises(InvalidTopologyError, match="parallelism"):
        stream.parallelism_hint(0)
    stream.project(["word"])
    stream.project(["args"])
    with pytest.raises(InvalidTopologyError, match="branches"):
        drpc_topologies(topology, str(tmp_path))
