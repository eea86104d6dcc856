"""Exactly once under injected failures and SIGKILL, over the file-log source (>= 50 000 words)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from drpc.state.topology import TopologyState
from drpc.transactional import run
from drpc.transactional.filelog import append_lines

from .faults import kill_after_commits, word_count

WORDS = 60_000
PARTITIONS = 4


def write_words(log_dir: Path, seed: int, count: int = WORDS) -> Counter[str]:
    """Append ``count`` random words over the partitions; returns how often each came."""
    rng = random.Random(seed)
    vocabulary = [f"word{n}" for n in range(300)]
    expected: Counter[str] = Counter()
    for partition in range(PARTITIONS):
        words = [rng.choice(vocabulary) for _ in range(count // PARTITIONS)]
        append_lines(log_dir, partition, words)
        expected.update(words)
    return expected


def committed(state_dir: Path, opaque: bool) -> Counter[str]:
    state = TopologyState.at(str(state_dir))
    counts = state.opaque_map("counts") if opaque else state.transactional_map("counts")
    return Counter(dict(counts.items()))


@pytest.mark.slow
@pytest.mark.parametrize("opaque", [False, True])
def test_20_percent_of_first_attempts_failing_in_both_phases(
    every_tx_executor: str, opaque: bool, tmp_path: Path
) -> None:
    expected = write_words(tmp_path / "log", seed=7)
    markers = tmp_path / "markers"
    markers.mkdir()
    topology = word_count(str(tmp_path / "log"), str(markers), opaque)
    result = run(
        topology, state_dir=str(tmp_path / "state"), executor=every_tx_executor, max_spout_pending=3
    )
    assert committed(tmp_path / "state", opaque) == expected
    assert result.tuples == WORDS
    injected = os.listdir(markers)
    assert any(name.startswith("process") for name in injected)
    assert any(name.startswith("commit") for name in injected)
    assert result.replays["processing"] > 0 and result.replays["commit"] > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("opaque", [False, True])
def test_sigkill_at_random_points_then_restart(opaque: bool, tmp_path: Path) -> None:
    expected = write_words(tmp_path / "log", seed=11)
    state_dir = tmp_path / "state"
    env = {
        **os.environ,
        "DRPC_TEST_LOG_DIR": str(tmp_path / "log"),
        "DRPC_TEST_OPAQUE": "1" if opaque else "0",
        "DRPC_TEST_TAKE": "150",  # ~100 batches: a run lasts long enough to be killed often
    }
    env.pop("DRPC_TEST_MARKERS", None)
    topology = "tests.transactional.faults:topology"
    command = [
        sys.executable, "-m", "drpc.transactional.cli", "run", topology,
        "--state-dir", str(state_dir), "--max-spout-pending", "3",
    ]  # fmt: skip
    rng = random.Random(3)
    targets = sorted(rng.sample(range(3, 90), 4))
    kills = kill_after_commits(command, env, state_dir, "fault-words", targets, rng)
    final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert final.returncode == 0, final.stderr[-2000:]
    assert kills >= 3, "the runs finished before they could be killed; make the workload larger"
    assert committed(state_dir, opaque) == expected
