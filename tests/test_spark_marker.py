"""The spark marker and the no-JVM guard of tests/spark_marker.py, run as pytest runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PYTEST_INI = """\
[pytest]
markers = spark: needs the shared SparkSession
addopts = -p tests.spark_marker -p no:cacheprovider
"""

TESTS = """\
import pytest


@pytest.fixture(scope="session")
def spark_session():
    from drpc import runtime

    session = runtime.get_session("local[1]")
    yield session
    runtime.stop_session()


def test_uses_the_session(spark_session):
    assert spark_session is not None


def test_starts_spark_unmarked():
    from drpc import runtime

    runtime.get_session("local[1]")


def test_needs_no_spark():
    assert True


@pytest.mark.parametrize("executor", ["local", "spark-batch"])
def test_on_an_executor(executor):
    assert executor
"""


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)
    (tmp_path / "test_sample.py").write_text(TESTS)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_tests_using_the_spark_session_or_a_spark_executor_are_marked_spark(
    tmp_path: Path,
) -> None:
    ran = _pytest(tmp_path, "--collect-only", "-m", "spark")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    collected = [line for line in ran.stdout.splitlines() if "::" in line]
    assert collected == [
        "test_sample.py::test_uses_the_session",
        "test_sample.py::test_on_an_executor[spark-batch]",
    ]
    assert "2/5 tests collected (3 deselected)" in ran.stdout


def test_a_run_without_spark_tests_fails_the_test_that_starts_a_jvm(tmp_path: Path) -> None:
    ran = _pytest(tmp_path, "-m", "not spark")
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output
    # The tripwire java refuses to start, so pyspark fails the test; the guard names it.
    assert re.search(r"^1 failed, 2 passed, 2 deselected, 1 error in ", output, re.MULTILINE)
    assert "test_starts_spark_unmarked started a JVM without the spark marker: java " in output
    assert "JVM started in a run without spark tests" in output
