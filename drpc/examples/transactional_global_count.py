"""Transactional global count (storm-starter's TransactionalGlobalCount).

A memory spout over the three-partition word data, 3 tuples per partition per
batch; ``partial-count`` counts each batch's tuples in parallel (5 tasks);
``sum``, a committer, adds the batch's count to the global count in a
``TransactionalMap`` and emits the new total. Batches of 9, 7 and 3 tuples
commit totals 9, 16 and 19; the count ends at 19 however often batches fail
and replay.
"""

from __future__ import annotations

from typing import Any

from drpc import (
    BaseBatchBolt,
    BatchOutputCollector,
    Fields,
    OutputFieldsDeclarer,
    TopologyContext,
    Tuple,
)
from drpc.transactional import (
    BaseTransactionalBolt,
    ICommitter,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
    TransactionAttempt,
)

DATA: dict[int, list[list[Any]]] = {
    0: [["cat"], ["dog"], ["chicken"], ["cat"], ["dog"], ["apple"]],
    1: [["cat"], ["dog"], ["apple"], ["banana"]],
    2: [["cat"], ["cat"], ["cat"], ["cat"], ["cat"], ["dog"], ["dog"], ["dog"], ["dog"]],
}
PARTITION_TAKE_PER_BATCH = 3
GLOBAL_COUNT_MAP = "global-count"


class BatchCount(BaseBatchBolt):
    """How many tuples of the batch this task saw."""

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector, self.id, self.count = collector, id, 0

    def execute(self, tuple: Tuple) -> None:
        self.count += 1

    def finish_batch(self) -> None:
        self.collector.emit([self.id, self.count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


class UpdateGlobalCount(BaseTransactionalBolt, ICommitter):
    """Adds the batch's count to the global count, once per txid."""

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        attempt: TransactionAttempt,
    ) -> None:
        self.collector, self.attempt, self.sum = collector, attempt, 0
        self.counts = context.state.transactional_map(GLOBAL_COUNT_MAP, default=0)

    def execute(self, tuple: Tuple) -> None:
        self.sum += tuple[1]

    def finish_batch(self) -> None:
        total = self.counts.update("count", lambda count, batch=self.sum: count + batch)
        self.collector.emit([self.attempt, total])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "sum"))


def build_global_count(
    data: dict[int, list[list[Any]]] | None = None, take_per_batch: int = PARTITION_TAKE_PER_BATCH
) -> TransactionalTopologyBuilder:
    spout = MemoryTransactionalSpout(DATA if data is None else data, Fields("word"), take_per_batch)
    builder = TransactionalTopologyBuilder("global-count", "spout", spout, 3)
    builder.set_bolt("partial-count", BatchCount(), 5).none_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    return builder


topology = build_global_count
