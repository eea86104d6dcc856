"""The ``spark`` marker, derived, and a guard that proves runs without it start no JVM.

Contract:

- Every test that uses the ``spark_session`` fixture, directly or through another
  fixture, carries the ``spark`` marker (the ``executor``, ``tx_executor`` and
  ``every_tx_executor`` fixtures mark their Spark params themselves, since they ask
  for the session at run time), and so does every test whose ``executor``,
  ``tx_executor`` or ``every_tx_executor`` argument is a Spark executor (``spark``,
  ``spark-batch``), fixture or own parametrization (a test that runs a Spark
  cluster of its own in a child process). So
  ``pytest -m "not spark"`` deselects every test that starts Spark.
- A run whose selected tests carry no ``spark`` marker (``-m "not spark"``, or a
  subset such as ``tests/semantics``) puts a tripwire ``java`` first: ``JAVA_HOME``
  and ``PATH`` lead to a script that records the attempt and exits 1, so neither
  the test process nor a child of it (a server, a runner) can start a JVM. A test
  during which one was attempted fails, naming the command; so does the run, for
  an attempt outside any test (a module-scoped fixture).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SPARK_FIXTURE = "spark_session"
EXECUTOR_ARGUMENTS = ("executor", "tx_executor", "every_tx_executor")
SPARK_EXECUTORS = frozenset({"spark", "spark-batch"})
_TRIPWIRE = pytest.StashKey["JvmTripwire"]()


class JvmTripwire:
    """A fake ``java`` that logs each call and refuses to start, put first while armed."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="drpc-no-jvm-"))
        self.log = self.home / "attempts.log"
        self.log.touch()
        java = self.home / "bin" / "java"
        java.parent.mkdir()
        java.write_text(
            "#!/bin/sh\n"
            f'echo "java $*" >> "{self.log}"\n'
            'echo "a JVM was started in a run without spark tests" >&2\n'
            'echo "(see tests/spark_marker.py)" >&2\n'
            "exit 1\n"
        )
        java.chmod(java.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self._saved = {name: os.environ.get(name) for name in ("JAVA_HOME", "PATH")}
        os.environ["JAVA_HOME"] = str(self.home)
        os.environ["PATH"] = f"{java.parent}{os.pathsep}{os.environ.get('PATH', '')}"

    def attempts(self) -> list[str]:
        return self.log.read_text().splitlines()

    def disarm(self) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that asks for the Spark session or runs on a Spark executor
    (before ``-m`` deselects)."""
    for item in items:
        if _starts_spark(item):
            item.add_marker(pytest.mark.spark)


def _starts_spark(item: pytest.Item) -> bool:
    if SPARK_FIXTURE in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    params = {} if callspec is None else callspec.params
    return any(params.get(name) in SPARK_EXECUTORS for name in EXECUTOR_ARGUMENTS)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    if not any(item.get_closest_marker("spark") for item in session.items):
        session.config.stash[_TRIPWIRE] = JvmTripwire()


@pytest.fixture(autouse=True)
def _no_jvm_outside_spark_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    tripwire = request.config.stash.get(_TRIPWIRE, None)
    before = 0 if tripwire is None else len(tripwire.attempts())
    yield
    if tripwire is not None and (started := tripwire.attempts()[before:]):
        pytest.fail(
            f"{request.node.nodeid} started a JVM without the spark marker: {started[0]}",
            pytrace=False,
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    tripwire = session.config.stash.get(_TRIPWIRE, None)
    if tripwire is not None and tripwire.attempts():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    tripwire = terminalreporter.config.stash.get(_TRIPWIRE, None)
    if tripwire is not None and (started := tripwire.attempts()):
        terminalreporter.section("JVM started in a run without spark tests", red=True)
        for command in started:
            terminalreporter.line(command)


def pytest_unconfigure(config: pytest.Config) -> None:
    tripwire = config.stash.get(_TRIPWIRE, None)
    if tripwire is not None:
        tripwire.disarm()
