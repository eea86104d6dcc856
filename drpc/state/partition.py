"""One partition of a partitioned state: its own LMDB directory, applying each txid once.

Contract.

- A **partitioned state** (a *group*) is what one committer component writes when it
  runs more than one task: task ``i`` owns partition ``i`` of ``partitions``, which
  holds the keys of its key groups (``drpc.state.keygroups``).
  ``PartitionLayout(group, topology, partitions, key_groups)`` describes a group;
  partition ``i`` lives in ``partition_path(root, group, i)`` under a partition root
  (``partition_root(state_dir, conf)``: ``drpc.state.local.dir`` when set, else
  ``<state_dir>/partitions``), on the disk of the process that owns it.
- ``StatePartition.open(path, layout, index, start_txid=0, **options)`` opens the
  directory (creating it; without ``options``, the environment this process already has
  open there if any, as a run opened it) and checks its partition record: a directory made for
  another group, layout or index raises ``StateError`` naming both. A new partition
  holds ``start_txid`` (the group's global commit when it was made).
- ``held()``: the last txid the partition applied.
- ``apply(txid, fn, keep_from=None, deltas_from=None)`` applies txid ``txid``:
  ``fn(txn)`` runs once in one write transaction that also records ``txid`` as held
  and the version that applied it, and returns what ``fn`` returned. The partition
  must hold ``txid - 1``. One that holds ``txid`` already (its global commit never
  happened: ``txid`` is replayed) first reverts it, in a write of its own, from that
  write's undo log, then applies the replay onto the state before it: for every map
  kind the replay counts once (a transactional map's replay changes nothing, an opaque
  map recomputes from the value before, a non-transactional map does not count twice),
  and the committer's own emits are made again. Anything else raises
  ``StateOrderError`` naming what the partition holds.
  ``keep_from`` is the oldest txid a live request may still read (default ``txid - 1``):
  its version stays readable after the write (``StateEnvironment.run_write``).
  ``deltas_from`` (default: ``keep_from``) is the oldest txid a copy elsewhere catches up
  from (a standby's): its journal keeps the deltas after it.
- ``read(txid)`` is a read transaction at the version that applied ``txid`` (None: the
  latest) for the partition's maps (``drpc.state.maps``, passed as ``txn=``). A txid
  before the partition's first reads it as it was made (empty); a txid it does not hold
  yet raises ``StateError``; one whose undo logs were reclaimed
  ``VersionReclaimedError``.
- ``attach(journal)`` makes a ``PartitionJournal`` (``drpc.state.checkpoint``) told of
  every apply: ``before_apply(partition, txid, held, keep_from, deltas_from)`` before its
  writes, and
  ``applied(partition, txid, writes)`` once it committed here, with what it changed in
  the partition's data (``data_writes``: a revert's and the replay's writes merged, the
  partition's own records left out): the partition as it held ``txid - 1`` plus these
  is the partition holding ``txid``. An error of ``applied`` is the apply's. ``rebase()``
  makes a compacted copy's records its own: the held txid applied by its latest version.
- ``status()`` is a ``PartitionStatus``: held txid, keys stored, bytes in use, path;
  ``partition_record(path)`` and ``held_txid(path)`` read what a directory holds
  without its layout.

The records are drpc's own plain data (``drpc.state.records``) in ``COORDINATOR_DB``,
under keys starting with a zero byte, which no topology's record does: the partition
record, and one ``applied`` entry (version, commit time) per txid still readable. Both
are versioned, so a revert restores them with the maps.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from drpc.errors import StateError, StateOrderError, VersionReclaimedError
from drpc.state.codec import decode_txid, encode_txid
from drpc.state.env import (
    COORDINATOR_DB,
    MAPS_DB,
    VERSIONED_DBS,
    VERSIONS_DB,
    StateEnvironment,
    StateTxn,
)
from drpc.state.keygroups import check_layout
from drpc.state.records import decode_plain, decode_undo, encode_plain
from drpc.state.txn import Writes
from drpc.state.versions import UNDO_PREFIX

T = TypeVar("T")

LOCAL_DIR_CONF = "drpc.state.local.dir"
"""Where a process keeps the partitions it owns (default: ``<state_dir>/partitions``)."""
PARTITIONS_DIR = "partitions"
STANDBY_DIR = "standby"
"""Under a partition root: the standby copies this host keeps (``drpc.state.standby``)."""

_RECORD = b"\x00partition"
_APPLIED = b"\x00applied"


def data_writes(writes: Writes) -> Writes:
    """What of a partition's write belongs to its data: not its version records, nor its
    own partition records (each place that holds the partition keeps its own)."""
    found: Writes = {}
    for db, entries in writes.items():
        if db == VERSIONS_DB or not entries:
            continue
        if db == COORDINATOR_DB:
            entries = {
                key: value
                for key, value in entries.items()
                if not (key == _RECORD or key.startswith(_APPLIED))
            }
            if not entries:
                continue
        found[db] = dict(entries)
    return found


class PartitionJournal(Protocol):
    """Told of a partition's applies (``StatePartition.attach``)."""

    def before_apply(
        self, partition: StatePartition, txid: int, held: int, keep_from: int, deltas_from: int
    ) -> None: ...

    def applied(self, partition: StatePartition, txid: int, writes: Writes) -> None: ...


@dataclass(frozen=True, slots=True)
class PartitionLayout:
    """A partitioned state: the committer ``group`` of transactional topology ``topology``
    whose keys spread over ``partitions`` by ``key_groups`` key groups."""

    group: str
    topology: str
    partitions: int
    key_groups: int

    def __post_init__(self) -> None:
        if not isinstance(self.group, str) or not self.group:
            raise StateError(f"a partitioned state needs a non-empty name, got {self.group!r}")
        check_layout(self.partitions, self.key_groups)

    def as_plain(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topology": self.topology,
            "partitions": self.partitions,
            "key_groups": self.key_groups,
        }

    @classmethod
    def from_plain(cls, plain: Mapping[str, Any]) -> PartitionLayout:
        return cls(
            str(plain["group"]),
            str(plain["topology"]),
            int(plain["partitions"]),
            int(plain["key_groups"]),
        )


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """Where one partition stands (``StatePartition.status``)."""

    group: str
    index: int
    held: int
    keys: int
    bytes: int
    path: str


def partition_root(state_dir: str, conf: Mapping[str, Any] | None = None) -> str:
    """The directory this process keeps its partitions of ``state_dir``'s states under."""
    local = (conf or {}).get(LOCAL_DIR_CONF)
    if local:
        return os.path.abspath(str(local))
    return os.path.join(os.path.abspath(state_dir), PARTITIONS_DIR)


def group_dir(root: str, group: str) -> str:
    return os.path.join(root, urllib.parse.quote(group, safe=""))


def partition_path(root: str, group: str, index: int) -> str:
    return os.path.join(group_dir(root, group), f"p{index}")


def standby_path(root: str, group: str, index: int, task: int = 0) -> str:
    """Where resident task ``task`` keeps its standby copy of partition ``index`` of
    ``group``: apart from the owner's path and from the other tasks' copies, which other
    tasks of the same host may use."""
    return partition_path(os.path.join(root, STANDBY_DIR, f"task-{task}"), group, index)


def partition_record(path: str) -> dict[str, Any] | None:
    """The record of the partition directory ``path`` (None: no partition there): its
    layout, index and held txid, read without knowing its layout."""
    if not os.path.exists(os.path.join(path, "data.mdb")):
        return None
    env = StateEnvironment.opened(path) or StateEnvironment.open(path)
    with env.read_latest() as txn:
        stored = txn.get(COORDINATOR_DB, _RECORD)
    return None if stored is None else dict(decode_plain(stored, "a partition record"))


def held_txid(path: str) -> int | None:
    """The txid the partition directory ``path`` holds (None: no partition there)."""
    record = partition_record(path)
    return None if record is None else int(record["held"])


@dataclass(frozen=True, slots=True)
class Applied:
    """The write that applied one txid: its version and when it committed."""

    txid: int
    version: int
    committed_at: float


class StatePartition:
    """One partition's directory in this process (see the module doc)."""

    def __init__(self, env: StateEnvironment, layout: PartitionLayout, index: int) -> None:
        self.env = env
        self.layout = layout
        self.index = index
        # what the latest version's records say (its start and applied writes), decoded
        # once per version: reads between two commits skip the decoding
        self._seen: tuple[int, int, list[Applied]] | None = None
        self.journal: PartitionJournal | None = None
        self._changes: Writes | None = None  # what the apply under way changed, when journaled

    def __repr__(self) -> str:
        return f"<StatePartition {self.layout.group!r} {self.index}/{self.layout.partitions}>"

    @classmethod
    def open(
        cls,
        path: str,
        layout: PartitionLayout,
        index: int,
        *,
        start_txid: int = 0,
        **options: Any,
    ) -> StatePartition:
        if not 0 <= index < layout.partitions:
            raise StateError(f"{layout.group!r} has no partition {index} of {layout.partitions}")
        os.makedirs(path, exist_ok=True)
        # without options (a reader): the environment this process has open, whatever its
        # options (the run's); with them (the run), exactly those
        env = (None if options else StateEnvironment.opened(path)) or StateEnvironment.open(
            path, **options
        )
        env.is_partition = True
        partition = cls(env, layout, index)
        record = partition._record()
        if record is None:
            env.run_write(
                lambda txn: partition._create(txn, start_txid),
                what=f"the creation of partition {index} of {layout.group!r}",
            )
        else:
            found = PartitionLayout.from_plain(record)
            if found != layout or record["index"] != index:
                raise StateError(
                    f"state directory {path!r} holds partition {record['index']} of "
                    f"{found!r}, not partition {index} of {layout!r}"
                )
        return partition

    def attach(self, journal: PartitionJournal) -> None:
        """Tell ``journal`` of every apply from now on (see the module doc)."""
        self.journal = journal
        self.env.watch_commits(self)

    def on_commit(self, txn: StateTxn, writes: Writes) -> None:
        if self._changes is None:
            return
        for db, entries in data_writes(writes).items():
            self._changes.setdefault(db, {}).update(entries)

    def rebase(self) -> None:
        """Make a compacted copy's records this directory's (see the module doc)."""
        held = self.held()

        def write(txn: StateTxn) -> None:
            for key, _ in list(txn.scan(COORDINATOR_DB, _APPLIED)):
                txn.delete(COORDINATOR_DB, key)
            self._write_applied(txn, held)

        self.env.run_write(write, what=f"the rebase of {self!r}")

    # -- records ---------------------------------------------------------------------------

    def _record(self, txn: StateTxn | None = None) -> dict[str, Any] | None:
        with self.env.reading(txn) as t:
            stored = t.get(COORDINATOR_DB, _RECORD)
        return None if stored is None else decode_plain(stored, "a partition record")

    def _create(self, txn: StateTxn, start_txid: int) -> None:
        self._write_record(txn, start_txid, start_txid)
        self._write_applied(txn, start_txid)

    def _write_record(self, txn: StateTxn, held: int, start: int) -> None:
        record = {**self.layout.as_plain(), "index": self.index, "held": held, "start": start}
        txn.put(COORDINATOR_DB, _RECORD, encode_plain(record, "a partition record"))

    def _write_applied(self, txn: StateTxn, txid: int) -> None:
        txn.put(
            COORDINATOR_DB,
            _APPLIED + encode_txid(txid),
            encode_plain([txn.lmdb_id, time.time()], "an applied record"),
        )

    def applied(self, txn: StateTxn | None = None) -> list[Applied]:
        """The writes whose versions are still recorded, oldest first."""
        with self.env.reading(txn) as t:
            entries = list(t.scan(COORDINATOR_DB, _APPLIED))
        found = []
        for key, value in entries:
            version, committed_at = decode_plain(value, "an applied record")
            found.append(Applied(decode_txid(key[len(_APPLIED) :]), int(version), committed_at))
        return found

    def _require_record(self, txn: StateTxn | None = None) -> dict[str, Any]:
        record = self._record(txn)
        if record is None:
            raise StateError(f"{self!r}: its partition record is missing")
        return record

    def held(self, txn: StateTxn | None = None) -> int:
        return int(self._require_record(txn)["held"])

    # -- applying --------------------------------------------------------------------------

    def apply(
        self,
        txid: int,
        fn: Callable[[StateTxn], T],
        *,
        keep_from: int | None = None,
        deltas_from: int | None = None,
        what: str | None = None,
    ) -> T:
        """Apply ``txid`` with ``fn`` (see the module doc)."""
        what = what or f"txid {txid} in partition {self.index} of {self.layout.group!r}"
        record = self._require_record()
        held = int(record["held"])
        if held not in (txid, txid - 1):
            raise StateOrderError(
                f"{self!r} holds txid {held}: it cannot apply txid {txid} (it applies each "
                "txid once, in order)"
            )
        keep = txid - 1 if keep_from is None else min(keep_from, txid - 1)
        applied = [entry for entry in self.applied() if entry.txid < txid]
        kept = [entry for entry in applied if entry.txid <= keep]
        floor = kept[-1] if kept else (applied[0] if applied else None)
        keep_version = None if floor is None else floor.version
        journal = self.journal
        if journal is not None:
            journal.before_apply(
                self, txid, held, keep, keep if deltas_from is None else min(deltas_from, keep)
            )
            self._changes = {}
        try:
            if held == txid:
                self._revert(txid, keep_version)

            def write(txn: StateTxn) -> T:
                result = fn(txn)
                self._write_record(txn, txid, int(record["start"]))
                self._write_applied(txn, txid)
                for entry in applied:
                    if floor is not None and entry.txid < floor.txid:
                        txn.delete(COORDINATOR_DB, _APPLIED + encode_txid(entry.txid))
                return result

            result = self.env.run_write(write, what=what, keep_from=keep_version)
            changes = self._changes
        finally:
            self._changes = None
        if journal is not None:
            assert changes is not None
            journal.applied(self, txid, changes)
        return result

    def _revert(self, txid: int, keep_version: int | None) -> None:
        """Undo the write that applied ``txid``, the partition's latest (see module doc)."""
        applied = {entry.txid: entry for entry in self.applied()}
        entry = applied.get(txid)
        latest = self.env.latest_version()
        if entry is None or entry.version != latest:
            raise StateError(
                f"{self!r}: cannot revert txid {txid}: it is not the partition's latest write "
                f"(version {latest}, applied {entry})"
            )
        with self.env.read_latest() as txn:
            stored = txn.get(VERSIONS_DB, UNDO_PREFIX + encode_txid(entry.version))
        if stored is None:
            raise StateError(f"{self!r}: the undo log of txid {txid} is missing")
        _, sections = decode_undo(stored)

        def undo(txn: StateTxn) -> None:
            for tag, replaced in sections.items():
                db = VERSIONED_DBS[tag]
                for key, value in replaced.items():
                    if value is None:
                        txn.delete(db, key)
                    else:
                        txn.put(db, key, value)

        self.env.run_write(
            undo, what=f"the revert of txid {txid} in {self!r}", keep_from=keep_version
        )

    # -- reading ---------------------------------------------------------------------------

    def version_of(self, txid: int) -> int:
        """The version a read at ``txid`` sees (see ``read``)."""
        with self.env.read_latest() as txn:
            return self._version_in(txn, txid)

    def _version_in(self, txn: StateTxn, txid: int) -> int:
        """``version_of(txid)``, from the records ``txn`` (a read at the latest) sees."""
        seen = self._seen
        if seen is not None and seen[0] == txn.lmdb_id:
            _, start, applied = seen
        else:
            start = int(self._require_record(txn)["start"])
            applied = self.applied(txn)
            self._seen = (txn.lmdb_id, start, applied)
        if not applied or txid > applied[-1].txid:
            held = applied[-1].txid if applied else None
            raise StateError(
                f"{self!r} holds txid {held}, not yet txid {txid} (a read at a global commit "
                "this partition has not applied)"
            )
        at = [entry for entry in applied if entry.txid <= txid]
        if at:
            return at[-1].version
        if applied[0].txid == start:  # before the partition was made: as it was made
            return applied[0].version
        raise VersionReclaimedError(self.env.path, txid, applied[0].txid, applied[-1].txid)

    @contextmanager
    def read(self, txid: int | None) -> Iterator[StateTxn]:
        with self.env.read_latest() as latest:
            version = None if txid is None else self._version_in(latest, txid)
            if version is None or version == latest.version:  # the common read: one snapshot
                yield latest
                return
        with self.env.read(version=version) as txn:
            yield txn

    def status(self) -> PartitionStatus:
        with self.env.read_latest() as txn:
            held = self.held(txn)
            keys = txn.entries(MAPS_DB)
        return PartitionStatus(
            self.layout.group, self.index, held, keys, self.env.bytes_used(), self.env.path
        )
