"""A transaction of a ``StateEnvironment``: reads, and writes buffered until it ends.

Contract:

- A read transaction (``env.read()``) sees a snapshot of committed data: the
  latest, or an earlier committed version (``drpc.state.versions``): then an
  overlay of the values that version held is read over the latest snapshot.
- A write transaction (``env.run_write(fn)``) buffers ``put`` and ``delete``
  in memory; its own ``get`` and ``scan`` see them over the committed data. The
  environment applies the buffered bytes when ``fn`` returns
  (``apply_writes``), and applies the same bytes again after the map grew, so
  ``fn`` runs once whatever the environment retries.
- Keys are checked where they are written: empty, or longer than LMDB's
  limit, raises ``StateKeyError`` at once (``put_read``: a map's commit writing
  the keys it read, checked then).
- A transaction that has ended raises ``StateError`` when used.
- ``lmdb_id`` is LMDB's id of the transaction (a write's id is the last
  committed id + 1, so a writer can tell whether anyone committed since);
  ``version`` is the committed version a read sees (``lmdb_id`` but for a read
  at an earlier version).
- A write transaction remembers the committed bytes of the keys it read in the
  versioned databases (``committed_reads``), so the environment's undo log need
  not read them again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING, cast

import lmdb

from drpc.errors import StateError, StateKeyError

if TYPE_CHECKING:
    from drpc.state.env import StateEnvironment

_MANY = 256
"""Keys a read takes in one sorted ``getmulti`` instead of one look-up each."""

Writes = dict[str, dict[bytes, bytes | None]]
"""Buffered writes by database: key -> value, or None for a delete."""

Overlay = Writes
"""What a transaction sees over LMDB's snapshot, by database: a write's buffered writes,
or a read's values of an earlier version (key -> value, or None: absent)."""


class StateTxn:
    """A read or write transaction of a ``StateEnvironment``, valid until it ends.

    A write transaction buffers its puts and deletes (see the module doc); its
    reads see them over the committed data. ``cache`` is a memo for state
    objects (a map's commit handle keeps the keys it wrote there); it dies with
    the transaction.
    """

    __slots__ = (
        "_done",
        "_env",
        "_overlay",
        "_raw",
        "cache",
        "committed_reads",
        "lmdb_id",
        "version",
        "write",
    )

    def __init__(
        self,
        env: StateEnvironment,
        raw: lmdb.Transaction,
        write: bool,
        *,
        overlay: Overlay | None = None,
        version: int | None = None,
        remember: frozenset[str] = frozenset(),
    ) -> None:
        self._env = env
        self._raw = raw
        self.write = write
        self._done = False
        self._overlay: Overlay | None = {} if write else overlay
        self.cache: dict[object, object] = {}
        self.lmdb_id: int = raw.id()
        self.version: int = self.lmdb_id if version is None else version
        self.committed_reads: Writes | None = (
            {name: {} for name in remember} if write and remember else None
        )

    @property
    def env(self) -> StateEnvironment:
        return self._env

    def get(self, db: str, key: bytes) -> bytes | None:
        [value] = self.get_many(db, [key])
        return value

    def get_many(self, db: str, keys: list[bytes]) -> list[bytes | None]:
        """The committed value of each key (a write transaction: its own writes over them)."""
        self._check_usable(mutate=False)
        self._check_keys(keys, mutate=False)
        pending = self._overlay.get(db) if self._overlay is not None else None
        get = self._raw.get
        handle = self._env._db(db)
        try:
            if not pending and len(keys) >= _MANY:
                # one C call over the keys in order: a B-tree walk, not a look-up each
                found = dict(self._raw.cursor(db=handle).getmulti(sorted(keys)))
                values = cast("list[bytes | None]", [found.get(key) for key in keys])
            elif not pending:
                values = cast("list[bytes | None]", [get(key, db=handle) for key in keys])
            else:
                values = [
                    pending[key] if key in pending else cast("bytes | None", get(key, db=handle))
                    for key in keys
                ]
        except lmdb.Error as error:
            raise self._env._wrap(error, "read") from error
        remembered = self.committed_reads.get(db) if self.committed_reads is not None else None
        if remembered is not None:
            if not pending:
                remembered.update(zip(keys, values, strict=True))
            else:
                pairs = zip(keys, values, strict=True)
                remembered.update((key, value) for key, value in pairs if key not in pending)
        return values

    def put(self, db: str, key: bytes, value: bytes) -> None:
        self.put_many(db, {key: value})

    def put_many(self, db: str, items: Mapping[bytes, bytes]) -> None:
        """Buffer a write of each key and value (see the module doc)."""
        self._check_usable(mutate=True)
        self._check_keys(items, mutate=True)
        assert self._overlay is not None
        self._overlay.setdefault(db, {}).update(
            (key, value if type(value) is bytes else bytes(value)) for key, value in items.items()
        )

    def put_read(self, db: str, items: Mapping[bytes, bytes]) -> None:
        """``put_many`` of keys that ``get_many`` read from ``db`` in this transaction (so
        their lengths were checked) and are not empty, each value ``bytes``: a map's
        commit, without another pass over the keys and values."""
        self._check_usable(mutate=True)
        assert self._overlay is not None
        self._overlay.setdefault(db, {}).update(items)

    def delete(self, db: str, key: bytes) -> bool:
        """Delete ``key``; True if it was there (committed, or put by this transaction)."""
        self._check(key, mutate=True)
        assert self._overlay is not None
        existed = self.get(db, key) is not None
        if existed:
            self._overlay.setdefault(db, {})[key] = None
        return existed

    def scan(
        self, db: str, prefix: bytes, *, start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items whose key starts with ``prefix``, in key order.

        Forward, from the first key ``>= prefix + start``; reverse (descending),
        from the last key ``< prefix + start`` (or the last key of the prefix).
        In a write transaction the items include its own buffered writes as they
        were when the scan began (a read at an earlier version: that version's
        items). Do not write to ``db`` while iterating; collect first.
        """
        self._check(prefix)
        committed = self._scan_committed(db, prefix, start, reverse)
        pending = self._overlay.get(db) if self._overlay is not None else None
        if not pending:
            yield from committed
            return
        yield from _merge(committed, _pending_range(pending, prefix, start, reverse), reverse)

    def entries(self, db: str) -> int:
        """How many records ``db`` holds in LMDB's snapshot (this transaction's own writes
        and an earlier version's overlay not counted)."""
        self._check_usable(mutate=False)
        return int(self._raw.stat(self._env._db(db))["entries"])

    def _scan_committed(
        self, db: str, prefix: bytes, start: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        cursor = self._raw.cursor(db=self._env._db(db))
        if reverse:
            bound = prefix + start if start is not None else _after_prefix(prefix)
            if bound == b"":
                return
            found = cursor.prev() if bound and cursor.set_range(bound) else cursor.last()
            step = cursor.prev
        else:
            first = prefix + (start or b"")
            found = cursor.set_range(first) if first else cursor.first()
            step = cursor.next
        while found:
            key = cast(bytes, cursor.key())  # bytes: the environment does not use buffers
            if not key.startswith(prefix):
                return
            yield key, cast(bytes, cursor.value())
            found = step()

    def _check(self, key: bytes, mutate: bool = False) -> None:
        self._check_usable(mutate)
        self._check_key(key, mutate)

    def _check_usable(self, mutate: bool) -> None:
        if self._done:
            raise StateError(f"state directory {self._env.path!r}: the transaction has ended")
        if mutate and not self.write:
            raise StateError(
                f"state directory {self._env.path!r}: cannot write in a read transaction"
            )

    def _check_keys(self, keys: Collection[bytes], mutate: bool) -> None:
        """``_check_key`` of each of ``keys``, which only runs when their lengths say one fails."""
        if keys and (
            max(map(len, keys)) > self._env.max_key_size or (mutate and not min(map(len, keys)))
        ):
            for key in keys:
                self._check_key(key, mutate)

    def _check_key(self, key: bytes, mutate: bool) -> None:
        if len(key) > self._env.max_key_size:
            raise StateKeyError(
                f"a key of {len(key)} bytes is longer than LMDB's limit of "
                f"{self._env.max_key_size} bytes: {key[:60]!r}..."
            )
        if mutate and not key:
            raise StateKeyError("LMDB does not store an empty key")

    def _take_writes(self) -> Writes:
        """End the transaction for its user and hand over what it wrote."""
        self._done = True
        writes, self._overlay = self._overlay or {}, None
        return writes

    def _end(self, commit: bool) -> None:
        self._done = True
        if commit:
            self._raw.commit()
            return
        with suppress(lmdb.Error):  # a failed commit has already aborted it
            self._raw.abort()


_Item = tuple[bytes, bytes]


def _pending_range(
    pending: dict[bytes, bytes | None], prefix: bytes, start: bytes | None, reverse: bool
) -> list[tuple[bytes, bytes | None]]:
    """The buffered writes a scan of (``prefix``, ``start``, ``reverse``) covers, in its order."""
    bound = prefix + start if start is not None else None
    if reverse:
        chosen = [k for k in pending if k.startswith(prefix) and (bound is None or k < bound)]
    else:
        chosen = [k for k in pending if k.startswith(prefix) and (bound is None or k >= bound)]
    chosen.sort(reverse=reverse)
    return [(key, pending[key]) for key in chosen]


def _merge(
    committed: Iterator[_Item], pending: list[tuple[bytes, bytes | None]], reverse: bool
) -> Iterator[_Item]:
    """Committed items overlaid with buffered writes (a write wins; None deletes)."""

    def before(a: bytes, b: bytes) -> bool:
        return a > b if reverse else a < b

    index = 0
    for key, value in committed:
        while index < len(pending) and before(pending[index][0], key):
            written = pending[index]
            index += 1
            if written[1] is not None:
                yield written[0], written[1]
        if index < len(pending) and pending[index][0] == key:
            written = pending[index]
            index += 1
            if written[1] is not None:
                yield key, written[1]
            continue
        yield key, value
    for key, written_value in pending[index:]:
        if written_value is not None:
            yield key, written_value


def _after_prefix(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def apply_writes(
    raw: lmdb.Transaction,
    writes: Writes,
    databases: dict[str, lmdb._Database],
) -> None:
    """Apply buffered writes to an LMDB write transaction, each database in key order."""
    for name, pending in writes.items():
        db = databases[name]
        puts = [(key, value) for key in sorted(pending) if (value := pending[key]) is not None]
        if puts:
            raw.cursor(db=db).putmulti(puts)
        if len(puts) < len(pending):
            for key, value in pending.items():
                if value is None:
                    raw.delete(key, db=db)
