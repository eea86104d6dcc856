"""Run as ``python -m tests.fault.kill_executor WORKDIR EXECUTOR [EXECUTOR ...]``: on one
Spark standalone cluster (master + two workers on 127.0.0.1), for each EXECUTOR in turn
("spark": resident tasks on both executors; "spark-batch": jobs), a DRPC server with reach
on it, 100 reach calls in flight, one executor JVM SIGKILLed meanwhile; on resident tasks
it then waits until the resident job broke and is back; then 20 more calls, then it waits
until the driver has removed the killed executor (so Spark's "Lost executor" line is in
its stderr: under load the Master's report of the exit can come seconds after the calls
have all ended), and until the cluster's replacement executor runs, for the next
EXECUTOR (stderr marks where each run begins: ``SCENARIO_MARK``). Prints one JSON line
per EXECUTOR: ``{"executor": ..., "answers": {...},
"errors": {...}, "wrong": [...], "after": [...], "after_errors": {...}, "killed": pid,
"in_flight_at_kill": n, "removed_after_s": s}``. Its own SparkSession (one per process,
so it cannot share the test run's), shared by the EXECUTORs as their cluster is."""

from __future__ import annotations

import asyncio
import collections
import faulthandler
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from drpc.client import AsyncDRPCClient, DRPCExecutionException
from drpc.server import DRPCServer, ServerThread

from drpc.examples.reach import EXPECTED_REACH, build_reach
from tests.fault.processes import HOST, kill, standalone_cluster

CALLS = 100
SCENARIO_MARK = "kill_executor scenario: "
"""Written to stderr before each EXECUTOR's run: what Spark logs after it is that run's."""
REMOVAL_TIMEOUT = 120.0
LOAD_ROUNDS = 50
"""Rounds of ``CALLS`` calls sent at most, until half of one round is in flight at once."""
HANG_DUMP_AFTER = 150.0
"""Seconds into a scenario (about three times a loaded one's) after which every thread's
stack goes to stderr, and again every as many seconds."""


def _executor_endpoints() -> set[str]:
    """``host:port`` of every block manager the driver counts live (itself included). An
    executor leaves this set only after the scheduler has logged its loss."""
    from drpc.runtime import get_session

    tracker = get_session().sparkContext._jsc.sc().statusTracker()
    return {f"{info.host()}:{info.port()}" for info in tracker.getExecutorInfos()}


def _await_removal(before: set[str], killed_at: float) -> float:
    """Seconds from the kill until one of ``before`` is seen gone from the driver's view
    (looked for once the later calls have ended, so at least their time)."""
    while before <= _executor_endpoints():
        assert time.monotonic() - killed_at < REMOVAL_TIMEOUT, "the driver kept the executor"
        time.sleep(0.2)
    return round(time.monotonic() - killed_at, 1)


def _await_resident_recovery(runtime: Any, killed_at: float) -> None:
    """Until the resident job broke and is serving again. The killed executor's Python
    worker may outlive its JVM for a while and answer the calls in flight: the break can
    come after they all ended, and it fails what is in flight then."""
    cluster = runtime.cluster
    while cluster.restarts < 1 or not runtime.serving:
        assert time.monotonic() - killed_at < REMOVAL_TIMEOUT, "the resident job never came back"
        time.sleep(0.1)


async def _calls(port: int, count: int, offset: int) -> list[tuple[str, str, str]]:
    urls = list(EXPECTED_REACH)
    async with AsyncDRPCClient(HOST, port, timeout=240) as client:

        async def one(i: int) -> tuple[str, str, str]:
            url = urls[(i + offset) % len(urls)]
            try:
                return url, "ok", await client.execute("reach", url)
            except DRPCExecutionException as error:
                return url, error.type.name, error.msg

        return await asyncio.gather(*(one(i) for i in range(count)))


def _scenario(cluster: Any, executor: str) -> dict[str, Any]:
    server = DRPCServer(host=HOST, port=0, invocations_port=0, http_port=None, timeout=200)
    if executor == "spark":  # a resident task on each executor: either kill hits one
        options: dict[str, object] = {"slots": 2}
    else:  # five jobs of 20 calls: two run when the executor dies, the others wait behind
        options = {"max_batch_size": 20, "max_jobs_in_flight": 2}
    deadline = time.monotonic() + 120
    runtime = server.register(
        build_reach(), executor=executor, master=cluster.master_url, **options
    )
    while len(cluster.executor_pids()) < 2:
        assert time.monotonic() < deadline, "two executors did not start"
        time.sleep(0.5)
    with ServerThread(server) as running:
        asyncio.run(_calls(running.port, 4, 0))  # warm: every executor has run tasks

        live = _executor_endpoints()

        # Looked up before the calls: 100 reach calls on resident tasks take tens of
        # milliseconds, less than listing the processes.
        victim = cluster.executor_pids()[0]

        async def load_and_kill() -> tuple[list[tuple[str, str, str]], int, int, float]:
            # On resident tasks the calls can all be answered before half of them were
            # ever in flight at once (the full suite's CI runs waited here for good):
            # then load again, until the kill lands on calls in flight.
            for _ in range(LOAD_ROUNDS):
                calls = asyncio.ensure_future(_calls(running.port, CALLS, 0))
                while running.service.outstanding() < CALLS // 2 and not calls.done():
                    await asyncio.sleep(0.001)
                if not calls.done():
                    break
            else:
                raise AssertionError(
                    f"{LOAD_ROUNDS} rounds of {CALLS} calls never had {CALLS // 2} in flight"
                )
            if executor == "spark-batch":
                await asyncio.sleep(0.5)  # the jobs are running on both executors
            in_flight = running.service.outstanding()
            kill(victim)
            return await calls, victim, in_flight, time.monotonic()

        during, victim, in_flight, killed_at = asyncio.run(load_and_kill())
        if executor == "spark":
            _await_resident_recovery(runtime, killed_at)
        after = asyncio.run(_calls(running.port, 20, 1))
        removed_after = _await_removal(live, killed_at)
    answers = collections.Counter(outcome for _, outcome, _ in during)
    wrong = [
        (url, result)
        for url, outcome, result in during + after
        if outcome == "ok" and result != EXPECTED_REACH[url]
    ]
    errors = collections.Counter(
        f"{outcome}: {msg[:120]}" for _, outcome, msg in during if outcome != "ok"
    )
    after_errors = collections.Counter(
        f"{outcome}: {msg[:300]}" for _, outcome, msg in after if outcome != "ok"
    )
    return {
        "executor": executor, "answers": dict(answers), "errors": dict(errors),
        "wrong": wrong, "after": [outcome for _, outcome, _ in after],
        "after_errors": dict(after_errors), "killed": victim,
        "in_flight_at_kill": in_flight, "removed_after_s": removed_after,
    }  # fmt: skip


def main(workdir: Path, executors: list[str]) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # drpc's own account of each step on stderr, and every thread's stack should a
    # scenario outlast HANG_DUMP_AFTER: a run that hangs then says where.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with standalone_cluster(workdir) as cluster:
        for executor in executors:
            print(f"{SCENARIO_MARK}{executor}", file=sys.stderr, flush=True)
            faulthandler.dump_traceback_later(HANG_DUMP_AFTER, repeat=True)
            print(json.dumps(_scenario(cluster, executor)), flush=True)
            faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    # A SIGTERM (the test gave up waiting) unwinds, so the cluster's JVMs are torn down.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    main(Path(sys.argv[1]), sys.argv[2:])
