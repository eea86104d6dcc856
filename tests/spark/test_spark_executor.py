"""What only the Spark executor does: sessions, coalescing, cancellation, crashes, resources."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from drpc import DRPCExceptionType, DRPCExecutionException, LinearDRPCTopologyBuilder, runtime
from drpc.examples.reach import EXPECTED_REACH, build_reach
from drpc.resources import WorkerResource
from drpc.testing import LocalDRPC
from tests import ahead
from tests.cluster.harness import package_listing, spark_home_view
from tests.waiting import SLACK, wait_until

from . import workload

pytestmark = pytest.mark.usefixtures("spark_session")


def single_step(name: str, bolt: object) -> LinearDRPCTopologyBuilder:
    builder = LinearDRPCTopologyBuilder(name)
    builder.add_bolt(bolt)  # type: ignore[arg-type]
    return builder


def test_two_executors_share_the_one_session() -> None:
    session = runtime.current_session()
    assert session is not None
    with LocalDRPC(executor="spark-batch") as first, LocalDRPC(executor="spark") as second:
        first.register(build_reach())
        second.register(build_reach("reach2"))
        assert runtime.current_session() is session
        assert first.execute("reach", "foo.com/blog/1") == second.execute(
            "reach2", "foo.com/blog/1"
        )
    assert session.conf.get("spark.scheduler.mode") == "FAIR"
    assert session.sparkContext.getConf().get("spark.python.worker.reuse") == "true"
    with pytest.raises(ValueError, match="one session per process"):
        runtime.get_session("local[3]")


def test_requests_arriving_while_a_job_runs_are_coalesced_into_the_next_job() -> None:
    with LocalDRPC(executor="spark-batch", max_jobs_in_flight=1) as drpc:
        runtime_ = drpc.register(single_step("slow", workload.SlowFor()))
        first = drpc.submit("slow", "3")
        # the first job is running (alone, sleeping 3 s); the next 30 queue up behind it
        wait_until(lambda: list(runtime_.stats.batch_sizes) == [1], what="the first job")
        rest = [drpc.submit("slow", "0") for _ in range(30)]
        assert first.result(timeout=60) == "done"
        assert [f.result(timeout=60) for f in rest] == ["done"] * 30
        assert list(runtime_.stats.batch_sizes) == [1, 30]


def test_max_batch_size_one_runs_a_job_per_request() -> None:
    with LocalDRPC(executor="spark-batch", max_batch_size=1) as drpc:
        runtime_ = drpc.register(build_reach())
        futures = [drpc.submit("reach", url) for url in EXPECTED_REACH]
        assert [f.result(timeout=60) for f in futures] == list(EXPECTED_REACH.values())
        assert list(runtime_.stats.batch_sizes) == [1, 1, 1, 1]


def test_a_job_whose_requests_all_timed_out_is_cancelled_and_frees_its_slot() -> None:
    with LocalDRPC(executor="spark-batch", max_jobs_in_flight=1) as drpc:
        runtime_ = drpc.register(single_step("slow", workload.SlowFor()))
        started = time.monotonic()
        with pytest.raises(DRPCExecutionException) as caught:
            drpc.execute("slow", "30", timeout=1.0)
        assert caught.value.type is DRPCExceptionType.SERVER_TIMEOUT
        assert time.monotonic() - started < 1.0 + SLACK
        # Only one job slot: this answers quickly only if the 30 s job was cancelled.
        started = time.monotonic()
        assert drpc.execute("slow", "0", timeout=20) == "done"
        assert time.monotonic() - started < 10
        assert runtime_.stats.jobs_cancelled == 1


def test_a_crashed_python_worker_fails_its_job_with_a_typed_error_and_serving_goes_on() -> None:
    with LocalDRPC(executor="spark-batch") as drpc:
        drpc.register(single_step("fragile", workload.CrashOn()))
        with pytest.raises(DRPCExecutionException) as caught:
            drpc.execute("fragile", "crash")
        assert caught.value.type is DRPCExceptionType.INTERNAL_ERROR
        assert (
            "Spark job" in caught.value.msg
            and "Python worker exited unexpectedly" in caught.value.msg
        )
        assert drpc.execute("fragile", "fine") == "fine!"


def test_a_worker_resource_is_loaded_once_per_python_worker(tmp_path: Path) -> None:
    marker = tmp_path / "loads.txt"
    resource = WorkerResource(f"marker-{tmp_path.name}", workload.load_marker, str(marker))
    builder = LinearDRPCTopologyBuilder("resource")
    builder.add_bolt(workload.UsesResource(resource), 2)
    with LocalDRPC(executor="spark-batch") as drpc:
        drpc.register(builder)
        answers = [drpc.execute("resource", str(n)) for n in range(8)]
    loads = Counter(marker.read_text().split())
    assert loads and max(loads.values()) == 1  # no worker process loaded it twice
    assert set(answers) <= set(loads)  # every answer came from a process that loaded it once
    assert str(os.getpid()) not in loads  # the driver never loaded it


LOCAL_CLUSTER_SCRIPT = textwrap.dedent(
    """
    from drpc.testing import LocalDRPC
    from drpc.examples.reach import build_reach, EXPECTED_REACH
    from drpc.examples.exclamation import build_exclamation
    from drpc.executors.resident import current_cluster
    master = "local-cluster[2,1,1024]"
    with (
        LocalDRPC(executor="spark", master=master, timeout=120) as resident,
        LocalDRPC(executor="spark-batch", master=master, timeout=120) as batch,
    ):
        resident.register(build_reach())
        batch.register(build_exclamation())
        for url, reach in EXPECTED_REACH.items():
            assert resident.execute("reach", url) == reach, url
            assert batch.execute("exclamation", url) == url + "!"
        from drpc import runtime
        sc = runtime.current_session().sparkContext
        print("executors", sc._jsc.sc().getExecutorMemoryStatus().size() - 1)
        print("slots", current_cluster().slots)
    print("ok")
    """
)


def _local_cluster_run(workdir: Path) -> ahead.Command:
    (workdir / "package-before.json").write_text(json.dumps(package_listing()))
    home = spark_home_view(workdir / "spark-home")  # its workers write work/ under SPARK_HOME
    return ahead.Command([sys.executable, "-c", LOCAL_CLUSTER_SCRIPT], {"SPARK_HOME": str(home)})


LOCAL_CLUSTER_RUN = ahead.register("local-cluster", _local_cluster_run, timeout=300)
"""Its own driver, workers and executor JVMs, started early in the session: it runs beside
the other tests, and this one runs last (tests/ahead.py)."""


@pytest.mark.slow
@pytest.mark.timeout(360)  # its own subprocess may take 300 s on a loaded machine
@pytest.mark.ahead(LOCAL_CLUSTER_RUN.name)
def test_resident_and_batch_functions_on_a_local_cluster_with_separate_executor_jvms(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    out = LOCAL_CLUSTER_RUN.finish(tmp_path_factory)
    assert out.returncode == 0, out.stderr[-3000:]
    # One resident task on one executor JVM, batch jobs on the other.
    assert out.stdout.split() == ["executors", "2", "slots", "1", "ok"]
    home = out.workdir / "spark-home"
    assert list(home.glob("work/app-*")), "the workers wrote their work directories elsewhere"
    before = json.loads((out.workdir / "package-before.json").read_text())
    assert package_listing() == before  # and nothing inside the installed pyspark
