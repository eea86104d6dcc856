"""Shared fixtures: every topology test runs once per executor.

``executor`` is parametrized over the executors under test; ``drpc`` is a
LocalDRPC on that executor, shut down after the test. Tests on "spark" share
one SparkSession (``local[2]``) for the whole run, started on first use.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from drpc.testing import LocalDRPC

EXECUTORS = ["local", "spark"]
SPARK_TEST_MASTER = "local[2]"


@pytest.fixture(scope="session")
def spark_session() -> Iterator[object]:
    from drpc import runtime

    session = runtime.get_session(SPARK_TEST_MASTER)
    yield session
    runtime.stop_session()


@pytest.fixture(params=EXECUTORS)
def executor(request: pytest.FixtureRequest) -> str:
    if request.param == "spark":
        request.getfixturevalue("spark_session")
    return request.param


@pytest.fixture
def drpc(executor: str) -> Iterator[LocalDRPC]:
    with LocalDRPC(executor=executor, timeout=30.0) as server:
        yield server
