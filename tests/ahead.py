"""Child runs started ahead: a test that only reads what a long child process printed (a
Spark cluster of its own, say) has that process started early in the session and runs
last, so the child run goes on beside the other tests instead of between them.

Most of the suite waits (on deadlines, sleeps, starting JVMs) and leaves the second core
idle, so a child run of tens of seconds that no other test waits on costs little beside
them; its own test then only collects the outcome, asserting on it as before.

Contract:

- ``register(name, prepare, timeout)``, at a test module's import, declares a run:
  ``prepare(workdir)`` readies ``workdir`` (a fresh ``tmp_path_factory`` directory named
  ``name``) and returns the ``Command`` to run there (argv, and variables over this
  process's environment as it stands when the run starts), from the repository's root.
- A test (or a parametrized case) that collects a run carries ``@pytest.mark.ahead(name)``;
  those tests run after all the others (in their own order). A run that one of the
  selected tests collects starts as a test not marked ``cluster`` starts (none starts at
  a two-host test, which runs a Spark cluster, servers and drivers of its own; the first
  run, started with tests/client, still goes on beside them: measured, that costs less
  than starting the runs after them, beside the fault tests' loads), one run at a time,
  in the order of registration, at least ``STAGGER`` seconds apart; its stdout and
  stderr go to ``name.stdout`` and ``name.stderr`` in ``workdir``. The other runs never
  start.
- ``AheadRun.finish(tmp_path_factory)`` waits for the run to end (starting it then if it
  has not started) and returns what it left: a ``Finished``. A run still going ``timeout``
  seconds after its start gets SIGTERM, then 60 s to end, then SIGKILL, and ``finish``
  fails with the end of its stderr. ``AheadRun.running(tmp_path_factory)`` is the started
  process itself, for a test that talks to it (a server) and ends it.
- At the session's end, a run still going (its test not reached: ``-x``, an interrupt)
  gets SIGTERM, then 60 s, then SIGKILL: a session leaves no run behind.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STOP_GRACE = 60.0
"""Seconds a run has to end after SIGTERM (a Spark cluster tears its JVMs down) before SIGKILL."""
STAGGER = 10.0
"""Seconds at least between two runs' starts, in the order they were registered: their JVMs
do not all start at once beside the test then running."""


@dataclass(frozen=True)
class Command:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    """Variables set over this process's environment."""


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    workdir: Path


@dataclass(frozen=True)
class Running:
    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    workdir: Path


@dataclass
class AheadRun:
    name: str
    prepare: Callable[[Path], Command]
    timeout: float
    _running: Running | None = None
    _started: float = 0.0

    @property
    def started(self) -> bool:
        return self._running is not None

    def start(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        if self._running is not None:
            return
        workdir = tmp_path_factory.mktemp(self.name)
        self._running = spawn(self.name, self.prepare(workdir), workdir)
        self._started = time.monotonic()

    def running(self, tmp_path_factory: pytest.TempPathFactory) -> Running:
        self.start(tmp_path_factory)
        assert self._running is not None
        return self._running

    def finish(self, tmp_path_factory: pytest.TempPathFactory) -> Finished:
        run = self.running(tmp_path_factory)
        left = self._started + self.timeout - time.monotonic()
        try:
            run.process.wait(max(left, 0.0))
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(
                f"{self.name}: no outcome within {self.timeout:g} s; its output ended:\n"
                f"{run.stderr.read_text(errors='replace')[-4000:]}"
            ) from None
        return Finished(
            run.process.returncode,
            run.stdout.read_text(errors="replace"),
            run.stderr.read_text(errors="replace"),
            run.workdir,
        )

    def stop(self) -> None:
        if self._running is None or self._running.process.poll() is not None:
            return
        process = self._running.process
        process.terminate()
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def spawn(name: str, command: Command, workdir: Path) -> Running:
    """``command`` started from the repository's root, its stdout and stderr going to
    ``name.stdout`` and ``name.stderr`` in ``workdir``."""
    stdout, stderr = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        process = subprocess.Popen(
            command.argv, cwd=ROOT, env={**os.environ, **command.env}, stdout=out, stderr=err
        )
    return Running(process, stdout, stderr, workdir)


_RUNS: dict[str, AheadRun] = {}


def register(name: str, prepare: Callable[[Path], Command], timeout: float) -> AheadRun:
    """Declare the run that tests marked ``ahead(name)`` collect (see the module doc)."""
    return _RUNS.setdefault(name, AheadRun(name, prepare, timeout))


def _collected(item: pytest.Item) -> list[str]:
    return [str(mark.args[0]) for mark in item.iter_markers("ahead")]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "ahead(name): collects the child run registered as name in tests/ahead.py, which "
        "starts early in the session; the test runs last",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that collect a run go last."""
    items[:] = [item for item in items if not _collected(item)] + [
        item for item in items if _collected(item)
    ]


@dataclass
class _Schedule:
    runs: list[AheadRun]  # the registered runs the session's tests collect, in order
    last_start: float = -STAGGER

    def start_next(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        waiting = [run for run in self.runs if not run.started]
        if waiting and time.monotonic() - self.last_start >= STAGGER:
            waiting[0].start(tmp_path_factory)
            self.last_start = time.monotonic()


@pytest.fixture(scope="session")
def _ahead_runs(request: pytest.FixtureRequest) -> Iterator[_Schedule]:
    """The registered runs the session's tests collect; stopped at its end."""
    wanted = {name for item in request.session.items for name in _collected(item)}
    unknown = wanted - set(_RUNS)
    assert not unknown, f"tests marked ahead() with no run registered: {sorted(unknown)}"
    schedule = _Schedule([run for name, run in _RUNS.items() if name in wanted])
    yield schedule
    for run in schedule.runs:
        run.stop()


@pytest.fixture(autouse=True)
def _start_ahead_runs(
    request: pytest.FixtureRequest,
    _ahead_runs: _Schedule,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if request.node.get_closest_marker("cluster") is None:
        _ahead_runs.start_next(tmp_path_factory)
