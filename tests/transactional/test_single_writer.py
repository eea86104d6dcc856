"""One writer per state directory: a second run or server is refused naming the live
writer's pid, while ``drpc-transactional status`` still reads (real processes, real LMDB)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drpc.errors import StateInUseError
from drpc.examples.transactional_global_count import build_global_count
from drpc.state import CoordinatorState
from drpc.state.topology import TopologyState
from drpc.transactional import run
from drpc.transactional.run import TransactionalRunner

TOPOLOGY = "drpc.examples.transactional_global_count:topology"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "drpc.transactional.cli", *args]


def live_run(state_dir: Path) -> subprocess.Popen[str]:
    """``drpc-transactional run --forever`` of the global count on ``state_dir``."""
    return subprocess.Popen(
        cli("run", TOPOLOGY, "--state-dir", str(state_dir), "--forever"),
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_commit(state_dir: Path, txid: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        if (state_dir / "data.mdb").exists():
            env = TopologyState.at(str(state_dir)).env
            if CoordinatorState(env, "global-count").next_txid() > txid:
                return
        time.sleep(0.05)
    raise AssertionError(f"no commit of txid {txid} within 60 s")


@pytest.mark.timeout(180)
def test_a_second_writer_is_refused_while_status_reads_and_the_next_run_resumes(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    live = live_run(state_dir)
    try:
        wait_for_commit(state_dir, 4, live)

        with pytest.raises(StateInUseError) as refused:
            TransactionalRunner(build_global_count(), state_dir=str(state_dir))
        assert refused.value.pid == live.pid

        second = subprocess.run(
            cli("run", TOPOLOGY, "--state-dir", str(state_dir)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 1
        [line] = second.stderr.strip().splitlines()
        assert f"is being written by process {live.pid} (running 'global-count')" in line

        status = subprocess.run(
            cli("status", "--state-dir", str(state_dir), "--json"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["topologies"]["global-count"]["last_txid"] >= 4
    finally:
        live.terminate()
        live.wait(60)
    assert live.returncode == 0
    last = CoordinatorState(TopologyState.at(str(state_dir)).env, "global-count").next_txid()
    result = run(build_global_count(), state_dir=str(state_dir))  # the directory is free again
    assert result.commits[0].txid == last
    assert TopologyState.at(str(state_dir)).transactional_map("global-count").get("count") == 19


@pytest.mark.timeout(180)
def test_a_server_hosting_a_run_on_a_live_directory_exits_with_one_line(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    live = live_run(state_dir)
    try:
        wait_for_commit(state_dir, 1, live)
        command = [
            sys.executable, "-m", "drpc.server", "--host", "127.0.0.1", "--executor", "local",
            "--port", "0", "--invocations-port", "0", "--http-port", "-1",
            "--transactional", TOPOLOGY, "--state-dir", str(state_dir),
        ]  # fmt: skip
        server = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    finally:
        live.terminate()
        live.wait(60)
    assert server.returncode == 1
    refusals = [line for line in server.stderr.splitlines() if "cannot serve" in line]
    assert len(refusals) == 1 and f"process {live.pid}" in refusals[0]
    assert "Traceback" not in server.stderr
