"""Trident exactly once as the transactional topologies prove it: runs SIGKILLed at random
points then restarted, and a state directory whose map grows during the run; the committed
counts equal the input, on both executors. A batch slower than its tuple-tree timeout stops
a local run with an error naming the setting instead of replaying forever."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from drpc import Fields
from drpc.errors import TransactionalError
from drpc.examples.transactional_global_count import DATA
from drpc.state import StateEnvironment
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import Count, LMDBMapState, TridentTopology, run, transactional_topology
from tests import ahead
from tests.conftest import SPARK_TEST_MASTER
from tests.state.processes import kill_writer_mid_publish
from tests.transactional.test_faults import write_words
from tests.transactional.test_growth import (  # noqa: F401  (pytest fixtures)
    LEVELS,
    Growth,
    capacity,
    growth,
    run_level,
    write_kind,
)

from .faults import counts_state, word_count
from .killed_runs import TAKE, KilledRuns
from .ops import SlowFilter
from .test_word_count import committed

RETRYING_MASTER = "local[2,2]"  # two attempts per Spark task
# Each Spark run starts a JVM (40-100 s on the loaded 2-core machine), so one kill there. The
# opaque file log on the resident tasks takes the general path; the transactional one as
# Spark jobs Trident's compiled path (drpc.trident.fused); flaky: its killed runs fail the
# first attempt of every Spark task midway under local[2,2], so Spark retries each task and
# a partial count that doubled would show in the final counts.
SIGKILL_CASES = {
    "local-transactional": KilledRuns("local", None, False, 20_000, (3, 9, 17, 28), False),
    "local-opaque": KilledRuns("local", None, True, 20_000, (4, 11, 20, 30), False),
    "spark-opaque": KilledRuns("spark", SPARK_TEST_MASTER, True, 6_000, (2,), False),
    "spark-batch-fused-retried": KilledRuns(
        "spark-batch", RETRYING_MASTER, False, 6_000, (2,), True
    ),
}


def _killed_early(case: KilledRuns) -> Callable[[Path], ahead.Command]:
    def prepare(workdir: Path) -> ahead.Command:
        return ahead.Command(
            [sys.executable, "-m", "tests.trident.killed_runs", str(workdir), case.to_json()]
        )

    return prepare


KILLED_EARLY = {
    case_id: ahead.register(f"trident-killed-{case_id}", _killed_early(case), timeout=300)
    for case_id, case in SIGKILL_CASES.items()
    if case.executor != "local"
}
"""A Spark case's killed runs start early in the session (tests/ahead.py): their JVM starts
beside the other tests, and the case runs last."""


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            case,
            id=case_id,
            marks=[pytest.mark.spark, pytest.mark.ahead(KILLED_EARLY[case_id].name)]
            if case_id in KILLED_EARLY
            else [],
        )
        for case_id, case in SIGKILL_CASES.items()
    ],
)
def test_sigkill_at_random_points_then_restart(
    case: KilledRuns,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> None:
    """Runs of the command line SIGKILLed, then a run in this process (on the shared Spark
    session for spark) finishes the input."""
    if case.executor == "local":
        workdir = tmp_path
        kills, expected = case.run(workdir)
    else:
        early = KILLED_EARLY[request.node.callspec.id].finish(tmp_path_factory)
        assert early.returncode == 0, early.stderr[-3000:]
        report = json.loads(early.stdout)
        workdir, kills, expected = early.workdir, report["kills"], Counter(report["expected"])
    assert kills == len(case.targets), "a run finished before it was killed; make the input larger"
    if case.executor != "local":
        request.getfixturevalue("spark_session")
    state_dir = workdir / "state"
    topology = word_count(str(workdir / "log"), case.opaque, TAKE)
    final = run(topology, state_dir=str(state_dir), executor=case.executor, max_spout_pending=3)
    assert final.commits and final.commits[0].txid > case.targets[-1]  # it resumed after the kills
    assert committed(state_dir, counts_state(case.opaque)) == dict(expected)


def test_a_run_resumes_after_a_commit_whose_writer_died_before_publishing_it(
    tmp_path: Path,
) -> None:
    """The window the SIGKILL test above hit by chance under load, made certain: LMDB's
    readers do not see that commit until a write repairs the lock file, so a runner that
    read where to resume first would replay txid 1 against a state at txid 2 forever."""
    expected = write_words(tmp_path / "log", seed=23, count=2_000)
    state_dir = tmp_path / "state"
    env = StateEnvironment.open(state_dir)
    kill_writer_mid_publish(env, state_dir, "trident-then-hold", str(tmp_path / "log"))
    topology = word_count(str(tmp_path / "log"), False, TAKE)
    final = run(topology, state_dir=str(state_dir), executor="local", max_spout_pending=3)
    assert final.commits and final.commits[0].txid == 2
    assert committed(state_dir, counts_state(False)) == dict(expected)


def growing_word_count(directory: Path) -> object:
    topology = TridentTopology()
    (
        topology.new_stream("growing-words", MemoryTransactionalSpout(DATA, Fields("word"), 3), 2)
        .group_by(["word"])
        .persistent_aggregate(LMDBMapState.transactional("counts"), Count(), ["count"])
    )
    return transactional_topology(topology, str(directory / "state"))


@pytest.mark.timeout(300)
def test_the_map_growing_at_any_write_of_a_run_commits_exactly_the_input(
    tx_executor: str,
    capacity: int,  # noqa: F811  (the fixture imported above)
    growth: Growth,  # noqa: F811
    tmp_path: Path,
) -> None:
    expected = Counter(values[0] for rows in DATA.values() for values in rows)
    levels = range(0, LEVELS, 4)  # every 4th level of the transactional test: a page apart
    directories = {level: tmp_path / f"level-{level}" for level in levels}
    with ThreadPoolExecutor(1 if tx_executor == "local" else 4) as pool:
        outcomes = dict(
            zip(
                levels,
                pool.map(
                    lambda level: run_level(
                        tx_executor, growing_word_count, directories[level], capacity - level
                    ),
                    levels,
                ),
                strict=True,
            )
        )
    kinds: set[str] = set()
    for level, (result, resizes) in outcomes.items():
        counts = committed(directories[level] / "state", LMDBMapState.transactional("counts"))
        assert counts == dict(expected), f"level {level}"
        assert result.tuples == sum(expected.values())
        where = growth.writes.get(str((directories[level] / "state").resolve()), [])
        assert len(where) == resizes
        kinds.update(write_kind(what) for what in where)
    assert {"batch metadata", "partition metadata", "commit"} <= kinds
    assert sum(1 for _, resizes in outcomes.values() if resizes) >= len(levels) * 3 // 4


def test_a_batch_slower_than_its_timeout_stops_a_local_run_naming_the_setting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Local executor only: a batch's Spark job is not cut by the tuple-tree timeout (it
    bounds only the wait for asynchronous acks there), so it never times out this way."""
    topology = TridentTopology()
    (
        topology.new_stream("slow", MemoryTransactionalSpout(DATA, Fields("word"), 3))
        .each(["word"], SlowFilter(0.5))
        .group_by(["word"])
        .persistent_aggregate(LMDBMapState.transactional("counts"), Count(), ["count"])
    )
    caplog.set_level("WARNING", logger="drpc.transactional.run")
    timeout = {"topology.message.timeout.secs": 0.5}
    with pytest.raises(TransactionalError) as caught:
        run(topology, state_dir=str(tmp_path), conf=timeout, max_timeouts=2)
    assert str(caught.value) == (
        "transactional topology 'slow': batch 1's tuple tree did not complete within 0.5 s "
        "(topology.message.timeout.secs), 2 time(s) (max_timeouts=2); raise "
        "topology.message.timeout.secs in the topology's conf or make the batches smaller"
    )
    warned = [r for r in caplog.records if "did not complete within 0.5 s" in r.getMessage()]
    assert [(r.txid, r.phase) for r in warned if "batch 1's" in r.getMessage()] == [
        (1, "processing")
    ] * 2
