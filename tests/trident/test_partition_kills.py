"""A process SIGKILLed between two partitions' commits of one txid: partition 0 holds the txid,
partition 1 does not, the global record does not claim it; the replay reverts and applies it
again where it was, so every word counts once, on transactional and opaque maps.

On ``spark`` the victim is the resident Spark task owning partition 1: the resident job
restarts and the run replays the txid on its own. On ``local`` it is the run's process
itself (the partitions live there): a new run resumes from the global record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from drpc import Fields
from drpc.state import CoordinatorState, StateEnvironment
from drpc.state.keygroups import partition_of
from drpc.state.partition import held_txid, partition_path, partition_root
from drpc.trident import Count, TridentTopology, run
from tests.transactional.test_faults import write_words

from .ops import KillsItsFirstReader
from .partition_kills import KILLED_TXID, PARTITIONS, TXID, counts, word_count
from .test_word_count import committed


def killed(markers: Path) -> tuple[int, int]:
    """What partition 0 held when the victim died, and the pid that died."""
    held, pid = (markers / "killed").read_text().split()
    return int(held), int(pid)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
@pytest.mark.parametrize("lose_disk", [False, True], ids=["disk-kept", "disk-lost"])
def test_a_resident_task_killed_between_two_partitions_commits(
    spark_session: object, tmp_path: Path, opaque: bool, lose_disk: bool
) -> None:
    """With its disk kept, the new task finds the partition where it was; with the disk
    lost too, the run restores it from its checkpoint store at the global commit."""
    expected = write_words(tmp_path / "log", seed=23, count=3_000)
    markers = tmp_path / "markers"
    markers.mkdir()
    state_dir = tmp_path / "state"
    topology = word_count(str(tmp_path / "log"), str(markers), opaque, lose_disk=lose_disk)
    durable = {
        "checkpoint_dir": f"file://{tmp_path / 'store'}",
        "conf": {"drpc.checkpoint.snapshot.deltas": 2},
    }
    result = run(
        topology,
        state_dir=str(state_dir),
        executor="spark",
        max_spout_pending=2,
        **(durable if lose_disk else {}),
    )
    held, pid = killed(markers)
    assert held == KILLED_TXID  # partition 0 had applied the txid when partition 1's task died
    assert pid != os.getpid()  # a resident task's process, not this driver
    assert result.replays["commit"] >= 1
    assert KILLED_TXID in [commit.txid for commit in result.commits]
    assert held_txid(partition_path(partition_root(str(state_dir)), "counts", 1)) == (
        result.last_txid
    )
    assert committed(state_dir, counts(opaque)) == dict(expected)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_resident_task_killed_while_the_run_starts(spark_session: object, tmp_path: Path) -> None:
    """The run's start (placing its partitions, warming the tasks' readers) is done again on
    the restarted resident job: the run goes on and counts every word once."""
    expected = write_words(tmp_path / "log", seed=31, count=1_000)
    markers = tmp_path / "markers"
    markers.mkdir()
    state_dir = tmp_path / "state"
    topology = TridentTopology()
    (
        topology.new_stream(
            "reader-kill-words",
            KillsItsFirstReader(str(tmp_path / "log"), Fields("word"), 50, str(markers)),
            parallelism=2,
        )
        .group_by(["word"])
        .persistent_aggregate(counts(False), Count(), ["count"])
        .parallelism_hint(PARTITIONS)
    )
    result = run(topology, state_dir=str(state_dir), executor="spark", max_spout_pending=2)
    died = int((markers / "reader-killed").read_text())
    assert died != os.getpid()  # a resident task's process, not this driver
    assert result.commits[0].txid == 1  # nothing was lost to the restart
    assert committed(state_dir, counts(False)) == dict(expected)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_a_local_run_killed_between_two_partitions_commits_resumes_exactly(
    tmp_path: Path, opaque: bool
) -> None:
    expected = write_words(tmp_path / "log", seed=29, count=3_000)
    markers = tmp_path / "markers"
    markers.mkdir()
    state_dir = tmp_path / "state"
    env = {
        **os.environ,
        "DRPC_TEST_LOG_DIR": str(tmp_path / "log"),
        "DRPC_TEST_MARKERS": str(markers),
        "DRPC_TEST_OPAQUE": "1" if opaque else "0",
        "DRPC_STATE_DIR": str(state_dir),
    }
    command = [
        sys.executable, "-m", "drpc.transactional.cli", "run",
        "tests.trident.partition_kills:topology", "--state-dir", str(state_dir),
        "--max-spout-pending", "2",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    died_pid = process.pid
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == -9, stderr[-3000:]  # the run's own process was the victim
    held, pid = killed(markers)
    assert held == KILLED_TXID and pid == died_pid
    # Partition 0 holds the txid, the global record does not, and partition 1 is behind.
    root = partition_root(str(state_dir))
    assert held_txid(partition_path(root, "counts", 0)) == KILLED_TXID
    assert held_txid(partition_path(root, "counts", 1)) == KILLED_TXID - 1
    record = CoordinatorState(StateEnvironment.open(state_dir), TXID).next_txid()
    assert record == KILLED_TXID
    topology = word_count(str(tmp_path / "log"), str(markers), opaque)
    final = run(topology, state_dir=str(state_dir), max_spout_pending=2)
    assert final.commits[0].txid == KILLED_TXID
    assert committed(state_dir, counts(opaque)) == dict(expected)
    assert {partition_of(word, PARTITIONS) for word in expected} == set(range(PARTITIONS))
