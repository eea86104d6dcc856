"""Shared fixtures: every topology test runs once per executor.

``executor`` is parametrized over the DRPC executors (local, spark: resident
tasks, spark-batch: a job per batch), ``tx_executor`` over the continuous executors of
transactional runs (local, spark: resident tasks), ``plain_executor`` over the same two
for plain topologies, ``every_tx_executor`` over those and
spark-batch (a Spark job per batch); ``drpc`` is a LocalDRPC on ``executor``,
shut down after the test. Tests on Spark share one SparkSession
(``local[2]``) for the whole run, started on first use, and carry the
``spark`` marker: those fixtures mark their Spark params, and
``tests.spark_marker`` marks every test that uses ``spark_session`` and
proves that a run without spark tests (``pytest -m "not spark"``) starts no JVM.
``tests.brokers`` adds the real brokers (``redis_server``, ``nats_server``,
``broker``: each in turn), started on first use; ``tests.s3`` a real S3-compatible server
(``s3_server``, moto). ``tests.ahead`` starts early the long child
runs some tests only read the outcome of, and runs those tests last.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Every JVM a test run starts (the shared session, and the Spark clusters, servers and runs
# of the tests' subprocesses, which inherit this) lives seconds to minutes: HotSpot's C2
# compiler spends more CPU there than its code saves. C1 only: the executor-kill runs took
# 45 s instead of 67 s (their CPU 22 s instead of 40).
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")
# Spark's Python workers import the test modules their steps name (``tests.trident.ops``):
# they find them through PYTHONPATH, since their working directory is the JVM's, wherever
# the test that started it had moved (the docs' tests run each block in a directory of its
# own).
os.environ["PYTHONPATH"] = os.pathsep.join(
    dict.fromkeys(
        path
        for path in (
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            *os.environ.get("PYTHONPATH", "").split(os.pathsep),
        )
        if path
    )
)

from drpc.testing import LocalDRPC

pytest_plugins = ["tests.spark_marker", "tests.brokers", "tests.ahead", "tests.s3"]

EXECUTORS = [
    "local",
    pytest.param("spark", marks=pytest.mark.spark),
    pytest.param("spark-batch", marks=pytest.mark.spark),
]
"""DRPC executors: the in-process engine, resident Spark tasks, a Spark job per batch."""
TRANSACTIONAL_EXECUTORS = ["local", pytest.param("spark", marks=pytest.mark.spark)]
"""Transactional runs: the in-process engine, or streamed through the resident Spark tasks."""
EVERY_TRANSACTIONAL_EXECUTOR = [
    *TRANSACTIONAL_EXECUTORS,
    pytest.param("spark-batch", marks=pytest.mark.spark),
]
"""And a Spark job per batch attempt (``every_tx_executor``: the core exactly-once tests)."""
SPARK_TEST_MASTER = "local[2]"


@pytest.fixture(scope="session")
def spark_session() -> Iterator[object]:
    from drpc import runtime

    session = runtime.get_session(SPARK_TEST_MASTER)
    yield session
    runtime.stop_session()


@pytest.fixture(params=EXECUTORS)
def executor(request: pytest.FixtureRequest) -> str:
    """Each DRPC executor in turn (the Spark ones on the shared session)."""
    if request.param != "local":
        request.getfixturevalue("spark_session")
    return str(request.param)


@pytest.fixture(params=TRANSACTIONAL_EXECUTORS)
def tx_executor(request: pytest.FixtureRequest) -> str:
    """Each continuous executor of transactional runs in turn."""
    if request.param != "local":
        request.getfixturevalue("spark_session")
    return str(request.param)


@pytest.fixture(params=TRANSACTIONAL_EXECUTORS)
def plain_executor(request: pytest.FixtureRequest) -> str:
    """Each executor of plain topologies in turn (``drpc.topologies``: local, spark)."""
    if request.param != "local":
        request.getfixturevalue("spark_session")
    return str(request.param)


@pytest.fixture(params=EVERY_TRANSACTIONAL_EXECUTOR)
def every_tx_executor(request: pytest.FixtureRequest) -> str:
    """Each executor of transactional runs in turn, a Spark job per batch included."""
    if request.param != "local":
        request.getfixturevalue("spark_session")
    return str(request.param)


@pytest.fixture
def drpc(executor: str) -> Iterator[LocalDRPC]:
    with LocalDRPC(executor=executor, timeout=30.0) as server:
        yield server
