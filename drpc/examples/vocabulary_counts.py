"""Consistent reads, shown: every batch counts each word of a vocabulary once, and the
``counts`` DRPC query asks for all of them.

After txid n every count is n (and every ``doubles`` value 2n, with ``doubles``), so an
answer whose counts differ mixed two commits. drpc pins each request to one committed
version of the state directory (``drpc.state.versions``): its answers never mix,
however fast the writer commits; with ``drpc.state.pinned.reads`` False in the query's
configuration the reads go key by key as Storm's Trident does, and some answers mix.

``build_vocabulary_counts(batches)`` declares it: a transactional spout of ``batches``
batches, each the ``VOCABULARY`` once (200 words), counted into the transactional map
``counts`` (in ``partitions`` partitions: a ``parallelism_hint`` on the state, each
partition its own LMDB directory; and, with ``doubles``, summing 2 a word into
``doubles``); the ``counts``
stream splits its argument into words, reads each word's count (and double) over 4
tasks and answers ``[[word, count(, double)], ...]``. ``before_split`` and
``after_split`` add ``each`` steps to the query (on ``args``, then on ``word``),
with no output fields.

For the command lines, on ``DRPC_STATE_DIR`` (default ``state``): ``topology()``
commits 10 000 batches (``drpc-transactional run`` or ``drpc-server --transactional``)
and ``counts_query()`` is the ``counts`` function (``drpc-server --topology``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

from drpc.examples import state_dir
from drpc.model.fields import Fields
from drpc.model.topology import Topology
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    Count,
    Function,
    LMDBMapState,
    MapGet,
    QueryFunction,
    Sum,
    TridentCollector,
    TridentTopology,
    TridentTuple,
    drpc_topology,
    transactional_topology,
)

TXID = "vocabulary-counts"
VOCABULARY = [f"w{i:03d}" for i in range(200)]
QUERY = " ".join(VOCABULARY)
"""The ``counts`` argument that asks for every word."""


class Repeated(Sequence[list[str]]):
    """``times`` copies of the one-word tuples of ``words``, made as they are read."""

    def __init__(self, words: list[str], times: int) -> None:
        self.words, self.times = words, times

    def __len__(self) -> int:
        return len(self.words) * self.times

    @overload
    def __getitem__(self, index: int) -> list[str]: ...
    @overload
    def __getitem__(self, index: slice) -> list[list[str]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return [self.words[index % len(self.words)]]

    def __iter__(self) -> Iterator[list[str]]:
        return (self[i] for i in range(len(self)))


class Split(Function):
    """One tuple per word of the argument."""

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        for word in tuple.get_value(0).split():
            collector.emit([word])


class Two(Function):
    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        collector.emit([2])


def build_vocabulary_counts(
    batches: int,
    *,
    doubles: bool = False,
    before_split: Sequence[Function] = (),
    after_split: Sequence[Function] = (),
    query_function: QueryFunction | None = None,
    partitions: int = 1,
) -> TridentTopology:
    """The writer's stream and the ``counts`` query (see the module doc); the query reads
    the counts with ``query_function`` (default ``MapGet()``)."""
    topology = TridentTopology()
    spout = MemoryTransactionalSpout(
        {0: Repeated(VOCABULARY, batches)}, Fields("word"), len(VOCABULARY)
    )
    stream = topology.new_stream(TXID, spout)
    counts = stream.group_by(["word"]).persistent_aggregate(
        LMDBMapState.transactional("counts"), Count(), ["count"]
    )
    if partitions > 1:
        counts.parallelism_hint(partitions)
    query = topology.new_drpc_stream("counts")
    for function in before_split:
        query = query.each(["args"], function, [])
    query = query.each(["args"], Split(), ["word"])
    for function in after_split:
        query = query.each(["word"], function, [])
    query = query.group_by(["word"]).state_query(
        counts, ["word"], query_function or MapGet(), ["count"]
    )
    fields = ["word", "count"]
    if doubles:
        twice = (
            stream.each(["word"], Two(), ["two"])
            .group_by(["word"])
            .persistent_aggregate(LMDBMapState.transactional("doubles"), ["two"], Sum(), ["double"])
        )
        query = query.state_query(twice, ["word"], MapGet(), ["double"])
        fields.append("double")
    query.parallelism_hint(4).project(fields)
    return topology


def counts_function(
    directory: str, conf: Mapping[str, Any] | None = None, **options: Any
) -> Topology:
    """The ``counts`` DRPC function over ``directory`` (``options``: as
    ``build_vocabulary_counts``'s)."""
    return drpc_topology(build_vocabulary_counts(1, **options), "counts", directory, conf)


def counts_of(answer: str) -> dict[str, list[int]]:
    """The count (and double) of each word of a ``counts`` answer."""
    return {row[0]: row[1:] for row in json.loads(answer)}


def topology() -> Topology:
    return transactional_topology(build_vocabulary_counts(10_000), state_dir())


def counts_query() -> Topology:
    return counts_function(state_dir())
