"""Durable partitions: with a checkpoint store, a partition lost between runs or in a run is
restored from its snapshot and deltas, and the run goes on exactly once, on every executor
(real LMDB, a real file:// store; the S3 store is tested in tests/state/test_s3_store.py)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from drpc import Fields
from drpc.errors import CheckpointStoreError, InvalidTopologyError, StateError
from drpc.state import StateEnvironment
from drpc.state.checkpoint import partition_folder
from drpc.state.checkpoint_store import CheckpointSettings, CheckpointStore
from drpc.state.driver_checkpoint import driver_folder
from drpc.state.keygroups import partition_of
from drpc.state.partition import partition_path, partition_root
from drpc.transactional import MemoryTransactionalSpout, TransactionalRunner
from drpc.trident import Count, LMDBMapState, TridentTopology, transactional_topology
from drpc.trident import run as run_trident

from .ops import Split
from .test_partitioned_state import listed
from .test_word_count import DATA, WORDS, ask, committed, expected_sum

SNAPSHOT_EVERY = {"drpc.checkpoint.snapshot.deltas": 2}


def close_state(tmp_path: Path) -> None:
    """Close every environment this process has open under ``tmp_path`` (a run's readers)."""
    for env in StateEnvironment.open_environments():
        if env.path.startswith(str(tmp_path)):
            env.close()


def test_a_lost_partition_is_restored_and_the_run_counts_exactly_once(
    every_tx_executor: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state_dir = tmp_path / "state"
    store = f"file://{tmp_path / 'store'}"
    topology = listed(3)
    options = {"executor": every_tx_executor, "checkpoint_dir": store, "conf": SNAPSHOT_EVERY}
    first = run_trident(topology, state_dir=str(state_dir), max_batches=2, **options)
    assert first.last_txid == 2
    lost = partition_of("the", 3)
    close_state(tmp_path)
    shutil.rmtree(partition_path(partition_root(str(state_dir)), "word-counts", lost))
    with caplog.at_level(logging.WARNING, logger="drpc.transactional.partitions"):
        run_trident(topology, state_dir=str(state_dir), **options)
    close_state(tmp_path)
    assert f"restoring partition {lost} of 'word-counts' at txid 2" in caplog.text
    assert committed(state_dir, LMDBMapState.transactional("word-counts")) == dict(WORDS)
    assert ask(topology, state_dir, every_tx_executor, "the cow") == [expected_sum("the cow")]
    names = CheckpointStore(CheckpointSettings(store)).list(partition_folder("word-counts", lost))
    assert any("/delta-" in name for name in names)


def test_a_run_refuses_a_store_it_cannot_use_before_it_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(CheckpointStoreError, match="is a file, not a directory"):
        run_trident(
            listed(3), state_dir=str(tmp_path / "state"), checkpoint_dir=f"file://{blocker}"
        )


@pytest.mark.parametrize("record_lost", [False, True], ids=["record put", "last record lost"])
def test_a_driver_on_an_empty_directory_continues_from_the_store_exactly_once(
    every_tx_executor: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, record_lost: bool
) -> None:
    """The driver's host is lost with its disk: a new driver on an empty directory takes the
    global record and the coordinator's state from the store, its partitions restored. With
    ``record_lost`` the driver died after the global commit of txid 2 but before its record
    reached the store: the store's newest says txid 1 with txid 2's batch metadata, so txid 2
    replays the same batch and nothing counts twice."""
    store = f"file://{tmp_path / 'store'}"
    topology = listed(3)
    options = {"executor": every_tx_executor, "checkpoint_dir": store, "conf": SNAPSHOT_EVERY}
    first = run_trident(topology, state_dir=str(tmp_path / "lost"), max_batches=2, **options)
    assert first.last_txid == 2
    close_state(tmp_path)
    shutil.rmtree(tmp_path / "lost")
    records = CheckpointStore(CheckpointSettings(store))
    names = records.list(driver_folder(first.topology_id))
    assert len(names) == 2  # the older are deleted
    if record_lost:
        records.delete(names[-1:])
    state_dir = tmp_path / "elsewhere"
    with caplog.at_level(logging.WARNING):
        second = run_trident(topology, state_dir=str(state_dir), **options)
    close_state(tmp_path)
    resumed_at, record = (1, names[-2]) if record_lost else (2, names[-1])
    assert f"restored from the checkpoint store's {record} at txid {resumed_at}" in caplog.text
    assert second.commits[0].txid == resumed_at + 1
    assert committed(state_dir, LMDBMapState.transactional("word-counts")) == dict(WORDS)
    assert ask(topology, state_dir, every_tx_executor, "the cow") == [expected_sum("the cow")]


def test_a_driver_record_of_a_directory_with_maps_of_its_own_is_refused(tmp_path: Path) -> None:
    """A state that is not partitioned lives in the driver's directory and is not in the
    store: a new driver refuses to continue without it rather than count from zero."""
    store = f"file://{tmp_path / 'store'}"
    topology = TridentTopology()
    words = topology.new_stream(
        "word-count", MemoryTransactionalSpout(DATA, Fields("sentence"), 3), parallelism=2
    ).each(["sentence"], Split(), ["word"])
    words.group_by(["word"]).persistent_aggregate(
        LMDBMapState.transactional("word-counts"), Count(), ["count"]
    ).parallelism_hint(3)
    words.group_by(["word"]).persistent_aggregate(
        LMDBMapState.transactional("directory-counts"), Count(), ["count"]
    )
    run_trident(topology, state_dir=str(tmp_path / "lost"), max_batches=1, checkpoint_dir=store)
    close_state(tmp_path)
    with pytest.raises(StateError, match=r"kept maps \['directory-counts'\] in its directory"):
        run_trident(topology, state_dir=str(tmp_path / "elsewhere"), checkpoint_dir=store)


def test_a_checkpoint_store_for_a_topology_without_partitioned_state_is_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(InvalidTopologyError, match="keeps no partitioned state"):
        run_trident(
            listed(1),
            state_dir=str(tmp_path / "state"),
            checkpoint_dir=f"file://{tmp_path / 'store'}",
        )


def test_the_status_shows_the_store_the_snapshots_and_the_restores(tmp_path: Path) -> None:
    store = f"file://{tmp_path / 'store'}"
    topology = listed(3)
    run_trident(topology, state_dir=str(tmp_path / "lost"), max_batches=3, checkpoint_dir=store)
    close_state(tmp_path)
    shutil.rmtree(tmp_path / "lost")
    state_dir = tmp_path / "elsewhere"
    runner = TransactionalRunner(
        transactional_topology(topology, str(state_dir)),
        state_dir=str(state_dir),
        checkpoint_dir=store,
        conf=SNAPSHOT_EVERY,
    )
    with runner:
        runner.run()
        status = runner.status()
    close_state(tmp_path)
    checkpoint = status["checkpoint"]
    assert checkpoint["store"] == store and checkpoint["waiting_since"] is None
    assert checkpoint["driver_restore"]["txid"] == 3
    assert checkpoint["driver_restore"]["record"].startswith("driver/word-count/record-")
    restored = checkpoint["last_restore"]
    assert restored["group"] == "word-counts" and restored["txid"] == 3
    assert restored["seconds"] > 0 and restored["snapshot"] == 0  # the first run's one
    assert checkpoint["record"]["txid"] == status["last_txid"] > 3
    partitions = status["partitions"]
    assert [entry["index"] for entry in partitions] == [0, 1, 2]
    for entry in partitions:
        assert entry["snapshot"] is not None and entry["snapshot_error"] is None
        assert entry["store_bytes"] > 0
    assert checkpoint["bytes"] > sum(entry["store_bytes"] for entry in partitions)  # + records
