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
- **Reads** (``with env.read() as txn``) see a snapshot of committed data only:
  the latest version, or ``read(version=V)`` the directory as the committed
  write ``V`` left it (``drpc.state.versions``); a read on a thread whose
  current DRPC request pinned a version of this directory reads at that one.
- **Versions.** ``pin()`` pins the latest committed version (a ``Pin``; its
  ``version``) until ``release(pin)`` or ``version_retention`` seconds (60),
  whichever comes first; a read at a version older than what was kept raises
  ``VersionReclaimedError``. Every write that changes the maps or commit
  records keeps an undo log of them and reclaims the ones no pin needs, so the
  writer never waits for a reader and the directory holds no more than the
  pins need. ``version_status()`` says where the directory stands.
  **Writes** run through ``run_write(fn)``: ``fn(txn)`` runs in one write
  transaction that commits when ``fn`` returns and aborts (nothing visible)
  when it raises. Writes are serialized; starting a write inside another on
  the same thread raises ``StateError`` (pass the open ``txn`` instead).
- **``fn`` runs exactly once per ``run_write``.** Its puts and deletes are
  buffered in the transaction (``drpc.state.txn``: its own reads see them) and
  applied to LMDB when it returns, so user callbacks inside ``fn`` (an emitter's new batch, a
  coordinator's ``initialize_transaction``, a committer's ``finish_batch``)
  never run twice because the state layer retried.
- **Full map.** When the buffered writes do not fit, the LMDB transaction is
  aborted, the map doubles (at most to ``max_map_size``) and the same bytes
  are applied again; ``fn`` does not run again. The re-application checks
  that no other writer committed in between (``StateError`` otherwise, with
  nothing applied). Past ``max_map_size`` it raises ``StateFullError`` naming
  the directory and sizes; nothing of that write is visible and the
  environment stays usable. Resizing waits until no read transaction of this
  process is open (at most ``resize_timeout`` seconds, then ``StateError``); a
  thread holding a read transaction cannot resize and gets ``StateError`` at
  once. A map grown by another process is adopted transparently. Each growth
  is logged with what the write was for (``run_write(fn, what=...)``).
- **Stale readers.** A process killed inside a read transaction leaves its
  reader slot behind, which pins old pages (the file grows) and takes one of
  ``max_readers``. ``reader_check()`` frees such slots (about a microsecond);
  it runs at open, before every write, and when a read finds every slot taken.
- **A writer killed mid-publish.** LMDB publishes a commit in two steps: the
  meta page, then the lock file's current txnid. A writer killed between them
  leaves a durable commit that reads do not see until the next write
  transaction takes the dead writer's lock and repairs the lock file.
  ``recover_crashed_writer()`` does that at once (an empty write
  transaction); whoever decides from state where to resume (the
  transactional runner) calls it before reading, or it resumes behind a
  commit.
- **One writer per directory.** ``claim_writer(holder)`` claims the directory
  for this process (``drpc.state.writer``): while a live process holds it, a
  claim from another process raises ``StateInUseError`` naming that pid
  (``claim_writer_when_free`` waits instead, as a standby does);
  ``close()`` releases this process's claims. Reads need no claim.
- **Commit watchers.** ``watch_commits(watcher)`` makes this process's every
  successful write call ``watcher.on_commit(txn, writes)`` (the ended
  transaction and the bytes it wrote, by database) on the writing thread,
  before the write returns; never for an aborted one. Watchers are held
  weakly. How caches of committed data (``drpc.state.cache``) stay true.
- Sub-databases are fixed: ``COORDINATOR_DB``, ``ROTATING_DB``, ``MAPS_DB``,
  ``CATALOG_DB``, ``WINDOWS_DB`` (Trident's window stores,
  ``drpc.trident.window_store``); the state classes own their key layouts
  (``drpc.state.codec``).
- LMDB errors that escape are wrapped in ``StateError`` naming the directory.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import asdict, dataclass
from typing import Protocol, TypeVar

import lmdb

from drpc.errors import (
    StateClosedError,
    StateError,
    StateForkError,
    StateFullError,
    StateInUseError,
)
from drpc.state.pins import Pin, PinTable
from drpc.state.txn import StateTxn, Writes, apply_writes
from drpc.state.versions import VersionStore, pinned_version
from drpc.state.writer import CLAIM_POLL, WriterClaim, WriterLock

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
DEFAULT_MAX_MAP_SIZE = 16 * 1024**3
DEFAULT_MAX_READERS = 126
DEFAULT_RESIZE_TIMEOUT = 30.0
MIN_MAP_SIZE = 64 * 1024

DEFAULT_VERSION_RETENTION = 60.0

COORDINATOR_DB = "drpc.coordinator"
ROTATING_DB = "drpc.rotating"
MAPS_DB = "drpc.maps"
CATALOG_DB = "drpc.catalog"
VERSIONS_DB = "drpc.versions"
WINDOWS_DB = "drpc.windows"
_DATABASES = (COORDINATOR_DB, ROTATING_DB, MAPS_DB, CATALOG_DB, VERSIONS_DB, WINDOWS_DB)
VERSIONED_DBS = (MAPS_DB, COORDINATOR_DB)
"""What a read at an earlier version sees as it was: the maps and the commit records."""
_VERSIONED = frozenset(VERSIONED_DBS)

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
    version_retention: float = DEFAULT_VERSION_RETENTION

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
        if not self.version_retention > 0:
            raise ValueError(
                f"version_retention must be positive seconds, got {self.version_retention}"
            )


@dataclass(frozen=True, slots=True)
class VersionStatus:
    """Where a state directory's versions stand (``StateEnvironment.version_status``)."""

    latest: int
    """The latest committed version."""
    horizon: int | None
    """The oldest version still readable (None: no versioned write yet)."""
    undo_logs: int
    """Undo logs kept for older versions."""
    oldest_pinned: int | None
    """The oldest version a live process pins, if any."""
    oldest_pin_age: float | None
    """Seconds since that pin was taken."""
    local_pins: int
    """Pins this process holds."""


class CommitWatcher(Protocol):
    """Told of every write this process commits (``StateEnvironment.watch_commits``)."""

    def on_commit(self, txn: StateTxn, writes: Writes) -> None: ...


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
        self.is_partition = False
        """A partition of a partitioned state (``drpc.state.partition``), not a directory of
        its own: status tools show it with its state."""
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
        self.stale_readers_cleared = 0
        self._writer = WriterLock(path)
        self._watchers: weakref.WeakSet[CommitWatcher] = weakref.WeakSet()
        self._dbs: dict[str, lmdb._Database] = {}
        try:
            for name in _DATABASES:
                self._dbs[name] = self._lmdb.open_db(name.encode("ascii"), create=True)
        except lmdb.Error as error:
            self._lmdb.close()
            raise StateError(f"cannot open the databases of {path!r}: {error}") from error
        self.versions = VersionStore(path, self._dbs, VERSIONED_DBS)
        self.pins = PinTable(path, options.version_retention)
        self.reader_check()

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
        version_retention: float = DEFAULT_VERSION_RETENTION,
        create: bool = True,
    ) -> StateEnvironment:
        """The environment of the state directory ``path``, opened once per process.

        ``map_size`` (64 MiB, rounded up to whole pages, at least ``MIN_MAP_SIZE``)
        is the initial map; it doubles on demand up to ``max_map_size`` (16 GiB).
        ``sync``/``metasync`` (True): flush data/metadata on every commit.
        ``max_readers`` (126): concurrent read transactions across all processes.
        ``resize_timeout`` (30 s): how long a resize waits for reads to end.
        ``version_retention`` (60 s): how long a pin keeps its version readable.
        ``create`` (True): create the directory if missing; False raises
        ``StateError`` for a missing directory and for one without state, saying which.
        """
        options = StateOptions(
            map_size=_round_up(map_size),
            max_map_size=max_map_size - max_map_size % _PAGE_SIZE,
            sync=sync,
            metasync=metasync,
            max_readers=max_readers,
            resize_timeout=resize_timeout,
            version_retention=version_retention,
        )
        raw = os.fspath(path)
        if not create and not os.path.isdir(raw):
            raise StateError(f"state directory {raw!r} does not exist")
        if not create and not os.path.exists(os.path.join(raw, "data.mdb")):
            raise StateError(f"{raw!r} is not a drpc state directory (it has no data.mdb)")
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

    @staticmethod
    def open_environments() -> list[StateEnvironment]:
        """Every environment open in this process, by path."""
        pid = os.getpid()
        with _registry_lock:
            envs = [env for _, env in sorted(_registry.items())]
        return [env for env in envs if not env._closed and env._pid == pid]

    def __reduce__(self) -> tuple[object, ...]:
        return (_reopen, (self.path, asdict(self.options)))

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pid {self._pid}"
        return f"<StateEnvironment {self.path!r} ({state})>"

    # -- transactions ----------------------------------------------------------------------

    def read(self, *, version: int | None = None) -> AbstractContextManager[StateTxn]:
        """A read transaction: a snapshot of committed data, ended on leaving the block.

        It reads at ``version`` when given, else at the version this thread's request
        pinned, else at the latest (see module doc)."""
        self._check()
        return self._snapshot(pinned_version(self.path) if version is None else version)

    def read_latest(self) -> AbstractContextManager[StateTxn]:
        """A read transaction at the latest committed version, whatever this thread's
        request pinned."""
        self._check()
        return self._snapshot(None)

    @contextmanager
    def _snapshot(self, version: int | None) -> Iterator[StateTxn]:
        """A read at ``version`` (None: the latest)."""
        raw = self._begin_read()
        self._local.reads = getattr(self._local, "reads", 0) + 1
        try:
            overlay = None
            if version is not None and version != raw.id():
                overlay = self.versions.overlay(raw, version, VERSIONS_DB)
            txn = StateTxn(self, raw, write=False, overlay=overlay, version=version)
        except BaseException:
            with suppress(lmdb.Error):
                raw.abort()
            self._local.reads -= 1
            self._gate.leave()
            raise
        try:
            yield txn
        finally:
            txn._end(commit=False)
            self._local.reads -= 1
            self._gate.leave()

    def latest_version(self) -> int:
        """The latest committed version of the directory (LMDB's last write id)."""
        self._check()
        raw = self._begin_read()
        try:
            return int(raw.id())
        finally:
            raw.abort()
            self._gate.leave()

    def copy_to(
        self, dest_dir: str, *, compact: bool = True, begun: Callable[[], None] | None = None
    ) -> int:
        """Copy the latest committed version into ``dest_dir`` (an existing, empty
        directory) as a new LMDB file, compacted unless told not to; returns the version
        copied. ``begun()`` runs once the copy's read transaction has begun: writes after
        that are not in the copy, and do not wait for it. A compacted copy restarts LMDB's
        write ids, so its version records name versions it does not have
        (``drpc.state.checkpoint`` rebases them)."""
        self._check()
        raw = self._begin_read()
        try:
            version = int(raw.id())
            if begun is not None:
                begun()
            self._lmdb.copy(dest_dir, compact=compact, txn=raw)
            return version
        except lmdb.Error as error:
            raise self._wrap(error, "copy") from error
        finally:
            with suppress(lmdb.Error):
                raw.abort()
            self._gate.leave()

    @staticmethod
    def drop_versions(path: str) -> None:
        """Empty the version records of the closed directory ``path``, a compacted copy
        (``copy_to``): their undo logs and horizon name versions of the directory it was
        copied from. Its data stays; its next write starts its versions anew."""
        try:
            # Room past the file: the drop's write needs free pages, and LMDB's own default
            # map (10 MiB) is smaller than most copies.
            size = os.path.getsize(os.path.join(path, "data.mdb"))
            raw = lmdb.open(
                path,
                max_dbs=len(_DATABASES),
                subdir=True,
                create=False,
                map_size=_round_up(max(2 * size, DEFAULT_MAP_SIZE)),
            )
        except (OSError, lmdb.Error) as error:
            raise StateError(f"cannot open state directory {path!r}: {error}") from error
        try:
            with raw.begin(write=True) as txn:
                txn.drop(raw.open_db(VERSIONS_DB.encode("ascii"), txn=txn), delete=False)
        except lmdb.Error as error:
            raise StateError(f"state directory {path!r}: LMDB drop failed: {error}") from error
        finally:
            raw.close()

    def pin(self) -> Pin:
        """Pin the latest committed version for reads at it (see module doc)."""
        version = self.latest_version()
        while True:
            pin = self.pins.pin(version, time.time())
            latest = self.latest_version()
            if latest == version:
                return pin
            self.pins.release(pin)
            version = latest

    def release(self, pin: Pin) -> None:
        """Release a pin (again: nothing)."""
        self.pins.release(pin)

    def version_status(self) -> VersionStatus:
        """The latest version, the oldest one still readable, the undo logs kept and the
        oldest pin of any live process (with its age) and this process's pins."""
        now = time.time()
        self._check()
        with self._snapshot(None) as txn:  # an open read holds off close()
            latest = txn.lmdb_id
            horizon = self.versions.horizon(txn._raw, VERSIONS_DB)
            undo_logs = self.versions.undo_logs(txn._raw, VERSIONS_DB)
            oldest = self.pins.oldest(now)
            local = self.pins.local()
        return VersionStatus(
            latest=latest,
            horizon=horizon,
            undo_logs=undo_logs,
            oldest_pinned=None if oldest is None else oldest[0],
            oldest_pin_age=None if oldest is None else max(0.0, now - oldest[1]),
            local_pins=local.count,
        )

    def run_write(
        self, fn: Callable[[StateTxn], T], *, what: str = "a write", keep_from: int | None = None
    ) -> T:
        """Run ``fn(txn)`` once in one write transaction, commit, and return its result.

        If ``fn`` raises, the transaction aborts and the exception propagates. If
        the map is full, its buffered writes are applied again after the map grew
        (see module doc); ``what`` names the write in the log line saying so.
        ``keep_from``: a version that stays readable whatever the pins say (a state
        partition's readers pin elsewhere: ``drpc.state.partition``).
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
                return self._write_once(fn, what, keep_from)
            finally:
                self._local.writing = False

    def reading(self, txn: StateTxn | None) -> AbstractContextManager[StateTxn]:
        """``txn`` itself when given, else a new read transaction (for state classes)."""
        if txn is not None:
            self._own(txn)
            return nullcontext(txn)
        return self.read()

    def writing(
        self, txn: StateTxn | None, fn: Callable[[StateTxn], T], *, what: str = "a write"
    ) -> T:
        """``fn(txn)`` inside the caller's write ``txn``, or ``run_write(fn)`` without one."""
        if txn is None:
            return self.run_write(fn, what=what)
        self._own(txn)
        if not txn.write:
            raise StateError(f"state directory {self.path!r}: a write needs a write transaction")
        return fn(txn)

    def watch_commits(self, watcher: CommitWatcher) -> None:
        """Call ``watcher.on_commit(txn, writes)`` after each write of this process commits."""
        self._check()
        self._watchers.add(watcher)

    # -- the writer claim ------------------------------------------------------------------

    def claim_writer(self, holder: str) -> WriterClaim:
        """Claim the directory for writes by this process as ``holder`` (see module doc)."""
        self._check()
        return self._writer.claim(holder)

    def claim_writer_when_free(
        self,
        holder: str,
        stop: threading.Event,
        *,
        poll: float = CLAIM_POLL,
        on_busy: Callable[[StateInUseError], None] | None = None,
    ) -> WriterClaim | None:
        """``claim_writer``, waiting while another process writes (``WriterLock``)."""
        self._check()
        return self._writer.claim_when_free(holder, stop, poll=poll, on_busy=on_busy)

    def writers(self) -> tuple[str, ...]:
        """The holders this process has claimed the directory for."""
        return self._writer.holders()

    # -- maintenance -----------------------------------------------------------------------

    @property
    def map_size(self) -> int:
        self._check()
        return int(self._lmdb.info()["map_size"])

    def bytes_used(self) -> int:
        """Bytes of the map in use (LMDB's last page), what a copy of it would hold."""
        self._check()
        return (int(self._lmdb.info()["last_pgno"]) + 1) * int(self._lmdb.stat()["psize"])

    def lmdb_flags(self) -> dict[str, bool]:
        """The flags LMDB reports for this environment (``sync``, ``metasync``, ...)."""
        self._check()
        return {name: bool(value) for name, value in self._lmdb.flags().items()}

    def reader_check(self) -> int:
        """Free the reader slots of processes that died inside a read transaction.

        Returns how many were freed (also added to ``stale_readers_cleared``)."""
        self._check()
        try:
            cleared = int(self._lmdb.reader_check())
        except lmdb.Error as error:
            raise self._wrap(error, "reader check") from error
        if cleared:
            self.stale_readers_cleared += cleared
            log.warning(
                "state directory %r: freed %d reader slot(s) left by dead processes",
                self.path,
                cleared,
            )
        return cleared

    def recover_crashed_writer(self) -> None:
        """Make reads see a commit whose writer died before publishing it (see module doc)."""
        self._check()
        with self._write_lock:
            self._begin_write().abort()

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
            self._writer.release_all()
            self.pins.close()
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

    def _db(self, name: str) -> lmdb._Database:
        return self._dbs[name]

    def _wrap(self, error: lmdb.Error, during: str) -> StateError:
        return StateError(f"state directory {self.path!r}: LMDB {during} failed: {error}")

    def _begin_read(self) -> lmdb.Transaction:
        """Begin a read transaction, entered in the gate; adopts a map grown elsewhere."""
        checked = False
        while True:
            self._gate.enter()
            try:
                return self._lmdb.begin(write=False)
            except lmdb.MapResizedError:
                self._gate.leave()
            except lmdb.ReadersFullError as error:
                self._gate.leave()
                if checked or not self.reader_check():
                    raise self._wrap(error, "begin") from error
                checked = True
                continue
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

    def _begin_write(self) -> lmdb.Transaction:
        while True:
            try:
                return self._lmdb.begin(write=True)
            except lmdb.MapResizedError:
                self._resize(0)
            except lmdb.Error as error:
                raise self._wrap(error, "begin") from error

    def _write_once(self, fn: Callable[[StateTxn], T], what: str, keep_from: int | None) -> T:
        self.reader_check()
        raw = self._begin_write()
        txn = StateTxn(self, raw, write=True, remember=_VERSIONED)
        try:
            result = fn(txn)
            committed = txn.committed_reads or {}
            writes = txn._take_writes()
            if any(writes.get(name) for name in VERSIONED_DBS):
                now = time.time()
                oldest = self._oldest_pin(now)
                kept = [
                    v for v in (keep_from, None if oldest is None else oldest[0]) if v is not None
                ]
                self.versions.capture(
                    raw, writes, committed, VERSIONS_DB, now, min(kept) if kept else None
                )
        except BaseException as error:
            txn._end(commit=False)
            if isinstance(error, lmdb.Error):
                raise self._wrap(error, "write") from error
            raise
        txn_id = raw.id()
        while True:
            try:
                apply_writes(raw, writes, self._dbs)
                raw.commit()
            except lmdb.MapFullError:
                with suppress(lmdb.Error):
                    raw.abort()
            except BaseException as error:
                with suppress(lmdb.Error):
                    raw.abort()
                if isinstance(error, lmdb.Error):
                    raise self._wrap(error, "write") from error
                raise
            else:
                for watcher in list(self._watchers):
                    watcher.on_commit(txn, writes)
                return result
            before = self.map_size
            self._grow()
            log.info(
                "state directory %r: grew the map from %d to %d bytes for %s",
                self.path,
                before,
                self.map_size,
                what,
            )
            raw = self._begin_write()
            if raw.id() != txn_id:
                with suppress(lmdb.Error):
                    raw.abort()
                raise StateError(
                    f"state directory {self.path!r}: another writer committed while {what} "
                    "waited for the map to grow; nothing of it was applied (one process "
                    "should write to a state directory)"
                )

    def _oldest_pin(self, now: float) -> tuple[int, float] | None:
        """The oldest live pin, for reclaiming; a pins file that cannot be read leaves the
        write going as if nothing were pinned (a pinned read then fails typed), logged."""
        try:
            return self.pins.oldest(now)
        except StateError as error:
            log.warning("%s; reclaiming old versions as if none were pinned", error)
            return None

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
