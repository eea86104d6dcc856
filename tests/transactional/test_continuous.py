"""Runs that go on forever: new input wakes an idle stream, batches follow the input's pace,
an idle stream costs next to nothing, and every committed batch says where its time went."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from drpc import Fields
from drpc.executors.resident.executor import resident_cluster_of
from drpc.transactional import CommitInfo, TransactionalRunner
from drpc.transactional.filelog import FileLogTransactionalSpout, append_lines
from drpc.transactional.run import MIN_IDLE_WAIT, _Metadata
from drpc.trident import Count, TridentTopology
from drpc.trident import run as trident_run
from tests.transactional.faults import word_count
from tests.transactional.running import running_forever
from tests.transactional.test_faults import committed, write_words
from tests.trident.faults import TXID, counts_state
from tests.trident.ops import KillsItsProcessOnce
from tests.trident.test_word_count import committed as committed_map
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)


@contextmanager
def forever(
    tmp_path: Path, executor: str, take: int = 1000, idle_interval: float = 60.0
) -> Iterator[list[CommitInfo]]:
    """A run of the fault word count over ``tmp_path/"log"`` that goes on until the block
    ends; yields its commits as they land."""
    log_dir = tmp_path / "log"
    for partition in range(2):
        append_lines(log_dir, partition, [])
    runner = TransactionalRunner(
        word_count(str(log_dir), take=take), state_dir=str(tmp_path / "state"), executor=executor
    )
    with runner, running_forever(runner, idle_interval) as commits:
        yield commits


def committed_words(state: Path) -> Counter[str]:
    return Counter(committed_map(state, counts_state(False)))


def idle(commits: list[CommitInfo]) -> bool:
    return bool(commits) and commits[-1].tuples == 0


def test_an_idle_stream_wakes_as_soon_as_a_partition_file_grows(
    tx_executor: str, tmp_path: Path
) -> None:
    """Idle, the run looks again only after idle_interval (an hour here): what counts the
    appended words is the file log's watch waking it."""
    with forever(tmp_path, tx_executor, idle_interval=3600.0) as commits:
        wait_until(lambda: idle(commits), 60, "the run idle")
        for round in range(3):
            append_lines(tmp_path / "log", round % 2, ["cat", "dog", "cat"])
            wait_until(
                lambda round=round: (
                    committed(tmp_path / "state", False)
                    == Counter({"cat": 2 * (round + 1), "dog": round + 1})
                ),
                60,
                f"round {round} counted",
            )
            wait_until(lambda: idle(commits), 60, "the run idle again")


def test_batches_are_small_while_input_trickles_and_full_under_a_flood(tmp_path: Path) -> None:
    with forever(tmp_path, "local", take=100) as commits:
        wait_until(lambda: idle(commits), 60, "the run idle")
        for word in ["w1", "w2", "w3", "w4", "w5"]:  # a trickle: a line, then its batch
            before = len(commits)
            append_lines(tmp_path / "log", 0, [word])
            wait_until(lambda before=before: sum(c.tuples for c in commits[before:]) == 1, 60)
        trickled = len(commits)
        append_lines(tmp_path / "log", 0, [f"f{i}" for i in range(1000)])  # a flood
        append_lines(tmp_path / "log", 1, [f"g{i}" for i in range(1000)])
        wait_until(lambda: sum(c.tuples for c in commits) == 2005, 60, "the flood counted")
    flood = [commit.tuples for commit in commits[trickled:] if commit.tuples]
    assert max(flood) == 200  # 100 lines a partition a batch, the spout's most
    assert flood.count(200) >= 9 and sum(flood) == 2000


def test_an_idle_stream_costs_a_commit_an_idle_interval(tmp_path: Path) -> None:
    with forever(tmp_path, "local", idle_interval=0.5) as commits:
        wait_until(lambda: idle(commits), 60, "the run idle")
        before = len(commits)
        time.sleep(2.0)
        empty = len(commits) - before
    assert 1 <= empty <= 5  # about one empty batch every half second, not a busy loop


def test_every_committed_batch_says_where_its_time_went(tx_executor: str, tmp_path: Path) -> None:
    append_lines(tmp_path / "log", 0, ["a", "b", "c"])
    runner = TransactionalRunner(
        word_count(str(tmp_path / "log")), state_dir=str(tmp_path / "state"), executor=tx_executor
    )
    with runner:
        result = runner.run()
        status = runner.status()
    assert [commit.tuples for commit in result.commits] == [3, 0]
    for commit in result.commits:
        phases = commit.phases
        assert phases is not None
        assert min(phases.as_dict().values()) >= 0 and phases.process > 0
        assert phases.commit == commit.seconds
    assert status["last_phases"] == result.commits[-1].phases.as_dict()  # type: ignore[union-attr]
    assert status["slowest"]["txid"] in {commit.txid for commit in result.commits}


def test_an_unwatched_source_is_polled_with_a_doubling_backoff() -> None:
    metadata = _Metadata(state=None, coordinator=None)  # type: ignore[arg-type]
    waits = []
    for _ in range(12):
        before = time.monotonic()
        metadata.went_idle(woken_since=False, idle_interval=0.5)
        waits.append(round(metadata.resume_at - before, 3))
    assert waits[:4] == [MIN_IDLE_WAIT, 0.002, 0.004, 0.008]
    assert waits[-1] == 0.5 and max(waits) == 0.5
    metadata.got_input()
    metadata.went_idle(woken_since=True, idle_interval=0.5)  # woken meanwhile: not idle
    assert metadata.backoff == MIN_IDLE_WAIT
    metadata.watching = True
    now = time.monotonic()
    metadata.went_idle(woken_since=False, idle_interval=0.5)
    assert 0.49 <= metadata.resume_at - now <= 0.51  # watched: until woken, at most that long
    metadata.woken()
    assert metadata.resume_at == 0.0


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("spark_session")
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "general"])
def test_a_resident_worker_killed_mid_batch_loses_nothing_and_counts_nothing_twice(
    fused: bool, tmp_path: Path
) -> None:
    """Trident's compiled path (a call per emitter task and batch) and the general one (the
    plan's stages as calls): the resident task running a batch SIGKILLs itself midway, the
    batch fails, the resident job comes back, the batch is replayed, and a run reopening
    the directory adds nothing."""
    expected = write_words(tmp_path / "log", seed=41, count=8_000)
    markers = tmp_path / "markers"
    markers.mkdir()
    topology = TridentTopology()
    (
        topology.new_stream(
            TXID, FileLogTransactionalSpout(tmp_path / "log", Fields("word"), 200), 2
        )
        .each(["word"], KillsItsProcessOnce(str(markers), "word7"))
        .group_by(["word"])
        .persistent_aggregate(counts_state(False), Count(), ["count"])
    )
    state = tmp_path / "state"
    cluster = resident_cluster_of(None, None, 120.0)
    restarts = cluster.restarts
    result = trident_run(
        topology, state_dir=str(state), executor="spark", fused=fused, max_spout_pending=2
    )
    assert (markers / "kill-word7").exists() and cluster.restarts > restarts
    assert result.replays["processing"] >= 1  # the batch the task died in
    assert committed_words(state) == expected
    again = trident_run(topology, state_dir=str(state), executor="spark", fused=fused)
    assert [commit.tuples for commit in again.commits] == [0]
    assert committed_words(state) == expected


def test_reading_a_file_log_s_ranges_needs_no_watchdog() -> None:
    """What a Spark executor imports to read ranges: the watcher's library only where a
    coordinator watches (executors shipped without it still run the batches)."""
    code = (
        "import sys; import drpc.transactional.filelog, drpc.trident.fused, "
        "drpc.transactional.spark_backend, drpc.executors.resident.stages; "
        "print('watchdog' in sys.modules)"
    )
    imported = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert imported.stdout.strip() == "False"
