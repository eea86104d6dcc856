"""What hosted runtimes report reaches ``/metrics`` and the dashboard, end to end: step
spans and failing steps on the local executor, coalesced batches and Spark jobs on Spark."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from drpc.client import AsyncDRPCClient, DRPCClient, DRPCExecutionException
from drpc.server import DRPCServer, ServerThread

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from tests.ops.test_metrics import Samples, requests_by_outcome, scrape, value
from tests.server.helpers import (
    HOST,
    exclamation,
    failing_topology,
    running_server,
    server_options,
    wait_until,
)
from tests.topologies.bolts import SleepThenEcho

DRIVER_STEPS = ("prepare-request", "join-result", "return-results")


def slow_topology() -> LinearDRPCTopologyBuilder:
    """Function "slow": sleeps its argument in seconds in step "bolt0", then answers "slept"."""
    builder = LinearDRPCTopologyBuilder("slow")
    builder.add_bolt(SleepThenEcho(), 1)
    return builder


def step_counts(samples: Samples, function: str) -> dict[str, float]:
    return {
        dict(labels)["step"]: count
        for (name, labels), count in samples.items()
        if name == "drpc_step_duration_seconds_count" and dict(labels)["function"] == function
    }


def test_local_steps_reach_metrics_and_the_dashboard() -> None:
    with running_server(exclamation(), failing_topology(), slow_topology()) as server:
        with DRPCClient(HOST, server.port, timeout=20) as client:
            for i in range(3):
                assert client.execute("exclamation", str(i)) == f"{i}!"
            with pytest.raises(DRPCExecutionException):
                client.execute("failing", "bad")

        answer: list[str] = []

        def slow_call() -> None:
            with DRPCClient(HOST, server.port, timeout=20) as client:
                answer.append(client.execute("slow", "1.5"))

        caller = threading.Thread(target=slow_call, daemon=True)
        caller.start()

        def slow_in_flight() -> dict[str, object] | None:
            rows = server.dashboard.status()["in_flight"]
            return next((row for row in rows if row["function"] == "slow"), None)

        wait_until(lambda: (row := slow_in_flight()) is not None and row["step"] == "bolt0")
        row = slow_in_flight()
        assert row is not None and row["state"] == "running"
        caller.join(20)
        assert answer == ["slept"]
        _, samples = scrape(server)

    steps = step_counts(samples, "exclamation")
    assert {step: steps.get(step) for step in DRIVER_STEPS} == dict.fromkeys(DRIVER_STEPS, 3)
    assert steps.get("bolt0") == 3
    slow = step_counts(samples, "slow")
    assert slow["bolt0"] == 1
    bolt0_seconds = value(samples, "drpc_step_duration_seconds_sum", function="slow", step="bolt0")
    assert bolt0_seconds is not None and bolt0_seconds >= 1.5
    (failure,) = server.dashboard.status()["failures"]
    assert (failure["function"], failure["step"]) == ("failing", "bolt0")


@pytest.fixture(scope="module")
def spark_server(spark_session: object) -> Iterator[DRPCServer]:
    server = DRPCServer(**server_options(executor="spark-batch"))
    server.register(exclamation(), max_wait=0.05)
    with ServerThread(server) as running:
        yield running


@pytest.mark.spark
async def test_spark_batches_and_jobs_reach_metrics(spark_server: DRPCServer) -> None:
    calls = 40
    async with AsyncDRPCClient(HOST, spark_server.port) as client:
        answers = await asyncio.gather(
            *(client.execute("exclamation", str(i)) for i in range(calls))
        )
    assert answers == [f"{i}!" for i in range(calls)]

    def scraped_after_jobs() -> Samples:
        # a job reports its end after handing over its results: wait for the last one
        while True:
            _, samples = scrape(spark_server)
            if value(samples, "drpc_spark_jobs_in_flight", function="exclamation") == 0:
                return samples
            time.sleep(0.05)

    samples = await asyncio.wait_for(asyncio.to_thread(scraped_after_jobs), 20)
    assert requests_by_outcome(samples) == {("exclamation", "ok"): calls}
    batches = value(samples, "drpc_batch_size_count", function="exclamation")
    assert value(samples, "drpc_batch_size_sum", function="exclamation") == calls
    assert batches is not None and 1 <= batches < calls  # calls were coalesced into jobs
    jobs = {
        dict(labels)["outcome"]: count
        for (name, labels), count in samples.items()
        if name == "drpc_spark_jobs_total"
    }
    assert jobs == {"ok": batches}
    assert value(samples, "drpc_spark_job_duration_seconds_count", function="exclamation") == (
        batches
    )
    steps = step_counts(samples, "exclamation")
    assert steps.get("spark-job") == calls
    assert steps.get("bolt0") == calls
