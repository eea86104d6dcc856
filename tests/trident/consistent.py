"""The consistent-reads topology: every batch counts each word of a vocabulary once, so after
txid n every count is n, and twice that in a second map; a DRPC query asks for all of them.

Run as ``python -m tests.trident.consistent STATE_DIR BATCHES`` to commit up to BATCHES
batches (printing ``committed N`` after each), the writer the SIGKILL test kills.
Module-level: Spark workers import these operations.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, overload

from drpc import Fields, Topology
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    Count,
    Function,
    LMDBMapState,
    MapGet,
    Sum,
    TridentCollector,
    TridentTopology,
    TridentTuple,
    drpc_topologies,
    run,
)

TXID = "consistent-words"
VOCABULARY = [f"w{i:03d}" for i in range(200)]
QUERY = " ".join(VOCABULARY)


class Repeated(Sequence[list[str]]):
    """``times`` copies of the one-word tuples of ``words``, made as they are sliced."""

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
        return [self.words[index % len(self.words)]]

    def __iter__(self) -> Iterator[list[str]]:
        return (self[i] for i in range(len(self)))


class Split(Function):
    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        for word in tuple.get_value(0).split():
            collector.emit([word])


class Two(Function):
    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        collector.emit([2])


class Sleep(Function):
    """Sleeps ``seconds`` per tuple (once per query, on its args: so a query outlives a
    short retention)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        import time

        time.sleep(self.seconds)
        collector.emit([])


class RecordPid(Function):
    """Writes the pid of the process running it into ``directory`` (the resident worker
    a test kills)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        path = os.path.join(self.directory, str(os.getpid()))
        if not os.path.exists(path):
            with open(path, "w"):
                pass
        collector.emit([])


def word_counts(
    batches: int, *, doubles: bool = False, sleep: float = 0.0, pid_dir: str | None = None
) -> TridentTopology:
    """The writer's stream (counts, and with ``doubles`` a second map of twice the counts)
    and the ``counts`` query: each word, its count (and its double), over 4 tasks."""
    topology = TridentTopology()
    spout = MemoryTransactionalSpout({0: Repeated(VOCABULARY, batches)}, Fields("word"), 200)
    stream = topology.new_stream(TXID, spout)
    counts = stream.group_by(["word"]).persistent_aggregate(
        LMDBMapState.transactional("counts"), Count(), ["count"]
    )
    query = topology.new_drpc_stream("counts")
    if sleep:
        query = query.each(["args"], Sleep(sleep), [])
    query = query.each(["args"], Split(), ["word"])
    if pid_dir is not None:
        query = query.each(["word"], RecordPid(pid_dir), [])
    query = query.group_by(["word"]).state_query(counts, ["word"], MapGet(), ["count"])
    if doubles:
        twice = (
            stream.each(["word"], Two(), ["two"])
            .group_by(["word"])
            .persistent_aggregate(LMDBMapState.transactional("doubles"), ["two"], Sum(), ["double"])
        )
        query = query.state_query(twice, ["word"], MapGet(), ["double"])
    query.parallelism_hint(4).project(["word", "count", "double"] if doubles else ["word", "count"])
    return topology


def query_topology(state_dir: str, **options: Any) -> Topology:
    [function] = drpc_topologies(word_counts(1, **options), state_dir)
    return function


def counts_of(answer: str) -> dict[str, list[int]]:
    """The counts (and doubles) by word in a ``counts`` answer."""
    return {row[0]: row[1:] for row in json.loads(answer)}


def main(state_dir: str, batches: int) -> None:
    def say(info: Any) -> None:
        sys.stdout.write(f"committed {info.txid}\n")
        sys.stdout.flush()

    run(word_counts(batches), state_dir=state_dir, executor="local", on_commit=say)
    sys.stdout.write("done\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
