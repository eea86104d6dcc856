"""``TransactionAttempt``: the id of one emission of one batch.

Contract: ``txid`` numbers batches from 1 and stays the same however often a
batch is replayed; ``attempt_id`` is unique per emission, so tuples of a
replay are never confused with tuples of an earlier emission. Every tuple of
a transactional topology carries the attempt as field 0. Attempts are
immutable, hashable, ordered by txid, picklable, and stable under
``drpc.stable_hash`` (fields grouping on the attempt works across processes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True, slots=True)
class TransactionAttempt:
    txid: int
    attempt_id: int

    def __post_init__(self) -> None:
        if not isinstance(self.txid, int) or isinstance(self.txid, bool) or self.txid < 1:
            raise ValueError(f"a txid is an int >= 1, got {self.txid!r}")

    @property
    def transaction_id(self) -> int:
        """Storm's name for ``txid``."""
        return self.txid

    def __str__(self) -> str:
        return f"{self.txid}:{self.attempt_id}"
