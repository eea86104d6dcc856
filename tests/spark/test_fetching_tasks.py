"""The resident tasks fetch and answer requests themselves (``request_path="tasks"``): a
runner's driver hands its functions to the tasks and does nothing per request."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from drpc.client import DRPCClient, DRPCExecutionException
from drpc.server import DRPCServer

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.errors import DRPCExceptionType
from drpc.examples.reach import EXPECTED_REACH, build_reach
from drpc.executors.resident import ResidentExecutor, current_cluster
from drpc.runner import RemoteInvocations, RemoteRunner
from drpc.testing import LocalDRPC
from tests.server.helpers import (
    HOST,
    exclamation,
    failing_topology,
    free_port,
    running_server,
    wait_until,
)
from tests.spark.workload import CrashOn
from tests.topologies.bolts import SleepThenEcho

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session")]

DOWN_SERVER_TIMEOUT = 10.0
"""The runner's default call timeout: a fetch or an answer waiting on the server that is
down would take that long."""


def _servers(*servers: DRPCServer) -> str:
    return ",".join(f"{HOST}:{server.invocations_port}" for server in servers)


def _call(server: DRPCServer, function: str, args: str) -> str:
    with DRPCClient(HOST, server.port, timeout=30) as drpc:
        return drpc.execute(function, args)


@pytest.mark.parametrize("replicate", [True, False], ids=["a copy per task", "one copy"])
def test_the_tasks_fetch_from_every_server_and_answer_each_its_own(replicate: bool) -> None:
    """Two live servers and one that is down (nothing listens on its port): the tasks'
    fetches are asynchronous, so the one that is down delays no call."""
    with running_server() as first, running_server() as second:
        down = f"{HOST}:{free_port()}"
        runner = RemoteRunner(
            [exclamation(), build_reach(), failing_topology()],
            f"{_servers(first, second)},{down}",
            executor="spark",
            executor_options={"replicate": replicate},
            poll_interval=0.01,
            reconnect_interval=0.2,
        )
        with runner:
            wait_until(lambda: {"exclamation", "reach", "failing"} <= set(first.functions))
            wait_until(lambda: {"exclamation", "reach", "failing"} <= set(second.functions))
            # the driver's handle fetches nothing: every function went to the tasks
            assert runner.invocations.functions == []
            assert sorted(runner.invocations.handed_off) == ["exclamation", "failing", "reach"]
            cluster = current_cluster()
            assert cluster is not None
            mine = [d for d in cluster.deployments() if d.fetching is not None]
            assert len(mine) == 3 and all(d.engine is None for d in mine)
            assert all(d.replicated is replicate for d in mine)

            calls = [(first, f"a{i}") for i in range(12)] + [(second, f"b{i}") for i in range(12)]
            started = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda item: _call(item[0], "exclamation", item[1]), calls))
            assert answers == [args + "!" for _, args in calls]
            assert time.monotonic() - started < DOWN_SERVER_TIMEOUT  # no call waited on it
            for url, reach in EXPECTED_REACH.items():
                assert _call(second, "reach", url) == str(reach)
            with pytest.raises(DRPCExecutionException) as failure:
                _call(first, "failing", "bad")
            assert failure.value.type is DRPCExceptionType.FAILED_REQUEST
            assert "ValueError: cannot handle 'bad'" in failure.value.msg
            assert _call(first, "failing", "fine") == "fine!"
        assert first.service.late_results == second.service.late_results == 0


@pytest.mark.timeout(240)
def test_a_task_that_dies_fails_what_it_held_at_once_typed_and_serving_resumes() -> None:
    """The process holding the request is gone: its server sees the connection that
    fetched it close and fails it with INTERNAL_ERROR, long before its deadline; the job
    restarts and the tasks fetch again."""
    crashing = LinearDRPCTopologyBuilder("fragile")
    crashing.add_bolt(CrashOn())
    with running_server(timeout=60.0) as server:
        runner = RemoteRunner([crashing], _servers(server), executor="spark", poll_interval=0.01)
        with runner:
            wait_until(lambda: "fragile" in server.functions)
            assert _call(server, "fragile", "fine") == "fine!"
            started = time.monotonic()
            with pytest.raises(DRPCExecutionException) as crashed:
                _call(server, "fragile", "crash")
            assert time.monotonic() - started < 30  # not the 60 s deadline
            assert crashed.value.type is DRPCExceptionType.INTERNAL_ERROR
            assert "went away" in crashed.value.msg
            # calls made while the job restarts wait in the server's queue, then answer
            assert [_call(server, "fragile", f"after{i}") for i in range(3)] == [
                f"after{i}!" for i in range(3)
            ]
        assert server.service.outstanding() == 0


def test_a_tree_that_times_out_on_the_tasks_fails_at_its_server_naming_the_step() -> None:
    builder = LinearDRPCTopologyBuilder("slow")
    builder.add_bolt(SleepThenEcho())
    with running_server() as server:
        runner = RemoteRunner(
            [builder],
            _servers(server),
            executor="spark",
            conf={"topology.message.timeout.secs": 1},
            poll_interval=0.01,
        )
        with runner:
            wait_until(lambda: "slow" in server.functions)
            with pytest.raises(DRPCExecutionException) as failure:
                _call(server, "slow", "3")
    assert failure.value.type is DRPCExceptionType.FAILED_REQUEST
    assert "did not complete within 1 s" in failure.value.msg


def test_request_path_tasks_without_a_shippable_handle_feeds_whole_copies_only() -> None:
    """A handle whose table is in this process is fed to the tasks by the driver, which
    feeds whole copies of the topology only: one copy dealt over the tasks needs them to
    fetch themselves."""
    with LocalDRPC() as drpc:
        fed = ResidentExecutor(
            build_reach().create_topology(),
            services={"drpc.invocations": drpc},
            request_path="tasks",
        )
        assert fed.feed is drpc and fed.fetching is None
        dealt = ResidentExecutor(
            build_reach().create_topology(), services={"drpc.invocations": drpc}, replicate=False
        )
        assert dealt.feed is None and dealt.fetching is None  # auto: the driver path
        needs = "request_path='tasks' needs an invocations handle .* replicate=False"
        with pytest.raises(ValueError, match=needs):
            ResidentExecutor(
                build_reach().create_topology(),
                services={"drpc.invocations": drpc},
                request_path="tasks",
                replicate=False,
            )
        with pytest.raises(ValueError, match="feed_window must be >= 1, got 0"):
            ResidentExecutor(
                build_reach().create_topology(),
                services={"drpc.invocations": drpc},
                feed_window=0,
            )
    with pytest.raises(ValueError, match="request_path must be one of auto, tasks, driver"):
        ResidentExecutor(
            build_reach().create_topology(),
            services={"drpc.invocations": RemoteInvocations(f"{HOST}:1", ["reach"])},
            request_path="workers",
        )
