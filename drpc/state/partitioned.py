"""Partitioned states as readers see them: the global record's catalog, and maps read across
partitions at one global commit.

Contract.

- **The catalog** (in the state directory the run's driver writes, ``CATALOG_DB``):
  ``record_layout(txn, layout)`` keeps a partitioned state's ``PartitionLayout``;
  recording another layout under the same group raises ``StateError`` naming both (a
  state's partitions and key groups are fixed once it has data). ``record_maps(txn,
  group, names)`` records which group holds each map; a map already held by another
  group raises ``StateError``. ``record_placement`` keeps where each partition lives
  (its host, and the resident task owning it). ``layouts``, ``group_of`` and
  ``placements`` read them.
- **Which commit a read sees.** A DRPC request pins one version of the state directory
  (``drpc.state.versions``); for each partitioned state the directory holds,
  ``pinned_commits(env, pin)`` gives the read keys its request carries: the global commit of
  the state's topology at that version (``commit_read_key``). A read of a partitioned
  map reads every partition at that txid (``StatePartition.read``), so an answer never
  mixes two commits, wherever the partitions are; a request that pinned a version from
  before the state's first global commit reads it at txid 0 (empty), even once the
  catalog that makes it partitioned has appeared. Outside such a request it reads at the
  latest global commit when this host has the directory's global record, else at each
  partition's latest; should commits go on while it reads until that commit's versions are
  reclaimed, it reads again at the new latest (at most ``UNPINNED_READ_ATTEMPTS`` times,
  then ``VersionReclaimedError``), so it still sees one commit. A pinned read never moves.
- ``PartitionedMap(source, layout, kind, name, default)`` reads one map of a partitioned
  state like a map of one directory (``drpc.state.maps``): ``get``, ``multi_get``,
  ``stored``, ``items`` and ``page`` (at most ``limit`` keys in key order across every
  partition, merged by their stored encoding: the order of a one-directory map).
  ``source`` reaches the partitions: ``LocalPartitions`` opens the ones under a
  partition root of this host (one another process of the host replaced since, by a
  restore or a standby copy's takeover, is opened anew); a partition it does not find raises
  ``PartitionLostError`` naming it, unless a remote reader is set
  (``set_remote_reader``: the resident executor's, which reads it where its owner
  lives; ``read_here`` is what runs there). ``local_partitioned_map`` finds a Trident
  state's partitions on a host without the global record (a worker's), from their own
  records.
"""

from __future__ import annotations

import functools
import heapq
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from drpc.errors import InvalidQueryError, PartitionLostError, StateError, VersionReclaimedError
from drpc.state.checkpoint import PartitionCheckpoint, Restored, restore
from drpc.state.checkpoint_store import CheckpointSettings, CheckpointStore
from drpc.state.codec import StateKey, decode_names, encode_key, encode_name
from drpc.state.coordinator import commit_record_key
from drpc.state.env import CATALOG_DB, COORDINATOR_DB, StateEnvironment, StateTxn
from drpc.state.keygroups import partition_of
from drpc.state.maps import MapPage, NonTransactionalMap, OpaqueMap, TransactionalMap
from drpc.state.partition import (
    PartitionLayout,
    StatePartition,
    group_dir,
    partition_path,
    partition_record,
    partition_root,
)
from drpc.state.pins import Pin
from drpc.state.records import decode_commit, decode_plain, encode_plain
from drpc.state.versions import READS, pinned_version

T = TypeVar("T")

MapKind = type[TransactionalMap] | type[OpaqueMap] | type[NonTransactionalMap]
AnyMap = TransactionalMap | OpaqueMap | NonTransactionalMap

_GROUP = b"\x00group"
_MAP = b"\x00map"
_PLACE = b"\x00place"
CATALOG_RECORDS = b"\x00"
"""What the partition catalog's keys start with: no map name's (its length byte is >= 1)."""
_MISSING: Any = object()


# -- the catalog ------------------------------------------------------------------------------


def record_layout(txn: StateTxn, layout: PartitionLayout) -> None:
    key = _GROUP + encode_name(layout.group, "a partitioned state's name")
    stored = txn.get(CATALOG_DB, key)
    if stored is not None:
        found = PartitionLayout.from_plain(decode_plain(stored, "a partition layout"))
        if found != layout:
            raise StateError(
                f"state directory {txn.env.path!r} holds state {layout.group!r} in "
                f"{found.partitions} partition(s) of {found.key_groups} key groups (topology "
                f"{found.topology!r}); this run asks for {layout.partitions} partition(s) of "
                f"{layout.key_groups} (topology {layout.topology!r}). A state keeps its "
                "partitions: run with the committer's parallelism it was made with, or use "
                "a new state directory"
            )
        return
    txn.put(CATALOG_DB, key, encode_plain(layout.as_plain(), "a partition layout"))


def layouts(env: StateEnvironment, txn: StateTxn | None = None) -> dict[str, PartitionLayout]:
    """Every partitioned state the directory's catalog records, by group."""
    with env.reading(txn) as t:
        return {
            layout.group: layout
            for _, value in t.scan(CATALOG_DB, _GROUP)
            if (layout := _layout(value))
        }


@functools.lru_cache(maxsize=256)
def _layout(stored: bytes) -> PartitionLayout:
    """A stored layout record, decoded once per process."""
    return PartitionLayout.from_plain(decode_plain(stored, "a partition layout"))


def map_kinds(txn: StateTxn) -> dict[str, str]:
    """Each map the catalog ``txn`` reads records (a directory's or a partition's), by name:
    its kind (``TransactionalMap.KIND``, ...)."""
    found: dict[str, str] = {}
    for key, kind in txn.scan(CATALOG_DB, b""):
        if key.startswith(CATALOG_RECORDS):  # partitioned states' records, not maps
            continue
        [name], _ = decode_names(key, 1)
        found[name] = kind.decode()
    return found


def record_maps(txn: StateTxn, group: str, names: Iterable[str]) -> None:
    for name in names:
        key = _MAP + encode_name(name, "map name")
        stored = txn.get(CATALOG_DB, key)
        if stored is None:
            txn.put(CATALOG_DB, key, encode_plain(group, "a map's partitioned state"))
            continue
        holder = decode_plain(stored, "a map's partitioned state")
        if holder != group:
            raise StateError(
                f"map {name!r} in {txn.env.path!r} is written by partitioned state {holder!r}; "
                f"{group!r} cannot write it too"
            )


def group_of(env: StateEnvironment, name: str, txn: StateTxn | None = None) -> str | None:
    """The partitioned state holding map ``name``, or None (a map of the directory itself)."""
    with env.reading(txn) as t:
        stored = t.get(CATALOG_DB, _MAP + encode_name(name, "map name"))
    return None if stored is None else str(decode_plain(stored, "a map's partitioned state"))


def record_placement(txn: StateTxn, group: str, index: int, host: str | None, task: int) -> None:
    """Record where partition ``index`` of ``group`` lives (its host, and the resident task
    owning it; 0: the run's own process), for status tools on any host."""
    key = _PLACE + encode_name(group, "a partitioned state's name") + index.to_bytes(4, "big")
    txn.put(CATALOG_DB, key, encode_plain({"host": host, "task": task}, "a partition's place"))


def placements(
    env: StateEnvironment, txn: StateTxn | None = None
) -> dict[tuple[str, int], dict[str, Any]]:
    """Where each partition lived when the run last recorded it, by (group, index)."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    with env.reading(txn) as t:
        for key, value in t.scan(CATALOG_DB, _PLACE):
            [group], rest = decode_names(key[len(_PLACE) :], 1)
            found[(group, int.from_bytes(rest, "big"))] = decode_plain(value, "a place")
    return found


# -- which commit a read sees ----------------------------------------------------------------


def commit_read_key(directory: str, topology: str) -> str:
    """The read key a request carries for the global commit of ``topology``'s partitioned
    states in ``directory`` (a NUL never appears in a path, so no directory's own key)."""
    return f"{directory}\x00{topology}"


def pinned_commits(env: StateEnvironment, pin: Pin) -> tuple[tuple[str, int], ...]:
    """The read keys of the global commits ``pin``'s version holds, one for each topology
    with partitioned states in the directory (none without), to ride with the request."""
    with env.read(version=pin.version) as txn:
        topologies = sorted({layout.topology for layout in layouts(env, txn).values()})
        commits = []
        for topology in topologies:
            stored = txn.get(COORDINATOR_DB, commit_record_key(topology))
            txid = 0 if stored is None else decode_commit(stored)[0]
            commits.append((commit_read_key(env.path, topology), txid))
    return tuple(commits)


def pinned_commit(directory: str, topology: str) -> int | None:
    """The global txid of ``topology`` this thread's request reads at, if it pinned one."""
    reads = READS.reads
    if reads:
        key = commit_read_key(directory, topology)
        for read_key, txid in reads:
            if read_key == key:
                return txid
    return None


def has_global_record(state_dir: str) -> bool:
    """Whether this host holds ``state_dir``'s own LMDB files (the driver's directory)."""
    return os.path.exists(os.path.join(state_dir, "data.mdb"))


# -- reading across partitions ---------------------------------------------------------------


RemoteReader = Callable[[str, PartitionLayout, int, "int | None", Callable[..., Any]], Any]
"""Reads partition ``index`` of a layout under a root elsewhere: ``(root, layout, index,
txid, fn) -> fn's result``, raising what the read raised there."""
_remote: list[RemoteReader] = []


def set_remote_reader(reader: RemoteReader | None) -> None:
    """Read partitions this host does not hold through ``reader`` (None: fail instead)."""
    _remote[:] = [] if reader is None else [reader]


def read_here(
    root: str, layout: PartitionLayout, index: int, txid: int | None, fn: Callable[..., T]
) -> tuple[bool, Any]:
    """What a remote reader runs where the partition lives: ``(True, fn's result)``, or
    ``(False, the StateError)`` to raise where it was asked (never another hop)."""
    try:
        partition = local_partitions_at(root).partition(layout, index)
        with partition.read(txid) as txn:
            return True, fn(partition, txn)
    except StateError as error:
        return False, error


class LocalPartitions:
    """The partitions under a partition root of this host, each opened once."""

    def __init__(
        self,
        root: str,
        options: Mapping[str, Any] | None = None,
        checkpoint: CheckpointSettings | None = None,
    ) -> None:
        """:param options: ``StateEnvironment.open``'s, for a writer (none: a reader takes
        the environment this process has open, whatever its options).
        :param checkpoint: the run's checkpoint store: each partition opened here puts its
        deltas and snapshots there (``drpc.state.checkpoint``), and ``restore`` rebuilds
        one from it."""
        self.root = root
        self.options = dict(options or {})
        self.checkpoint = checkpoint
        self._store: CheckpointStore | None = None
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], StatePartition] = {}
        self._identities: dict[tuple[str, int], tuple[int, int] | None] = {}
        self.journals: dict[tuple[str, int], PartitionCheckpoint] = {}
        self.restores: dict[tuple[str, int], Restored] = {}

    @property
    def store(self) -> CheckpointStore | None:
        if self.checkpoint is not None and self._store is None:
            self._store = CheckpointStore(self.checkpoint)
        return self._store

    def exists(self, layout: PartitionLayout, index: int) -> bool:
        path = partition_path(self.root, layout.group, index)
        return os.path.exists(os.path.join(path, "data.mdb"))

    def held(self, layouts: Iterable[PartitionLayout]) -> dict[tuple[str, int], int]:
        """What each partition of ``layouts`` found here holds, by (state, index)."""
        return {
            (layout.group, index): self.partition(layout, index).held()
            for layout in layouts
            for index in range(layout.partitions)
            if self.exists(layout, index)
        }

    def partition(
        self, layout: PartitionLayout, index: int, *, create_at: int | None = None
    ) -> StatePartition:
        """Partition ``index`` of ``layout``; made holding ``create_at`` when it is not
        there and that is given, else ``PartitionLostError`` naming this host."""
        key = (layout.group, index)
        path = partition_path(self.root, layout.group, index)
        with self._lock:
            partition = self._open.get(key)
            if partition is not None and not partition.env.closed:
                if _identity(path) == self._identities.get(key):
                    return partition
                # Another process of this host moved a new copy into place (a standby's
                # takeover, a restore): what this one has open is the old, deleted files.
                partition.env.close()
            made = not self.exists(layout, index)
            if create_at is None and made:
                raise PartitionLostError(
                    layout.group, index, os.uname().nodename, f"it is not under {self.root!r}"
                )
            partition = self._open[key] = StatePartition.open(
                path, layout, index, start_txid=create_at or 0, **self.options
            )
            self._identities[key] = _identity(path)
            store = self.store
            if store is not None:
                journal = self.journals[key] = PartitionCheckpoint(store, layout, index)
                if made:
                    journal.created(create_at or 0)
                partition.attach(journal)
            return partition

    def restore(
        self, layout: PartitionLayout, index: int, target: int, keep_from: int | None = None
    ) -> Restored:
        """Rebuild partition ``index`` of ``layout`` here from the checkpoint store, holding
        ``target`` (``drpc.state.checkpoint.restore``), and open it."""
        store = self.store
        if store is None:
            raise PartitionLostError(
                layout.group, index, os.uname().nodename, "the run has no checkpoint store"
            )
        key = (layout.group, index)
        self.close_partition(layout, index)
        path = partition_path(self.root, layout.group, index)
        restored = restore(
            store, layout, index, path, target, keep_from=keep_from, options=self.options
        )
        self.restores[key] = restored
        self.partition(layout, index)
        return restored

    def close_partition(self, layout: PartitionLayout, index: int) -> None:
        """Close partition ``index`` of ``layout`` if this process has it open (a reader may
        have opened another owner's files on a shared disk): the next use opens it anew."""
        key = (layout.group, index)
        with self._lock:
            found = self._open.pop(key, None)
            journal = self.journals.pop(key, None)
        if journal is not None:
            journal.wait()
        if found is not None and not found.env.closed:
            found.env.close()

    def close(self) -> None:
        """Close every partition opened here."""
        with self._lock:
            opened, self._open = list(self._open.values()), {}
            journals, self.journals = list(self.journals.values()), {}
        for journal in journals:
            journal.wait()
        for partition in opened:
            if not partition.env.closed:
                partition.env.close()

    def read(
        self,
        layout: PartitionLayout,
        index: int,
        txid: int | None,
        fn: Callable[[StatePartition, Any], T],
    ) -> T:
        if _remote and not self.exists(layout, index):
            return _remote[0](self.root, layout, index, txid, fn)
        partition = self.partition(layout, index)
        with partition.read(txid) as txn:
            return fn(partition, txn)


def _identity(path: str) -> tuple[int, int] | None:
    """Which file a partition's data is (device, inode); None: none there."""
    try:
        found = os.stat(os.path.join(path, "data.mdb"))
    except OSError:
        return None
    return found.st_dev, found.st_ino


_sources: dict[str, LocalPartitions] = {}
_sources_lock = threading.Lock()


def local_partitions(state_dir: str, conf: Mapping[str, Any] | None = None) -> LocalPartitions:
    """This process's ``LocalPartitions`` of ``state_dir`` (one per partition root)."""
    return local_partitions_at(partition_root(state_dir, conf))


def local_partitions_at(root: str) -> LocalPartitions:
    """This process's reading ``LocalPartitions`` of a partition root."""
    with _sources_lock:
        source = _sources.get(root)
        if source is None:
            source = _sources[root] = LocalPartitions(root)
        return source


def local_partitioned_map(
    state_dir: str, conf: Mapping[str, Any] | None, name: str, kind: MapKind, default: Any = None
) -> PartitionedMap | None:
    """Map ``name`` as a partitioned state this host holds partitions of under its partition
    root, found without the directory's global record (a worker's host: Trident names a
    partitioned state after its map); None when there are none."""
    root = partition_root(state_dir, conf)
    found = group_dir(root, name)
    if not os.path.isdir(found):
        return None
    for entry in sorted(os.listdir(found)):
        record = partition_record(os.path.join(found, entry))
        if record is not None:
            layout = PartitionLayout.from_plain(record)
            return PartitionedMap(
                local_partitions(state_dir, conf),
                layout,
                kind,
                name,
                default,
                state_dir=os.path.realpath(state_dir),
            )
    return None


_maps: dict[tuple[str, str, str], AnyMap] = {}
_maps_lock = threading.Lock()


def partition_map(partition: StatePartition, kind: MapKind, name: str, default: Any) -> AnyMap:
    """The process's one map object of ``kind`` and ``name`` in ``partition``."""
    key = (partition.env.path, kind.__name__, name)
    with _maps_lock:
        found = _maps.get(key)
        if found is None or found.env is not partition.env or found.default != default:
            found = _maps[key] = kind(partition.env, name, default=default)
        return found


@dataclass(frozen=True, slots=True)
class _Listed:
    entries: list[tuple[bytes, StateKey, Any]]
    more: bool


UNPINNED_READ_ATTEMPTS = 5
"""Latest commits an unpinned read tries before its ``VersionReclaimedError`` stands."""


class PartitionedMap:
    """One map of a partitioned state, read across its partitions (see the module doc)."""

    def __init__(
        self,
        source: LocalPartitions,
        layout: PartitionLayout,
        kind: MapKind,
        name: str,
        default: Any = None,
        *,
        state_dir: str | None = None,
        latest_txid: Callable[[], int | None] | None = None,
    ) -> None:
        self.source = source
        self.layout = layout
        self.kind = kind
        self.name = name
        self.default = default
        self.state_dir = state_dir
        self._latest_txid = latest_txid
        self.env_of: StateEnvironment | None = None
        """The directory whose global record says where reads stand, if any."""

    def __repr__(self) -> str:
        return (
            f"<PartitionedMap {self.name!r} of {self.layout.group!r} "
            f"({self.layout.partitions} partitions)>"
        )

    def read_txid(self) -> int | None:
        """The global txid reads see now (see the module doc)."""
        pinned = self._pinned_txid()
        return pinned if pinned is not None else self._latest()

    def _latest(self) -> int | None:
        return None if self._latest_txid is None else self._latest_txid()

    def _pinned_txid(self) -> int | None:
        if self.state_dir is None:
            return None
        pinned = pinned_commit(self.state_dir, self.layout.topology)
        if pinned is not None:
            return pinned
        if pinned_version(self.state_dir) is not None:
            # The request pinned a version of the directory that held no partitioned
            # state of this topology yet (its first global commit came after): nothing
            # was committed as of the pin, whatever has been since.
            return 0
        return None

    def _at_one_commit(self, body: Callable[[int | None], T]) -> T:
        """``body(txid)`` at the txid reads see; an unpinned read whose commit was
        reclaimed meanwhile runs again at the new latest (see the module doc)."""
        pinned = self._pinned_txid()
        if pinned is not None:
            return body(pinned)
        for attempt in range(UNPINNED_READ_ATTEMPTS):
            txid = self._latest()
            try:
                return body(txid)
            except VersionReclaimedError:
                if txid is None or attempt == UNPINNED_READ_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _by_partition(self, keys: list[StateKey]) -> dict[int, list[int]]:
        layout = self.layout
        spread: dict[int, list[int]] = {}
        for at, key in enumerate(keys):
            index = partition_of(key, layout.partitions, layout.key_groups)
            spread.setdefault(index, []).append(at)
        return spread

    def multi_get(self, keys: Iterable[StateKey], default: Any = _MISSING) -> list[Any]:
        fallback = self.default if default is _MISSING else default
        keys = list(keys)
        kind, name, map_default = self.kind, self.name, self.default
        spread = self._by_partition(keys)

        def at_commit(txid: int | None) -> list[Any]:
            values: list[Any] = [fallback] * len(keys)
            for index, positions in spread.items():
                wanted = [keys[at] for at in positions]

                def read(
                    partition: StatePartition, txn: Any, wanted: list[Any] = wanted
                ) -> list[Any]:
                    state_map = partition_map(partition, kind, name, map_default)
                    return state_map.multi_get(wanted, fallback, txn=txn)

                found = self.source.read(self.layout, index, txid, read)
                for at, value in zip(positions, found, strict=True):
                    values[at] = value
            return values

        return self._at_one_commit(at_commit)

    def get(self, key: StateKey, default: Any = _MISSING) -> Any:
        [value] = self.multi_get([key], default)
        return value

    def stored(self, key: StateKey) -> Any:
        index = partition_of(key, self.layout.partitions, self.layout.key_groups)
        kind, name, default = self.kind, self.name, self.default
        return self._at_one_commit(
            lambda txid: self.source.read(
                self.layout,
                index,
                txid,
                lambda partition, txn: partition_map(partition, kind, name, default).stored(
                    key, txn=txn
                ),
            )
        )

    def items(self) -> list[tuple[StateKey, Any]]:
        """Every key and committed value, in key order."""
        kind, name, default = self.kind, self.name, self.default

        def at_commit(txid: int | None) -> list[tuple[StateKey, Any]]:
            entries: list[tuple[bytes, StateKey, Any]] = []
            for index in range(self.layout.partitions):
                listed = self.source.read(
                    self.layout,
                    index,
                    txid,
                    lambda partition, txn: partition_map(partition, kind, name, default).items(
                        txn=txn
                    ),
                )
                entries.extend((encode_key(key), key, value) for key, value in listed)
            entries.sort(key=lambda entry: entry[0])
            return [(key, value) for _, key, value in entries]

        return self._at_one_commit(at_commit)

    def page(
        self, limit: int, *, after: StateKey | None = None, prefix: StateKey | None = None
    ) -> MapPage:
        """At most ``limit`` keys and values after ``after`` among those starting with
        ``prefix``, in key order across every partition (see the module doc)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidQueryError(f"{self!r}: a page's limit is an int >= 1, got {limit!r}")
        kind, name, default = self.kind, self.name, self.default

        def listed(partition: StatePartition, txn: Any) -> _Listed:
            page = partition_map(partition, kind, name, default).page(
                limit, after=after, prefix=prefix, txn=txn
            )
            return _Listed(
                [(encode_key(key), key, value) for key, value in page.entries],
                page.next_after is not None,
            )

        pages = self._at_one_commit(
            lambda txid: [
                self.source.read(self.layout, index, txid, listed)
                for index in range(self.layout.partitions)
            ]
        )
        merged = list(heapq.merge(*(page.entries for page in pages), key=lambda e: e[0]))
        entries = [(key, value) for _, key, value in merged[:limit]]
        more = len(merged) > limit or any(page.more for page in pages)
        return MapPage(entries, entries[-1][0] if more and entries else None)
