"""``drpc-runner --standby``: a second runner waits, warm, while the active one writes the
state directory, and takes over its transactional run and its queries once it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from drpc.client import DRPCClient, DRPCConnectionError, DRPCExecutionException

from drpc.errors import StateInUseError
from drpc.state import CoordinatorState, StateEnvironment
from drpc.state.topology import TopologyState
from drpc.state.writer import WriterLock
from tests.server.helpers import HOST, running_server, wait_until
from tests.transactional.test_faults import committed, write_words

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


class Runner:
    """A ``drpc-runner`` process hosting the fault word count and its query, its output
    collected as it comes."""

    def __init__(self, invocations: str, state_dir: Path, env: dict[str, str], *extra: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "drpc.runner", "--servers", invocations,
             "--topology", "tests.transactional.faults:count_query",
             "--transactional", "tests.transactional.faults:topology",
             "--state-dir", str(state_dir), "--executor", "local", "--max-spout-pending", "2",
             "--poll-interval", "0.02", "--reconnect-interval", "0.1", "--log-level", "INFO",
             *extra],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def said(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(60)
        self._reader.join(10)
        return code


def _next_txid(state_dir: Path) -> int:
    if not (state_dir / "data.mdb").exists():
        return 1
    return CoordinatorState(TopologyState.at(str(state_dir)).env, "fault-words").next_txid()


@pytest.mark.timeout(180)
def test_a_standby_takes_over_a_killed_runners_run_and_queries_exactly_once(
    tmp_path: Path,
) -> None:
    log_dir, state_dir = tmp_path / "log", tmp_path / "state"
    expected = write_words(log_dir, seed=11)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DRPC_TEST_LOG_DIR": str(log_dir),
        "DRPC_TEST_OPAQUE": "0",
        "DRPC_TEST_TAKE": "100",  # 40 batches of 400 words
        "DRPC_STATE_DIR": str(state_dir),
    }
    env.pop("DRPC_TEST_MARKERS", None)
    word = sorted(expected)[0]
    with running_server(runner_liveness=0.5) as server:
        invocations = f"{HOST}:{server.invocations_port}"
        active = Runner(invocations, state_dir, env)
        standby = None
        try:
            wait_until(lambda: _next_txid(state_dir) > 3, 60)
            standby = Runner(invocations, state_dir, env, "--standby")
            wait_until(lambda: standby.said("taking over when it stops"), 60)
            assert standby.said(f"written by process {active.process.pid}")
            assert not standby.said("runner running transactional topology")
            killed_at = _next_txid(state_dir)
            active.process.send_signal(signal.SIGKILL)
            active.process.wait(10)
            killed = time.monotonic()
            wait_until(lambda: standby.said("standby: taking over state directory"), 30)
            client = DRPCClient(HOST, server.port, timeout=10)

            def answered() -> bool:
                try:
                    return int(client.execute("count", word)) >= 0
                except (DRPCExecutionException, DRPCConnectionError):
                    return False

            wait_until(answered, 30)
            took_over = time.monotonic() - killed
            wait_until(lambda: committed(state_dir, False) == expected, 120)
            assert int(client.execute("count", word)) == expected[word]
            assert _next_txid(state_dir) > killed_at  # the standby committed the rest
        finally:
            active.stop()
            if standby is not None:
                assert standby.stop() == 0, standby.output()[-3000:]
    assert took_over < 10, standby.output()[-3000:]  # no Spark here: a process's start
    assert standby.said("runner running transactional topology 'fault-words'")
    assert committed(state_dir, False) == expected  # nothing lost, nothing counted twice


@pytest.mark.timeout(60)
def test_a_standby_stopped_while_it_waits_exits_0_and_never_wrote(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    env = StateEnvironment.open(str(state_dir))
    claim = env.claim_writer("someone-else")  # this process plays the active runner
    try:
        runner = Runner(f"{HOST}:9", state_dir, {**os.environ, "PYTHONPATH": str(ROOT),
                        "DRPC_TEST_LOG_DIR": str(tmp_path / "log"),
                        "DRPC_STATE_DIR": str(state_dir)}, "--standby")  # fmt: skip
        wait_until(lambda: runner.said("taking over when it stops"), 30)
        assert runner.stop() == 0, runner.output()
    finally:
        claim.release()
    assert runner.said(f"written by process {os.getpid()} (someone-else)")
    assert not runner.said("taking over state directory")
    assert CoordinatorState(env, "fault-words").last_commit() is None


def test_claim_when_free_waits_for_the_holder_and_stops_when_told(tmp_path: Path) -> None:
    """The writer lock's wait, across processes: a child holds the directory; the claim
    waits, reports the holder once, and succeeds the moment the child dies."""
    path = tmp_path / "state"
    path.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from drpc.state.writer import WriterLock; "
         f"WriterLock({str(path)!r}).claim('child'); print('held', flush=True); time.sleep(60)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        lock = WriterLock(str(path))
        busy: list[StateInUseError] = []
        stop = threading.Event()
        stopper = threading.Timer(0.3, stop.set)
        stopper.start()
        assert lock.claim_when_free("me", stop, poll=0.02, on_busy=busy.append) is None
        assert [(error.pid, error.holders) for error in busy] == [(holder.pid, ("child",))]
        threading.Timer(0.3, holder.kill).start()
        started = time.monotonic()
        claim = lock.claim_when_free("me", threading.Event(), poll=0.02)
        assert claim is not None and 0.2 < time.monotonic() - started < 5
        assert lock.holders() == ("me",)
        with pytest.raises(StateInUseError):  # the same holder twice in one process
            lock.claim_when_free("me", threading.Event(), poll=0.02)
        claim.release()
    finally:
        holder.kill()
        holder.wait()
