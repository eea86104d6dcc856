"""Transactional words (storm-starter's TransactionalWords) and a DRPC query over its state.

``count`` (a committer, 5 tasks, fields-grouped on the word) adds each batch's
counts to an ``OpaqueMap`` "words" and emits ``[attempt, word, count, prev]``;
``bucketize`` turns count changes into bucket moves (buckets of 10);
``buckets`` (after the committer, so it also runs in the commit phase) keeps
how many words each bucket holds in a ``TransactionalMap`` "word-buckets".
Over the reference data: cat 8, dog 7, apple 2, chicken 1, banana 1, and
bucket 0 holds 5 words.

``build_words_query(state_dir)`` is a DRPC function ``words`` answering a
word's committed count from that state; ``words_query()`` builds it for the
state directory in ``DRPC_STATE_DIR`` (default ``state``), for
``drpc-server --topology drpc.examples.transactional_words:words_query``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from drpc import (
    BaseBasicBolt,
    BasicOutputCollector,
    BatchOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    Topology,
    TopologyContext,
    Tuple,
)
from drpc.examples import state_dir
from drpc.examples.transactional_global_count import DATA, PARTITION_TAKE_PER_BATCH
from drpc.state.topology import STATE_DIR_CONF
from drpc.transactional import (
    BaseTransactionalBolt,
    ICommitter,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
    TransactionAttempt,
)

WORDS_MAP = "words"
BUCKETS_MAP = "word-buckets"
BUCKET_SIZE = 10


class KeyedCountUpdater(BaseTransactionalBolt, ICommitter):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        attempt: TransactionAttempt,
    ) -> None:
        self.collector, self.attempt = collector, attempt
        self.counts: Counter[str] = Counter()
        self.words = context.state.opaque_map(WORDS_MAP, default=0)

    def execute(self, tuple: Tuple) -> None:
        self.counts[tuple[1]] += 1

    def finish_batch(self) -> None:
        for word, added in sorted(self.counts.items()):
            previous = self.words.get(word)
            count = self.words.update(word, lambda current, added=added: current + added)
            self.collector.emit([self.attempt, word, count, previous])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "key", "count", "prev-count"))


class Bucketize(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        attempt, _, count, previous = tuple.values
        bucket, previous_bucket = count // BUCKET_SIZE, previous // BUCKET_SIZE
        if previous == 0:
            collector.emit([attempt, bucket, 1])
        elif bucket != previous_bucket:
            collector.emit([attempt, bucket, 1])
            collector.emit([attempt, previous_bucket, -1])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("attempt", "bucket", "delta"))


class BucketCountUpdater(BaseTransactionalBolt):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        attempt: TransactionAttempt,
    ) -> None:
        self.collector, self.attempt = collector, attempt
        self.deltas: Counter[int] = Counter()
        self.buckets = context.state.transactional_map(BUCKETS_MAP, default=0)

    def execute(self, tuple: Tuple) -> None:
        self.deltas[tuple[1]] += tuple[2]

    def finish_batch(self) -> None:
        for bucket, delta in sorted(self.deltas.items()):
            total = self.buckets.update(bucket, lambda current, delta=delta: current + delta)
            self.collector.emit([self.attempt, bucket, total])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "bucket", "count"))


def build_words(
    data: dict[int, list[list[Any]]] | None = None, take_per_batch: int = PARTITION_TAKE_PER_BATCH
) -> TransactionalTopologyBuilder:
    spout = MemoryTransactionalSpout(DATA if data is None else data, Fields("word"), take_per_batch)
    builder = TransactionalTopologyBuilder("top-n-words", "spout", spout, 2)
    builder.set_bolt("count", KeyedCountUpdater(), 5).fields_grouping("spout", Fields("word"))
    builder.set_bolt("bucketize", Bucketize()).none_grouping("count")
    builder.set_bolt("buckets", BucketCountUpdater(), 5).fields_grouping(
        "bucketize", Fields("bucket")
    )
    return builder


topology = build_words


class CommittedCount(BaseBasicBolt):
    """[id, word] -> [id, the word's committed count]."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.words = context.state.opaque_map(WORDS_MAP, default=0)

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], self.words.get(tuple[1])])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


def build_words_query(state_dir: str, function: str = "words") -> Topology:
    builder = LinearDRPCTopologyBuilder(function)
    builder.add_bolt(CommittedCount(), 2)
    return builder.create_topology({STATE_DIR_CONF: str(state_dir)})


def words_query() -> Topology:
    return build_words_query(state_dir())
