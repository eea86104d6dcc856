"""The resident tasks fetch and answer requests themselves (``request_path="tasks"``): a
runner's driver hands its functions to the tasks and does nothing per request."""

from __future__ import annotations

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
from tests.server.helpers import HOST, exclamation, failing_topology, running_server, wait_until
from tests.topologies.bolts import SleepThenEcho

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session")]


def _servers(*servers: DRPCServer) -> str:
    return ",".join(f"{HOST}:{server.invocations_port}" for server in servers)


def _call(server: DRPCServer, function: str, args: str) -> str:
    with DRPCClient(HOST, server.port, timeout=30) as drpc:
        return drpc.execute(function, args)


def test_the_tasks_fetch_from_every_server_and_answer_each_its_own() -> None:
    with running_server() as first, running_server() as second:
        runner = RemoteRunner(
            [exclamation(), build_reach(), failing_topology()],
            _servers(first, second),
            executor="spark",
            poll_interval=0.01,
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

            calls = [(first, f"a{i}") for i in range(12)] + [(second, f"b{i}") for i in range(12)]
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda item: _call(item[0], "exclamation", item[1]), calls))
            assert answers == [args + "!" for _, args in calls]
            for url, reach in EXPECTED_REACH.items():
                assert _call(second, "reach", url) == str(reach)
            with pytest.raises(DRPCExecutionException) as failure:
                _call(first, "failing", "bad")
            assert failure.value.type is DRPCExceptionType.FAILED_REQUEST
            assert "ValueError: cannot handle 'bad'" in failure.value.msg
            assert _call(first, "failing", "fine") == "fine!"
        assert first.service.late_results == second.service.late_results == 0


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


def test_request_path_tasks_needs_a_handle_the_tasks_can_rebuild() -> None:
    needs = "request_path='tasks' needs an invocations handle"
    with LocalDRPC() as drpc, pytest.raises(ValueError, match=needs):
        ResidentExecutor(
            build_reach().create_topology(),
            services={"drpc.invocations": drpc},
            request_path="tasks",
        )
    with pytest.raises(ValueError, match="request_path must be one of auto, tasks, driver"):
        ResidentExecutor(
            build_reach().create_topology(),
            services={"drpc.invocations": RemoteInvocations(f"{HOST}:1", ["reach"])},
            request_path="workers",
        )
