"""The driver's records in the checkpoint store (real LMDB, a real file:// store): put when
they change, the newest two kept, restored into a directory behind them and never over one
at or ahead of them, refused when the store cannot make the directory whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from drpc.errors import CheckpointCorruptError, StateError
from drpc.state import CoordinatorState, StateEnvironment, StateTxn, TransactionalMap
from drpc.state.checkpoint_store import CheckpointSettings, CheckpointStore
from drpc.state.driver_checkpoint import DriverCheckpoint, driver_folder, driver_rows

TOPOLOGY = "words"


def store_at(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(CheckpointSettings(f"file://{tmp_path / 'store'}"))


def directory(path: Path, commits: int, topology: str = TOPOLOGY) -> StateEnvironment:
    """A state directory whose coordinator committed ``commits`` txids and cached the batch
    metadata of the next, as a run does when it emits a batch."""
    env = StateEnvironment.open(str(path))
    emit(env, 1, topology)
    for txid in range(1, commits + 1):
        commit(env, txid, topology)
    return env


def emit(env: StateEnvironment, txid: int, topology: str = TOPOLOGY) -> None:
    coordinator = CoordinatorState(env, topology, plain_batch_meta=True)
    coordinator.batch_meta.get_state(txid, lambda at, previous: {"batch": at})


def commit(env: StateEnvironment, txid: int, topology: str = TOPOLOGY) -> None:
    coordinator = CoordinatorState(env, topology, plain_batch_meta=True)

    def record(txn: StateTxn) -> None:
        coordinator.record_commit(txn, txid)

    env.run_write(record, what=f"the commit of {txid}")
    emit(env, txid + 1, topology)


def last_txid(env: StateEnvironment) -> int | None:
    record = CoordinatorState(env, TOPOLOGY).last_commit()
    return None if record is None else record.txid


def test_records_are_put_only_when_they_change_and_the_newest_two_are_kept(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path)
    env = directory(tmp_path / "driver", 1)
    records = DriverCheckpoint(store, TOPOLOGY)
    assert records.put(env) is True
    assert records.put(env) is False  # nothing changed
    for txid in (2, 3):
        commit(env, txid)
        assert records.put(env) is True
    assert records.last_put == (3, 3)
    assert store.list(driver_folder(TOPOLOGY)) == [
        f"driver/{TOPOLOGY}/record-{sequence:020d}" for sequence in (2, 3)
    ]
    # a driver started later numbers its records after the store's newest
    assert DriverCheckpoint(store, TOPOLOGY).put(env) is True
    assert store.list(driver_folder(TOPOLOGY))[-1].endswith(f"record-{4:020d}")


def test_an_empty_directory_takes_the_newest_record_whole(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    source = directory(tmp_path / "driver", 3)
    DriverCheckpoint(store, TOPOLOGY).put(source)
    fresh = StateEnvironment.open(str(tmp_path / "elsewhere"))
    restored = DriverCheckpoint(store, TOPOLOGY).restore(fresh)
    assert restored is not None and restored.txid == 3
    assert last_txid(fresh) == 3
    with source.read_latest() as a, fresh.read_latest() as b:
        assert driver_rows(a) == driver_rows(b)
    # a replay of txid 4 after the move emits the batch the lost driver cached for it
    meta = CoordinatorState(fresh, TOPOLOGY, plain_batch_meta=True).batch_meta
    assert meta.get_state(4, lambda at, previous: {"batch": "new"}) == {"batch": 4}


def test_a_directory_at_or_ahead_of_the_store_is_kept(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    env = directory(tmp_path / "driver", 2)
    DriverCheckpoint(store, TOPOLOGY).put(env)
    assert DriverCheckpoint(store, TOPOLOGY).restore(env) is None  # at the record
    commit(env, 3)
    assert DriverCheckpoint(store, TOPOLOGY).restore(env) is None  # ahead of it
    assert last_txid(env) == 3
    behind = directory(tmp_path / "behind", 1)
    restored = DriverCheckpoint(store, TOPOLOGY).restore(behind)
    assert restored is not None and last_txid(behind) == 2


class DriverStopped(Exception):
    """The driver died between the store's record and the directory's commit."""


def put_then_stop(env: StateEnvironment, records: DriverCheckpoint, txid: int) -> None:
    """The commit of ``txid`` as the run writes it: the record put inside the write, the
    write then never committing."""
    coordinator = CoordinatorState(env, TOPOLOGY, plain_batch_meta=True)

    def record(txn: StateTxn) -> None:
        coordinator.record_commit(txn, txid)
        records.put(env, txn=txn)
        raise DriverStopped

    with pytest.raises(DriverStopped):
        env.run_write(record, what=f"the commit of {txid}")


def test_a_record_put_inside_a_write_holds_the_commit_before_the_directory_does(
    tmp_path: Path,
) -> None:
    store = store_at(tmp_path)
    env = directory(tmp_path / "driver", 2)
    records = DriverCheckpoint(store, TOPOLOGY)
    records.put(env)
    put_then_stop(env, records, 3)
    assert records.last_put == (2, 3)  # the store holds txid 3 ...
    assert last_txid(env) == 2  # ... the directory never did
    fresh = StateEnvironment.open(str(tmp_path / "elsewhere"))
    restored = DriverCheckpoint(store, TOPOLOGY).restore(fresh)
    assert restored is not None and restored.txid == 3


def with_totals(env: StateEnvironment) -> StateEnvironment:
    """``env`` with a map of its own, ``totals``, not in partitions."""
    env.run_write(
        lambda txn: TransactionalMap(env, "totals").handle(txn, 2).multi_put({"a": 1}),
        what="a map of the directory",
    )
    return env


def test_a_directory_one_commit_behind_keeps_its_own_maps(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    env = with_totals(directory(tmp_path / "driver", 2))
    ahead = with_totals(directory(tmp_path / "ahead", 3))
    records = DriverCheckpoint(store, TOPOLOGY)
    put_then_stop(env, records, 3)
    assert DriverCheckpoint(store, TOPOLOGY).restore(env) is None  # replays 3 on its maps
    assert last_txid(env) == 2
    with env.read_latest() as txn:
        assert TransactionalMap(env, "totals").multi_get(["a"], txn=txn) == [1]
    # two commits behind is not the stop between a put and its write: refused, as before
    put_then_stop(ahead, records, 4)
    with pytest.raises(StateError, match=r"kept maps \['totals'\] in its directory"):
        DriverCheckpoint(store, TOPOLOGY).restore(env)


def test_no_record_in_the_store_restores_nothing(tmp_path: Path) -> None:
    fresh = StateEnvironment.open(str(tmp_path / "fresh"))
    assert DriverCheckpoint(store_at(tmp_path), TOPOLOGY).restore(fresh) is None
    assert last_txid(fresh) is None


def test_a_directory_with_maps_of_its_own_or_other_topologies_is_refused(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    env = directory(tmp_path / "driver", 2)
    env.run_write(
        lambda txn: TransactionalMap(env, "totals").handle(txn, 2).multi_put({"a": 1}),
        what="a map of the directory",
    )
    DriverCheckpoint(store, TOPOLOGY).put(env)
    with pytest.raises(StateError, match=r"kept maps \['totals'\] in its directory"):
        DriverCheckpoint(store, TOPOLOGY).restore(StateEnvironment.open(str(tmp_path / "a")))

    clean = store_at(tmp_path / "clean")
    DriverCheckpoint(clean, TOPOLOGY).put(directory(tmp_path / "driver2", 2))
    shared = directory(tmp_path / "shared", 1, topology="other")
    with pytest.raises(StateError, match=r"also holds the commit records of \['other'\]"):
        DriverCheckpoint(clean, TOPOLOGY).restore(shared)
    assert CoordinatorState(shared, "other").last_commit() is not None  # left as it was


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "CRC-32 does not match"),
        (lambda data: b"DRPCDLT1" + data[8:], "first bytes are not DRPCDRV1"),
    ],
    ids=["flipped bit", "a delta, not a record"],
)
def test_a_damaged_record_is_refused_naming_it(tmp_path: Path, damage: object, says: str) -> None:
    store = store_at(tmp_path)
    DriverCheckpoint(store, TOPOLOGY).put(directory(tmp_path / "driver", 2))
    [name] = store.list(driver_folder(TOPOLOGY))
    store.put(name, damage(store.get(name)))  # type: ignore[operator]
    with pytest.raises(CheckpointCorruptError, match=says) as raised:
        DriverCheckpoint(store, TOPOLOGY).restore(StateEnvironment.open(str(tmp_path / "b")))
    assert raised.value.name == name


def test_a_record_of_another_topology_is_refused_naming_it(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    DriverCheckpoint(store, TOPOLOGY).put(directory(tmp_path / "driver", 2))
    [name] = store.list(driver_folder(TOPOLOGY))
    store.put(name.replace(f"/{TOPOLOGY}/", "/counts/"), store.get(name) or b"")
    with pytest.raises(CheckpointCorruptError, match="it is topology 'words'"):
        DriverCheckpoint(store, "counts").restore(StateEnvironment.open(str(tmp_path / "c")))
