"""The transactional coordinator: which batches to process, which to commit, as a state machine.

Events in (``next_tuple``, ``ack``, ``fail``), decisions out (``EmitBatch``,
``EmitCommit``, ``Committed``). Storm's TransactionalSpoutCoordinator rules:

- at most ``max_spout_pending`` transactions are active, in the window of
  txids starting at the oldest uncommitted one (``current_txid``);
- a new transaction gets a fresh attempt id and its metadata: cached
  metadata if the txid has some (a replay, or a batch emitted before a
  restart), else from the spout's coordinator, only when it is ready, which is
  asked at most once per pass over the window (so a spout turning ready
  mid-pass cannot start a txid before an earlier one it was not ready for);
- ``ack`` of a processing attempt marks it processed; once the current txid is
  processed it is emitted for commit (one commit at a time, strictly in txid
  order); ``ack`` of the committing attempt means committed: the window moves
  on (``Committed``);
- ``fail`` of an active attempt (processing or commit) drops it and every
  later active transaction; the next ``next_tuple`` re-emits them with new
  attempt ids and their cached metadata. Acks and fails of stale attempts are
  ignored.

Persisting is the caller's business: the commit record is written in the same
LMDB transaction as the batch's state (``drpc.state``), so the next txid is
durable exactly when the commit is; metadata is cached durably by the
``MetadataSource`` before a batch is emitted. No threads, no clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from drpc.transactional.attempt import TransactionAttempt


class MetadataSource(Protocol):
    """Batch metadata by txid: the coordinator state's cache and the spout's coordinator."""

    def has_cache(self, txid: int) -> bool: ...

    def is_ready(self) -> bool: ...

    def get_state(self, txid: int) -> Any:
        """The cached metadata of ``txid``, or new metadata, cached before it is returned."""
        ...


@dataclass(frozen=True, slots=True)
class EmitBatch:
    attempt: TransactionAttempt
    metadata: Any
    last_committed: int | None  # emitters may forget state from before it


@dataclass(frozen=True, slots=True)
class EmitCommit:
    attempt: TransactionAttempt


@dataclass(frozen=True, slots=True)
class Committed:
    txid: int


Decision = EmitBatch | EmitCommit | Committed


class Status(Enum):
    PROCESSING = "processing"
    PROCESSED = "processed"
    COMMITTING = "committing"


@dataclass
class _Active:
    attempt: TransactionAttempt
    status: Status = Status.PROCESSING


def random_attempt_ids() -> Callable[[], int]:
    generator = random.Random()
    return lambda: generator.getrandbits(63)


@dataclass
class TransactionalCoordinator:
    max_spout_pending: int = 1
    current_txid: int = 1
    attempt_ids: Callable[[], int] = field(default_factory=random_attempt_ids)
    _active: dict[int, _Active] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_spout_pending < 1:
            raise ValueError(f"max_spout_pending must be >= 1, got {self.max_spout_pending}")
        if self.current_txid < 1:
            raise ValueError(f"txids start at 1, got {self.current_txid}")

    @property
    def active(self) -> dict[int, Status]:
        return {txid: entry.status for txid, entry in sorted(self._active.items())}

    def attempt_of(self, txid: int) -> TransactionAttempt | None:
        entry = self._active.get(txid)
        return None if entry is None else entry.attempt

    def next_tuple(self, source: MetadataSource) -> list[Decision]:
        return self._sync(source)

    def ack(self, attempt: TransactionAttempt, source: MetadataSource) -> list[Decision]:
        entry = self._active.get(attempt.txid)
        if entry is None or entry.attempt != attempt:
            return []
        decisions: list[Decision] = []
        if entry.status is Status.PROCESSING:
            entry.status = Status.PROCESSED
        elif entry.status is Status.COMMITTING:
            del self._active[attempt.txid]
            self.current_txid = attempt.txid + 1
            decisions.append(Committed(attempt.txid))
        return decisions + self._sync(source)

    def fail(self, attempt: TransactionAttempt, source: MetadataSource) -> list[Decision]:
        entry = self._active.get(attempt.txid)
        if entry is None or entry.attempt != attempt:
            return []
        for txid in [t for t in self._active if t >= attempt.txid]:
            del self._active[txid]
        return self._sync(source)

    def _sync(self, source: MetadataSource) -> list[Decision]:
        decisions: list[Decision] = []
        current = self._active.get(self.current_txid)
        if current is not None and current.status is Status.PROCESSED:
            current.status = Status.COMMITTING
            decisions.append(EmitCommit(current.attempt))
        if len(self._active) < self.max_spout_pending:
            last_committed = self.current_txid - 1 if self.current_txid > 1 else None
            # The spout is asked once a sync: asked per txid, as Storm does, a spout that
            # became ready between two answers (a broker back) had txid n + 1 start while n,
            # not ready, had no metadata yet, which the strict metadata state refuses.
            ready: bool | None = None
            for txid in range(self.current_txid, self.current_txid + self.max_spout_pending):
                if txid in self._active:
                    continue
                if not source.has_cache(txid):
                    if ready is None:
                        ready = source.is_ready()
                    if not ready:
                        continue
                attempt = TransactionAttempt(txid, self.attempt_ids())
                metadata = source.get_state(txid)
                self._active[txid] = _Active(attempt)
                decisions.append(EmitBatch(attempt, metadata, last_committed))
        return decisions
