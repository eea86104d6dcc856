"""Square by coordination: the answer only exists if every count arrives.

Step one emits n*n tuples for argument n (spread over its tasks' outputs),
a batch step counts the tuples each of its tasks saw, and an aggregate step
sums the counts: "2" -> "4", "0" -> "0" (a request whose steps emit nothing
still finishes, because every task reports a count of 0).
"""

from __future__ import annotations

from typing import Any

from drpc import (
    BaseBasicBolt,
    BaseBatchBolt,
    BasicOutputCollector,
    BatchOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    TopologyContext,
    Tuple,
)


class EmitSquare(BaseBasicBolt):
    """[id, "n"] -> n*n tuples [id, i]."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        n = int(tuple[1])
        if n < 0:
            raise ValueError(f"square takes a non-negative integer, got {n}")
        for i in range(n * n):
            collector.emit([tuple[0], i])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "i"))


class BatchCount(BaseBatchBolt):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector = collector
        self.id = id
        self.count = 0

    def execute(self, tuple: Tuple) -> None:
        self.count += 1

    def finish_batch(self) -> None:
        self.collector.emit([self.id, self.count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


class SumCounts(BaseBatchBolt):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector = collector
        self.id = id
        self.total = 0

    def execute(self, tuple: Tuple) -> None:
        self.total += tuple[1]

    def finish_batch(self) -> None:
        self.collector.emit([self.id, self.total])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "square"))


def build_square(function: str = "square") -> LinearDRPCTopologyBuilder:
    builder = LinearDRPCTopologyBuilder(function)
    builder.add_bolt(EmitSquare(), 3)
    builder.add_bolt(BatchCount(), 4).shuffle_grouping()
    builder.add_bolt(SumCounts(), 2).fields_grouping(Fields("id"))
    return builder


topology = build_square()
"""The square function's builder, for ``--topology drpc.examples.square:topology``."""
