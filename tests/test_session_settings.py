"""Where a session's settings go before Spark starts: the executors' Python and
SPARK_LOCAL_IP from the resolved settings, and the Spark keywords only to Spark runtimes.
(A real session under spark-defaults.conf, --spark-conf-file and --spark-conf, and one
under spark-submit: tests/cluster/test_two_hosts.py.)"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from drpc.examples.exclamation import build_exclamation
from drpc.runtime import _prepare_environment
from drpc.sparkconf import resolve
from drpc.testing import LocalDRPC
from drpc.transactional.run import TransactionalRunner
from drpc.transactional.spark_backend import ResidentBackend, SparkBackend
from tests.transactional.faults import word_count
from tests.transactional.test_faults import write_words


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_spark_pyspark_python_beats_pyspark_python_as_under_spark_submit(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("PYSPARK_PYTHON", "python-from-the-environment")
    settings = resolve("yarn", {"spark.pyspark.python": "./environment/bin/python"}, {})
    _prepare_environment(settings)
    assert os.environ["PYSPARK_PYTHON"] == "./environment/bin/python"
    assert "SPARK_LOCAL_IP" not in os.environ  # a cluster master: Spark's choice


def test_without_either_the_executors_run_this_interpreter_and_local_is_loopback(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    _prepare_environment(resolve("local[2]", None, {}))
    environ = os.environ
    assert environ["PYSPARK_PYTHON"] == sys.executable
    assert environ["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_spark_keywords_reach_spark_runtimes_only() -> None:
    with LocalDRPC(
        executor="local", master="spark://nowhere:7077", spark_conf={"spark.a": 1}
    ) as drpc:
        drpc.register(build_exclamation())  # the local executor takes no Spark keywords
        assert drpc.execute("exclamation", "hi") == "hi!"


@pytest.mark.parametrize(
    ("executor", "backend"), [("spark", ResidentBackend), ("spark-batch", SparkBackend)]
)
def test_a_transactional_run_passes_its_spark_settings_to_its_backend(
    tmp_path: Path, executor: str, backend: type
) -> None:
    write_words(tmp_path / "log", seed=1, count=40)
    runner = TransactionalRunner(  # not started: no session needed to see what it would ask
        word_count(str(tmp_path / "log")),
        state_dir=str(tmp_path / "state"),
        executor=executor,
        master="local[1]",
        spark_conf={"spark.executor.memory": "700m"},
        start_timeout=7.0,
    )
    try:
        assert type(runner.backend) is backend
        assert (
            runner.backend.master,  # type: ignore[attr-defined]
            runner.backend.spark_conf,  # type: ignore[attr-defined]
            runner.backend.start_timeout,  # type: ignore[attr-defined]
        ) == ("local[1]", {"spark.executor.memory": "700m"}, 7.0)
    finally:
        runner.close()
