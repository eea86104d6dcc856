"""What only the resident executor does: one resident job shared by every function, its
slots, and batch jobs and transactional runs beside it on the same session."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from drpc import LinearDRPCTopologyBuilder, runtime
from drpc.compiled import engine_build
from drpc.examples.exclamation import build_exclamation
from drpc.examples.reach import EXPECTED_REACH, build_reach
from drpc.examples.square import build_square
from drpc.examples.transactional_global_count import build_global_count
from drpc.executors.resident import ResidentExecutor, current_cluster
from drpc.executors.resident.cluster import default_slots
from drpc.state.topology import TopologyState
from drpc.testing import LocalDRPC
from drpc.transactional import run
from tests.spark.workload import KillsItsTaskInPrepare

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session")]


def test_functions_share_one_resident_job_of_half_the_slots() -> None:
    with LocalDRPC(executor="spark") as first, LocalDRPC(executor="spark") as second:
        first.register(build_reach())
        second.register(build_square())
        cluster = current_cluster()
        assert cluster is not None
        generation = cluster.generation
        assert {d.topology.drpc_function for d in cluster.deployments()} >= {"reach", "square"}
        assert first.execute("reach", "foo.com/blog/1") == "16"
        assert second.execute("square", "10") == "100"
        session = runtime.current_session()
        assert session is not None
        sc = session.sparkContext
        assert cluster.slots == default_slots(sc) == 1  # local[2]: half of 2
        assert cluster.generation == generation  # no second job for the second function
    assert {d.topology.drpc_function for d in cluster.deployments()} == set()


def test_the_resident_tasks_run_the_engine_build_the_driver_runs() -> None:
    """A Spark Python worker imports drpc on its own: it must find the compiled engine the
    driver uses (``make test`` runs both compiled, DRPC_EXPECT_BUILD=compiled)."""
    with LocalDRPC(executor="spark") as drpc:
        drpc.register(build_square())
        assert drpc.execute("square", "3") == "9"
        cluster = current_cluster()
        assert cluster is not None
        builds = dict(cluster.engine_builds)
    assert sorted(builds) == cluster.workers
    assert set(builds.values()) == {engine_build()}
    expected = os.environ.get("DRPC_EXPECT_BUILD")
    if expected is not None:
        assert engine_build() == expected


def test_asking_for_other_slots_than_the_running_job_is_refused_naming_both() -> None:
    with LocalDRPC(executor="spark") as drpc:
        drpc.register(build_reach())
        cluster = current_cluster()
        assert cluster is not None
        executor = ResidentExecutor(
            build_exclamation().create_topology(),
            services={"drpc.invocations": drpc},
            slots=cluster.slots + 1,
        )
        with pytest.raises(ValueError, match=rf"already runs {cluster.slots} slot.*cannot also"):
            executor.start()
        assert drpc.execute("reach", "foo.com/blog/1") == "16"  # the job is unharmed


def test_batch_jobs_and_a_transactional_run_go_on_beside_resident_functions(
    tmp_path: Path,
) -> None:
    outcome: dict[str, Any] = {}

    def transactional() -> None:
        outcome["run"] = run(build_global_count(), state_dir=str(tmp_path), executor="spark")

    with LocalDRPC(executor="spark") as resident, LocalDRPC(executor="spark-batch") as batch:
        resident.register(build_reach())
        batch.register(build_exclamation())
        runner = threading.Thread(target=transactional)
        runner.start()
        answers: list[tuple[str, str]] = []
        while runner.is_alive() or len(answers) < 20:
            url = list(EXPECTED_REACH)[len(answers) % 4]
            answers.append((resident.execute("reach", url), EXPECTED_REACH[url]))
            assert batch.execute("exclamation", url) == url + "!"
        runner.join()
    assert all(got == expected for got, expected in answers)
    totals = [values[1] for values in outcome["run"].outputs("sum")]
    assert totals[:3] == [9, 16, 19]
    state = TopologyState.at(str(tmp_path))
    assert state.transactional_map("global-count").get("count") == 19


@pytest.mark.timeout(180)
def test_a_task_dying_while_it_starts_a_function_does_not_fail_the_start(tmp_path: Path) -> None:
    """The job breaks while ``deploy`` waits for its tasks; the recovery deploys the
    function on the new job and the start returns once that serves it."""
    builder = LinearDRPCTopologyBuilder("phoenix")
    builder.add_bolt(KillsItsTaskInPrepare(str(tmp_path)), 2)
    restarts = None
    with LocalDRPC(executor="spark", timeout=60) as drpc:
        drpc.register(builder)
        cluster = current_cluster()
        assert cluster is not None
        restarts = cluster.restarts
        assert (tmp_path / "killed-in-prepare").exists()
        assert drpc.execute("phoenix", "again") == "again!"
    assert restarts is not None and restarts >= 1
