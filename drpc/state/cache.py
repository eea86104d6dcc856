"""A writer's cache of one map's committed records, so a commit reads most keys from memory.

Contract. ``RecordCache(size)`` belongs to one map object in the process that
commits to it (the state directory's one writer). Its entries are the records
stored under LMDB keys (``None``: the key is absent), as committed.

- ``open(txn)``, by every commit handle of the map (opening again in the
  same transaction changes nothing): if anything was committed since the last transaction
  this cache was opened in committed (LMDB's transaction ids tell:
  ``txn.lmdb_id`` must follow it), every entry is dropped. A cache therefore
  never serves a record another writer wrote over, it only misses more.
  Every write of the map in this process must go through the object owning
  the cache.
- ``get(key)`` gives the record this transaction staged for ``key``, else the
  committed one, else ``MISS``; ``remember(key, record)`` keeps a record just
  read from LMDB (committed data: it stays even if the transaction aborts).
- ``stage(txn, key, record)`` keeps a record the transaction writes; staged
  records become committed entries only once ``txn`` commits, and vanish if
  it aborts.
- At most ``size`` committed entries are kept, least recently used dropped
  first; ``size=0`` keeps none (every read goes to LMDB).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from drpc.errors import StateError
from drpc.state.txn import StateTxn

MISS: Any = object()


class RecordCache:
    """Committed records of one map, by LMDB key (see the module doc)."""

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"a cache size is an int >= 0, got {size!r}")
        self.size = size
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[bytes, Any] = OrderedDict()
        self._staged: dict[bytes, Any] = {}
        self._staged_in: int | None = None  # lmdb_id of the transaction that staged
        self._open: StateTxn | None = None  # the write transaction the cache is open in
        self._last_commit: int | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def open(self, txn: StateTxn) -> None:
        if txn is self._open:
            return
        self._open = txn
        self._staged = {}
        self._staged_in = txn.lmdb_id
        if self._last_commit is None or txn.lmdb_id != self._last_commit + 1:
            self._entries.clear()
        txn.after_commit(lambda: self._commit(txn.lmdb_id))

    def get(self, key: bytes) -> Any:
        if self._staged and key in self._staged:
            return self._staged[key]
        record = self._entries.get(key, MISS)
        if record is MISS:
            self.misses += 1
        else:
            self.hits += 1
            self._entries.move_to_end(key)
        return record

    def remember(self, key: bytes, record: Any) -> None:
        if self.size:
            self._entries[key] = record
            self._trim()

    def stage(self, txn: StateTxn, key: bytes, record: Any) -> None:
        if self._staged_in != txn.lmdb_id:
            raise StateError("a record was staged outside the transaction its cache was opened in")
        if self.size:
            self._staged[key] = record

    def _commit(self, lmdb_id: int) -> None:
        self._entries.update(self._staged)
        for key in self._staged:
            self._entries.move_to_end(key)
        self._staged = {}
        self._staged_in = None
        self._open = None
        self._last_commit = lmdb_id
        self._trim()

    def _trim(self) -> None:
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
