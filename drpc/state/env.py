"""One LMDB environment per state directory per process, with growth and fork safety.

Contract:

- ``StateEnvironment.open(path, **options)`` is the only way to get one. A
  process-wide registry keyed by the directory's real path returns the same
  object for every open of the same directory, because LMDB forbids opening
  an environment twice in one process. Opening it again with different
  options raises ``StateError`` naming them. ``close()`` closes it for the
  whole process; a later ``open`` makes a new one.
- **Fork.** The environment records the pid that opened it. Used in any
  other process (a ``fork()`` child) every method raises ``StateForkError``
  and the inherited LMDB handle is never touched; ``open`` of the same
  directory in such a child raises ``StateForkError`` too (LMDB cannot open
  a second handle beside the inherited one). Open state in a process that
  did not inherit it (spawn, exec), or close it before forking. Pickling an
  environment (or any state object holding one) pickles its path and
  options; unpickling opens it through the registry of the receiving process.
- **Durability.** ``sync=True`` and ``metasync=True`` by default: when a write
  returns, its commit is on disk. ``sync=False`` trades that for speed (a
  crash of the machine, not of the process, may lose recent commits but
  never leaves a partial one); ``sync()`` flushes on demand.
- **Reads** (``with env.read() as txn``) see a snapshot of committed data only.
  **Writes** run through ``run_write(fn)``: ``fn(txn)`` runs in one write
  transaction that commits when ``fn`` returns and aborts (nothing visible)
  when it raises. Writes are serialized; starting a write inside another on
  the same thread raises ``StateError`` (pass the open ``txn`` instead).
- **Full map.** When a write does not fit, the transaction is aborted, the
  map doubles (at most to ``max_map_size``) and ``fn`` runs again from the
  start, so ``fn`` must only act through ``txn``. Past ``max_map_size`` it
  raises ``StateFullError`` naming the directory and sizes; nothing of that
  write is visible and the environment stays usable. Resizing waits until
  no read transaction of this process is open (at most ``resize_timeout``
  seconds, then ``StateError``); a thread holding a read transaction cannot
  resize and gets ``StateError`` at once. A map grown by another process is
  adopted transparently.
- Sub-databases are fixed: ``COORDINATOR_DB``, ``ROTATING_DB``, ``MAPS_DB``,
  ``CATALOG_DB``; the state classes own their key layouts (``drpc.state.codec``).
- LMDB errors that escape are wrapped in ``StateError`` naming the directory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import asdict, dataclass
from typing import TypeVar

import lmdb

from drpc.errors import (
    StateClosedError,
    StateError,
    StateForkError,
    StateFullError,
    StateKeyError,
)

T = TypeVar("T")

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
DEFAULT_MAX_MAP_SIZE = 16 * 1024**3
DEFAULT_MAX_READERS = 126
DEFAULT_RESIZE_TIMEOUT = 30.0
MIN_MAP_SIZE = 64 * 1024

COORDINATOR_DB = "drpc.coordinator"
ROTATING_DB = "drpc.rotating"
MAPS_DB = "drpc.maps"
CATALOG_DB = "drpc.catalog"
_DATABASES = (COORDINATOR_DB, ROTATING_DB, MAPS_DB, CATALOG_DB)

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_registry: dict[str, StateEnvironment] = {}
_registry_lock = threading.Lock()
_OPEN_TOKEN = object()


@dataclass(frozen=True, slots=True)
class StateOptions:
    """The options an environment was opened with (see ``StateEnvironment.open``)."""

    map_size: int = DEFAULT_MAP_SIZE
    max_map_size: int = DEFAULT_MAX_MAP_SIZE
    sync: bool = True
    metasync: bool = True
    max_readers: int = DEFAULT_MAX_READERS
    resize_timeout: float = DEFAULT_RESIZE_TIMEOUT

    def __post_init__(self) -> None:
        if self.map_size < MIN_MAP_SIZE:
            raise ValueError(f"map_size must be at least {MIN_MAP_SIZE} bytes, got {self.map_size}")
        if self.max_map_size < self.map_size:
            raise ValueError(
                f"max_map_size ({self.max_map_size}) must be at least map_size ({self.map_size})"
            )
        if self.max_readers < 1:
            raise ValueError(f"max_readers must be at least 1, got {self.max_readers}")
        if self.resize_timeout <= 0:
            raise ValueError(f"resize_timeout must be positive, got {self.resize_timeout}")


class StateTxn:
    """A read or write transaction of a ``StateEnvironment``, valid until it ends.

    ``cache`` is a memo for state objects (a map's commit handle keeps the keys it
    wrote there); it dies with the transaction, and a retried write starts empty.
    """

    __slots__ = ("_done", "_env", "_map_full", "_raw", "cache", "write")

    def __init__(self, env: StateEnvironment, raw: lmdb.Transaction, write: bool) -> None:
        self._env = env
        self._raw = raw
        self.write = write
        self._map_full = False
        self._done = False
        self.cache: dict[object, object] = {}

    @property
    def env(self) -> StateEnvironment:
        return self._env

    def get(self, db: str, key: bytes) -> bytes | None:
        self._check(key)
        try:
            return self._raw.get(key, db=self._env._db(db))
        except lmdb.Error as error:
            raise self._env._wrap(error, "read") from error

    def put(self, db: str, key: bytes, value: bytes) -> None:
        self._check(key, mutate=True)
        try:
            self._raw.put(key, value, db=self._env._db(db))
        except lmdb.MapFullError:
            self._map_full = True
            raise
        except lmdb.Error as error:
            raise self._env._wrap(error, "write") from error

    def delete(self, db: str, key: bytes) -> bool:
        self._check(key, mutate=True)
        try:
            return bool(self._raw.delete(key, db=self._env._db(db)))
        except lmdb.MapFullError:
            self._map_full = True
            raise
        except lmdb.Error as error:
            raise self._env._wrap(error, "delete") from error

    def scan(
        self, db: str, prefix: bytes, *, start: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items whose key starts with ``prefix``, in key order.

        Forward, from the first key ``>= prefix + start``; reverse (descending),
        from the last key ``< prefix + start`` (or the last key of the prefix).
        Do not write to ``db`` while iterating; collect first.
        """
        self._check(prefix)
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
            key = cursor.key()
            if not key.startswith(prefix):
                return
            yield key, cursor.value()
            found = step()

    def _check(self, key: bytes, mutate: bool = False) -> None:
        if self._done:
            raise StateError(f"state directory {self._env.path!r}: the transaction has ended")
        if mutate and not self.write:
            raise StateError(
                f"state directory {self._env.path!r}: cannot write in a read transaction"
            )
        if len(key) > self._env.max_key_size:
            raise StateKeyError(
                f"a key of {len(key)} bytes is longer than LMDB's limit of "
                f"{self._env.max_key_size} bytes: {key[:60]!r}..."
            )

    def _end(self, commit: bool) -> None:
        self._done = True
        if commit:
            self._raw.commit()
            return
        with suppress(lmdb.Error):  # a failed commit has already aborted it
            self._raw.abort()


def _after_prefix(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


class _ReadGate:
    """Counts this process's open read transactions so the map is only resized without any."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False

    def enter(self) -> None:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._readers += 1

    def leave(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    @contextmanager
    def exclusive(self, timeout: float, path: str) -> Iterator[None]:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._exclusive = True
            if not self._cond.wait_for(lambda: not self._readers, timeout):
                readers = self._readers
                self._exclusive = False
                self._cond.notify_all()
                raise StateError(
                    f"state directory {path!r}: cannot resize the map, {readers} read "
                    f"transaction(s) of this process stayed open for {timeout:g} s"
                )
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class StateEnvironment:
    """The LMDB environment of one state directory in this process (see module doc)."""

    def __init__(self, token: object, path: str, options: StateOptions) -> None:
        if token is not _OPEN_TOKEN:
            raise TypeError("use StateEnvironment.open(path, ...) to open a state directory")
        self.path = path
        self.options = options
        self.resizes = 0
        self._pid = os.getpid()
        self._closed = False
        self._write_lock = threading.Lock()
        self._gate = _ReadGate()
        self._local = threading.local()
        try:
            self._lmdb = lmdb.open(
                path,
                map_size=options.map_size,
                max_dbs=len(_DATABASES),
                max_readers=options.max_readers,
                sync=options.sync,
                metasync=options.metasync,
                subdir=True,
                create=True,
            )
        except lmdb.Error as error:
            raise StateError(f"cannot open state directory {path!r}: {error}") from error
        self.max_key_size: int = self._lmdb.max_key_size()
        self._dbs: dict[str, object] = {}
        try:
            for name in _DATABASES:
                self._dbs[name] = self._lmdb.open_db(name.encode("ascii"), create=True)
        except lmdb.Error as error:
            self._lmdb.close()
            raise StateError(f"cannot open the databases of {path!r}: {error}") from error

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        max_map_size: int = DEFAULT_MAX_MAP_SIZE,
        sync: bool = True,
        metasync: bool = True,
        max_readers: int = DEFAULT_MAX_READERS,
        resize_timeout: float = DEFAULT_RESIZE_TIMEOUT,
        create: bool = True,
    ) -> StateEnvironment:
        """The environment of the state directory ``path``, opened once per process.

        ``map_size`` (64 MiB, rounded up to whole pages, at least ``MIN_MAP_SIZE``)
        is the initial map; it doubles on demand up to ``max_map_size`` (16 GiB).
        ``sync``/``metasync`` (True): flush data/metadata on every commit.
        ``max_readers`` (126): concurrent read transactions across all processes.
        ``resize_timeout`` (30 s): how long a resize waits for reads to end.
        ``create`` (True): create the directory if missing; False raises
        ``StateError`` for a directory without state.
        """
        options = StateOptions(
            map_size=_round_up(map_size),
            max_map_size=max_map_size - max_map_size % _PAGE_SIZE,
            sync=sync,
            metasync=metasync,
            max_readers=max_readers,
            resize_timeout=resize_timeout,
        )
        raw = os.fspath(path)
        if not create and not os.path.exists(os.path.join(raw, "data.mdb")):
            raise StateError(f"no state in {raw!r} (create=False)")
        os.makedirs(raw, exist_ok=True)
        real = os.path.realpath(raw)
        with _registry_lock:
            env = _registry.get(real)
            if env is not None:
                if env._pid != os.getpid():
                    raise StateForkError(
                        f"state directory {real!r} was opened by process {env._pid} before "
                        f"this process ({os.getpid()}) was forked from it; LMDB cannot be "
                        "used or reopened across fork: open it in a spawned process, or "
                        "close it before forking"
                    )
                if env.options != options:
                    differing = {
                        name: (theirs, mine)
                        for (name, theirs), mine in zip(
                            asdict(env.options).items(), asdict(options).values(), strict=True
                        )
                        if theirs != mine
                    }
                    raise StateError(
                        f"state directory {real!r} is already open in this process with "
                        f"other options (open, requested): {differing}"
                    )
                return env
            env = cls(_OPEN_TOKEN, real, options)
            _registry[real] = env
            return env

    @staticmethod
    def opened(path: str | os.PathLike[str]) -> StateEnvironment | None:
        """The environment of ``path`` already open in this process, whatever its options."""
        with _registry_lock:
            env = _registry.get(os.path.realpath(os.fspath(path)))
        if env is None or env._closed or env._pid != os.getpid():
            return None
        return env

    def __reduce__(self) -> tuple[object, ...]:
        return (_reopen, (self.path, asdict(self.options)))

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pid {self._pid}"
        return f"<StateEnvironment {self.path!r} ({state})>"

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[StateTxn]:
        """A read transaction: a snapshot of committed data, ended on leaving the block."""
        self._check()
        raw = self._begin_read()
        txn = StateTxn(self, raw, write=False)
        self._local.reads = getattr(self._local, "reads", 0) + 1
        try:
            yield txn
        finally:
            txn._end(commit=False)
            self._local.reads -= 1
            self._gate.leave()

    def run_write(self, fn: Callable[[StateTxn], T]) -> T:
        """Run ``fn(txn)`` in one write transaction, commit, and return its result.

        If ``fn`` raises, the transaction aborts and the exception propagates. If
        the map is full, ``fn`` runs again after the map grew (see module doc).
        """
        self._check()
        if getattr(self._local, "writing", False):
            raise StateError(
                f"state directory {self.path!r}: a write was started inside another write "
                "on the same thread; pass the open transaction (txn=...) instead"
            )
        with self._write_lock:
            self._local.writing = True
            try:
                return self._write_loop(fn)
            finally:
                self._local.writing = False

    def reading(self, txn: StateTxn | None) -> AbstractContextManager[StateTxn]:
        """``txn`` itself when given, else a new read transaction (for state classes)."""
        if txn is not None:
            self._own(txn)
            return nullcontext(txn)
        return self.read()

    def writing(self, txn: StateTxn | None, fn: Callable[[StateTxn], T]) -> T:
        """``fn(txn)`` inside the caller's write ``txn``, or ``run_write(fn)`` without one."""
        if txn is None:
            return self.run_write(fn)
        self._own(txn)
        if not txn.write:
            raise StateError(f"state directory {self.path!r}: a write needs a write transaction")
        return fn(txn)

    # -- maintenance -----------------------------------------------------------------------

    @property
    def map_size(self) -> int:
        self._check()
        return int(self._lmdb.info()["map_size"])

    def lmdb_flags(self) -> dict[str, bool]:
        """The flags LMDB reports for this environment (``sync``, ``metasync``, ...)."""
        self._check()
        return dict(self._lmdb.flags())

    def sync(self) -> None:
        """Flush committed data to disk now (useful with ``sync=False``)."""
        self._check()
        try:
            self._lmdb.sync(True)
        except lmdb.Error as error:
            raise self._wrap(error, "sync") from error

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the environment for this whole process; using it afterwards raises."""
        if self._closed:
            return
        self._check()
        if getattr(self._local, "writing", False) or getattr(self._local, "reads", 0):
            raise StateError(
                f"state directory {self.path!r}: close() inside a transaction of this thread"
            )
        with self._write_lock, self._gate.exclusive(self.options.resize_timeout, self.path):
            self._closed = True
            self._lmdb.close()
        with _registry_lock:
            if _registry.get(self.path) is self:
                del _registry[self.path]

    # -- internals -------------------------------------------------------------------------

    def _check(self) -> None:
        if self._pid != os.getpid():
            raise StateForkError(
                f"state directory {self.path!r} was opened by process {self._pid}; this "
                f"process ({os.getpid()}) inherited it through fork and must not use it"
            )
        if self._closed:
            raise StateClosedError(f"state directory {self.path!r} is closed")

    def _own(self, txn: StateTxn) -> None:
        if txn.env is not self:
            raise StateError(
                f"a transaction of {txn.env.path!r} was passed to state in {self.path!r}"
            )

    def _db(self, name: str) -> object:
        return self._dbs[name]

    def _wrap(self, error: lmdb.Error, during: str) -> StateError:
        return StateError(f"state directory {self.path!r}: LMDB {during} failed: {error}")

    def _begin_read(self) -> lmdb.Transaction:
        """Begin a read transaction, entered in the gate; adopts a map grown elsewhere."""
        while True:
            self._gate.enter()
            try:
                return self._lmdb.begin(write=False)
            except lmdb.MapResizedError:
                self._gate.leave()
            except lmdb.Error as error:
                self._gate.leave()
                raise self._wrap(error, "begin") from error
            if getattr(self._local, "writing", False):
                raise StateError(
                    f"state directory {self.path!r}: another process grew the map while "
                    "this thread's write transaction was open"
                )
            with self._write_lock:
                self._resize(0)

    def _write_loop(self, fn: Callable[[StateTxn], T]) -> T:
        while True:
            try:
                raw = self._lmdb.begin(write=True)
            except lmdb.MapResizedError:
                self._resize(0)
                continue
            except lmdb.Error as error:
                raise self._wrap(error, "begin") from error
            txn = StateTxn(self, raw, write=True)
            try:
                result = fn(txn)
                txn._end(commit=True)  # LMDB refuses to commit after a swallowed MAP_FULL
                return result
            except BaseException as error:
                txn._end(commit=False)
                full = txn._map_full or isinstance(error, lmdb.MapFullError)
                if not (full and isinstance(error, Exception)):
                    if isinstance(error, lmdb.Error):
                        raise self._wrap(error, "write") from error
                    raise
            self._grow()

    def _grow(self) -> None:
        current = int(self._lmdb.info()["map_size"])
        limit = self.options.max_map_size
        if current >= limit:
            raise StateFullError(self.path, current, limit)
        self._resize(min(current * 2, limit))
        self.resizes += 1

    def _resize(self, size: int) -> None:
        """Set the map size (0: adopt another process's). Caller holds the write lock."""
        if getattr(self._local, "reads", 0):
            raise StateError(
                f"state directory {self.path!r}: the map must be resized but this thread "
                "holds an open read transaction; end it before writing"
            )
        with self._gate.exclusive(self.options.resize_timeout, self.path):
            try:
                self._lmdb.set_mapsize(size)
            except lmdb.Error as error:
                raise self._wrap(error, "resize") from error


_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """Bytes from ``"65536"``, ``"64MiB"``, ``"64M"``, ``"16GiB"`` (binary units); ValueError
    naming the text otherwise."""
    raw = text.strip().lower().removesuffix("b").removesuffix("i")
    number, unit = (raw[:-1], raw[-1]) if raw and raw[-1] in _SIZE_UNITS else (raw, "")
    try:
        value = float(number) * _SIZE_UNITS[unit]
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use bytes or KiB, MiB, GiB, TiB)") from None
    if value <= 0 or value != value or value == float("inf"):
        raise ValueError(f"a size must be positive, got {text!r}")
    return int(value)


def _round_up(size: int) -> int:
    return -(-size // _PAGE_SIZE) * _PAGE_SIZE


def _reopen(path: str, options: dict[str, object]) -> StateEnvironment:
    return StateEnvironment.open(path, **options)  # type: ignore[arg-type]
