"""The transactional coordinator's persistent state for one topology id.

Contract:

- ``next_txid()`` is the txid to commit next: 1 before any commit, then the
  last committed txid + 1. Reads see committed data only.
- ``record_commit(txn, txid)`` writes the commit record inside the commit's
  write transaction ``txn`` (required: the record must commit or vanish with
  the commit's state writes). ``txid`` must equal ``next_txid()`` as seen in
  ``txn``, else ``StateOrderError`` (a commit twice or out of order is a bug,
  and raising aborts the whole commit). It also drops the cached batch
  metadata of every txid before ``txid``; ``txid``'s own stays, because strict
  batch metadata initializes ``txid + 1`` from it.
- ``batch_meta`` is the per-txid batch metadata, a strict
  ``RotatingTransactionalState`` (namespace ``"meta"``): cache a batch's
  metadata when it is first emitted (standalone, durable at once) so a replay,
  even after a restart, emits the same batch. With ``plain_batch_meta`` (the
  metadata is drpc's own: a partitioned spout's partition count, an opaque
  spout's None) it is stored as plain data (``drpc.state.records``), never
  pickled; a user coordinator's metadata is user data, pickled.
- ``partition_state(i)`` is partition ``i``'s per-txid metadata, a non-strict
  ``RotatingTransactionalState`` (namespace ``"partition/<i>"``), as Storm's
  partitioned emitters keep it; its cleanup is the emitter's job.
- ``CoordinatorState.topologies(env)`` lists every topology with a commit
  record in a state directory, for status tools.

The record lives in ``COORDINATOR_DB`` under ``name(topology_id) + b"commit"``
as ``drpc.state.records``' commit record (never a pickle; a record drpc wrote
as a pickled ``(txid, committed_at)`` before is still read, without running
anything).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from drpc.errors import StateError, StateKeyError, StateOrderError
from drpc.state.codec import decode_names, encode_name
from drpc.state.env import COORDINATOR_DB, StateEnvironment, StateTxn
from drpc.state.records import decode_commit, encode_commit
from drpc.state.rotating import INIT_TXID, RotatingTransactionalState

META_NAMESPACE = "meta"
PARTITION_NAMESPACE = "partition/{}"
_COMMIT = b"commit"


def commit_record_key(topology_id: str) -> bytes:
    """Where the commit record of ``topology_id`` lives in ``COORDINATOR_DB``."""
    return encode_name(topology_id, "topology id") + _COMMIT


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """The last commit of a topology: its txid and when it committed (``time.time()``)."""

    txid: int
    committed_at: float

    @property
    def next_txid(self) -> int:
        return self.txid + 1


class CoordinatorState:
    """Next txid, commit record, batch and partition metadata of ``topology_id``."""

    def __init__(
        self, env: StateEnvironment, topology_id: str, *, plain_batch_meta: bool = False
    ) -> None:
        self.env = env
        self.topology_id = topology_id
        self._key = commit_record_key(topology_id)
        self.batch_meta = RotatingTransactionalState(
            env, topology_id, META_NAMESPACE, strict=True, plain=plain_batch_meta
        )

    def __repr__(self) -> str:
        return f"<CoordinatorState {self.topology_id!r} in {self.env.path!r}>"

    def last_commit(self, *, txn: StateTxn | None = None) -> CommitRecord | None:
        with self.env.reading(txn) as t:
            stored = t.get(COORDINATOR_DB, self._key)
        return None if stored is None else _record(stored)

    def next_txid(self, *, txn: StateTxn | None = None) -> int:
        record = self.last_commit(txn=txn)
        return INIT_TXID if record is None else record.next_txid

    def record_commit(
        self, txn: StateTxn, txid: int, *, committed_at: float | None = None
    ) -> CommitRecord:
        """Record the commit of ``txid`` in the commit's write transaction ``txn``."""
        if not isinstance(txn, StateTxn) or not txn.write:
            raise StateError(
                f"{self!r}: record_commit needs the commit's write transaction, got {txn!r}"
            )
        expected = self.next_txid(txn=txn)
        if txid != expected:
            raise StateOrderError(
                f"topology {self.topology_id!r}: commit of txid {txid} but the next txid "
                f"to commit is {expected}"
            )
        record = CommitRecord(txid, time.time() if committed_at is None else committed_at)
        txn.put(COORDINATOR_DB, self._key, encode_commit(record.txid, record.committed_at))
        self.batch_meta.cleanup_before(txid, txn=txn)
        return record

    def partition_state(
        self, partition: int, *, strict: bool = False
    ) -> RotatingTransactionalState:
        if type(partition) is not int or partition < 0:
            raise StateKeyError(f"a partition must be an int >= 0, got {partition!r}")
        namespace = PARTITION_NAMESPACE.format(partition)
        return RotatingTransactionalState(self.env, self.topology_id, namespace, strict=strict)

    @staticmethod
    def topologies(
        env: StateEnvironment, *, txn: StateTxn | None = None
    ) -> dict[str, CommitRecord]:
        """Every topology id with a commit record in ``env``, with that record."""
        found: dict[str, CommitRecord] = {}
        with env.reading(txn) as t:
            for key, value in t.scan(COORDINATOR_DB, b""):
                [topology_id], rest = decode_names(key, 1)
                if rest == _COMMIT:
                    found[topology_id] = _record(value)
        return found


def _record(stored: bytes) -> CommitRecord:
    txid, committed_at = decode_commit(stored)
    return CommitRecord(txid, committed_at)
