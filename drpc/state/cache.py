"""A writer's cache of one map's committed records, so a commit reads most keys from memory.

Contract. ``RecordCache(size, env, db)`` belongs to one map object in the
process that commits to it (the state directory's one writer). Its entries
are the records stored under LMDB keys of database ``db`` (``None``: the key
is absent), as committed; it never serves a record that was written over:

- it watches every commit of this process (``env.watch_commits``): keys that
  another transaction wrote in ``db`` leave the cache; what the cache's own
  transaction staged joins it;
- ``open(txn)``, by every commit handle of the map (opening again in the
  same transaction changes nothing): if another process committed since the
  last commit this process saw (LMDB's transaction ids tell: ``txn.lmdb_id``
  must follow it; a commit that wrote nothing does not take an id), every
  entry is dropped;
- ``get(key)`` gives the record this transaction staged for ``key``, else the
  committed one, else ``MISS``; ``remember(key, record)`` keeps a record just
  read from LMDB (committed data: it stays even if the transaction aborts);
- ``stage(txn, key, record)`` keeps a record the transaction writes; staged
  records become committed entries only once ``txn`` commits, and vanish if
  it aborts;
- ``drop(txn, keys)``: the transaction writes ``keys`` without staging them
  (an operation over more keys than the cache holds, which would only churn
  it: the commit handle reads and writes those in LMDB directly); they leave
  the cache, committed and staged alike;
- at most ``size`` committed entries are kept, least recently used dropped
  first; ``size`` is at least 1 (a map without a cache has none).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Set
from typing import Any

from drpc.errors import StateError
from drpc.state.env import StateEnvironment
from drpc.state.txn import StateTxn, Writes

MISS: Any = object()


class RecordCache:
    """Committed records of one map, by LMDB key (see the module doc)."""

    def __init__(self, size: int, env: StateEnvironment, db: str) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a cache size is an int >= 1, got {size!r}")
        self.size = size
        self.db = db
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[bytes, Any] = OrderedDict()
        self._staged: dict[bytes, Any] = {}
        self._open: StateTxn | None = None  # the write transaction the cache is open in
        self._last_commit: int | None = None  # lmdb_id of the last commit this process made
        env.watch_commits(self)

    def __len__(self) -> int:
        return len(self._entries)

    def open(self, txn: StateTxn) -> None:
        if txn is self._open:
            return
        self._open = txn
        self._staged = {}
        if self._last_commit is None or txn.lmdb_id != self._last_commit + 1:
            self._entries.clear()

    def get(self, key: bytes) -> Any:
        if key in self._staged:
            return self._staged[key]
        record = self._entries.get(key, MISS)
        if record is MISS:
            self.misses += 1
        else:
            self.hits += 1
            self._entries.move_to_end(key)
        return record

    def remember(self, key: bytes, record: Any) -> None:
        self._entries[key] = record
        self._trim()

    def stage(self, txn: StateTxn, key: bytes, record: Any) -> None:
        if txn is not self._open:
            raise StateError("a record was staged outside the transaction its cache was opened in")
        self._staged[key] = record

    def drop(self, txn: StateTxn, keys: Iterable[bytes]) -> None:
        if txn is not self._open:
            raise StateError("keys were dropped outside the transaction their cache was opened in")
        entries, staged = self._entries, self._staged
        if not isinstance(keys, (Mapping, Set)) or len(keys) < len(entries) + len(staged):
            for key in keys:
                entries.pop(key, None)
                staged.pop(key, None)
            return
        # More keys than records held (a commit too large for the cache): walk the records.
        for held in (entries, staged):
            for key in [key for key in held if key in keys]:
                del held[key]

    def on_commit(self, txn: StateTxn, writes: Writes) -> None:
        if txn is self._open:
            self._entries.update(self._staged)
            for key in self._staged:
                self._entries.move_to_end(key)
            self._trim()
        else:
            for key in writes.get(self.db, ()):
                self._entries.pop(key, None)
        self._staged = {}
        self._open = None
        if any(writes.values()):  # a commit that wrote nothing leaves LMDB's id unchanged
            self._last_commit = txn.lmdb_id

    def _trim(self) -> None:
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
