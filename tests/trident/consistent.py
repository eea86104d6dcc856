"""Test hooks for the consistent-reads example (``drpc.examples.vocabulary_counts``).

Run as ``python -m tests.trident.consistent STATE_DIR BATCHES`` to commit up to BATCHES
batches (printing ``committed N`` after each, then ``done``): the writer the SIGKILL test
kills. Module-level: Spark workers import these operations.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from drpc import (
    BaseBasicBolt,
    BaseBatchBolt,
    BasicOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    Topology,
    TopologyContext,
    Tuple,
)
from drpc.examples.vocabulary_counts import build_vocabulary_counts
from drpc.state.topology import STATE_DIR_CONF
from drpc.trident import Function, QueryFunction, TridentCollector, TridentTuple, run


class Sleep(Function):
    """Sleeps ``seconds`` per tuple (on a query's args: once, so it outlives a retention)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        time.sleep(self.seconds)
        collector.emit([])


class RecordPid(Function):
    """Creates a file named after the pid of the process running it in ``directory`` (the
    resident worker a test kills)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        path = os.path.join(self.directory, str(os.getpid()))
        if not os.path.exists(path):
            with open(path, "w"):
                pass
        collector.emit([])


def main(state_dir: str, batches: int) -> None:
    def say(info: Any) -> None:
        sys.stdout.write(f"committed {info.txid}\n")
        sys.stdout.flush()

    run(build_vocabulary_counts(batches), state_dir=state_dir, executor="local", on_commit=say)
    sys.stdout.write("done\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))


class SplitWords(BaseBasicBolt):
    """[id, args] -> [id, word] per word."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple[1].split():
            collector.emit([tuple[0], word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "word"))


class CountOfWord(BaseBasicBolt):
    """[id, word] -> [id, count]: reads the committed count through ``context.state``, in
    ``execute`` (a step whose ``state_reads`` is the default, "anywhere"), then sleeps
    ``pause`` seconds, so commits land between a request's reads."""

    def __init__(self, pause: float) -> None:
        self.pause = pause

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.counts = context.state.transactional_map("counts", default=0)

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], self.counts.get(tuple[1])])
        time.sleep(self.pause)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


class DistinctCounts(BaseBatchBolt):
    """[id, count]... -> [id, the distinct counts as JSON]."""

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: Any, id: Any
    ) -> None:
        self.collector, self.id, self.seen = collector, id, set()

    def execute(self, tuple: Tuple) -> None:
        self.seen.add(tuple[1])

    def finish_batch(self) -> None:
        self.collector.emit([self.id, json.dumps(sorted(self.seen))])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "counts"))


def linear_counts(state_dir: str, pause: float = 0.0) -> Topology:
    """``counts``, as a linear DRPC topology of user bolts reading ``context.state``: the
    distinct counts of the words of its argument, as JSON."""
    builder = LinearDRPCTopologyBuilder("counts")
    builder.add_bolt(SplitWords())
    builder.add_bolt(CountOfWord(pause), 4).shuffle_grouping()
    builder.add_bolt(DistinctCounts(), 2).fields_grouping(Fields("id"))
    return builder.create_topology({STATE_DIR_CONF: state_dir})


class CountsOneByOne(QueryFunction):
    """A user's query function: each key read on its own (no batch read to hide in)."""

    def batch_retrieve(self, state: Any, keys: list[TridentTuple]) -> list[Any]:
        return [state.multi_get([key.get_value(0)])[0] for key in keys]

    def execute(self, tuple: TridentTuple, result: Any, collector: TridentCollector) -> None:
        collector.emit([result])
