"""Durable partitions: each partition's changes and snapshots in the checkpoint store, and
the restore of a lost partition from them.

Contract.

- **Objects.** Partition ``i`` of state ``g`` keeps, under ``partitions/<g>/p<i>/`` of
  the store (``drpc.state.checkpoint_store``): ``created`` (the txid it was made
  holding), ``delta-<txid>`` (what applying ``txid`` changed: ``encode_delta``) and
  ``snapshot-<txid>`` (a compacted LMDB copy of the partition holding ``txid``) with its
  ``manifest-<txid>`` (size and CRC-32; written after the snapshot, so a snapshot
  without one is unfinished and never read). Txids are 20-digit, so names sort as txids.
- ``PartitionCheckpoint(store, layout, index)`` is the partition's journal
  (``StatePartition.attach``):

  - ``applied(partition, txid, writes)`` puts ``delta-<txid>`` before it returns, so
    the partition reports ``txid`` (and the global record may claim it) only once its
    changes are durable. A replayed txid puts its delta again, over the old one.
  - ``before_apply(partition, txid, held, keep_from, deltas_from)`` starts a snapshot
    when one is due
    (``snapshot_every`` deltas or ``snapshot_mib`` MiB of them since the last, or none
    yet) and the partition holds ``txid - 1``, whose global commit is recorded (the run
    sends ``txid`` only then): so a snapshot never holds a txid that could be replayed.
    The apply waits only until the copy's LMDB read has begun (microseconds); the copy,
    its upload and the retention after it run on a thread of their own, one at a time
    per partition (a due snapshot while one runs waits for the next apply). A failed
    snapshot is logged and tried again at the next apply.
  - **Retention**, after each snapshot: the newest snapshot at or before ``keep_from``
    (the oldest txid a live request may read) is the base; every older snapshot, its
    manifest, every delta up to the base (and up to ``deltas_from``, the oldest txid a
    standby copy catches up from) and ``created`` are deleted.
    Without such a snapshot nothing is deleted. A retention whose base was not the newest
    snapshot runs again, on a thread of its own, at the first apply whose ``keep_from``
    reaches that snapshot.
  - ``created(start_txid)`` puts ``created`` for a partition made with the store.

- ``restore(store, layout, index, path, target, ...)`` rebuilds the partition holding
  ``target`` (its state's global commit) at ``path``: from a copy already there holding
  ``h <= target`` when the deltas after ``h`` are all in the store (a catch-up: nothing
  downloaded but deltas), else from the newest snapshot at or before ``target`` (and
  ``keep_from``, when given: so reads pinned that far back still find their versions),
  else from ``created``, then every delta up to ``target``, each applied as its own
  txid, the versions from ``keep_from`` on kept readable. It builds in a directory of
  its own and moves it into place, so a failed restore leaves nothing half-made. A
  missing delta (a gap), a snapshot whose size or CRC differs from its manifest, or an
  object that does not decode raises ``CheckpointCorruptError`` naming the object; no
  snapshot and no ``created`` raises it naming the partition's folder. Deltas after
  ``target`` are never read: they belong to a txid whose global commit did not happen,
  and its replay writes them again.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
import zlib
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drpc.errors import CheckpointCorruptError, CheckpointStoreError
from drpc.state.checkpoint_store import CheckpointStore
from drpc.state.env import StateEnvironment, StateTxn
from drpc.state.partition import PartitionLayout, StatePartition, held_txid
from drpc.state.txn import Writes

log = logging.getLogger(__name__)

DELTA_MAGIC = b"DRPCDLT1"
SNAPSHOT_FILE = "data.mdb"
_U32 = struct.Struct("<I")
_NATIVE_LITTLE = sys.byteorder == "little"


def partition_folder(group: str, index: int) -> str:
    return f"partitions/{urllib.parse.quote(group, safe='')}/p{index}/"


def delta_name(group: str, index: int, txid: int) -> str:
    return f"{partition_folder(group, index)}delta-{txid:020d}"


def snapshot_name(group: str, index: int, txid: int) -> str:
    return f"{partition_folder(group, index)}snapshot-{txid:020d}"


def manifest_name(group: str, index: int, txid: int) -> str:
    return f"{partition_folder(group, index)}manifest-{txid:020d}"


def created_name(group: str, index: int) -> str:
    return f"{partition_folder(group, index)}created"


# -- deltas -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delta:
    """What applying ``txid`` changed in partition ``index`` of ``group``."""

    group: str
    index: int
    txid: int
    writes: Writes


def _lengths(items: list[bytes] | list[bytes | None], deletes: bool) -> bytes:
    """Each item's length, -1 for None (a deletion's value: only when ``deletes``)."""
    if deletes:
        lengths = array("i", (-1 if item is None else len(item) for item in items))
    else:  # keys, and the values of puts: no test per item
        lengths = array("i", map(len, items))  # type: ignore[arg-type]
    if not _NATIVE_LITTLE:  # pragma: no cover - every platform Spark runs on is little-endian
        lengths.byteswap()
    return lengths.tobytes()


def encode_rows(magic: bytes, header: Mapping[str, Any], writes: Writes) -> bytes:
    """``writes`` as an object: ``magic``, a JSON header (``header`` and each database's
    entry count), per database its keys' and values' lengths and bytes, and a CRC-32 of all
    before it. A value of None is a deletion."""
    sections = []
    counts: dict[str, int] = {}
    for db, entries in sorted(writes.items()):
        keys = list(entries)
        values = list(entries.values())
        counts[db] = len(keys)
        deletes = None in values
        sections += [
            _lengths(keys, False),
            _lengths(values, deletes),
            b"".join(keys),
            b"".join(value for value in values if value is not None)
            if deletes
            else b"".join(values),  # type: ignore[arg-type]
        ]
    encoded = json.dumps({**header, "dbs": counts}, separators=(",", ":")).encode()
    body = b"".join([magic, _U32.pack(len(encoded)), encoded, *sections])
    return body + _U32.pack(zlib.crc32(body))


def decode_rows(magic: bytes, kind: str, name: str, data: bytes) -> tuple[dict[str, Any], Writes]:
    """The header and writes ``encode_rows`` put in object ``name`` (a ``kind``, for the
    error); ``CheckpointCorruptError`` naming it otherwise."""
    if len(data) < len(magic) + 8 or not data.startswith(magic):
        raise CheckpointCorruptError(
            name, f"not a drpc {kind} (its first bytes are not {magic.decode()})"
        )
    body, (crc,) = data[:-4], _U32.unpack(data[-4:])
    if zlib.crc32(body) != crc:
        raise CheckpointCorruptError(name, "its CRC-32 does not match: the object is damaged")
    try:
        at = len(magic)
        (header_length,) = _U32.unpack_from(body, at)
        at += 4
        header = json.loads(body[at : at + header_length])
        at += header_length
        writes: Writes = {}
        for db, count in header.pop("dbs").items():
            key_lengths = array("i")
            key_lengths.frombytes(body[at : at + 4 * count])
            at += 4 * count
            value_lengths = array("i")
            value_lengths.frombytes(body[at : at + 4 * count])
            at += 4 * count
            if not _NATIVE_LITTLE:  # pragma: no cover
                key_lengths.byteswap()
                value_lengths.byteswap()
            keys = []
            for length in key_lengths:
                keys.append(body[at : at + length])
                at += length
            entries: dict[bytes, bytes | None] = {}
            for key, length in zip(keys, value_lengths, strict=True):
                if length < 0:
                    entries[key] = None
                    continue
                entries[key] = body[at : at + length]
                at += length
            writes[db] = entries
        if at != len(body):
            raise ValueError(f"{len(body) - at} bytes after its last entry")
        return header, writes
    except Exception as error:
        raise CheckpointCorruptError(name, f"it does not decode: {error}") from error


def encode_delta(delta: Delta) -> bytes:
    header = {"group": delta.group, "index": delta.index, "txid": delta.txid}
    return encode_rows(DELTA_MAGIC, header, delta.writes)


def decode_delta(name: str, data: bytes) -> Delta:
    """The delta object ``name`` holds; ``CheckpointCorruptError`` naming it otherwise."""
    header, writes = decode_rows(DELTA_MAGIC, "delta", name, data)
    try:
        return Delta(str(header["group"]), int(header["index"]), int(header["txid"]), writes)
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointCorruptError(name, f"its header lacks {error}") from error


def _write(txn: StateTxn, writes: Writes) -> None:
    for db, entries in writes.items():
        puts = {key: value for key, value in entries.items() if value is not None}
        if puts:
            txn.put_many(db, puts)  # one call: a delta is tens of thousands of keys
        if len(puts) < len(entries):
            for key, value in entries.items():
                if value is None:
                    txn.delete(db, key)


# -- the journal ------------------------------------------------------------------------------


def _txid_of(name: str) -> int | None:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _txids(names: Iterable[str], kind: str) -> list[int]:
    """The txids of the ``kind`` objects (``delta``, ``manifest``, ...) among ``names``,
    in order."""
    marker = f"/{kind}-"
    return sorted(txid for name in names if marker in name and (txid := _txid_of(name)) is not None)


@dataclass
class _Since:
    """Deltas and their bytes since the last snapshot began."""

    deltas: int = 0
    bytes: int = 0
    snapshots: int = 0


@dataclass
class CheckpointStatus:
    """Where a partition's checkpoint stands."""

    last_delta: int | None = None
    last_snapshot: int | None = None
    snapshot_at: float | None = None
    snapshot_error: str | None = None
    delta_bytes: int = 0
    store_bytes: int = 0  # the partition's objects in the store, as last listed and put since
    since: _Since = field(default_factory=_Since)


@dataclass(frozen=True, slots=True)
class CheckpointReport:
    """A partition's checkpoint as its run's status shows it: the txid and time
    (``time.time()``) of its last snapshot, why the last one failed (None: it did not), and
    the bytes it keeps in the store."""

    last_snapshot: int | None
    snapshot_at: float | None
    snapshot_error: str | None
    store_bytes: int


class PartitionCheckpoint:
    """Partition ``index`` of ``layout``'s journal in the checkpoint store (module doc)."""

    def __init__(self, store: CheckpointStore, layout: PartitionLayout, index: int) -> None:
        self.store = store
        self.layout = layout
        self.index = index
        self.status = CheckpointStatus()
        self._snapshotting: threading.Thread | None = None
        self._lock = threading.Lock()
        folder = partition_folder(layout.group, index)
        stored = store.sizes(folder)
        snapshots = _txids(stored, "manifest")
        self.status.last_snapshot = max(snapshots, default=None)
        self.status.store_bytes = sum(stored.values())
        self._forced = not snapshots  # the store has no base from this partition yet
        self._held_back = False  # the newest snapshot was past keep_from at its retention

    def __repr__(self) -> str:
        return f"<PartitionCheckpoint {self.layout.group!r} {self.index}: {self.store!r}>"

    def report(self) -> CheckpointReport:
        with self._lock:
            status = self.status
            return CheckpointReport(
                status.last_snapshot, status.snapshot_at, status.snapshot_error, status.store_bytes
            )

    def created(self, start_txid: int) -> None:
        record = json.dumps({**self.layout.as_plain(), "index": self.index, "start": start_txid})
        self.store.put(created_name(self.layout.group, self.index), record.encode())
        with self._lock:
            self.status.store_bytes += len(record)

    def applied(self, partition: StatePartition, txid: int, writes: Writes) -> None:
        data = encode_delta(Delta(self.layout.group, self.index, txid, writes))
        self.store.put(delta_name(self.layout.group, self.index, txid), data)
        with self._lock:
            self.status.last_delta = txid
            self.status.delta_bytes = len(data)
            self.status.store_bytes += len(data)
            self.status.since.deltas += 1
            self.status.since.bytes += len(data)

    def before_apply(
        self, partition: StatePartition, txid: int, held: int, keep_from: int, deltas_from: int
    ) -> None:
        if held != txid - 1 or not self._due():
            self._retain_held_back(keep_from, deltas_from)
            return
        begun = threading.Event()
        thread = threading.Thread(
            target=self._snapshot,
            args=(partition, held, keep_from, deltas_from, begun),
            name=f"drpc-snapshot-{self.layout.group}-{self.index}",
            daemon=True,
        )
        with self._lock:
            self._snapshotting = thread
            self.status.since = _Since(snapshots=self.status.since.snapshots + 1)
        thread.start()
        begun.wait()

    def _due(self) -> bool:
        settings = self.store.settings
        with self._lock:
            if self._snapshotting is not None and self._snapshotting.is_alive():
                return False
            since = self.status.since
            return (
                self._forced
                or since.deltas >= settings.snapshot_every
                or since.bytes >= settings.snapshot_mib * (1 << 20)
            )

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the snapshot under way, if any (tests, and a stopping run)."""
        thread = self._snapshotting
        if thread is not None:
            thread.join(timeout)

    def _snapshot(
        self,
        partition: StatePartition,
        txid: int,
        keep_from: int,
        deltas_from: int,
        begun: threading.Event,
    ) -> None:
        group, index = self.layout.group, self.index
        folder = tempfile.mkdtemp(
            prefix=".snapshot-", dir=os.path.dirname(os.path.abspath(partition.env.path))
        )
        try:
            partition.env.copy_to(folder, compact=True, begun=begun.set)
            begun.set()
            copied = os.path.join(folder, SNAPSHOT_FILE)
            size, crc = _file_crc(copied)
            started = time.monotonic()
            self.store.put_file(snapshot_name(group, index, txid), copied)
            manifest = {"group": group, "index": index, "txid": txid, "size": size, "crc32": crc}
            described = json.dumps(manifest).encode()
            self.store.put(manifest_name(group, index, txid), described)
            with self._lock:
                self.status.store_bytes += size + len(described)
                self._forced = False
                self.status.last_snapshot = txid
                self.status.snapshot_at = time.time()
                self.status.snapshot_error = None
            log.info(
                "partition %d of %r: snapshot at txid %d in the checkpoint store (%d bytes, "
                "%.2f s)",
                index,
                group,
                txid,
                size,
                time.monotonic() - started,
            )
            self._retain(keep_from, deltas_from)
        except Exception as error:
            with self._lock:
                self.status.snapshot_error = f"{type(error).__name__}: {error}"
                self._forced = True  # try again at the next apply
            log.warning(
                "partition %d of %r: snapshot at txid %d failed: %s", index, group, txid, error
            )
        finally:
            begun.set()
            shutil.rmtree(folder, ignore_errors=True)

    def _retain_held_back(self, keep_from: int, deltas_from: int) -> None:
        """Run the retention the last snapshot held back, once ``keep_from`` has reached it
        (a read pinned before it then): on a thread of its own, as a snapshot's."""
        with self._lock:
            last = self.status.last_snapshot
            if (
                not self._held_back
                or last is None
                or keep_from < last
                or (self._snapshotting is not None and self._snapshotting.is_alive())
            ):
                return
            self._held_back = False
            thread = self._snapshotting = threading.Thread(
                target=self._retain_logged,
                args=(keep_from, deltas_from),
                name=f"drpc-retention-{self.layout.group}-{self.index}",
                daemon=True,
            )
        thread.start()

    def _retain_logged(self, keep_from: int, deltas_from: int) -> None:
        try:
            self._retain(keep_from, deltas_from)
        except Exception as error:  # the next snapshot's retention tries again
            log.warning(
                "partition %d of %r: retention failed: %s", self.index, self.layout.group, error
            )

    def _retain(self, keep_from: int, deltas_from: int) -> None:
        """Delete what no restore can need any more (see the module doc)."""
        group, index = self.layout.group, self.index
        names = self.store.sizes(partition_folder(group, index))
        snapshots = _txids(names, "manifest")
        bases = [txid for txid in snapshots if txid <= keep_from]
        with self._lock:
            self._held_back = bool(snapshots) and (not bases or bases[-1] < snapshots[-1])
        if not bases:
            return
        base = bases[-1]
        delta_floor = min(base, deltas_from)
        doomed = []
        for name in names:
            txid = _txid_of(name)
            kind = name.rsplit("/", 1)[-1].split("-", 1)[0]
            if kind == "created" or (
                txid is not None
                and (
                    (kind == "delta" and txid <= delta_floor)
                    or (kind in ("snapshot", "manifest") and txid < base)
                )
            ):
                doomed.append(name)
        self.store.delete(doomed)
        with self._lock:
            self.status.store_bytes -= sum(names[name] for name in doomed)


def _file_crc(path: str) -> tuple[int, int]:
    crc = 0
    size = 0
    with open(path, "rb") as source:
        while chunk := source.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return size, crc


# -- restoring --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Restored:
    """What a restore did: from which snapshot (None: a catch-up of a copy already there,
    or from ``created``), how many deltas, the bytes downloaded and how long it took."""

    txid: int
    snapshot: int | None
    deltas: int
    bytes: int
    seconds: float
    caught_up: bool = False


def restore(
    store: CheckpointStore,
    layout: PartitionLayout,
    index: int,
    path: str,
    target: int,
    *,
    keep_from: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> Restored:
    """Rebuild partition ``index`` of ``layout`` at ``path`` holding ``target`` (module doc).
    No environment may be open at ``path`` in this process."""
    started = time.monotonic()
    group = layout.group
    folder = partition_folder(group, index)
    names = set(store.list(folder))
    deltas = set(_txids(names, "delta"))
    snapshots = _txids(names, "manifest")
    options = dict(options or {})
    here = _held_here(path)
    if (
        here is not None
        and here <= target
        and all(txid in deltas for txid in range(here + 1, target + 1))
    ):
        partition = StatePartition.open(path, layout, index, **options)
        try:
            downloaded = _replay(store, partition, here, target, keep_from)
        finally:
            partition.env.close()
        return Restored(target, None, target - here, downloaded, time.monotonic() - started, True)
    limit = target if keep_from is None else min(target, keep_from)
    bases = [txid for txid in snapshots if txid <= limit] or [
        txid for txid in snapshots if txid <= target
    ]
    building = f"{path.rstrip(os.sep)}.restore-{uuid.uuid4().hex[:8]}"
    os.makedirs(building)
    try:
        downloaded = 0
        if bases:
            base: int | None = bases[-1]
            assert base is not None
            downloaded += _download_snapshot(store, group, index, base, building)
            StateEnvironment.drop_versions(building)
            partition = StatePartition.open(building, layout, index, **options)
            partition.rebase()
            if partition.held() != base:
                partition.env.close()
                raise CheckpointCorruptError(
                    snapshot_name(group, index, base),
                    f"it holds txid {partition.held()}, not the txid {base} it is named after",
                )
            start = base
        else:
            base = None
            record = store.get(created_name(group, index))
            if record is None:
                raise CheckpointCorruptError(
                    folder,
                    f"no snapshot at or before txid {target} and no creation record: the "
                    "store holds nothing to rebuild this partition from",
                )
            try:
                start = int(json.loads(record)["start"])
            except Exception as error:
                raise CheckpointCorruptError(
                    created_name(group, index), f"it does not decode: {error}"
                ) from error
            partition = StatePartition.open(building, layout, index, start_txid=start, **options)
        try:
            missing = [txid for txid in range(start + 1, target + 1) if txid not in deltas]
            if missing:
                raise CheckpointCorruptError(
                    delta_name(group, index, missing[0]),
                    f"missing: restoring txid {target} from txid {start} needs every delta "
                    f"after it ({len(missing)} missing)",
                )
            downloaded += _replay(store, partition, start, target, keep_from)
        finally:
            partition.env.close()
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(building, path)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    restored = Restored(target, base, target - start, downloaded, time.monotonic() - started)
    log.info(
        "partition %d of %r restored at txid %d from %s and %d delta(s), %d bytes in %.2f s",
        index,
        group,
        target,
        "its creation" if base is None else f"the snapshot at txid {base}",
        restored.deltas,
        downloaded,
        restored.seconds,
    )
    return restored


def _held_here(path: str) -> int | None:
    try:
        return held_txid(path)
    except Exception:  # a damaged copy is no base: the restore replaces it
        return None


def _download_snapshot(
    store: CheckpointStore, group: str, index: int, txid: int, folder: str
) -> int:
    manifest_object = manifest_name(group, index, txid)
    data = store.get(manifest_object)
    if data is None:
        raise CheckpointCorruptError(manifest_object, "missing (it was listed a moment ago)")
    try:
        manifest = json.loads(data)
        size, crc = int(manifest["size"]), int(manifest["crc32"])
    except Exception as error:
        raise CheckpointCorruptError(manifest_object, f"it does not decode: {error}") from error
    snapshot = snapshot_name(group, index, txid)
    local = os.path.join(folder, SNAPSHOT_FILE)
    if not store.get_file(snapshot, local):
        raise CheckpointCorruptError(snapshot, "missing, though its manifest is there")
    found = _file_crc(local)
    if found != (size, crc):
        raise CheckpointCorruptError(
            snapshot,
            f"{found[0]} bytes with CRC-32 {found[1]:08x}; its manifest says {size} bytes "
            f"with {crc:08x}",
        )
    return size


def _replay(
    store: CheckpointStore,
    partition: StatePartition,
    start: int,
    target: int,
    keep_from: int | None,
) -> int:
    """Apply the deltas after ``start`` up to ``target`` to ``partition``, keeping the
    versions from ``keep_from`` on readable; their bytes."""
    group, index = partition.layout.group, partition.index
    downloaded = 0
    for txid in range(start + 1, target + 1):
        name = delta_name(group, index, txid)
        data = store.get(name)
        if data is None:
            raise CheckpointCorruptError(name, "missing (it was listed a moment ago)")
        downloaded += len(data)
        delta = decode_delta(name, data)
        if (delta.group, delta.index, delta.txid) != (group, index, txid):
            raise CheckpointCorruptError(
                name,
                f"it holds txid {delta.txid} of partition {delta.index} of {delta.group!r}",
            )
        partition.apply(txid, functools.partial(_write, writes=delta.writes), keep_from=keep_from)
    return downloaded


__all__ = [
    "CheckpointStoreError",
    "Delta",
    "PartitionCheckpoint",
    "Restored",
    "decode_delta",
    "encode_delta",
    "restore",
]
