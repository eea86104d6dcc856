"""User state maps: ``TransactionalMap``, ``OpaqueMap`` and ``NonTransactionalMap`` in LMDB.

Contract:

- A map is a named key -> value store in a ``StateEnvironment`` (keys: see
  ``drpc.state.codec``). Each stored value remembers the txid that last wrote
  it: ``TransactionalValue(value, txid)`` or ``OpaqueValue(value, prev, txid)``.
- **Reads** (``get``, ``multi_get``, ``stored``, ``items``) use their own read
  transaction, so they only ever see committed data; pass ``txn=`` to read
  several maps in one snapshot. An absent key reads as the map's ``default``.
- **Writes** only happen in a commit: ``handle = map.handle(txn, txid)`` inside
  the commit's write transaction, then ``update(key, fn)``, ``put``, their
  ``multi_`` forms and ``get`` ("as of" txid). Asking twice in one transaction
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
pickled ``(value, txid)``, ``(value, prev, txid)`` or ``(value,)``; ``CATALOG_DB`` maps
``name(map name)`` to the kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from drpc.errors import StateError, StateKeyError, StateOrderError
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

Updater = Callable[[Any], Any]
S = TypeVar("S", "TransactionalValue", "OpaqueValue", "PlainValue")

_MISSING: Any = object()
_UNCHANGED: Any = object()


@dataclass(frozen=True, slots=True)
class TransactionalValue:
    """A value and the txid that last changed it."""

    value: Any
    txid: int

    def update(self, txid: int, fn: Updater) -> TransactionalValue:
        """The value after applying batch ``txid``: unchanged if it already includes it."""
        value = _transactional_update(self.value, self.txid, txid, fn, written=False)
        return self if value is _UNCHANGED else TransactionalValue(value, txid)


def _transactional_update(
    value: Any, stored_txid: int, txid: int, fn: Updater, written: bool
) -> Any:
    """A stored transactional value after ``fn`` in the commit of ``txid``, or ``_UNCHANGED``
    when it already includes ``txid`` (a replay), unless this commit ``written`` it."""
    if written:
        return fn(value)
    if txid == stored_txid:
        return _UNCHANGED
    if txid < stored_txid:
        _check_not_behind(txid, TransactionalValue(value, stored_txid))
    return fn(value)


@dataclass(frozen=True, slots=True)
class OpaqueValue:
    """A value, the value before the txid that last changed it, and that txid."""

    value: Any
    prev: Any
    txid: int

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

    def __init__(
        self, env: StateEnvironment, name: str, *, default: Any = None, cache_size: int = 0
    ) -> None:
        self.env = env
        self.name = name
        self.default = default
        self.cache = RecordCache(cache_size, env, MAPS_DB) if cache_size else None
        self._prefix = encode_name(name, "map name")
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
        return [fallback if record is None else record.value for record in records]

    def items(self, *, txn: StateTxn | None = None) -> list[tuple[StateKey, Any]]:
        """Every key and committed value, in key order (see ``drpc.state.codec``)."""
        start = len(self._prefix)
        with self.env.reading(txn) as t:
            return [
                (decode_key(key[start:]), self._decode(value).value)
                for key, value in t.scan(MAPS_DB, self._prefix)
            ]

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

    def _encode(self, record: S) -> tuple[Any, ...]:
        raise NotImplementedError

    def _decode(self, data: bytes) -> S:
        raise NotImplementedError

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
        for at, fn, stored in zip(encoded, fns, self._read_many(t, encoded), strict=True):
            record = self._apply(stored, txid, fn, at in written)
            if record is not stored:
                changed[at] = record
            values.append(record.value)
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
            state_map.default if stored is None else state_map._as_of(stored, txid, at in written)
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
            self.txn.put_many(MAPS_DB, rewritten)
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
            results[key] = record.value
        self._write_many(changed)
        return results

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
        value = _transactional_update(stored.value, stored.txid, txid, fn, written)
        return stored if value is _UNCHANGED else TransactionalValue(value, txid)

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
                stored_value, stored_txid = loads(data)  # the stored form of ``_encode``
                value = _transactional_update(stored_value, stored_txid, txid, fn, at in written)
                if value is _UNCHANGED:
                    values.append(stored_value)
                    continue
            values.append(value)
            changed[at] = (value, txid)

        def what(key: bytes, encoded: object) -> str:
            return f"value {TransactionalValue(*changed[key])!r:.60} in {self!r}"

        return values, dumps_many(changed, what)

    def _put(self, stored: TransactionalValue | None, txid: int, value: Any) -> TransactionalValue:
        if stored is not None:
            _check_not_behind(txid, stored)
        return TransactionalValue(value, txid)

    def _as_of(self, stored: TransactionalValue, txid: int, written: bool) -> Any:
        return stored.value

    def _encode(self, record: TransactionalValue) -> tuple[Any, ...]:
        return (record.value, record.txid)

    def _decode(self, data: bytes) -> TransactionalValue:
        value, txid = loads(data)
        return TransactionalValue(value, txid)


class OpaqueMap(_StateMap[OpaqueValue]):
    """``{value, prev, txid}`` per key: replaying the current txid recomputes from prev."""

    KIND = b"opaque"

    def _apply(
        self, stored: OpaqueValue | None, txid: int, fn: Updater, written: bool
    ) -> OpaqueValue:
        if stored is None:
            return OpaqueValue(fn(self.default), self.default, txid)
        if written:
            return OpaqueValue(fn(stored.value), stored.prev, txid)
        return stored.update(txid, fn(stored.get(txid)))

    def _put(self, stored: OpaqueValue | None, txid: int, value: Any) -> OpaqueValue:
        if stored is None:
            return OpaqueValue(value, self.default, txid)
        return stored.update(txid, value)

    def _as_of(self, stored: OpaqueValue, txid: int, written: bool) -> Any:
        return stored.value if written else stored.get(txid)

    def _encode(self, record: OpaqueValue) -> tuple[Any, ...]:
        return (record.value, record.prev, record.txid)

    def _decode(self, data: bytes) -> OpaqueValue:
        value, prev, txid = loads(data)
        return OpaqueValue(value, prev, txid)


class NonTransactionalMap(_StateMap[PlainValue]):
    """The bare value per key: every update applies, replays included (see module doc)."""

    KIND = b"non-transactional"

    def _apply(
        self, stored: PlainValue | None, txid: int, fn: Updater, written: bool
    ) -> PlainValue:
        return PlainValue(fn(self.default if stored is None else stored.value))

    def _put(self, stored: PlainValue | None, txid: int, value: Any) -> PlainValue:
        return PlainValue(value)

    def _as_of(self, stored: PlainValue, txid: int, written: bool) -> Any:
        return stored.value

    def _encode(self, record: PlainValue) -> tuple[Any, ...]:
        return (record.value,)

    def _decode(self, data: bytes) -> PlainValue:
        (value,) = loads(data)
        return PlainValue(value)
