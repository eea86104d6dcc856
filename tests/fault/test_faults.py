"""Fault injection: processes die mid-request and every caller still gets a correct answer
or a typed error, in bounded time, and serving resumes.

- an executor JVM of a Spark standalone cluster SIGKILLed with 100 reach calls in flight,
  on resident tasks and on batch jobs;
- a Python worker crashing (os._exit) inside a step, through the server, on both;
- the server process SIGKILLed under load, then restarted on the same ports;
- a server hosting a transactional run SIGKILLed twice mid-run under load, then
  restarted: the run resumes and counts exactly once;
- a remote runner SIGKILLed while it holds a request: its sockets close, the request fails
  at once.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from drpc.client import AsyncDRPCClient, DRPCClient, DRPCConnectionError, DRPCExecutionException
from drpc.server import DRPCServer, ServerThread

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.errors import DRPCError, DRPCExceptionType
from drpc.examples.exclamation import build_exclamation
from drpc.state import CoordinatorState
from drpc.state.topology import TopologyState
from tests import ahead
from tests.fault.kill_executor import SCENARIO_MARK
from tests.fault.processes import free_port, kill
from tests.server.helpers import HOST, server_options, wait_until
from tests.spark.workload import CrashOn
from tests.transactional.test_faults import committed, write_words

pytestmark = [pytest.mark.fault, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


KILLED_EXECUTORS = ("spark-batch", "spark")  # one cluster: the batch jobs' kill first


def _kill_run(workdir: Path) -> ahead.Command:
    return ahead.Command(
        [sys.executable, "-m", "tests.fault.kill_executor", str(workdir), *KILLED_EXECUTORS]
    )


KILL_RUN = ahead.register("kill-executor", _kill_run, timeout=400)
"""One cluster for both (a cluster and its session take half a minute to start), started
early in the session: it runs beside the other tests, and these run last (tests/ahead.py)."""


@pytest.fixture(scope="module")
def executor_kill_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each executor's report from ``tests.fault.kill_executor``."""
    run = KILL_RUN.finish(tmp_path_factory)
    assert run.returncode == 0, run.stderr[-4000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    reports = {report["executor"]: report for report in map(json.loads, lines)}
    assert set(reports) == set(KILLED_EXECUTORS), run.stdout
    return {"reports": reports, "stderr": run.stderr}


@pytest.mark.timeout(480)  # 400 s for both runs from their start, then their teardown
@pytest.mark.ahead(KILL_RUN.name)
@pytest.mark.parametrize("executor", KILLED_EXECUTORS)
def test_sigkill_of_an_executor_jvm_with_100_reach_calls_in_flight(
    executor: str, executor_kill_reports: dict[str, Any]
) -> None:
    report = executor_kill_reports["reports"][executor]
    stderr = executor_kill_reports["stderr"].partition(f"{SCENARIO_MARK}{executor}\n")[2]
    stderr = stderr.partition(SCENARIO_MARK)[0]  # this run's part of the log
    assert report["in_flight_at_kill"] > 0  # the kill landed while calls were in flight
    assert report["wrong"] == []  # never a wrong answer
    assert sum(report["answers"].values()) == 100  # every call ended...
    assert set(report["answers"]) <= {"ok", "INTERNAL_ERROR", "FAILED_REQUEST"}  # ...typed
    # and every later call succeeds
    assert report["after"] == ["ok"] * 20, (report["after_errors"], stderr[-4000:])
    executor_lost = [line for line in stderr.splitlines() if "Lost executor" in line]
    assert executor_lost, f"Spark never logged the executor's loss:\n{stderr[-4000:]}"


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("spark_session")
@pytest.mark.parametrize("executor", ["spark", "spark-batch"])
def test_a_python_worker_crash_in_a_step_fails_what_was_in_flight_typed_and_serving_goes_on(
    executor: str,
) -> None:
    crashing = LinearDRPCTopologyBuilder("fragile")
    crashing.add_bolt(CrashOn())
    server = DRPCServer(**server_options(executor=executor, http_port=None))
    server.register(crashing)
    server.register(build_exclamation(parallelism=2))
    with ServerThread(server) as running, DRPCClient(HOST, running.port, timeout=120) as client:
        assert client.execute("fragile", "fine") == "fine!"
        with pytest.raises(DRPCExecutionException) as crashed:
            client.execute("fragile", "crash")
        assert crashed.value.type is DRPCExceptionType.INTERNAL_ERROR
        if executor == "spark":  # the resident task that ran the step died with it
            assert "went away" in crashed.value.msg
        assert "Python worker exited unexpectedly" in crashed.value.msg
        # Calls made while the resident tasks restart wait in the queue, then answer.
        assert [client.execute("fragile", f"after{i}") for i in range(3)] == [
            f"after{i}!" for i in range(3)
        ]
        assert client.execute("exclamation", "other") == "other!"
        assert running.service.outstanding() == 0


def _start_server(ports: dict[str, int]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "drpc.server", "--executor", "local", "--host", HOST,
         "--port", str(ports["port"]), "--invocations-port", str(ports["invocations"]),
         "--http-port", "-1", "--topology", "drpc.examples.exclamation:topology",
         "--log-level", "WARNING"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def _serves(port: int) -> bool:
    try:
        with DRPCClient(HOST, port, timeout=5) as client:
            return client.execute("exclamation", "up") == "up!"
    except DRPCConnectionError:
        return False


@pytest.mark.timeout(120)
def test_sigkill_of_the_server_under_load_then_restart() -> None:
    ports = {"port": free_port(), "invocations": free_port()}
    server = _start_server(ports)
    outcomes: collections.Counter[str] = collections.Counter()
    wrong: list[tuple[str, str]] = []
    phase = {"name": "before"}

    async def caller(index: int, stop: asyncio.Event) -> None:
        n = 0
        async with AsyncDRPCClient(HOST, ports["port"], timeout=10) as client:
            while not stop.is_set():
                n += 1
                args = f"{index}-{n}"
                try:
                    answer = await client.execute("exclamation", args)
                except DRPCConnectionError:
                    outcomes[f"{phase['name']}: connection error"] += 1
                    await asyncio.sleep(0.05)
                    continue
                except DRPCError as error:  # any other typed error is counted, then judged
                    outcomes[f"{phase['name']}: {type(error).__name__}"] += 1
                    continue
                if answer != args + "!":
                    wrong.append((args, answer))
                outcomes[f"{phase['name']}: ok"] += 1

    async def load() -> None:
        stop = asyncio.Event()
        callers = [asyncio.ensure_future(caller(i, stop)) for i in range(40)]
        await asyncio.sleep(1.5)
        phase["name"] = "killed"
        server.send_signal(signal.SIGKILL)
        await asyncio.to_thread(server.wait, 10)
        await asyncio.sleep(0.5)
        phase["name"] = "restarted"
        restarted = _start_server(ports)
        try:
            deadline = time.monotonic() + 60
            while outcomes["restarted: ok"] < 200:
                assert time.monotonic() < deadline, dict(outcomes)
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await asyncio.gather(*callers)
            restarted.send_signal(signal.SIGTERM)
            await asyncio.to_thread(restarted.wait, 30)

    try:
        wait_until(lambda: _serves(ports["port"]), 30)
        asyncio.run(load())
    finally:
        kill(server.pid)
    assert wrong == []
    assert outcomes["before: ok"] > 0 and outcomes["restarted: ok"] >= 200
    assert outcomes["killed: connection error"] > 0  # callers noticed, as connection errors
    kinds = {kind.partition(": ")[2] for kind in outcomes}
    assert kinds <= {"ok", "connection error"}, dict(outcomes)


@pytest.mark.timeout(60)
def test_a_runner_killed_mid_request_fails_at_once_typed() -> None:
    timeout = 30.0
    server = DRPCServer(**server_options(timeout=timeout, runner_liveness=0.5, http_port=None))
    with ServerThread(server) as running:
        runner = subprocess.Popen(
            [sys.executable, "-m", "drpc.runner", "--servers", f"{HOST}:{running.invocations_port}",
             "--topology", "tests.fault.topologies:slow", "--executor", "local",
             "--poll-interval", "0.01", "--log-level", "WARNING"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_until(lambda: "slow" in running.functions, 30)
            with DRPCClient(HOST, running.port, timeout=30) as client:
                assert client.execute("slow", "0") == "done"

                async def call_and_kill() -> tuple[BaseException | str, float]:
                    started = time.monotonic()
                    call = asyncio.ensure_future(asyncio.to_thread(client.execute, "slow", "60"))
                    while running.service.outstanding() == 0 or running.service.queue_depth("slow"):
                        await asyncio.sleep(0.01)  # until the runner fetched it
                    runner.send_signal(signal.SIGKILL)
                    try:
                        outcome: BaseException | str = await call
                    except DRPCError as error:
                        outcome = error
                    return outcome, time.monotonic() - started

                outcome, elapsed = asyncio.run(call_and_kill())
        finally:
            kill(runner.pid)
            runner.wait(10)
        assert isinstance(outcome, DRPCExecutionException), outcome
        # The dead process's sockets closed: the connection that fetched the request is
        # gone, so the server fails it at once, long before its deadline.
        assert outcome.type is DRPCExceptionType.INTERNAL_ERROR
        assert "that fetched it went away" in outcome.msg
        assert elapsed < 5.0
        assert running.service.orphaned == 1
        # past runner_liveness: nobody serves "slow" now
        wait_until(lambda: "slow" not in running.functions, 30)
        with DRPCClient(HOST, running.port, timeout=10) as client:
            started = time.monotonic()
            with pytest.raises(DRPCExecutionException, match="is not served"):
                client.execute("slow", "0")
            assert time.monotonic() - started < 5.0  # at once, not at the deadline
        assert running.service.outstanding() == 0


def _start_transactional_server(
    ports: dict[str, int], env: dict[str, str], state_dir: Path
) -> subprocess.Popen[str]:
    with open(state_dir.parent / "server.log", "a") as log:  # read when an assertion fails
        return subprocess.Popen(
            [sys.executable, "-m", "drpc.server", "--executor", "local", "--host", HOST,
             "--port", str(ports["port"]), "--invocations-port", str(ports["invocations"]),
             "--http-port", "-1", "--topology", "tests.transactional.faults:count_query",
             "--transactional", "tests.transactional.faults:topology",
             "--state-dir", str(state_dir), "--max-spout-pending", "3", "--log-level", "WARNING"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True,
        )  # fmt: skip


@pytest.mark.timeout(300)
@pytest.mark.parametrize("opaque", [False, True])
def test_sigkill_of_a_server_hosting_a_transactional_run_then_restart(
    opaque: bool, tmp_path: Path
) -> None:
    """Killed twice mid-run while 20 callers read the committed counts: callers see only
    answers that were true at some commit (never more than the input, never going back)
    or connection errors, and the restarted server finishes the run exactly once."""
    log_dir, state_dir = tmp_path / "log", tmp_path / "state"
    expected = write_words(log_dir, seed=5)
    vocabulary = sorted(expected)
    env = {
        **os.environ,
        "DRPC_TEST_LOG_DIR": str(log_dir),
        "DRPC_TEST_OPAQUE": "1" if opaque else "0",
        "DRPC_TEST_TAKE": "150",  # ~100 batches of 600 words
        "DRPC_STATE_DIR": str(state_dir),
    }
    env.pop("DRPC_TEST_MARKERS", None)
    ports = {"port": free_port(), "invocations": free_port()}
    outcomes: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
    phase = {"name": "first run"}
    rng = random.Random(5)
    targets = sorted(rng.sample(range(10, 70), 2))

    def next_txid() -> int:
        if not (state_dir / "data.mdb").exists():
            return 1
        return CoordinatorState(TopologyState.at(str(state_dir)).env, "fault-words").next_txid()

    async def caller(index: int, stop: asyncio.Event) -> None:
        seen: dict[str, int] = {}
        words = random.Random(index)
        async with AsyncDRPCClient(HOST, ports["port"], timeout=30) as client:
            while not stop.is_set():
                word = words.choice(vocabulary)
                try:
                    answer = int(await client.execute("count", word))
                except DRPCConnectionError:
                    outcomes[f"{phase['name']}: connection error"] += 1
                    await asyncio.sleep(0.05)
                    continue
                except DRPCError as error:
                    outcomes[f"{phase['name']}: {type(error).__name__}"] += 1
                    continue
                if not seen.get(word, 0) <= answer <= expected[word]:
                    wrong.append(f"{word}: {answer} after {seen.get(word, 0)}, input has "
                                 f"{expected[word]}")  # fmt: skip
                seen[word] = answer
                outcomes[f"{phase['name']}: ok"] += 1

    async def load() -> int:
        stop = asyncio.Event()
        server = _start_transactional_server(ports, env, state_dir)
        callers = [asyncio.ensure_future(caller(i, stop)) for i in range(20)]
        kills = 0
        try:
            for number, target in enumerate(targets, start=1):
                deadline = time.monotonic() + 120
                while next_txid() <= target and server.poll() is None:
                    assert time.monotonic() < deadline, "the run made no progress"
                    await asyncio.sleep(0.01)
                assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
                server.send_signal(signal.SIGKILL)
                await asyncio.to_thread(server.wait, 10)
                kills += 1
                phase["name"] = f"killed {number}"
                await asyncio.sleep(0.3)
                phase["name"] = f"restart {number}"
                server = _start_transactional_server(ports, env, state_dir)
            deadline = time.monotonic() + 150
            while committed(state_dir, opaque) != expected:
                assert time.monotonic() < deadline, "the restarted run did not finish"
                assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.5)  # it keeps polling the source: nothing more is counted
        finally:
            stop.set()
            await asyncio.gather(*callers)
            server.send_signal(signal.SIGTERM)
            await asyncio.to_thread(server.wait, 60)
        assert server.returncode == 0
        return kills

    kills = asyncio.run(load())
    assert kills == 2
    assert wrong == []
    assert committed(state_dir, opaque) == expected
    assert outcomes["first run: ok"] > 0 and outcomes["restart 2: ok"] > 0
    assert outcomes["killed 1: connection error"] + outcomes["killed 2: connection error"] > 0
    kinds = {kind.partition(": ")[2] for kind in outcomes}
    assert kinds <= {"ok", "connection error"}, dict(outcomes)
