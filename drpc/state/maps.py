"""User state maps: ``TransactionalMap``, ``OpaqueMap`` and ``NonTransactionalMap`` in LMDB.

Contract:

- A map is a named key -> value store in a ``StateEnvironment`` (keys: see
  ``drpc.state.codec``). Each stored value remembers the txid that last wrote
  it: ``TransactionalValue(value, txid)`` or ``OpaqueValue(value, prev, txid)``.
- **Reads** (``get``, ``multi_get``, ``stored``, ``items``) use their own read
  transaction, so they only ever see committed data; pass ``txn=`` to read
  several maps in one snapshot. An absent key reads as the map's ``default``.
- **Writes** only happen in a commit: ``handle = map.handle(txn, txid)`` inside
  the commit's write transaction, then ``update(key, fn)``, ``put``, ``remove``,
  their ``multi_`` forms and ``get`` ("as of" txid). Asking twice in one transaction
  gives the same handle. Rules for a commit of txid T (Storm's):

  ``TransactionalMap`` (for transactional spouts: a replay of T is the same
  batch) - stored txid == T: the key already includes this batch, the update
  is a no-op returning the stored value; otherwise store
  ``{fn(stored value or default), T}``.

  ``OpaqueMap`` (for opaque spouts: a replay of T may differ) - stored txid
  == T: recompute from prev, store ``{fn(prev), prev, T}``; otherwise store
  ``{fn(value), prev=value, T}``; an absent key starts from prev = default.
  ``handle.get`` reads as of T: prev if stored txid == T, else value.

  Within one handle, a key updated again composes on the value this commit
  wrote (the first update's txid mark does not make the second a no-op).
  A stored txid above T raises ``StateOrderError``: T was committed before
  that txid, so applying it now would count twice.

  ``NonTransactionalMap`` (Storm's non-transactional state) - stores the bare
  ``PlainValue(value)`` and applies every update, a replay included: at least
  once, not exactly once.
- **Removing keys** (Storm's ``multiRemove``, which Storm's in-memory test map
  alone offers): ``handle.remove(key)`` / ``multi_remove(keys)`` in the commit
  of txid T, by the kind's rules. A key that is absent stays absent.

  ``TransactionalMap`` and ``OpaqueMap`` keep a **tombstone** carrying T, so
  the txid rules hold through a removal: transactional ``{REMOVED, T}`` (a
  replay of T finds stored txid == T: its removal and updates are no-ops, so
  the key is neither removed twice nor resurrected); opaque ``{REMOVED, prev,
  T}`` (a replay of T recomputes from prev, whatever it does this time). A
  tombstone reads as absent everywhere (``get``, ``items``, ``page``, a
  handle's ``get``: the map's ``default``); ``stored`` shows it, its value
  ``REMOVED``. An update of a tombstoned key in a later txid starts from the
  default (opaque: prev = default). Tombstones are reclaimed (the record
  deleted) by the map's first commit handle of a txid above T, as Storm's
  ``MemoryMapState`` drops them at the next ``beginCommit`` of another txid:
  once a later txid commits, T is never applied again. Until then the map
  lists the keys of its tombstones in a record of its own (below; a handle
  of a txid below the list's reclaims nothing).

  ``NonTransactionalMap`` deletes the record: no txid, so no replay rule (a
  replay removes again; one that updates the key after it brings it back).
- **Listing** (``page(limit, after=, prefix=)``): at most ``limit`` (>= 1)
  present keys and values in key order, starting after the key ``after``
  (None: from the first) among the keys that start with ``prefix`` (None:
  every key; a ``str``/``bytes`` prefix: keys of that type that start with
  it; a tuple: tuple keys whose first elements are these), as a ``MapPage``
  whose ``next_after`` is the key to start the next page after, None when no
  key follows. Reads at one committed version like ``multi_get`` (a pinned
  one inside a DRPC request). A bad limit raises ``InvalidQueryError``.
- ``cache_size=N`` (default 0: none) keeps up to N committed records in
  memory for the commit handles of this map object (``drpc.state.cache``):
  for the one process writing the map; one operation over more than N keys
  reads and writes LMDB directly (the cache would only churn); writes by other map objects or
  processes make it miss, never serve stale records. Committed reads
  outside a commit never use it.
- ``fn`` runs once per update, even when the map must grow during the
  commit (``drpc.state.env`` applies the commit's bytes again, not ``fn``).
- A map name is bound to one kind in the directory's catalog: opening an
  ``OpaqueMap`` under a ``TransactionalMap``'s name raises ``StateError``.

Records live in ``MAPS_DB`` under ``name(map name) + encode_key(key)`` as a
pickled ``(value, txid)``, ``(value, prev, txid)`` or ``(value,)``; a tombstone as
``(txid,)`` or ``(prev, txid)``. ``CATALOG_DB`` maps ``name(map name)`` to the kind. The
keys of a map's tombstones are listed under ``b"\\x00" + name(map name)`` in ``MAPS_DB``
(removed keys, ``drpc.state.records``: without the map's name, with the last txid that
removed one): no map record starts with that byte, which no name length takes, and a
handle finds the list with one read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from drpc.errors import InvalidQueryError, StateError, StateKeyError, StateOrderError
from drpc.state.cache import MISS, RecordCache
from drpc.state.codec import (
    StateKey,
    decode_key,
    dumps_many,
    encode_keys,
    encode_name,
    loads,
)
from drpc.state.env import CATALOG_DB, MAPS_DB, StateEnvironment, StateTxn
from drpc.state.records import RemovedKeys, decode_removed, encode_removed

Updater = Callable[[Any], Any]
Combine = Callable[[Any, Any], Any]


class _Combiner:
    """The updater of ``multi_combine`` for one key: ``combine(value, batch)``, or ``batch``
    when the value is None."""

    __slots__ = ("batch", "combine")

    def __init__(self, combine: Combine, batch: Any) -> None:
        self.combine, self.batch = combine, batch

    def __call__(self, value: Any) -> Any:
        return self.batch if value is None else self.combine(value, self.batch)


S = TypeVar("S", "TransactionalValue", "OpaqueValue", "PlainValue")

_MISSING: Any = object()
_UNCHANGED: Any = object()
_REMOVED_KEYS = b"\x00"  # leads a map's list of removed keys; no map name's length byte is 0


class _Removed:
    """The type of ``REMOVED``: one object per process, which pickles as itself."""

    __slots__ = ()
    _instance: ClassVar[_Removed | None] = None

    def __new__(cls) -> _Removed:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REMOVED"

    def __reduce__(self) -> str:
        return "REMOVED"


REMOVED: Any = _Removed()
"""The value of a removed key's tombstone (see the module doc)."""


@dataclass(frozen=True, slots=True)
class MapPage:
    """One page of a map's listing (``page``): ``entries`` are (key, value) pairs in key
    order; ``next_after`` is the key to start the next page after (None: no key follows)."""

    entries: list[tuple[StateKey, Any]]
    next_after: StateKey | None


@dataclass(frozen=True, slots=True)
class TransactionalValue:
    """A value and the txid that last changed it."""

    value: Any
    txid: int

    @property
    def removed(self) -> bool:
        """A tombstone: the key was removed in ``txid``."""
        return self.value is REMOVED

    def update(self, txid: int, fn: Updater) -> TransactionalValue:
        """The value after applying batch ``txid``: unchanged if it already includes it."""
        value = _transactional_update(self.value, self.txid, txid, fn, written=False)
        return self if value is _UNCHANGED else TransactionalValue(value, txid)


def _transactional_update(
    value: Any, stored_txid: int, txid: int, fn: Updater, written: bool
) -> Any:
    """A stored transactional value after ``fn`` in the commit of ``txid``, or ``_UNCHANGED``
    when it already includes ``txid`` (a replay), unless this commit ``written`` it."""
    return _UNCHANGED if _includes(value, stored_txid, txid, written) else fn(value)


def _includes(value: Any, stored_txid: int, txid: int, written: bool) -> bool:
    """Whether a stored transactional value already includes the batch of ``txid`` (a
    replay: leave it), unless this commit ``written`` it; a ``txid`` behind the stored one
    raises ``StateOrderError``."""
    if written:
        return False
    if txid == stored_txid:
        return True
    if txid < stored_txid:
        _check_not_behind(txid, TransactionalValue(value, stored_txid))
    return False


def _stored_pair(data: bytes, default: Any) -> tuple[Any, int]:
    """A transactional record as stored (``TransactionalMap._encode``): its value and txid;
    a tombstone's value is ``default``."""
    stored = loads(data)
    try:
        value, txid = stored
    except ValueError:  # a tombstone, (txid,): no len() call on every key
        return default, stored[0]
    return value, txid


@dataclass(frozen=True, slots=True)
class OpaqueValue:
    """A value, the value before the txid that last changed it, and that txid."""

    value: Any
    prev: Any
    txid: int

    @property
    def removed(self) -> bool:
        """A tombstone: the key was removed in ``txid`` (``prev``: its value before)."""
        return self.value is REMOVED

    def get(self, txid: int | None = None) -> Any:
        """The value as of ``txid``'s commit: ``prev`` if ``txid`` wrote it, else ``value``."""
        if txid is None:
            return self.value
        _check_not_behind(txid, self)
        return self.prev if txid == self.txid else self.value

    def update(self, txid: int, new_value: Any) -> OpaqueValue:
        """Store ``new_value`` for ``txid``, keeping the value from before ``txid`` as prev."""
        _check_not_behind(txid, self)
        return OpaqueValue(new_value, self.prev if txid == self.txid else self.value, txid)


@dataclass(frozen=True, slots=True)
class PlainValue:
    """A value of a non-transactional map: no txid, so no replay rule."""

    value: Any


def _check_not_behind(txid: int, stored: TransactionalValue | OpaqueValue) -> None:
    if txid < stored.txid:
        raise StateOrderError(
            f"batch txid {txid} is behind the state's txid {stored.txid} ({stored!r}): "
            "a commit older than the last one cannot be applied"
        )


class _StateMap(Generic[S]):
    """What both map kinds share; subclasses define the stored form and the rules."""

    KIND: ClassVar[bytes]
    TOMBSTONES: ClassVar[bool] = True
    """Whether a removal leaves a tombstone (else the record is deleted)."""

    def __init__(
        self, env: StateEnvironment, name: str, *, default: Any = None, cache_size: int = 0
    ) -> None:
        self.env = env
        self.name = name
        self.default = default
        self.cache = RecordCache(cache_size, env, MAPS_DB) if cache_size else None
        self._prefix = encode_name(name, "map name")
        self._removed_keys = _REMOVED_KEYS + self._prefix
        with env.read() as t:
            self._check_kind(t)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} in {self.env.path!r}>"

    # -- committed reads -------------------------------------------------------------------

    def stored(self, key: StateKey, *, txn: StateTxn | None = None) -> S | None:
        """The stored record of ``key`` (value and txid, and prev for opaque), or None."""
        with self.env.reading(txn) as t:
            return self._read(t, self._key(key))

    def get(self, key: StateKey, default: Any = _MISSING, *, txn: StateTxn | None = None) -> Any:
        [value] = self.multi_get([key], default, txn=txn)
        return value

    def multi_get(
        self, keys: Iterable[StateKey], default: Any = _MISSING, *, txn: StateTxn | None = None
    ) -> list[Any]:
        fallback = self.default if default is _MISSING else default
        encoded = self._keys(keys)
        with self.env.reading(txn) as t:
            records = self._read_many(t, encoded)
        return [
            fallback if record is None or record.value is REMOVED else record.value
            for record in records
        ]

    def items(self, *, txn: StateTxn | None = None) -> list[tuple[StateKey, Any]]:
        """Every key and committed value, in key order (see ``drpc.state.codec``)."""
        start = len(self._prefix)
        with self.env.reading(txn) as t:
            return [
                (decode_key(key[start:]), value)
                for key, data in t.scan(MAPS_DB, self._prefix)
                if (value := self._decode(data).value) is not REMOVED
            ]

    def page(
        self,
        limit: int,
        *,
        after: StateKey | None = None,
        prefix: StateKey | None = None,
        txn: StateTxn | None = None,
    ) -> MapPage:
        """At most ``limit`` keys and values after ``after`` among those starting with
        ``prefix``, in key order (see the module doc)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidQueryError(f"{self!r}: a page's limit is an int >= 1, got {limit!r}")
        scanned = self._prefix if prefix is None else self._key(prefix)
        start = skip = None
        if after is not None:
            first = self._key(after)
            if first.startswith(scanned):
                start, skip = first[len(scanned) :], first
            elif first > scanned:  # after every key of the prefix
                return MapPage([], None)
        name = len(self._prefix)
        entries: list[tuple[StateKey, Any]] = []
        with self.env.reading(txn) as t:
            for key, data in t.scan(MAPS_DB, scanned, start=start):
                if key == skip:
                    continue
                value = self._decode(data).value
                if value is REMOVED:
                    continue
                if len(entries) == limit:
                    return MapPage(entries, entries[-1][0])
                entries.append((decode_key(key[name:]), value))
        return MapPage(entries, None)

    # -- commits ---------------------------------------------------------------------------

    def handle(self, txn: StateTxn, txid: int) -> MapHandle[S]:
        """This map in the commit of ``txid`` running in write transaction ``txn``."""
        if not isinstance(txn, StateTxn) or not txn.write:
            raise StateError(f"{self!r}: a commit handle needs the commit's write transaction")
        self.env._own(txn)
        memo = (MapHandle, self.KIND, self.name, txid)
        handle = txn.cache.get(memo)
        if handle is None:
            self._check_kind(txn, register=True)
            handle = MapHandle(self, txn, txid)
            txn.cache[memo] = handle
        return handle  # type: ignore[return-value]

    # -- the rules, per kind ---------------------------------------------------------------

    def _apply(self, stored: S | None, txid: int, fn: Updater, written: bool) -> S:
        """The record after updating ``stored`` with ``fn`` in the commit of ``txid``."""
        raise NotImplementedError

    def _put(self, stored: S | None, txid: int, value: Any) -> S:
        """The record after setting ``value`` in the commit of ``txid``."""
        raise NotImplementedError

    def _as_of(self, stored: S, txid: int, written: bool) -> Any:
        raise NotImplementedError

    def _remove(self, stored: S | None, txid: int, written: bool) -> S | None:
        """The record after removing the key in the commit of ``txid``: ``stored`` itself
        (no change), None (delete the record) or a tombstone."""
        raise NotImplementedError

    def _shown(self, value: Any) -> Any:
        """A stored value as reads see it: a tombstone's is the default."""
        return self.default if value is REMOVED else value

    def _encode(self, record: S) -> tuple[Any, ...]:
        raise NotImplementedError

    def _decode(self, data: bytes) -> S:
        raise NotImplementedError

    def _combine_uncached(
        self,
        t: StateTxn,
        txid: int,
        encoded: list[bytes],
        batch: Iterable[Any],
        combine: Combine,
        written: set[bytes],
    ) -> dict[bytes, bytes] | None:
        """``multi_combine``'s changed records, encoded, in one pass; None: this kind has
        no such pass (the updater path runs instead)."""
        return None

    # -- internals -------------------------------------------------------------------------

    def _key(self, key: StateKey) -> bytes:
        [encoded] = self._keys([key])
        return encoded

    def _keys(self, keys: Iterable[StateKey]) -> list[bytes]:
        keys = list(keys)
        encoded = encode_keys(self._prefix, keys)
        limit = self.env.max_key_size
        if encoded and max(map(len, encoded)) > limit:
            at, key = next(
                (at, key) for at, key in zip(encoded, keys, strict=True) if len(at) > limit
            )
            raise StateKeyError(
                f"{self!r}: key {key!r:.60} takes {len(at)} bytes with the map name, "
                f"LMDB allows {limit}"
            )
        return encoded

    def _read(self, t: StateTxn, key: bytes) -> S | None:
        [record] = self._read_many(t, [key])
        return record

    def _read_many(self, t: StateTxn, keys: list[bytes]) -> list[S | None]:
        decode = self._decode
        return [None if data is None else decode(data) for data in t.get_many(MAPS_DB, keys)]

    def _write_many(self, t: StateTxn, records: Mapping[bytes, S]) -> None:
        t.put_many(MAPS_DB, self._encoded(records))

    def _update_uncached(
        self,
        t: StateTxn,
        txid: int,
        encoded: list[bytes],
        fns: Iterable[Updater],
        written: set[bytes],
    ) -> tuple[list[Any], dict[bytes, bytes]]:
        """``_apply`` to each of ``encoded`` as stored in LMDB: the values after the update,
        and the changed records, encoded."""
        values: list[Any] = []
        changed: dict[bytes, S] = {}
        apply, default = self._apply, self.default
        for at, fn, stored in zip(encoded, fns, self._read_many(t, encoded), strict=True):
            record = apply(stored, txid, fn, at in written)
            if record is not stored:
                changed[at] = record
            value = record.value
            values.append(default if value is REMOVED else value)
        return values, self._encoded(changed)

    def _encoded(self, records: Mapping[bytes, S]) -> dict[bytes, bytes]:
        def what(key: bytes, encoded: object) -> str:
            return f"value {records[key]!r:.60} in {self!r}"

        encode = self._encode
        return dumps_many({key: encode(record) for key, record in records.items()}, what)

    def _check_kind(self, t: StateTxn, register: bool = False) -> None:
        kind = t.get(CATALOG_DB, self._prefix)
        if kind is None and register:
            t.put(CATALOG_DB, self._prefix, self.KIND)
        elif kind is not None and kind != self.KIND:
            raise StateError(
                f"map {self.name!r} in {self.env.path!r} holds {kind.decode()} values; "
                f"it cannot be opened as a {type(self).__name__}"
            )


class MapHandle(Generic[S]):
    """A map inside one commit (``map.handle(txn, txid)``); valid until ``txn`` ends."""

    def __init__(self, map: _StateMap[S], txn: StateTxn, txid: int) -> None:
        self.map: _StateMap[S] = map
        self.txn = txn
        self.txid = txid
        self._written: set[bytes] = set()
        self._cache = map.cache
        if self._cache is not None:
            self._cache.open(txn)
        if map.TOMBSTONES:
            self._reclaim()

    def __repr__(self) -> str:
        return f"<MapHandle {self.map.name!r} txid {self.txid}>"

    def get(self, key: StateKey) -> Any:
        [value] = self.multi_get([key])
        return value

    def multi_get(self, keys: Iterable[StateKey]) -> list[Any]:
        """The values as of this txid (opaque: as before it, unless this commit wrote them)."""
        state_map, txid, written = self.map, self.txid, self._written
        encoded = state_map._keys(keys)
        return [
            state_map.default
            if stored is None
            else state_map._shown(state_map._as_of(stored, txid, at in written))
            for at, stored in zip(encoded, self._stored_many(encoded), strict=True)
        ]

    def update(self, key: StateKey, fn: Updater) -> Any:
        """Apply ``fn`` to ``key``'s value under the map's rules; return the new value."""
        return self.multi_update({key: fn})[key]

    def multi_update(self, updates: Mapping[StateKey, Updater]) -> dict[StateKey, Any]:
        state_map, txid, written = self.map, self.txid, self._written
        encoded = state_map._keys(updates)
        cache = self._cache
        if cache is None or len(encoded) > cache.size:
            values, rewritten = state_map._update_uncached(
                self.txn, txid, encoded, updates.values(), written
            )
            self.txn.put_read(MAPS_DB, rewritten)
            written.update(rewritten)
            if cache is not None:
                cache.drop(self.txn, rewritten)
            return dict(zip(updates, values, strict=True))
        results: dict[StateKey, Any] = {}
        changed: dict[bytes, S] = {}
        for (key, fn), at, stored in zip(
            updates.items(), encoded, self._stored_many(encoded), strict=True
        ):
            record = state_map._apply(stored, txid, fn, at in written)
            if record is not stored:
                changed[at] = record
            value = record.value
            results[key] = state_map.default if value is REMOVED else value
        self._write_many(changed)
        return results

    def multi_combine(self, batch: Mapping[StateKey, Any], combine: Combine) -> None:
        """Storm's combiner value updater for each key of ``batch`` under the map's rules:
        the key's value becomes ``combine(value, batch[key])``, or ``batch[key]`` when the
        value is None (absent, removed, or a None default). ``multi_update`` with such
        updaters, without an updater per key; a transactional map over more keys than its
        cache takes them in one pass over the stored records."""
        state_map = self.map
        if self._cache is None or len(batch) > self._cache.size:
            # in key order: LMDB reads and writes them in one walk of its tree, and sorting
            # the commit's writes again takes one pass (the keys alone: sorting (key, value)
            # pairs compares tuples, two thirds slower)
            values = dict(zip(state_map._keys(batch), batch.values(), strict=True))
            ordered = sorted(values)
            combined = state_map._combine_uncached(
                self.txn,
                self.txid,
                ordered,
                [values[at] for at in ordered],
                combine,
                self._written,
            )
            if combined is not None:
                self.txn.put_read(MAPS_DB, combined)
                self._written.update(combined)
                if self._cache is not None:
                    self._cache.drop(self.txn, combined)
                return
        self.multi_update({key: _Combiner(combine, value) for key, value in batch.items()})

    def put(self, key: StateKey, value: Any) -> None:
        self.multi_put({key: value})

    def multi_put(self, values: Mapping[StateKey, Any]) -> None:
        """Set values for this txid (opaque: keeping the value from before it as prev)."""
        state_map, txid = self.map, self.txid
        encoded = state_map._keys(values)
        self._write_many(
            {
                at: state_map._put(stored, txid, value)
                for at, stored, value in zip(
                    encoded, self._stored_many(encoded), values.values(), strict=True
                )
            }
        )

    def remove(self, key: StateKey) -> None:
        self.multi_remove([key])

    def multi_remove(self, keys: Iterable[StateKey]) -> None:
        """Remove ``keys`` under the map's rules: a tombstone carrying this txid, or (non-
        transactional) no record (see the module doc)."""
        state_map, txid, written = self.map, self.txid, self._written
        encoded = list(dict.fromkeys(state_map._keys(keys)))
        tombstones: dict[bytes, S] = {}
        deleted: list[bytes] = []
        for at, stored in zip(encoded, self._stored_many(encoded), strict=True):
            record = state_map._remove(stored, txid, at in written)
            if record is stored:
                continue
            if record is None:
                deleted.append(at)
            else:
                tombstones[at] = record
        self._write_many(tombstones)
        self._delete_many(deleted)
        self._written.update(deleted)
        if tombstones:
            self._list_removed(tombstones)

    def _list_removed(self, encoded: Iterable[bytes]) -> None:
        """Add ``encoded`` to the keys the map holds tombstones for, for ``_reclaim``."""
        state_map, txn = self.map, self.txn
        listed = txn.get(MAPS_DB, state_map._removed_keys)
        name = len(state_map._prefix)
        removed: RemovedKeys = RemovedKeys(self.txid, [at[name:] for at in encoded])
        if listed is not None:  # after ``_reclaim``: tombstones of this txid or a later one
            before: RemovedKeys = decode_removed(listed)
            keys = dict.fromkeys([*before.keys, *removed.keys])
            removed = RemovedKeys(max(removed.txid, before.txid), list(keys))
        txn.put(MAPS_DB, state_map._removed_keys, encode_removed(removed))

    def _reclaim(self) -> None:
        """Delete the tombstones listed by txids below this one, and the list."""
        state_map, txn = self.map, self.txn
        listed = txn.get(MAPS_DB, state_map._removed_keys)
        if listed is None:
            return
        removed = decode_removed(listed)
        if removed.txid >= self.txid:
            return
        keys = [state_map._prefix + at for at in removed.keys]
        self._delete_many(
            [
                at
                for at, stored in zip(keys, self._stored_many(keys), strict=True)
                if stored is not None and stored.value is REMOVED  # not set again since
            ]
        )
        txn.delete(MAPS_DB, state_map._removed_keys)

    def _delete_many(self, encoded: list[bytes]) -> None:
        if not encoded:
            return
        for at in encoded:
            self.txn.delete(MAPS_DB, at)
        cache = self._cache
        if cache is None:
            return
        if len(encoded) > cache.size:
            cache.drop(self.txn, encoded)
            return
        for at in encoded:
            cache.stage(self.txn, at, None)

    def _stored_many(self, encoded: list[bytes]) -> list[S | None]:
        """The records of ``encoded`` as this commit sees them: the cache's, else LMDB's."""
        cache = self._cache
        if cache is None or len(encoded) > cache.size:
            return self.map._read_many(self.txn, encoded)
        records = [cache.get(at) for at in encoded]
        missing = [i for i, record in enumerate(records) if record is MISS]
        if missing:
            read = self.map._read_many(self.txn, [encoded[i] for i in missing])
            for i, record in zip(missing, read, strict=True):
                records[i] = record
                cache.remember(encoded[i], record)
        return records

    def _write_many(self, records: Mapping[bytes, S]) -> None:
        self.map._write_many(self.txn, records)
        self._written.update(records)
        cache = self._cache
        if cache is None:
            return
        if len(records) > cache.size:
            cache.drop(self.txn, records)
            return
        for at, record in records.items():
            cache.stage(self.txn, at, record)


class TransactionalMap(_StateMap[TransactionalValue]):
    """``{value, txid}`` per key: replaying an applied txid is a no-op (see module doc)."""

    KIND = b"transactional"

    def _apply(
        self, stored: TransactionalValue | None, txid: int, fn: Updater, written: bool
    ) -> TransactionalValue:
        if stored is None:
            return TransactionalValue(fn(self.default), txid)
        value = stored.value
        value = _transactional_update(
            self.default if value is REMOVED else value, stored.txid, txid, fn, written
        )
        return stored if value is _UNCHANGED else TransactionalValue(value, txid)

    def _remove(
        self, stored: TransactionalValue | None, txid: int, written: bool
    ) -> TransactionalValue | None:
        if stored is None or (stored.txid == txid and (stored.removed or not written)):
            return stored  # absent, removed already, or a replay of txid: it includes the batch
        _check_not_behind(txid, stored)
        return TransactionalValue(REMOVED, txid)

    def _update_uncached(
        self,
        t: StateTxn,
        txid: int,
        encoded: list[bytes],
        fns: Iterable[Updater],
        written: set[bytes],
    ) -> tuple[list[Any], dict[bytes, bytes]]:
        """``_apply`` on the stored ``(value, txid)`` pairs themselves: no record object per
        key (a 13 216-key commit: 40-44 ms instead of 58-63)."""
        default = self.default
        values: list[Any] = []
        changed: dict[bytes, tuple[Any, int]] = {}
        for at, fn, data in zip(encoded, fns, t.get_many(MAPS_DB, encoded), strict=True):
            if data is None:
                value = fn(default)
            else:
                stored_value, stored_txid = _stored_pair(data, default)
                value = _transactional_update(stored_value, stored_txid, txid, fn, at in written)
                if value is _UNCHANGED:
                    values.append(stored_value)
                    continue
            values.append(value)
            changed[at] = (value, txid)

        def what(key: bytes, encoded: object) -> str:
            return f"value {TransactionalValue(*changed[key])!r:.60} in {self!r}"

        return values, dumps_many(changed, what)

    def _combine_uncached(
        self,
        t: StateTxn,
        txid: int,
        encoded: list[bytes],
        batch: Iterable[Any],
        combine: Combine,
        written: set[bytes],
    ) -> dict[bytes, bytes] | None:
        """``_update_uncached`` with ``multi_combine``'s updater inlined (a 47 000-key
        commit: about a microsecond a key less)."""
        default = self.default
        changed: dict[bytes, tuple[Any, int]] = {}
        for at, value, data in zip(encoded, batch, t.get_many(MAPS_DB, encoded), strict=True):
            if data is None:
                base = default
            else:
                base, stored_txid = _stored_pair(data, default)
                if _includes(base, stored_txid, txid, at in written):
                    continue  # a replay of txid: the key includes the batch already
            changed[at] = (value if base is None else combine(base, value), txid)

        def what(key: bytes, encoded: object) -> str:
            return f"value {TransactionalValue(*changed[key])!r:.60} in {self!r}"

        return dumps_many(changed, what)

    def _put(self, stored: TransactionalValue | None, txid: int, value: Any) -> TransactionalValue:
        if stored is not None:
            _check_not_behind(txid, stored)
        return TransactionalValue(value, txid)

    def _as_of(self, stored: TransactionalValue, txid: int, written: bool) -> Any:
        return stored.value

    def _encode(self, record: TransactionalValue) -> tuple[Any, ...]:
        return (record.txid,) if record.value is REMOVED else (record.value, record.txid)

    def _decode(self, data: bytes) -> TransactionalValue:
        return TransactionalValue(*_stored_pair(data, REMOVED))


class OpaqueMap(_StateMap[OpaqueValue]):
    """``{value, prev, txid}`` per key: replaying the current txid recomputes from prev."""

    KIND = b"opaque"

    def _apply(
        self, stored: OpaqueValue | None, txid: int, fn: Updater, written: bool
    ) -> OpaqueValue:
        if stored is None:
            return OpaqueValue(fn(self.default), self.default, txid)
        if written:
            return OpaqueValue(fn(self._shown(stored.value)), stored.prev, txid)
        value = stored.get(txid)
        record = stored.update(txid, fn(self.default if value is REMOVED else value))
        if record.prev is REMOVED:  # inlined ``_next``: this runs for every key of a commit
            return OpaqueValue(record.value, self.default, txid)
        return record

    def _put(self, stored: OpaqueValue | None, txid: int, value: Any) -> OpaqueValue:
        if stored is None:
            return OpaqueValue(value, self.default, txid)
        return self._next(stored, txid, value)

    def _remove(self, stored: OpaqueValue | None, txid: int, written: bool) -> OpaqueValue | None:
        if stored is None:
            return stored
        if written or (stored.removed and stored.txid == txid):  # the commit's updates after
            return OpaqueValue(REMOVED, stored.prev, txid)  # this must start from the default
        return self._next(stored, txid, REMOVED)

    def _next(self, stored: OpaqueValue, txid: int, value: Any) -> OpaqueValue:
        """``stored.update(txid, value)``, a tombstone's value kept as prev as the default."""
        record = stored.update(txid, value)
        if record.prev is REMOVED:
            return OpaqueValue(value, self.default, txid)
        return record

    def _as_of(self, stored: OpaqueValue, txid: int, written: bool) -> Any:
        return stored.value if written else stored.get(txid)

    def _encode(self, record: OpaqueValue) -> tuple[Any, ...]:
        if record.value is REMOVED:
            return (record.prev, record.txid)
        return (record.value, record.prev, record.txid)

    def _decode(self, data: bytes) -> OpaqueValue:
        stored = loads(data)
        try:
            value, prev, txid = stored
        except ValueError:  # a tombstone, (prev, txid)
            return OpaqueValue(REMOVED, *stored)
        return OpaqueValue(value, prev, txid)


class NonTransactionalMap(_StateMap[PlainValue]):
    """The bare value per key: every update applies, replays included (see module doc)."""

    KIND = b"non-transactional"
    TOMBSTONES = False

    def _apply(
        self, stored: PlainValue | None, txid: int, fn: Updater, written: bool
    ) -> PlainValue:
        return PlainValue(fn(self.default if stored is None else stored.value))

    def _put(self, stored: PlainValue | None, txid: int, value: Any) -> PlainValue:
        return PlainValue(value)

    def _as_of(self, stored: PlainValue, txid: int, written: bool) -> Any:
        return stored.value

    def _remove(self, stored: PlainValue | None, txid: int, written: bool) -> PlainValue | None:
        return None

    def _encode(self, record: PlainValue) -> tuple[Any, ...]:
        return (record.value,)

    def _decode(self, data: bytes) -> PlainValue:
        (value,) = loads(data)
        return PlainValue(value)
