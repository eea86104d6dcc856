"""Storm's RotatingTransactionalState: per-txid data of one topology, persisted in LMDB.

Contract (Storm's semantics; the "cache" is the LMDB records themselves, so it
survives restarts and follows the caller's transaction exactly):

- ``get_state(txid, initializer)``: the cached data of ``txid`` if any (``None``
  is a valid cached value). Otherwise let ``prev`` be the greatest cached txid
  below ``txid``. In strict mode raise ``StateOrderError`` if ``prev`` is None
  and ``txid != 1``, if ``prev != txid - 1``, or if a txid above ``txid`` is
  cached. If no txid above ``txid`` is cached the data is
  ``initializer(txid, data of prev or None)``, else ``None``; it is cached and
  returned.
- ``get_state_or_create(txid, initializer)``: the cached data if present, else
  ``get_state`` and ``None``.
- ``has_cache``, ``get_last_state`` (data of the greatest cached txid, or None),
  ``override_state`` (set), ``remove_state``, ``cleanup_before(txid)`` (drop every
  txid below ``txid``), ``list()`` (cached txids, ascending).
- Every method takes ``txn=``: with it, the call joins that transaction (a
  write for mutations), so commit-time updates commit or vanish with the
  commit; without it a read opens its own read transaction and a mutation its
  own write transaction, durable when the call returns.
- ``initializer`` runs at most once per call, whatever the state layer retries
  (``drpc.state.env`` buffers a write and applies its bytes again when the map
  grows), so it may have side effects: Storm calls ``init`` once per txid, and
  a partitioned emitter's new batch is emitted from it.

Records live in ``ROTATING_DB`` under ``name(topology_id) + name(namespace) +
txid`` (``drpc.state.codec``), so several topologies and namespaces share a
directory without meeting. Values are pickled (user data: a spout's
metadata), or with ``plain=True`` (drpc's own data) stored as plain data by
``drpc.state.records``, which never runs code when it reads.
"""

from __future__ import annotations

from collections.abc import Callable

from drpc.errors import StateOrderError
from drpc.state.codec import decode_txid, dumps, encode_name, encode_txid, loads
from drpc.state.env import ROTATING_DB, StateEnvironment, StateTxn
from drpc.state.records import decode_plain, encode_plain

INIT_TXID = 1

StateInitializer = Callable[[int, object], object]


class RotatingTransactionalState:
    """Per-txid data of ``namespace`` in topology ``topology_id`` (see module doc)."""

    def __init__(
        self,
        env: StateEnvironment,
        topology_id: str,
        namespace: str,
        *,
        strict: bool = True,
        plain: bool = False,
    ) -> None:
        self.env = env
        self.topology_id = topology_id
        self.namespace = namespace
        self.strict = strict
        self.plain = plain
        self._prefix = encode_name(topology_id, "topology id") + encode_name(namespace, "namespace")

    def __repr__(self) -> str:
        mode = "strict" if self.strict else "non-strict"
        return f"<RotatingTransactionalState {self.topology_id}/{self.namespace} ({mode})>"

    # -- reads ---------------------------------------------------------------------------

    def has_cache(self, txid: int, *, txn: StateTxn | None = None) -> bool:
        with self.env.reading(txn) as t:
            return t.get(ROTATING_DB, self._key(txid)) is not None

    def get_last_state(self, *, txn: StateTxn | None = None) -> object:
        with self.env.reading(txn) as t:
            for _, value in t.scan(ROTATING_DB, self._prefix, reverse=True):
                return self._decode(value)
            return None

    def list(self, *, txn: StateTxn | None = None) -> list[int]:
        with self.env.reading(txn) as t:
            return [self._txid(key) for key, _ in t.scan(ROTATING_DB, self._prefix)]

    # -- reads that may create -------------------------------------------------------------

    def get_state(
        self, txid: int, initializer: StateInitializer, *, txn: StateTxn | None = None
    ) -> object:
        found, data = self._cached(txid, txn)
        if found:
            return data
        return self.env.writing(
            txn, lambda t: self._get_or_init(t, txid, initializer)[1], what=self._what(txid)
        )

    def get_state_or_create(
        self, txid: int, initializer: StateInitializer, *, txn: StateTxn | None = None
    ) -> object:
        found, data = self._cached(txid, txn)
        if found:
            return data
        found, data = self.env.writing(
            txn, lambda t: self._get_or_init(t, txid, initializer), what=self._what(txid)
        )
        return data if found else None

    # -- writes ----------------------------------------------------------------------------

    def override_state(self, txid: int, data: object, *, txn: StateTxn | None = None) -> None:
        key = self._key(txid)
        value = self._encode(data, txid)
        self.env.writing(txn, lambda t: t.put(ROTATING_DB, key, value), what=self._what(txid))

    def remove_state(self, txid: int, *, txn: StateTxn | None = None) -> None:
        key = self._key(txid)
        self.env.writing(txn, lambda t: t.delete(ROTATING_DB, key), what=self._what(txid))

    def cleanup_before(self, txid: int, *, txn: StateTxn | None = None) -> None:
        bound = encode_txid(txid)

        def cleanup(t: StateTxn) -> None:
            doomed = t.scan(ROTATING_DB, self._prefix, start=bound, reverse=True)
            for key in [key for key, _ in doomed]:
                t.delete(ROTATING_DB, key)

        self.env.writing(txn, cleanup, what=f"the cleanup of {self!r} before txid {txid}")

    # -- internals -------------------------------------------------------------------------

    def _what(self, txid: int) -> str:
        return f"txid {txid} of {self!r}"

    def _encode(self, data: object, txid: int) -> bytes:
        what = f"state of txid {txid} in {self!r}"
        return encode_plain(data, what) if self.plain else dumps(data, what)

    def _decode(self, stored: bytes) -> object:
        return decode_plain(stored, f"a record of {self!r}") if self.plain else loads(stored)

    def _key(self, txid: int) -> bytes:
        return self._prefix + encode_txid(txid)

    def _txid(self, key: bytes) -> int:
        return decode_txid(key[len(self._prefix) :])

    def _cached(self, txid: int, txn: StateTxn | None) -> tuple[bool, object]:
        with self.env.reading(txn) as t:
            stored = t.get(ROTATING_DB, self._key(txid))
        return (False, None) if stored is None else (True, self._decode(stored))

    def _get_or_init(
        self, t: StateTxn, txid: int, initializer: StateInitializer
    ) -> tuple[bool, object]:
        """(True, cached data) if ``txid`` is cached, else (False, data it was initialized to)."""
        key = self._key(txid)
        stored = t.get(ROTATING_DB, key)
        if stored is not None:
            return True, self._decode(stored)
        start = encode_txid(txid)
        before = next(t.scan(ROTATING_DB, self._prefix, start=start, reverse=True), None)
        after = next(t.scan(ROTATING_DB, self._prefix, start=start), None)
        if self.strict:
            self._check_order(
                txid,
                self._txid(before[0]) if before else None,
                self._txid(after[0]) if after else None,
            )
        data = None if after else initializer(txid, self._decode(before[1]) if before else None)
        t.put(ROTATING_DB, key, self._encode(data, txid))
        return False, data

    def _check_order(self, txid: int, prev: int | None, later: int | None) -> None:
        where = f"{self!r}: cannot initialize txid {txid}"
        if prev is None and txid != INIT_TXID:
            raise StateOrderError(
                f"{where}: there should be a previous state (txid {txid - 1}) but none is cached"
            )
        if prev is not None and prev != txid - 1:
            raise StateOrderError(
                f"{where}: the previous cached txid is {prev}, expected {txid - 1}"
            )
        if later is not None:
            raise StateOrderError(
                f"{where}: strict order, but txid {later} after it already has state"
            )
