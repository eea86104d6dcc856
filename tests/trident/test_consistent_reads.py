"""Consistent reads: every DRPC answer reads one committed version of its state directory,
on every executor, while a writer commits batches that each change every key.

Each batch counts every word of a 200-word vocabulary once, so after txid n every count
is n (and every double 2n): an answer whose counts differ mixed two commits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from drpc.builders.drpc_components import REQUEST_PINS
from drpc.errors import DRPCExceptionType, DRPCExecutionException
from drpc.examples.vocabulary_counts import (
    QUERY,
    TXID,
    VOCABULARY,
    build_vocabulary_counts,
    counts_function,
    counts_of,
)
from drpc.state import CoordinatorState, StateEnvironment
from drpc.testing import LocalDRPC
from drpc.transactional import CommitInfo
from drpc.trident import run
from tests.trident.consistent import CountsOneByOne, RecordPid, Sleep, linear_counts
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
ENOUGH = {"local": 1000, "spark": 200, "spark-batch": 12}
"""Answers each executor gives in a few seconds."""


@contextmanager
def writer(
    state_dir: Path, doubles: bool = False, partitions: int = 1, **state_options: Any
) -> Iterator[list[int]]:
    """A Trident run committing batches without end in a thread (``doubles``: into the
    second map too; ``partitions``: of the counts); yields the txids its ``on_commit``
    reported, in order."""
    stop, reported = threading.Event(), []

    def on_commit(info: CommitInfo) -> None:
        reported.append(info.txid)

    thread = threading.Thread(
        target=run,
        args=(build_vocabulary_counts(10**6, doubles=doubles, partitions=partitions),),
        kwargs={
            "state_dir": str(state_dir),
            "executor": "local",
            "stop": stop,
            "on_commit": on_commit,
            "state_options": state_options or None,
        },
    )
    thread.start()
    try:
        while not reported:
            time.sleep(0.01)
        yield reported
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()


def check_whole(answer: str, doubles: bool = False) -> int:
    """The one txid every count of ``answer`` was committed at; fails on a mixed answer."""
    counts = counts_of(answer)
    assert sorted(counts) == VOCABULARY
    values = {tuple(value) for value in counts.values()}
    assert len(values) == 1, f"an answer mixed commits: {sorted(values)}"
    [value] = values
    if doubles:
        assert value[1] == 2 * value[0]
    return int(value[0])


@pytest.mark.parametrize("partitions", [1, 4], ids=["one directory", "4 partitions"])
def test_no_answer_mixes_two_commits_and_each_reads_its_commits(
    executor: str, tmp_path: Path, partitions: int
) -> None:
    """Over 4 partitions each answer reads every partition at one global commit."""
    state = tmp_path / "state"
    with (
        writer(state, partitions=partitions) as reported,
        LocalDRPC(executor=executor, timeout=60.0) as drpc,
    ):
        drpc.register(counts_function(str(state)))
        seen: list[int] = []
        while len(seen) < ENOUGH[executor]:
            committed_before = reported[-1]
            txid = check_whole(drpc.execute("counts", QUERY))
            assert txid >= committed_before  # read your commits
            seen.append(txid)
        env = StateEnvironment.opened(state)
        assert env is not None
        # every request released its pin (at its spout's ack, or its Spark job's end)
        wait_until(lambda: env.version_status().local_pins == 0, what="the pins released")
        assert len(REQUEST_PINS) == 0
    assert len(set(seen)) >= 3, "commits should have landed between the queries"
    assert seen == sorted(seen)


def test_user_bolts_reading_context_state_read_their_request_s_version(
    executor: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with writer(state), LocalDRPC(executor=executor, timeout=60.0) as drpc:
        # reads 0.3 ms apart: unpinned, nearly every answer would mix commits
        drpc.register(linear_counts(str(state), pause=0.0003))
        seen = set()
        for _ in range(5 if executor == "spark-batch" else 12):
            counts = json.loads(drpc.execute("counts", QUERY))
            assert len(counts) == 1, f"an answer mixed commits: {counts}"
            seen.add(counts[0])
    assert len(seen) >= 2


def test_a_user_query_function_reads_its_request_s_version(executor: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with writer(state), LocalDRPC(executor=executor, timeout=60.0) as drpc:
        drpc.register(counts_function(str(state), query_function=CountsOneByOne()))
        seen = {check_whole(drpc.execute("counts", QUERY)) for _ in range(ENOUGH[executor] // 4)}
    assert len(seen) >= 2


def test_two_maps_of_one_directory_are_read_at_one_version(executor: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with writer(state, doubles=True), LocalDRPC(executor=executor, timeout=60.0) as drpc:
        drpc.register(counts_function(str(state), doubles=True))
        seen = {check_whole(drpc.execute("counts", QUERY), doubles=True) for _ in range(10)}
    assert len(seen) >= 2


@pytest.mark.parametrize("past_retention", [False, True])
def test_a_request_reads_its_version_for_version_retention_seconds(
    executor: str, tmp_path: Path, past_retention: bool
) -> None:
    state = tmp_path / "state"
    # Past it: a step sleeps 1 s on a 0.5 s retention. Within it: 10 s, so a spark-batch
    # job that a loaded machine starts late still reads inside it.
    retention = 0.5 if past_retention else 10.0
    env = StateEnvironment.open(state, version_retention=retention)
    try:
        with (
            writer(state, version_retention=retention),
            LocalDRPC(executor=executor, timeout=60.0) as drpc,
        ):
            # The conf reaches a process that opens the directory itself (a resident task).
            drpc.register(
                counts_function(
                    str(state),
                    {"drpc.state.version.retention": retention},
                    before_split=[Sleep(1.0 if past_retention else 0.05)],
                )
            )
            if past_retention:
                with pytest.raises(DRPCExecutionException) as failed:
                    drpc.execute("counts", QUERY)
                assert failed.value.type is DRPCExceptionType.FAILED_REQUEST
                assert "VersionReclaimedError" in failed.value.msg
                assert "was reclaimed; the oldest version still readable is" in failed.value.msg
            else:
                for _ in range(3):
                    check_whole(drpc.execute("counts", QUERY))
    finally:
        env.close()


def start_writer(state: Path, batches: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.trident.consistent", str(state), str(batches)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def wait_for_line(process: subprocess.Popen[str], prefix: str) -> str:
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        assert line, f"the writer exited ({process.wait()}) before printing {prefix!r}"
        if line.startswith(prefix):
            return line.strip()


def test_a_writer_killed_mid_commit_leaves_whole_answers_and_a_restart_counts_exactly(
    executor: str, tmp_path: Path
) -> None:
    """Each batch counts every word once more, so every count must equal the last committed
    txid: after a writer SIGKILLed mid-run, and after a restarted one SIGKILLed again."""
    state = tmp_path / "state"
    endless = 10**6  # batches: no writer gets to the end before it is killed
    writers = [start_writer(state, endless)]
    try:
        wait_for_line(writers[0], "committed 3")
        with LocalDRPC(executor=executor, timeout=60.0) as drpc:
            drpc.register(counts_function(str(state)))
            before = [check_whole(drpc.execute("counts", QUERY)) for _ in range(3)]
            writers[0].send_signal(signal.SIGKILL)
            writers[0].wait(timeout=30)
            committed = last_committed(state)
            after = [check_whole(drpc.execute("counts", QUERY)) for _ in range(3)]
            assert before == sorted(before) and after[0] >= before[-1]
            assert set(after) == {committed}  # nobody commits any more
            writers.append(start_writer(state, endless))
            wait_for_line(writers[1], f"committed {after[0] + 3}")  # it resumed after them
            writers[1].send_signal(signal.SIGKILL)
            writers[1].wait(timeout=30)
            committed = last_committed(state)
            assert check_whole(drpc.execute("counts", QUERY)) == committed >= after[0] + 3
    finally:
        for process in writers:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)
            if process.stdout is not None:
                process.stdout.close()


def last_committed(state: Path) -> int:
    env = StateEnvironment.opened(state) or StateEnvironment.open(state)
    env.recover_crashed_writer()  # a writer killed mid-publish leaves its commit unseen
    record = CoordinatorState(env, TXID).last_commit()
    assert record is not None
    return record.txid


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("spark_session")
def test_a_resident_worker_killed_mid_query_gives_whole_answers_or_typed_errors(
    tmp_path: Path,
) -> None:
    state, pids = tmp_path / "state", tmp_path / "pids"
    pids.mkdir()
    outcomes: list[int | DRPCExceptionType] = []
    with writer(state), LocalDRPC(executor="spark", timeout=120.0) as drpc:
        drpc.register(counts_function(str(state), after_split=[RecordPid(str(pids))]))
        check_whole(drpc.execute("counts", QUERY))
        [victim, *_] = sorted(int(name) for name in os.listdir(pids))
        stop = threading.Event()

        def query() -> None:
            while not stop.is_set():
                try:
                    outcomes.append(check_whole(drpc.execute("counts", QUERY)))
                except DRPCExecutionException as error:
                    outcomes.append(error.type)

        callers = [threading.Thread(target=query) for _ in range(3)]
        for caller in callers:
            caller.start()
        while len(outcomes) < 10:
            time.sleep(0.01)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while not any(isinstance(o, DRPCExceptionType) for o in outcomes) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)
        served = len(outcomes)
        while len(outcomes) < served + 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for caller in callers:
            caller.join(timeout=120)
        after = check_whole(drpc.execute("counts", QUERY))
    errors = [o for o in outcomes if isinstance(o, DRPCExceptionType)]
    assert errors and set(errors) <= {DRPCExceptionType.INTERNAL_ERROR}
    answers = [o for o in outcomes if isinstance(o, int)]
    assert len(answers) >= 20 and after >= max(answers)
