"""Durable partitions: with a checkpoint store, a partition lost between runs or in a run is
restored from its snapshot and deltas, and the run goes on exactly once, on every executor
(real LMDB, a real file:// store; the S3 store is tested in tests/state/test_s3_store.py)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from drpc.errors import CheckpointStoreError
from drpc.state import StateEnvironment
from drpc.state.checkpoint import partition_folder
from drpc.state.checkpoint_store import CheckpointSettings, CheckpointStore
from drpc.state.keygroups import partition_of
from drpc.state.partition import partition_path, partition_root
from drpc.trident import LMDBMapState
from drpc.trident import run as run_trident

from .test_partitioned_state import listed
from .test_word_count import WORDS, ask, committed, expected_sum

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
