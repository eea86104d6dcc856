"""Committed versions of a state directory: what a pinned read sees, and how long it can.

Contract. A **version** of a state directory is LMDB's id of one committed write
transaction: the directory as that write left it. Reads and writes of the
environment (``drpc.state.env``) use this module; nothing else writes its records.

- **Undo logs.** Every write that changes a versioned database (``VERSIONED_DBS``:
  the maps and the coordinator's commit records) also stores, under its own
  version ``V``, an undo log: each key it wrote with the committed value it replaced
  (or "absent"), and the commit time. The old values come from what the write
  already read (``StateTxn`` remembers the committed bytes of its reads), the rest
  from LMDB, in one pass.
- **A read at version R** in a snapshot at the latest version ``S`` sees, for a key
  that some write in ``(R, S]`` changed, the value the earliest of them replaced,
  and LMDB's value otherwise (``overlay``: one overlay per ``(R, S)``, built from
  the undo logs and cached for the process, as are the decoded logs). That is the
  directory exactly as version ``R`` left it, for every map and key, in any process
  that opens the directory, whenever it reads.
- **Reclaiming.** Each such write deletes the undo logs nobody can need: every one
  at or below both the oldest version pinned by a live process (``drpc.state.pins``)
  and the version before this write, so the latest undo log always stays. It records
  that bound (the **horizon**): a read at ``R`` below it raises
  ``VersionReclaimedError`` naming ``R``, the horizon and the latest version, and
  never answers from a mix. Readers never block the writer: the writer reads the
  pins file and moves on. Before the first write that keeps an undo log there is
  no horizon and nothing to undo; that write starts it at 0 in a directory that
  held no versioned data yet, else at the version before it (older values of a
  directory written without undo logs are unknown).
- **Pinning** (``StateEnvironment.pin``): pin the latest version, then look again;
  if a write landed meanwhile, pin the newer one instead. Once the latest version is
  still the pinned one after the pin was published, every later write sees the pin,
  so what the pin needs stays until it is released or ``retention`` passes.
- **Requests.** ``PinnedRequest(number, reads)`` is a DRPC request's coordination id
  carrying the ``(state directory, version)`` pairs it reads at.
  ``enter_reads(reads)`` / ``leave_reads(previous)`` (or ``READS.reads`` itself)
  make them this thread's (the task core does so around the user code it runs for
  such an id), and a read transaction begun without an explicit version reads at
  this thread's version of its directory (``pinned_version``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, cast

import lmdb

from drpc.errors import StateError, VersionReclaimedError
from drpc.state.codec import decode_txid, encode_txid
from drpc.state.records import Undo, decode_undo, encode_undo

UNDO_PREFIX = b"u"
HORIZON_KEY = b"h"
DECODED_CACHE = 256
"""Decoded undo logs kept per process and directory."""
OVERLAY_CACHE = 64
"""Read overlays kept per process and directory."""

Reads = tuple[tuple[str, int], ...]
"""(state directory, version) pairs."""

_MISSING: Any = object()


class PinnedRequest(int):
    """A DRPC request's coordination id, with the versions its reads see (module doc).

    An ``int``: equal to, hashed and grouped as the plain id it stands for, at the cost
    of an int wherever the engine keys by id; ``reads`` rides along. Immutable, so the
    engine passes it between tasks of a process without copying it."""

    reads: Reads

    def __new__(cls, number: int, reads: Reads) -> PinnedRequest:
        self = super().__new__(cls, number)
        object.__setattr__(self, "reads", reads)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a PinnedRequest is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a PinnedRequest is immutable (cannot delete {name!r})")

    @property
    def number(self) -> int:
        return int(self)

    def __reduce__(self) -> tuple[type[PinnedRequest], tuple[int, Reads]]:
        return (PinnedRequest, (int(self), self.reads))

    def __repr__(self) -> str:
        return f"PinnedRequest({int(self)}, {self.reads!r})"

    __str__ = int.__repr__


class ReadScope(threading.local):
    """Per thread: the ``reads`` of the request whose user code runs on it, if any. The
    task core sets ``READS.reads`` around that code and restores it after (an attribute,
    not a call: it is done for every tuple of a pinned request)."""

    reads: Reads | None = None


READS = ReadScope()


def enter_reads(reads: Reads) -> Reads | None:
    """Make ``reads`` this thread's versions; returns what to restore with ``leave_reads``."""
    previous = READS.reads
    READS.reads = reads
    return previous


def leave_reads(previous: Reads | None) -> None:
    READS.reads = previous


def pinned_version(path: str) -> int | None:
    """The version this thread reads ``path`` at, if its current request pinned one."""
    reads = READS.reads
    if reads:
        for directory, version in reads:
            if directory == path:
                return version
    return None


class VersionStore:
    """Undo logs of one state directory in this process: capture, reclaim, overlays."""

    def __init__(self, path: str, dbs: Mapping[str, Any], versioned: tuple[str, ...]) -> None:
        self.path = path
        self._db = dbs
        self._versioned = versioned
        self._tags = {name: tag for tag, name in enumerate(versioned)}
        self._lock = threading.Lock()
        self._decoded: OrderedDict[int, Undo] = OrderedDict()
        self._overlays: OrderedDict[tuple[int, int], dict[str, dict[bytes, bytes | None]]] = (
            OrderedDict()
        )
        self.reclaimed = 0

    # -- the writer ------------------------------------------------------------------------

    def capture(
        self,
        raw: lmdb.Transaction,
        writes: dict[str, dict[bytes, bytes | None]],
        committed: Mapping[str, Mapping[bytes, bytes | None]],
        versions_db: str,
        now: float,
        oldest_pinned: int | None,
    ) -> None:
        """Add this write's undo log, and the reclaiming of older ones, to ``writes``."""
        version = raw.id()
        sections: Undo = {}
        for name, tag in self._tags.items():
            pending = writes.get(name)
            if pending:
                sections[tag] = self._replaced(raw, name, pending, committed.get(name, {}))
        if not sections:
            return
        own = writes.setdefault(versions_db, {})
        own[UNDO_PREFIX + encode_txid(version)] = encode_undo(now, sections)
        bound = version - 1 if oldest_pinned is None else min(oldest_pinned, version - 1)
        handle = self._db[versions_db]
        stored = _get(raw, HORIZON_KEY, handle)
        if stored is None:
            horizon = self._first_horizon(raw, version)
        else:
            horizon = decode_txid(stored)
            if bound <= horizon:
                return
        cursor = raw.cursor(db=handle)
        found = cursor.set_range(UNDO_PREFIX)
        while found:
            key = cast(bytes, cursor.key())  # bytes: the environment does not use buffers
            if not key.startswith(UNDO_PREFIX) or decode_txid(key[1:]) > bound:
                break
            own[key] = None
            self.reclaimed += 1
            found = cursor.next()
        own[HORIZON_KEY] = encode_txid(max(bound, horizon))

    def _first_horizon(self, raw: lmdb.Transaction, version: int) -> int:
        """The horizon before the first write that keeps an undo log: 0 (every version
        readable) when nothing versioned was ever stored, else the version before it (a
        directory written by a drpc that kept no undo logs: older values are unknown)."""
        for name in self._versioned:
            if raw.stat(self._db[name])["entries"]:
                return version - 1
        return 0

    def _replaced(
        self,
        raw: lmdb.Transaction,
        name: str,
        pending: Mapping[bytes, bytes | None],
        committed: Mapping[bytes, bytes | None],
    ) -> dict[bytes, bytes | None]:
        extra = committed.keys() - pending.keys()
        if len(committed) - len(extra) == len(pending) and len(extra) <= len(pending):
            # the commit read every key it wrote (a map's commit: also a record or two it
            # did not write): copy its reads and drop those, both without a loop per key
            copied = dict(committed)
            for key in extra:
                del copied[key]
            return copied
        replaced = {key: committed.get(key, _MISSING) for key in pending}
        unread = sorted(key for key, value in replaced.items() if value is _MISSING)
        if unread:
            found = dict(raw.cursor(db=self._db[name]).getmulti(unread))
            for key in unread:
                replaced[key] = found.get(key)
        return replaced

    # -- readers ---------------------------------------------------------------------------

    def overlay(
        self, raw: lmdb.Transaction, version: int, versions_db: str
    ) -> dict[str, dict[bytes, bytes | None]]:
        """What a read at ``version`` sees over ``raw``'s snapshot, by database."""
        latest = raw.id()
        if version > latest:
            raise StateError(
                f"state directory {self.path!r}: version {version} is newer than the latest "
                f"committed version {latest}"
            )
        key = (version, latest)
        with self._lock:
            cached = self._overlays.get(key)
            if cached is not None:
                self._overlays.move_to_end(key)
                return cached
        handle = self._db[versions_db]
        logs: list[Undo] = []
        stored = _get(raw, HORIZON_KEY, handle)
        if stored is not None:  # None: no versioned write yet, so nothing to undo
            horizon = decode_txid(stored)
            if horizon > version:
                raise VersionReclaimedError(self.path, version, horizon, latest)
            cursor = raw.cursor(db=handle)
            found = cursor.set_range(UNDO_PREFIX + encode_txid(version + 1))
            while found:
                undo_key = cast(bytes, cursor.key())  # bytes: the environment does not use buffers
                if not undo_key.startswith(UNDO_PREFIX):
                    break
                logs.append(self._decoded_log(decode_txid(undo_key[1:]), cursor))
                found = cursor.next()
        overlay: dict[str, dict[bytes, bytes | None]] = {}
        for sections in reversed(logs):  # the earliest write after ``version`` wins
            for tag, replaced in sections.items():
                overlay.setdefault(self._versioned[tag], {}).update(replaced)
        with self._lock:
            self._overlays[key] = overlay
            while len(self._overlays) > OVERLAY_CACHE:
                self._overlays.popitem(last=False)
        return overlay

    def _decoded_log(self, version: int, cursor: lmdb.Cursor) -> Undo:
        """The undo log of ``version`` at ``cursor``, decoded once per process."""
        with self._lock:
            sections = self._decoded.get(version)
            if sections is not None:
                self._decoded.move_to_end(version)
                return sections
        _, sections = decode_undo(cast(bytes, cursor.value()))
        with self._lock:
            self._decoded[version] = sections
            while len(self._decoded) > DECODED_CACHE:
                self._decoded.popitem(last=False)
        return sections

    def horizon(self, raw: lmdb.Transaction, versions_db: str) -> int | None:
        """The oldest version still readable, in ``raw``'s snapshot (None: never written)."""
        stored = _get(raw, HORIZON_KEY, self._db[versions_db])
        return None if stored is None else decode_txid(stored)

    def undo_logs(self, raw: lmdb.Transaction, versions_db: str) -> int:
        """How many undo logs ``raw``'s snapshot holds."""
        cursor = raw.cursor(db=self._db[versions_db])
        count = 0
        found = cursor.set_range(UNDO_PREFIX)
        while found and cast(bytes, cursor.key()).startswith(UNDO_PREFIX):
            count += 1
            found = cursor.next()
        return count


def _get(raw: lmdb.Transaction, key: bytes, db: Any) -> bytes | None:
    return cast("bytes | None", raw.get(key, db=db))
