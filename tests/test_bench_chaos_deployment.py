"""The chaos run's deployment (bench/chaos_deployment.py): its runners, before any starts, and
what a service's kill waits for."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from bench import procs
from bench.chaos_deployment import Deployment, Service


@pytest.mark.parametrize(
    ("standbys", "runners"),
    [(0, ["runner"]), (1, ["runner", "standby"]), (2, ["runner", "standby", "standby2"])],
)
def test_each_standby_is_a_runner_of_its_own_started_with_standby(
    tmp_path: Path, standbys: int, runners: list[str]
) -> None:
    deployment = Deployment(tmp_path, "local[2]", standbys=standbys)
    assert deployment.runners() == runners
    for name in runners:
        argv = deployment.services[name].argv
        assert argv[argv.index("-m") + 1] == "drpc.runner"
        assert ("--standby" in argv) == bool(standbys)
    assert deployment.active_runner() == (None if standbys else "runner")  # none writes yet
    assert not deployment.standby_warm()


# A service whose child leaves the service's process group (as PySpark's daemon does) and
# lives on for a while after the service is killed, printing its pid first.
LINGERING_CHILD = """
import subprocess, sys, time
child = subprocess.Popen(
    [sys.executable, "-c", "import os, time; os.setpgid(0, 0); time.sleep(1.5)"]
)
print(child.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.timeout(30)
def test_a_kill_returns_once_processes_outside_the_group_have_ended_too(tmp_path: Path) -> None:
    log = tmp_path / "lingering.log"
    service = Service("lingering", [sys.executable, "-c", LINGERING_CHILD], dict(os.environ), log)
    service.start()
    deadline = time.monotonic() + 10
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(log.read_text().split()[0])
    assert procs.alive(child)
    time.sleep(0.3)  # the child has left the group by now
    outlived = service.kill()
    assert not procs.alive(child)
    assert outlived > 0.5  # it lived on past the group's SIGKILL, and kill() waited for it
