"""Bolts for the transactional tests (module-level: Spark workers import them)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drpc import (
    BaseBasicBolt,
    BaseRichBolt,
    BasicOutputCollector,
    BatchOutputCollector,
    FailedException,
    Fields,
    OutputCollector,
    OutputFieldsDeclarer,
    TopologyContext,
    Tuple,
    stable_hash,
)
from drpc.state.topology import current_commit
from drpc.transactional import (
    BaseTransactionalBolt,
    BaseTransactionalSpout,
    ICommitter,
    TransactionAttempt,
)


def first_time(marker_dir: str, name: str) -> bool:
    """True exactly once per name, across processes (an O_EXCL marker file)."""
    try:
        os.close(os.open(Path(marker_dir) / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def first_commit_attempt(marker_dir: str, marker: str, chosen: Callable[[int], bool]) -> int | None:
    """The txid of the commit this runs in, when ``chosen(txid)`` and this is the first
    time across processes (``first_time`` of ``marker`` + txid); None otherwise."""
    commit = current_commit()
    if commit is None or not chosen(commit[1]):
        return None
    return commit[1] if first_time(marker_dir, f"{marker}{commit[1]}") else None


def fails_first_attempt(marker_dir: str | None, phase: str, txid: int, percent: int) -> bool:
    if marker_dir is None or stable_hash([phase, txid]) % 100 >= percent:
        return False
    return first_time(marker_dir, f"{phase}-{txid}")


def log_event(log_dir: str | None, event: str) -> None:
    if log_dir is not None:
        with open(Path(log_dir) / "events.log", "a") as out:
            out.write(f"{time.monotonic():.6f} {event}\n")


class PartialWordCount(BaseTransactionalBolt):
    """Processing phase: counts the batch's words this task saw; may fail a first attempt."""

    def __init__(
        self, marker_dir: str | None = None, percent: int = 20, log_dir: str | None = None
    ) -> None:
        self.marker_dir, self.percent, self.log_dir = marker_dir, percent, log_dir

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        attempt: TransactionAttempt,
    ) -> None:
        self.collector, self.attempt = collector, attempt
        self.counts: Counter[str] = Counter()
        self.index = context.this_task_index

    def execute(self, tuple: Tuple) -> None:
        self.counts[tuple[1]] += 1

    def finish_batch(self) -> None:
        if fails_first_attempt(
            self.marker_dir, f"process{self.index}", self.attempt.txid, self.percent
        ):
            raise FailedException(f"injected failure in processing batch {self.attempt.txid}")
        log_event(self.log_dir, f"processed {self.attempt.txid}")
        for word, count in self.counts.items():
            self.collector.emit([self.attempt, word, count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "word", "count"))


class CommitWordCounts(BaseTransactionalBolt, ICommitter):
    """Commit phase: adds the batch's counts to a map; may fail a first commit attempt."""

    def __init__(
        self,
        map_name: str = "counts",
        opaque: bool = False,
        marker_dir: str | None = None,
        percent: int = 20,
        log_dir: str | None = None,
    ) -> None:
        self.map_name, self.opaque = map_name, opaque
        self.marker_dir, self.percent, self.log_dir = marker_dir, percent, log_dir

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        attempt: TransactionAttempt,
    ) -> None:
        self.collector, self.attempt = collector, attempt
        self.counts: Counter[str] = Counter()
        self.index = context.this_task_index
        kind = context.state.opaque_map if self.opaque else context.state.transactional_map
        self.map = kind(self.map_name, default=0)

    def execute(self, tuple: Tuple) -> None:
        self.counts[tuple[1]] += tuple[2]

    def finish_batch(self) -> None:
        log_event(self.log_dir, f"commit {self.attempt.txid}")
        self.map.multi_update({w: (lambda v, n=n: v + n) for w, n in self.counts.items()})
        if fails_first_attempt(
            self.marker_dir, f"commit{self.index}", self.attempt.txid, self.percent
        ):
            raise FailedException(f"injected failure in committing batch {self.attempt.txid}")
        self.collector.emit([self.attempt, sum(self.counts.values())])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "words"))


class AckFirstBatchLate(BaseRichBolt):
    """Acks batch 1's tuples from a timer thread after a delay: later batches overtake it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        self.collector.emit(tuple.values, anchors=tuple)
        if tuple[0].txid == 1:
            threading.Timer(self.seconds, self.collector.ack, [tuple]).start()
        else:
            self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "word"))


class SumOfSecondField(BaseTransactionalBolt):
    """Emits [attempt, the sum of field 1 over the batch] when the batch finishes."""

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        attempt: TransactionAttempt,
    ) -> None:
        self.collector, self.attempt, self.total = collector, attempt, 0

    def execute(self, tuple: Tuple) -> None:
        self.total += tuple[1]

    def finish_batch(self) -> None:
        self.collector.emit([self.attempt, self.total])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "total"))


class SlowFirstBatch(BaseBasicBolt):
    """Holds up batch 1 so later batches finish processing before it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        if tuple[0].txid == 1:
            time.sleep(self.seconds)
        collector.emit(tuple.values)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "word"))


class CommitCountsAndPayloads(BaseTransactionalBolt, ICommitter):
    """Commit phase over [word, size]: counts each word, and stores a payload of ``size``
    bytes under the word when size > 0, in the same commit (to fill a state directory)."""

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        attempt: TransactionAttempt,
    ) -> None:
        self.counts: Counter[str] = Counter()
        self.payloads: dict[str, int] = {}
        self.count_map = context.state.transactional_map("counts", default=0)
        self.payload_map = context.state.transactional_map("payloads", default="")

    def execute(self, tuple: Tuple) -> None:
        word, size = tuple[1], tuple[2]
        self.counts[word] += 1
        if size:
            self.payloads[word] = size

    def finish_batch(self) -> None:
        self.count_map.multi_update({w: (lambda v, n=n: v + n) for w, n in self.counts.items()})
        for word, size in self.payloads.items():
            self.payload_map.put(word, "x" * size)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


class ClaimingSpout(BaseTransactionalSpout):
    """A coordinator that claims each batch's words from a queue, as one over a work queue
    would: a second ``initialize_transaction`` for one txid would lose the first claim. Every
    call is appended to ``calls_file`` (one txid per line). One emitter task emits the claim."""

    def __init__(self, words: list[str], per_batch: int, calls_file: str) -> None:
        self.words, self.per_batch, self.calls_file = words, per_batch, calls_file

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("tx", "word"))

    def get_coordinator(self, conf: dict[str, Any], context: TopologyContext) -> Any:
        return _ClaimingCoordinator(list(self.words), self.per_batch, self.calls_file)

    def get_emitter(self, conf: dict[str, Any], context: TopologyContext) -> Any:
        return _ClaimEmitter()


class _ClaimingCoordinator:
    def __init__(self, queue: list[str], per_batch: int, calls_file: str) -> None:
        self.queue, self.per_batch, self.calls_file = queue, per_batch, calls_file

    def is_ready(self) -> bool:
        return True

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> list[str]:
        with open(self.calls_file, "a") as calls:
            calls.write(f"{txid}\n")
        claimed, self.queue = self.queue[: self.per_batch], self.queue[self.per_batch :]
        return claimed


class _ClaimEmitter:
    def emit_batch(
        self, attempt: TransactionAttempt, metadata: list[str], collector: BatchOutputCollector
    ) -> None:
        for word in metadata:
            collector.emit([attempt, word])

    def cleanup_before(self, txid: int) -> None:
        """Nothing cached per txid here."""


class ReadsEveryWord(CommitWordCounts):
    """A committer that reads the count of both words whatever its task received: with
    several tasks, one of them reads a key of another partition."""

    def finish_batch(self) -> None:
        self.map.multi_get(["cat", "dog"])
        super().finish_batch()
