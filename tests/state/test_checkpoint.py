"""Durable partitions (real LMDB, a real file:// store): each apply's delta reaches the store
before the apply returns, snapshots run beside the applies, and a restore rebuilds the
partition exactly, or names the object that keeps it from doing so."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from drpc.errors import CheckpointCorruptError, CheckpointStoreError, VersionReclaimedError
from drpc.state import OpaqueMap, StateTxn, TransactionalMap
from drpc.state.checkpoint import (
    Delta,
    PartitionCheckpoint,
    decode_delta,
    delta_name,
    encode_delta,
    manifest_name,
    partition_folder,
    restore,
    snapshot_name,
)
from drpc.state.checkpoint_store import (
    CheckpointSettings,
    CheckpointStore,
    settings_from_conf,
)
from drpc.state.env import COORDINATOR_DB, MAPS_DB
from drpc.state.partition import PartitionLayout, StatePartition

LAYOUT = PartitionLayout("counts", "words", 2, 128)
FOLDER = partition_folder("counts", 1)


def store_at(tmp_path: Path, **settings: Any) -> CheckpointStore:
    return CheckpointStore(CheckpointSettings(f"file://{tmp_path / 'store'}", **settings))


def add(state_map: Any, txid: int, counts: dict[str, int]) -> Any:
    def apply(txn: StateTxn) -> Any:
        return state_map.handle(txn, txid).multi_update(
            {word: (lambda value, n=n: value + n) for word, n in counts.items()}
        )

    return apply


def counted(partition: StatePartition, name: str, txid: int | None = None) -> dict[Any, Any]:
    with partition.read(txid) as txn:
        return dict(TransactionalMap(partition.env, name, default=0).items(txn=txn))


BATCHES = [{"cat": 1}, {"cat": 2, "dog": 1}, {"emu": 4}, {"dog": 2}, {"cat": 1, "fox": 1}]


def journaled(path: Path, store: CheckpointStore) -> StatePartition:
    partition = StatePartition.open(str(path), LAYOUT, 1)
    journal = PartitionCheckpoint(store, LAYOUT, 1)
    journal.created(0)
    partition.attach(journal)
    return partition


def apply_batches(partition: StatePartition, batches: list[dict[str, int]]) -> dict[str, int]:
    """Apply each batch as the next txid, each snapshot done before the next apply (so
    which txids have one does not depend on timing)."""
    counts = TransactionalMap(partition.env, "counts", default=0)
    for batch in batches:
        txid = partition.held() + 1
        partition.apply(txid, add(counts, txid, batch))
        partition.journal.wait()  # type: ignore[union-attr]
    return counted(partition, "counts")


# -- deltas -----------------------------------------------------------------------------------


def test_a_delta_round_trips_puts_deletes_and_empty_values() -> None:
    writes = {
        MAPS_DB: {b"\x05counts\x03cat": b"\x01\x02", b"gone": None, b"empty": b""},
        COORDINATOR_DB: {b"k": b"v" * 1000},
    }
    delta = Delta("counts", 1, 7, writes)
    assert decode_delta("d", encode_delta(delta)) == delta
    assert decode_delta("d", encode_delta(Delta("counts", 1, 8, {}))).writes == {}


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda data: b"NOTDELTA" + data[8:], "not a drpc delta"),
        (lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:], "CRC-32 does not match"),
        (lambda data: data[:-9], "CRC-32 does not match"),
    ],
)
def test_a_damaged_delta_is_refused_naming_the_object(damage: Any, says: str) -> None:
    data = encode_delta(Delta("counts", 1, 7, {MAPS_DB: {b"k": b"value"}}))
    with pytest.raises(CheckpointCorruptError, match=f"'the/object'.*{says}"):
        decode_delta("the/object", damage(data))


# -- the journal ------------------------------------------------------------------------------


def test_each_apply_puts_its_delta_before_it_returns(tmp_path: Path) -> None:
    store = store_at(tmp_path, snapshot_every=100)
    partition = journaled(tmp_path / "p1", store)
    counts = TransactionalMap(partition.env, "counts", default=0)
    partition.apply(1, add(counts, 1, {"cat": 1}))
    delta = decode_delta("d1", store.get(delta_name("counts", 1, 1)) or b"")
    assert (delta.group, delta.index, delta.txid) == ("counts", 1, 1)
    assert len(delta.writes[MAPS_DB]) == 1  # the key, not the partition's own records
    assert all(not key.startswith(b"\x00") for key in delta.writes.get(COORDINATOR_DB, {}))
    partition.apply(2, add(counts, 2, {"dog": 1}))
    partition.apply(2, add(counts, 2, {"emu": 1}))  # a replay: reverted, and its delta anew
    replayed = decode_delta("d2", store.get(delta_name("counts", 1, 2)) or b"")
    # the reverted dog (back to absent) and the emu: txid 1's state plus these is txid 2's
    assert sorted(value is None for value in replayed.writes[MAPS_DB].values()) == [False, True]
    partition.env.close()


def test_a_store_past_its_retry_limit_fails_the_apply_typed(tmp_path: Path) -> None:
    blocker = tmp_path / "store"
    blocker.write_text("a file where the store's folder should be")
    store = CheckpointStore(
        CheckpointSettings(f"file://{blocker}", retry_timeout=0.2, retry_initial=0.05)
    )
    with pytest.raises(CheckpointStoreError, match="is a file, not a directory"):
        store.check()
    partition = StatePartition.open(str(tmp_path / "p1"), LAYOUT, 1)
    partition.attach(PartitionCheckpoint(store, LAYOUT, 1))
    counts = TransactionalMap(partition.env, "counts", default=0)
    with pytest.raises(CheckpointStoreError, match="could not write 'partitions/counts/p1/delta"):
        partition.apply(1, add(counts, 1, {"cat": 1}))
    partition.env.close()


def test_snapshots_come_every_n_deltas_and_retention_keeps_what_a_restore_needs(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path, snapshot_every=2)
    partition = journaled(tmp_path / "p1", store)
    apply_batches(partition, BATCHES)
    names = [name.rsplit("/", 1)[-1] for name in store.list(FOLDER)]
    # forced at txid 0 (no base yet), then every 2 deltas: at 2 and 4; the newest at or
    # before keep_from (4: no pins) is the base; everything before it went
    assert names == [
        "delta-00000000000000000005",
        "manifest-00000000000000000004",
        "snapshot-00000000000000000004",
    ]
    report = partition.journal.report()  # type: ignore[union-attr]
    assert report.store_bytes == sum(store.sizes(FOLDER).values())  # what retention left
    assert (report.last_snapshot, report.snapshot_error) == (4, None)
    assert PartitionCheckpoint(store, LAYOUT, 1).report().store_bytes == report.store_bytes
    partition.env.close()


def test_a_retention_held_back_by_a_reader_runs_once_the_reader_has_moved_on(
    tmp_path: Path,
) -> None:
    """A standby copy (or a pinned read) a commit behind the newest snapshot keeps the one
    before it as the base; once keep_from reaches the newest, the older one goes."""
    store = store_at(tmp_path, snapshot_every=2)
    partition = journaled(tmp_path / "p1", store)
    counts = TransactionalMap(partition.env, "counts", default=0)
    journal = partition.journal
    assert journal is not None
    for txid, batch in enumerate(BATCHES, start=1):  # keep_from one behind, up to txid 5
        partition.apply(txid, add(counts, txid, batch), keep_from=max(0, txid - 2))
        journal.wait()

    def kept() -> list[str]:
        return [name.rsplit("/", 1)[-1] for name in store.list(FOLDER) if "delta" not in name]

    # the snapshot at 4 came at txid 5's apply, whose keep_from was 3: the one at 2 stays
    assert kept() == [
        "manifest-00000000000000000002",
        "manifest-00000000000000000004",
        "snapshot-00000000000000000002",
        "snapshot-00000000000000000004",
    ]
    partition.apply(6, add(counts, 6, {"cat": 1}), keep_from=4)  # the reader moved on
    journal.wait()
    assert kept() == ["manifest-00000000000000000004", "snapshot-00000000000000000004"]
    assert journal.report().store_bytes == sum(store.sizes(FOLDER).values())
    partition.env.close()


def test_the_deltas_a_standby_copy_catches_up_from_stay_without_the_snapshots_before(
    tmp_path: Path,
) -> None:
    """A standby copy at txid 3 needs the deltas after 3, not a snapshot before the newest:
    retention keeps those deltas and still deletes the older snapshot."""
    store = store_at(tmp_path, snapshot_every=2)
    partition = journaled(tmp_path / "p1", store)
    counts = TransactionalMap(partition.env, "counts", default=0)
    journal = partition.journal
    assert journal is not None
    for txid, batch in enumerate(BATCHES, start=1):
        partition.apply(txid, add(counts, txid, batch), deltas_from=min(txid - 1, 3))
        journal.wait()
    assert [name.rsplit("/", 1)[-1] for name in store.list(FOLDER)] == [
        "delta-00000000000000000004",
        "delta-00000000000000000005",
        "manifest-00000000000000000004",
        "snapshot-00000000000000000004",
    ]
    partition.env.close()


def test_a_snapshot_never_holds_a_txid_the_apply_under_way_writes(tmp_path: Path) -> None:
    store = store_at(tmp_path, snapshot_every=1)
    partition = journaled(tmp_path / "p1", store)
    counts = TransactionalMap(partition.env, "counts", default=0)
    for txid, batch in enumerate(BATCHES[:3], start=1):
        partition.apply(txid, add(counts, txid, batch))
        partition.journal.wait()  # type: ignore[union-attr]
    # the snapshot begun as txid 3 applied holds txid 2, never part of 3
    manifest = json.loads(store.get(manifest_name("counts", 1, 2)) or b"{}")
    assert manifest["txid"] == 2
    at_two = counted(partition, "counts", 2)
    partition.env.close()
    store.delete([delta_name("counts", 1, 3)])
    restored = restore(store, LAYOUT, 1, str(tmp_path / "new"), 2)
    assert (restored.snapshot, restored.deltas) == (2, 0)
    rebuilt = StatePartition.open(str(tmp_path / "new"), LAYOUT, 1)
    assert counted(rebuilt, "counts") == at_two == {"cat": 3, "dog": 1}
    rebuilt.env.close()


# -- restoring --------------------------------------------------------------------------------


def test_a_restore_rebuilds_the_partition_exactly_from_snapshot_and_deltas(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path, snapshot_every=2)
    partition = journaled(tmp_path / "p1", store)
    expected = apply_batches(partition, BATCHES)
    partition.env.close()
    restored = restore(store, LAYOUT, 1, str(tmp_path / "new"), 5)
    assert (restored.snapshot, restored.deltas, restored.caught_up) == (4, 1, False)
    rebuilt = StatePartition.open(str(tmp_path / "new"), LAYOUT, 1)
    assert rebuilt.held() == 5
    assert counted(rebuilt, "counts") == expected
    assert counted(rebuilt, "counts", 4) == {"cat": 3, "dog": 3, "emu": 4}
    with pytest.raises(VersionReclaimedError):  # before its snapshot: not kept
        counted(rebuilt, "counts", 2)
    rebuilt.env.close()


def test_a_snapshot_larger_than_lmdb_s_default_map_restores(tmp_path: Path) -> None:
    """LMDB opens a file with a map of its own default size (10 MiB) unless told; a restore
    writes to the snapshot it downloaded, so it must give it room past its size."""
    store = store_at(tmp_path, snapshot_every=1)
    partition = journaled(tmp_path / "p1", store)
    big = TransactionalMap(partition.env, "big")
    values = {f"k{n}": f"{n}" * 400_000 for n in range(1, 31)}  # about 14 MB
    for txid, batch in ((1, values), (2, {"k1": "small"})):
        partition.apply(
            txid, lambda txn, txid=txid, batch=batch: big.handle(txn, txid).multi_put(batch)
        )
        partition.journal.wait()  # type: ignore[union-attr]
    partition.env.close()
    [snapshot] = [n for n in store.list(FOLDER) if "/snapshot-" in n]
    assert store.sizes(FOLDER)[snapshot] > 10 * 1024 * 1024
    restored = restore(store, LAYOUT, 1, str(tmp_path / "new"), 2)
    assert (restored.snapshot, restored.deltas) == (1, 1)
    rebuilt = StatePartition.open(str(tmp_path / "new"), LAYOUT, 1)
    with rebuilt.read(2) as txn:
        found = dict(TransactionalMap(rebuilt.env, "big").items(txn=txn))
    assert found == {**values, "k1": "small"}
    rebuilt.env.close()


def test_a_restore_stops_at_the_global_commit_whatever_lies_after_it(tmp_path: Path) -> None:
    store = store_at(tmp_path, snapshot_every=100)
    partition = journaled(tmp_path / "p1", store)
    apply_batches(partition, BATCHES)  # txid 5's global commit never happened, say
    partition.env.close()
    restore(store, LAYOUT, 1, str(tmp_path / "new"), 4, keep_from=1)
    rebuilt = StatePartition.open(str(tmp_path / "new"), LAYOUT, 1)
    assert rebuilt.held() == 4
    assert counted(rebuilt, "counts") == {"cat": 3, "dog": 3, "emu": 4}
    # rebuilt from its creation: each txid its own version, readable from keep_from on
    assert counted(rebuilt, "counts", 1) == {"cat": 1}
    assert counted(rebuilt, "counts", 2) == {"cat": 3, "dog": 1}
    rebuilt.env.close()


def test_a_copy_still_there_catches_up_from_the_deltas_alone(tmp_path: Path) -> None:
    store = store_at(tmp_path, snapshot_every=100)
    partition = journaled(tmp_path / "p1", store)
    apply_batches(partition, BATCHES[:2])
    partition.env.close()
    old = tmp_path / "old"
    os.rename(tmp_path / "p1", old)  # a copy holding txid 2
    partition = StatePartition.open(str(old), LAYOUT, 1)
    partition.attach(PartitionCheckpoint(store, LAYOUT, 1))
    expected = apply_batches(partition, BATCHES[2:])
    partition.env.close()
    os.rename(old, tmp_path / "p1-later")
    stale = tmp_path / "stale"
    # the copy as it was at txid 2: rebuild it from the store up to 2, then catch it up
    restore(store, LAYOUT, 1, str(stale), 2)
    restored = restore(store, LAYOUT, 1, str(stale), 5)
    assert (restored.caught_up, restored.deltas, restored.snapshot) == (True, 3, None)
    rebuilt = StatePartition.open(str(stale), LAYOUT, 1)
    assert counted(rebuilt, "counts") == expected
    rebuilt.env.close()


def test_a_gap_in_the_deltas_fails_the_restore_naming_the_missing_delta(tmp_path: Path) -> None:
    store = store_at(tmp_path, snapshot_every=100)
    partition = journaled(tmp_path / "p1", store)
    apply_batches(partition, BATCHES)
    partition.env.close()
    store.delete([delta_name("counts", 1, 3)])
    with pytest.raises(CheckpointCorruptError, match=r"delta-00000000000000000003'.*missing"):
        restore(store, LAYOUT, 1, str(tmp_path / "new"), 5)
    assert not (tmp_path / "new").exists()  # nothing half-made
    assert not [entry for entry in os.listdir(tmp_path) if ".restore-" in entry]


def test_a_damaged_snapshot_fails_the_restore_naming_it(tmp_path: Path) -> None:
    store = store_at(tmp_path, snapshot_every=2)
    partition = journaled(tmp_path / "p1", store)
    apply_batches(partition, BATCHES)
    partition.env.close()
    name = snapshot_name("counts", 1, 4)
    data = bytearray(store.get(name) or b"")
    data[100] ^= 0xFF
    store.put(name, bytes(data))
    with pytest.raises(CheckpointCorruptError, match=r"snapshot-00000000000000000004'.*CRC-32"):
        restore(store, LAYOUT, 1, str(tmp_path / "new"), 5)


def test_nothing_to_restore_from_is_said_naming_the_partition(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    store.check()
    with pytest.raises(
        CheckpointCorruptError, match=r"'partitions/counts/p1/'.*nothing to rebuild"
    ):
        restore(store, LAYOUT, 1, str(tmp_path / "new"), 3)


def test_an_opaque_map_restores_its_previous_values_too(tmp_path: Path) -> None:
    store = store_at(tmp_path, snapshot_every=3)
    partition = journaled(tmp_path / "p1", store)
    totals = OpaqueMap(partition.env, "totals", default=0)
    for txid in range(1, 6):
        partition.apply(
            txid,
            lambda txn, txid=txid: totals.handle(txn, txid).multi_update(
                {"sum": lambda value, txid=txid: value + txid}
            ),
        )
    partition.apply(5, lambda txn: totals.handle(txn, 5).multi_update({"sum": lambda v: v + 100}))
    partition.journal.wait()  # type: ignore[union-attr]
    with partition.read(None) as txn:
        expected = totals.stored("sum", txn=txn)
        latest = dict(totals.items(txn=txn))
    partition.env.close()
    restore(store, LAYOUT, 1, str(tmp_path / "new"), 5)
    rebuilt = StatePartition.open(str(tmp_path / "new"), LAYOUT, 1)
    rebuilt_totals = OpaqueMap(rebuilt.env, "totals", default=0)
    with rebuilt.read(None) as txn:
        assert dict(rebuilt_totals.items(txn=txn)) == latest == {"sum": 110}
        assert rebuilt_totals.stored("sum", txn=txn) == expected
    # its replay of txid 5 recomputes from the previous value, as the original would
    rebuilt.apply(
        5, lambda txn: rebuilt_totals.handle(txn, 5).multi_update({"sum": lambda v: v + 1})
    )
    with rebuilt.read(None) as txn:
        assert dict(rebuilt_totals.items(txn=txn)) == {"sum": 11}
    rebuilt.env.close()


# -- settings ---------------------------------------------------------------------------------


def test_settings_refuse_what_is_not_a_store_and_never_show_the_secret() -> None:
    for uri, says in [
        ("/plain/path", "give a file:// or s3:// URI"),
        ("hdfs://nn/x", "give a file:// or s3:// URI"),
        ("s3:///prefix", "name the bucket"),
        ("file://relative/x", "absolute path"),
    ]:
        with pytest.raises(CheckpointStoreError, match=says):
            CheckpointSettings(uri)
    with pytest.raises(CheckpointStoreError, match="snapshot_every must be >= 1"):
        CheckpointSettings("s3://b/p", snapshot_every=0)
    settings = settings_from_conf(
        None,
        {
            "drpc.checkpoint.dir": "s3://bucket/run",
            "drpc.checkpoint.s3.endpoint": "http://127.0.0.1:9000",
            "drpc.checkpoint.s3.access.key": "AKIDEXAMPLE",
            "drpc.checkpoint.s3.secret.key": "wJalrXUtnFEMI-very-secret",
            "drpc.checkpoint.snapshot.deltas": "4",
        },
    )
    assert settings is not None
    assert settings.snapshot_every == 4
    assert "very-secret" not in repr(settings)
    assert "very-secret" not in settings.describe()
    assert settings_from_conf(None, {}) is None
    with pytest.raises(CheckpointStoreError, match=r"drpc\.checkpoint\.retry\.timeout must be a"):
        settings_from_conf("file:///x", {"drpc.checkpoint.retry.timeout": "soon"})
