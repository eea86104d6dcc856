"""The session drpc starts takes the user's Spark settings: spark-defaults.conf from
SPARK_CONF_DIR over drpc's defaults, ``spark_conf=`` over both, spark.pyspark.python for the
executors' Python. Its own process: the test run's session is already started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from drpc.transactional.run import TransactionalRunner
from drpc.transactional.spark_backend import SparkBackend
from tests.transactional.faults import word_count
from tests.transactional.test_faults import write_words

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from drpc import runtime
    from drpc.examples.exclamation import build_exclamation
    from drpc.testing import LocalDRPC

    with LocalDRPC(executor="spark", spark_conf={"spark.executor.memory": "700m",
                                                "spark.sql.shuffle.partitions": 3}) as drpc:
        drpc.register(build_exclamation())
        answer = drpc.execute("exclamation", "hi")
        conf = dict(runtime.current_session().sparkContext.getConf().getAll())
        print(json.dumps({"answer": answer, "conf": conf, "ui": runtime.ui_url(),
                          "python": os.environ["PYSPARK_PYTHON"]}))
    """
)


@pytest.mark.slow
def test_spark_defaults_then_spark_conf_over_drpc_defaults(tmp_path: Path) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.master            local[1]\n"
        "spark.scheduler.mode    FIFO\n"  # drpc's default is FAIR
        "spark.executor.memory   600m\n"  # spark_conf says 700m
        f"spark.pyspark.python    {sys.executable}\n"
        "spark.app.name          from-the-file\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYSPARK_")}
    env.pop("SPARK_LOCAL_IP", None)
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={**env, "SPARK_CONF_DIR": str(conf_dir), "PYSPARK_PYTHON": "python-from-the-env"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    conf = report["conf"]
    assert report["answer"] == "hi!"
    assert conf["spark.master"] == "local[1]"  # the file's master: nobody named one
    assert conf["spark.scheduler.mode"] == "FIFO"  # the file over drpc's default
    assert conf["spark.executor.memory"] == "700m"  # spark_conf over the file
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert conf["spark.app.name"] == "from-the-file"
    assert conf["spark.python.worker.reuse"] == "true"  # drpc's default where nobody spoke
    assert conf["spark.driver.host"] == "127.0.0.1"  # a local master: loopback
    assert report["ui"] is None  # off on a local master
    assert report["python"] == sys.executable  # spark.pyspark.python over PYSPARK_PYTHON


def test_a_transactional_run_passes_its_spark_settings_to_its_backend(tmp_path: Path) -> None:
    write_words(tmp_path / "log", seed=1)
    runner = TransactionalRunner(  # not started: no session needed to see what it would ask
        word_count(str(tmp_path / "log")),
        state_dir=str(tmp_path / "state"),
        executor="spark",
        master="local[1]",
        spark_conf={"spark.executor.memory": "700m"},
        start_timeout=7.0,
    )
    try:
        backend = runner.backend
        assert isinstance(backend, SparkBackend)
        assert (backend.master, backend.spark_conf, backend.start_timeout) == (
            "local[1]",
            {"spark.executor.memory": "700m"},
            7.0,
        )
    finally:
        runner.close()
