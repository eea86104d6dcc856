"""Trident operations and spouts for the tests (module-level: Spark workers import them)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Sequence
from typing import Any

from drpc import FailedException, stable_hash
from drpc.state.partition import held_txid, partition_path, partition_root
from drpc.state.topology import STATE_DIR_CONF, current_commit
from drpc.transactional import OpaqueMemoryTransactionalSpout
from drpc.transactional.filelog import FileLogTransactionalSpout
from drpc.transactional.spouts import MemoryMeta, _OpaqueMemoryEmitter
from drpc.trident import (
    Consumer,
    Count,
    Filter,
    FilterNull,
    Function,
    MapGet,
    MapRemove,
    ReducerAggregator,
    StateUpdater,
    TridentCollector,
    TridentState,
    TridentTopology,
    TridentTuple,
)
from tests.transactional.bolts import first_commit_attempt, first_time


class Split(Function):
    """Storm's tutorial Split: one output tuple per word of the sentence."""

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        for word in tuple.get_value(0).split():
            collector.emit([word])


def add_count_query(topology: TridentTopology, counts: TridentState) -> None:
    """The ``count`` DRPC stream: the committed count of each word of its argument."""
    (
        topology.new_drpc_stream("count")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .project(["word", "count"])
    )


class Triple(Function):
    """``"a b n"`` as the fields (a, b, int(n))."""

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        first, second, number = tuple.get_value(0).split()
        collector.emit([first, second, int(number)])


class SplitFailingOnce(Split):
    """Split, failing the batch the first time it meets some words (processing phase)."""

    def __init__(self, marker_dir: str, percent: int = 30) -> None:
        self.marker_dir, self.percent = marker_dir, percent

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        for word in tuple.get_value(0).split():
            if stable_hash(["split", word]) % 100 < self.percent and first_time(
                self.marker_dir, f"split-{word}"
            ):
                raise FailedException(f"injected: first sight of {word!r}")
        super().execute(tuple, collector)


class CountFailingCommits(Count):
    """Count whose combine fails the first commit of every third txid (commit phase)."""

    def __init__(self, marker_dir: str) -> None:
        self.marker_dir = marker_dir

    def combine(self, a: int, b: int) -> int:
        txid = first_commit_attempt(self.marker_dir, "commit-", lambda txid: txid % 3 == 0)
        if txid is not None:
            raise FailedException(f"injected: first commit of txid {txid}")
        return a + b


class KillsBetweenPartitions(Count):
    """Count whose partition ``victim`` SIGKILLs its own process in the first commit of txid
    ``txid``, once partition 0 of the same state holds ``txid``: the process dies between
    two partitions' commits of one txid (a resident task, or a local run's whole process).
    The marker file ``killed`` records what partition 0 held then. With ``lose_disk`` the
    victim deletes its partition's directory first: the worker is lost with its disk."""

    def __init__(
        self, marker_dir: str, state: str, txid: int, victim: int = 1, lose_disk: bool = False
    ) -> None:
        self.marker_dir, self.state, self.txid, self.victim = marker_dir, state, txid, victim
        self.lose_disk = lose_disk
        self.index = -1
        self.conf: dict[str, Any] = {}

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.index = context.this_task_index
        self.conf = conf

    def combine(self, a: int, b: int) -> int:
        commit = current_commit()
        if (
            commit is not None
            and commit[1] == self.txid
            and self.index == self.victim
            and first_time(self.marker_dir, "killing")
        ):
            root = partition_root(self.conf[STATE_DIR_CONF], self.conf)
            first = partition_path(root, self.state, 0)
            deadline = time.monotonic() + 30
            while (held_txid(first) or 0) < self.txid and time.monotonic() < deadline:
                time.sleep(0.005)
            with open(os.path.join(self.marker_dir, "killed"), "w") as out:
                out.write(f"{held_txid(first)} {os.getpid()}")
            if self.lose_disk:
                shutil.rmtree(partition_path(root, self.state, self.victim))
            os.kill(os.getpid(), signal.SIGKILL)
        return a + b


class KillsItsFirstReader(FileLogTransactionalSpout):
    """A file log spout whose first emitter made outside the driver SIGKILLs its process:
    on ``spark`` a resident task warming the run's reader dies while the run starts. The
    marker file ``reader-killed`` records the pid that died."""

    def __init__(self, directory: str, fields: Any, take: int, marker_dir: str) -> None:
        super().__init__(directory, fields, take)
        self.marker_dir = marker_dir
        self.driver_pid = os.getpid()

    def get_emitter(self, conf: Any, context: Any) -> Any:
        if os.getpid() != self.driver_pid and first_time(self.marker_dir, "reader-kill"):
            with open(os.path.join(self.marker_dir, "reader-killed"), "w") as out:
                out.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return super().get_emitter(conf, context)


class _GrowingOpaqueEmitter(_OpaqueMemoryEmitter):
    """A first attempt of a partition's batch takes ``take``, a replay twice as many."""

    def __init__(self, data: Any, take: int, marker_dir: str) -> None:
        super().__init__(data, take)
        self.marker_dir = marker_dir

    def emit_partition_batch(
        self, attempt: Any, collector: Any, partition: int, last_meta: Any
    ) -> MemoryMeta:
        first = first_time(self.marker_dir, f"emit-{attempt.txid}-{partition}")
        start = 0 if last_meta is None else last_meta.end
        take = self.take if first else 2 * self.take
        meta = MemoryMeta(start, min(take, max(0, len(self.data[partition]) - start)))
        self._emit(attempt, collector, partition, meta)
        return meta


class ChangingOpaqueSpout(OpaqueMemoryTransactionalSpout):
    """An opaque spout whose replays emit more than their first attempt did."""

    def __init__(self, data: Any, fields: Any, take: int, marker_dir: str) -> None:
        super().__init__(data, fields, take)
        self.marker_dir = marker_dir

    def get_emitter(self, conf: Any, context: Any) -> Any:
        return _GrowingOpaqueEmitter(self.data, self.take_per_batch, self.marker_dir)


class Concat(ReducerAggregator[str]):
    """Joins a group's first input field in arrival order."""

    def init(self) -> str:
        return ""

    def reduce(self, current: str, tuple: TridentTuple) -> str:
        return current + tuple.get_value(0)


class WriteLines(Consumer):
    """peek: appends each tuple's values to a file (the test reads it back)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def accept(self, tuple: TridentTuple) -> None:
        with open(self.path, "a") as out:
            out.write(" ".join(map(str, tuple.values)) + "\n")


class EmitsTwoValues(Function):
    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        collector.emit([1, 2])


class PutLatest(StateUpdater):
    """partition_persist: stores each tuple's second field under its first (the last wins)."""

    def update_state(
        self, state: Any, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        collector.emit(["dropped"])
        state.multi_put({tuple.get_value(0): tuple.get_value(1) for tuple in tuples})


class RemoveFailingCommits(MapRemove):
    """MapRemove whose first commit of each of ``txids`` fails after its removals: the commit
    aborts and the batch is replayed."""

    def __init__(self, marker_dir: str, txids: Sequence[int]) -> None:
        self.marker_dir, self.txids = marker_dir, tuple(txids)

    def update_state(
        self, state: Any, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        super().update_state(state, tuples, collector)
        commit = current_commit()
        assert commit is not None
        if commit[1] in self.txids and first_time(self.marker_dir, f"remove-{commit[1]}"):
            raise FailedException(f"injected: first commit of txid {commit[1]}, after removing")


class SlowFilter(Filter):
    """Keeps every tuple, after sleeping ``seconds`` on each: a batch slower than its timeout."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def is_keep(self, tuple: TridentTuple) -> bool:
        time.sleep(self.seconds)
        return True


class FailsFirstTaskAttempt(Filter):
    """Keeps every tuple, but the first attempt of every Spark task raises at its
    ``after``-th tuple (after counting that many): Spark retries the task (a master
    ``local[N,F]`` with F > 1). Outside a Spark task it never fails."""

    def __init__(self, after: int = 50) -> None:
        self.after = after
        self.seen = 0

    def is_keep(self, tuple: TridentTuple) -> bool:
        from pyspark import TaskContext

        context = TaskContext.get()
        self.seen += 1
        if context is not None and context.attemptNumber() == 0 and self.seen == self.after:
            raise RuntimeError("injected: the first attempt of this Spark task fails")
        return True


class KillsItsProcessOnce(Filter):
    """Keeps every tuple, but SIGKILLs the process running it at the first sight of ``word``
    (once across processes: a marker in ``marker_dir``): a resident worker dying mid-batch."""

    def __init__(self, marker_dir: str, word: str) -> None:
        self.marker_dir, self.word = marker_dir, word

    def is_keep(self, tuple: TridentTuple) -> bool:
        if tuple.get_value(0) == self.word and first_time(self.marker_dir, f"kill-{self.word}"):
            os.kill(os.getpid(), signal.SIGKILL)
        return True


class RefuseWord(Filter):
    """Keeps every tuple but raises ``ValueError`` on ``word`` in its first input field."""

    def __init__(self, word: str) -> None:
        self.word = word

    def is_keep(self, tuple: TridentTuple) -> bool:
        if tuple.get_value(0) == self.word:
            raise ValueError(f"cannot handle {self.word!r}")
        return True


class RecordsBatchRows(StateUpdater):
    """partition_persist: stores the batch's tuples under (txid, this committer task's index),
    so a test sees which tasks answered each batch."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.task = context.this_task_index

    def update_state(
        self, state: Any, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        commit = current_commit()
        assert commit is not None
        state.multi_put({(commit[1], self.task): [list(tuple.values) for tuple in tuples]})


class WritersOfKey(ReducerAggregator[list[int]]):
    """persistent_aggregate: a key's value is the sorted indexes of the committer tasks that
    ever reduced a tuple of it."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.task = context.this_task_index

    def init(self) -> list[int]:
        return []

    def reduce(self, current: list[int], tuple: TridentTuple) -> list[int]:
        return sorted({*current, self.task})
