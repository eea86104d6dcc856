"""The driver's own records in the checkpoint store, so a driver restarted on another host
(an empty state directory) continues the run where the last one left it.

Contract.

- **What.** The records of a run's state directory that coordinate it: every entry of
  ``COORDINATOR_DB`` (the global commit record, the partition records), ``ROTATING_DB``
  (the batch metadata of each txid emitted, the partitioned emitters' metadata) and
  ``CATALOG_DB`` (the partition layouts and placements). Not the directory's own maps
  (``MAPS_DB``, ``WINDOWS_DB``): only partitioned states are in the store.
- **Objects.** ``driver/<topology>/record-<sequence>``: ``encode_rows`` with magic
  ``DRPCDRV1`` and a header of the topology, the txid of its commit record (0: none) and
  its sequence number (20 digits, so names sort as sequences).
- ``DriverCheckpoint(store, topology_id)``:

  - ``put(env, txn=None)`` puts the records as the next sequence when they differ from
    the last it put (True), else does nothing (False). Then it deletes every record but
    the newest two. Given ``txn``, a write transaction of ``env``, it puts the records as
    that write leaves them, before the write commits. The run puts before its partitions
    apply a txid (so the batch metadata a replay of that txid needs is durable before any
    partition holds it) and inside the global commit's write of the txid (so the commit is
    durable before anyone can read it, and a restarted driver never reads a commit older
    than one the run reported).
  - ``restore(env)``, before the run reads where to resume: when the newest record is
    ahead of the directory's commit record (or the directory has none), it replaces the
    three databases' entries with the record's in one write (``DriverRestore``); a
    directory at or ahead of the record is kept, and so is one a single commit behind it
    that keeps maps of its own: its driver stopped between the record's put and the
    commit's write, and a replay of that txid applies it to those maps (the partitions
    holding it skip it). It refuses (``StateError``) a record
    whose directory kept maps of its own, whose data the store does not hold, and a
    directory that holds other topologies' commit records, which a replacement would
    drop. A damaged record raises ``CheckpointCorruptError`` naming it.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from dataclasses import dataclass

from drpc.errors import CheckpointCorruptError, StateError
from drpc.state.checkpoint import decode_rows, encode_rows
from drpc.state.checkpoint_store import CheckpointStore
from drpc.state.codec import decode_names
from drpc.state.coordinator import CoordinatorState, commit_record_key
from drpc.state.env import CATALOG_DB, COORDINATOR_DB, ROTATING_DB, StateEnvironment, StateTxn
from drpc.state.partitioned import CATALOG_RECORDS
from drpc.state.records import decode_commit
from drpc.state.txn import Writes

log = logging.getLogger(__name__)

DRIVER_MAGIC = b"DRPCDRV1"
DRIVER_DBS = (COORDINATOR_DB, ROTATING_DB, CATALOG_DB)
KEEP_RECORDS = 2


def driver_folder(topology_id: str) -> str:
    return f"driver/{urllib.parse.quote(topology_id, safe='')}/"


def record_name(topology_id: str, sequence: int) -> str:
    return f"{driver_folder(topology_id)}record-{sequence:020d}"


def _sequence_of(name: str) -> int | None:
    tail = name.rsplit("/record-", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None


@dataclass(frozen=True, slots=True)
class DriverRestore:
    """The state directory took the store's record ``name``: commit record at ``txid``,
    in ``seconds``."""

    name: str
    txid: int
    seconds: float


def driver_rows(txn: StateTxn) -> Writes:
    """The coordinating records a read of a state directory sees (module doc)."""
    return {db: dict(txn.scan(db, b"")) for db in DRIVER_DBS}


def _commit_txid(rows: Writes, topology_id: str) -> int:
    stored = rows.get(COORDINATOR_DB, {}).get(commit_record_key(topology_id))
    return 0 if stored is None else decode_commit(stored)[0]


def _own_maps(rows: Writes) -> list[str]:
    """The maps a run kept in its state directory, not in partitions (catalog entries)."""
    return sorted(
        decode_names(key, 1)[0][0]
        for key in rows.get(CATALOG_DB, {})
        if not key.startswith(CATALOG_RECORDS)
    )


class DriverCheckpoint:
    """The driver records of ``topology_id`` in ``store`` (module doc)."""

    def __init__(self, store: CheckpointStore, topology_id: str) -> None:
        self.store = store
        self.topology_id = topology_id
        self._folder = driver_folder(topology_id)
        self._names = self._records()
        self._last: Writes | None = None
        self.last_put: tuple[int, int] | None = None
        """The sequence and txid of the last record this process put."""
        self.record_bytes = 0
        """The bytes of the records kept in the store (the newest two) this process put."""
        self._sizes: dict[str, int] = {}
        self.restored: DriverRestore | None = None

    def __repr__(self) -> str:
        return f"<DriverCheckpoint {self.topology_id!r}: {self.store!r}>"

    def _records(self) -> list[str]:
        found = [name for name in self.store.list(self._folder) if _sequence_of(name) is not None]
        return sorted(found, key=lambda name: _sequence_of(name) or 0)

    def put(self, env: StateEnvironment, *, txn: StateTxn | None = None) -> bool:
        with env.reading(txn) if txn is not None else env.read_latest() as read:
            rows = driver_rows(read)
        if rows == self._last:
            return False
        sequence = 1 + max((_sequence_of(name) or 0 for name in self._names), default=0)
        txid = _commit_txid(rows, self.topology_id)
        header = {"topology": self.topology_id, "txid": txid, "sequence": sequence}
        name = record_name(self.topology_id, sequence)
        data = encode_rows(DRIVER_MAGIC, header, rows)
        self.store.put(name, data)
        self._names.append(name)
        self._sizes[name] = len(data)
        self._last = rows
        self.last_put = (sequence, txid)
        if len(self._names) > KEEP_RECORDS:
            old, self._names = self._names[:-KEEP_RECORDS], self._names[-KEEP_RECORDS:]
            self.store.delete(old)
            for name in old:
                self._sizes.pop(name, None)
        self.record_bytes = sum(self._sizes.values())
        return True

    def restore(self, env: StateEnvironment) -> DriverRestore | None:
        if not self._names:
            return None
        began = time.monotonic()
        name = self._names[-1]
        data = self.store.get(name)
        if data is None:  # deleted since the listing: a newer record exists
            self._names = self._records()
            return self.restore(env)
        header, rows = decode_rows(DRIVER_MAGIC, "driver record", name, data)
        if header.get("topology") != self.topology_id:
            raise CheckpointCorruptError(
                name, f"it is topology {header.get('topology')!r}'s, not {self.topology_id!r}'s"
            )
        txid = _commit_txid(rows, self.topology_id)
        with env.read_latest() as txn:
            here = self._local_txid(txn)
            others = sorted(set(CoordinatorState.topologies(env, txn=txn)) - {self.topology_id})
            keeps_own_maps = bool(_own_maps({CATALOG_DB: dict(txn.scan(CATALOG_DB, b""))}))
        if here >= txid:
            return None
        if here == txid - 1 and keeps_own_maps:
            log.warning(
                "transactional topology %r: state directory %s is one commit behind the "
                "checkpoint store's %s (txid %d): its driver stopped before that commit's "
                "write; it keeps its own maps, so the run replays txid %d on it",
                self.topology_id,
                env.path,
                name,
                txid,
                txid,
                extra={"topology": self.topology_id},
            )
            return None
        self._refuse_unless_restorable(env, name, rows, others)

        def replace(txn: StateTxn) -> None:
            for db in DRIVER_DBS:
                for key, _ in list(txn.scan(db, b"")):
                    txn.delete(db, key)
                for key, value in rows.get(db, {}).items():
                    if value is not None:
                        txn.put(db, key, value)

        env.run_write(replace, what=f"the driver records of {self.topology_id!r} from {name!r}")
        self._last = rows
        self.restored = DriverRestore(name, txid, time.monotonic() - began)
        log.warning(
            "transactional topology %r: state directory %s restored from the checkpoint "
            "store's %s at txid %d (the directory held txid %d)",
            self.topology_id,
            env.path,
            name,
            txid,
            here,
            extra={"topology": self.topology_id},
        )
        return self.restored

    def _local_txid(self, txn: StateTxn) -> int:
        stored = txn.get(COORDINATOR_DB, commit_record_key(self.topology_id))
        return 0 if stored is None else decode_commit(stored)[0]

    def _refuse_unless_restorable(
        self, env: StateEnvironment, name: str, rows: Writes, others: list[str]
    ) -> None:
        own_maps = _own_maps(rows)
        if own_maps:
            raise StateError(
                f"the checkpoint store's {name!r} is ahead of state directory {env.path!r}, "
                f"but that run kept maps {own_maps} in its directory, not in partitions, and "
                "the store does not hold them: restore the directory itself, or give those "
                "states a parallelism_hint of 2 or more so their partitions are durable"
            )
        if others:
            raise StateError(
                f"the checkpoint store's {name!r} is ahead of state directory {env.path!r}, "
                f"which also holds the commit records of {others}; restoring would drop them. "
                "Give each topology's run a state directory of its own"
            )
