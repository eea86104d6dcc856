"""Remote runners: topologies served from another process through the invocations port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from drpc.client import DRPCClient, DRPCExecutionException
from drpc.server import DRPCServer, ServerThread

from bench import procs
from drpc.errors import DRPCExceptionType
from drpc.runner import RemoteInvocations, RemoteRunner
from drpc.transactional.filelog import append_lines
from tests.server.helpers import (
    HOST,
    exclamation,
    failing_topology,
    running_server,
    server_options,
    wait_until,
)
from tests.tcp_gate import TcpGate

ROOT = Path(__file__).resolve().parents[2]


def _invocations(*servers: DRPCServer) -> str:
    return ",".join(f"{HOST}:{server.invocations_port}" for server in servers)


def test_results_go_back_to_the_server_that_issued_each_request() -> None:
    with running_server() as first, running_server() as second:
        runner = RemoteRunner(
            [exclamation(), failing_topology()],
            _invocations(first, second),
            executor="local",
            poll_interval=0.01,
        )
        with runner:
            wait_until(lambda: "exclamation" in first.functions and "failing" in second.functions)
            calls = [(first, f"a{i}") for i in range(10)] + [(second, f"b{i}") for i in range(10)]

            def call(server: DRPCServer, args: str) -> str:
                with DRPCClient(HOST, server.port) as drpc:
                    return drpc.execute("exclamation", args)

            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda item: call(*item), calls))
            # Both servers issue ids "1", "2", ...: a result sent to the wrong one would be
            # a wrong answer or a late result there.
            assert answers == [args + "!" for _, args in calls]
            with DRPCClient(HOST, second.port) as drpc:
                with pytest.raises(DRPCExecutionException) as failure:
                    drpc.execute("failing", "bad")
                assert failure.value.type is DRPCExceptionType.FAILED_REQUEST
                assert "ValueError: cannot handle 'bad'" in failure.value.msg
        assert first.service.late_results == second.service.late_results == 0


def test_buffered_requests_per_function_up_to_the_limit() -> None:
    with running_server(wait_for_unserved=True) as server:
        pending = ThreadPoolExecutor(5)
        calls = [
            pending.submit(lambda i=i: DRPCClient(HOST, server.port).execute("f", str(i)))
            for i in range(5)
        ]
        wait_until(lambda: server.service.queue_depth("f") == 5)
        invocations = RemoteInvocations(
            _invocations(server), ["f"], max_buffered=2, poll_interval=0.01
        )
        invocations.start()
        try:
            wait_until(lambda: invocations.buffered("f") == 2)
            wait_until(lambda: server.service.queue_depth("f") == 3)
            first = invocations.fetch_request("f")
            assert first is not None
            assert first.return_info.origin == f"{HOST}:{server.invocations_port}"
            wait_until(lambda: server.service.queue_depth("f") == 2)
            assert invocations.buffered("f") == 2
            invocations.result(first.return_info, "answered")
            # The five callers race to queue; the oldest request is whichever came first.
            assert calls[int(first.args)].result(10) == "answered"
        finally:
            invocations.stop()
            server.service.shutdown()
            pending.shutdown()


def _serves(server: DRPCServer, args: str) -> bool:
    try:
        with DRPCClient(HOST, server.port, timeout=10) as drpc:
            return drpc.execute("exclamation", args) == args + "!"
    except DRPCExecutionException as error:
        assert error.type is DRPCExceptionType.FAILED_REQUEST  # not served (yet)
        return False


@pytest.mark.slow
def test_a_runner_process_serves_two_servers_and_survives_one_stopping() -> None:
    first = ServerThread(DRPCServer(**server_options(runner_liveness=0.5)))
    first.start()
    with running_server(runner_liveness=0.5) as second:
        runner = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "drpc.runner",
                "--servers",
                _invocations(first.server, second),
                "--topology",
                "drpc.examples.exclamation:topology",
                "--executor",
                "local",
                "--poll-interval",
                "0.02",
                "--reconnect-interval",
                "0.1",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_until(lambda: _serves(first.server, "one") and _serves(second, "two"), 30)
            ports = {
                "port": first.server.port,
                "invocations_port": first.server.invocations_port,
                "http_port": None,
            }
            first.stop()
            for i in range(5):
                assert _serves(second, f"still {i}")
            restarted = ServerThread(DRPCServer(**server_options(runner_liveness=0.5, **ports)))
            restarted.start()
            try:
                wait_until(lambda: _serves(restarted.server, "back"), 30)
            finally:
                restarted.stop()
            assert _serves(second, "last")
        finally:
            runner.send_signal(signal.SIGTERM)
            output, _ = runner.communicate(timeout=30)
            first.stop()
    assert runner.returncode == 0, output
    assert "runner serving exclamation for" in output
    assert "reconnecting in the background" in output


@pytest.mark.timeout(60)
def test_requests_fetched_before_the_link_broke_are_dropped_unrun() -> None:
    """The server fails the requests a fetch connection held once it closes; the runner
    must not run them and answer late: its buffers let go of them."""
    with running_server(wait_for_unserved=True) as server:
        gate = TcpGate(server.invocations_port)
        pending = ThreadPoolExecutor(2)
        calls = [
            pending.submit(lambda i=i: DRPCClient(HOST, server.port, timeout=30).execute("f", i))
            for i in ("a", "b")
        ]
        wait_until(lambda: server.service.queue_depth("f") == 2)
        invocations = RemoteInvocations(
            f"{HOST}:{gate.port}", ["f"], poll_interval=0.01, reconnect_interval=0.1
        )
        invocations.start()
        try:
            wait_until(lambda: invocations.buffered("f") == 2)
            gate.cut()
            for call in calls:
                with pytest.raises(DRPCExecutionException) as failed:
                    call.result(10)
                assert failed.value.type is DRPCExceptionType.INTERNAL_ERROR
            wait_until(lambda: invocations.dropped_requests == 2)
            assert invocations.buffered("f") == 0
            assert invocations.fetch_request("f") is None  # nothing left to answer late
            gate.mend()
            later = pending.submit(
                lambda: DRPCClient(HOST, server.port, timeout=30).execute("f", "c")
            )
            wait_until(lambda: invocations.buffered("f") == 1)
            request = invocations.fetch_request("f")
            assert request is not None and request.args == "c"
            invocations.result(request.return_info, "served after the break")
            assert later.result(10) == "served after the break"
        finally:
            invocations.stop()
            gate.cut()
            server.service.shutdown()
            pending.shutdown()


GONE = "the SparkContext is stopped (its JVM shut down or went away), so they are not restarted"


@pytest.mark.slow
@pytest.mark.spark  # the runner's own Spark driver, in a child process
@pytest.mark.timeout(180)
def test_a_runner_runs_partitioned_state_and_exits_once_its_jvm_is_gone(
    tmp_path: Path,
) -> None:
    """``drpc-runner --transactional``: the runner runs a Trident count into a state of two
    partitions on its resident tasks and serves the query that reads them through a server
    in another process. Then its Spark JVM dies (SIGKILL; a SIGTERM to the runner's whole
    process group, as a service manager sends, does the same mid-stop): the runner must say
    its resident tasks cannot come back, and exit with status 1 for its supervisor to start
    it again. It used to restart them every second for ever, refusing every call, and a
    stop waited on them until the runner was killed."""
    log_dir, state_dir = tmp_path / "log", tmp_path / "state"
    append_lines(log_dir, 0, ["cat", "dog", "cat"])
    append_lines(log_dir, 1, ["cat"])
    with running_server(runner_liveness=5) as server:
        runner = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "drpc.runner",
                "--servers",
                _invocations(server),
                "--topology",
                "tests.cluster.partitioned:query",
                "--transactional",
                "tests.cluster.partitioned:topology",
                "--state-dir",
                str(state_dir),
                "--executor",
                "spark",
                "--master",
                "local[2]",
            ],
            cwd=ROOT,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "DRPC_TEST_LOG_DIR": str(log_dir),
                "DRPC_STATE_DIR": str(state_dir),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: list[str] = []
        assert runner.stdout is not None
        reader = threading.Thread(target=lambda: lines.extend(runner.stdout or ()), daemon=True)
        reader.start()
        try:
            client = DRPCClient(HOST, server.port, timeout=30)

            def counted() -> bool:
                try:
                    return json.loads(client.execute("count", "cat dog")) == [
                        ["cat", 3],
                        ["dog", 1],
                    ]
                except DRPCExecutionException:
                    return False

            wait_until(counted, 120)
            jvm = procs.jvm(runner.pid)
            assert jvm is not None
            os.kill(jvm, signal.SIGKILL)
            runner.wait(60)  # it exits by itself, its resident tasks not waited for
        finally:
            if runner.poll() is None:
                os.killpg(runner.pid, signal.SIGKILL)
                runner.wait()
            reader.join(10)
    output = "".join(lines)
    assert runner.returncode == 1, output[-4000:]
    assert "runner running transactional topology 'two-host-words'" in output
    assert GONE in output, output[-4000:]
    assert "cannot serve any more: its Spark driver's JVM shut down or went away; exiting" in output
    assert "restarting in" not in output, output[-4000:]
    assert "Exception ignored in atexit" not in output, output[-4000:]  # its session: gone


@pytest.mark.timeout(60)
@pytest.mark.parametrize("grace", [0.0, 3.0])
def test_the_startup_grace_holds_calls_until_the_runners_reconnect(grace: float) -> None:
    """Found by the chaos run: a server restarted behind a runner refused every call made
    before the runner reconnected (the function is not served yet). With a startup grace
    such a call waits for a runner to fetch its function; a call to a function no runner
    fetches by the grace's end still fails as not served. Without one, nothing changes."""
    with running_server(startup_grace=grace, runner_liveness=5) as server:
        calls = ThreadPoolExecutor(2)
        early = calls.submit(
            lambda: DRPCClient(HOST, server.port, timeout=30).execute("exclamation", "early")
        )
        nobody = calls.submit(
            lambda: DRPCClient(HOST, server.port, timeout=30).execute("nobody", "x")
        )
        if grace:
            wait_until(lambda: server.service.queue_depth("exclamation") == 1)
        else:
            with pytest.raises(DRPCExecutionException) as refused:
                early.result(10)
            assert "function 'exclamation' is not served" in refused.value.msg
        with RemoteRunner(
            [exclamation()], _invocations(server), executor="local", poll_interval=0.01
        ):
            if grace:
                assert early.result(10) == "early!"
            with pytest.raises(DRPCExecutionException) as failed:
                nobody.result(10)
            assert failed.value.type is DRPCExceptionType.FAILED_REQUEST
            assert "function 'nobody' is not served" in failed.value.msg
            # Without a grace the runner's first fetch is what makes the function served.
            wait_until(lambda: "exclamation" in server.service.served_functions())
            assert DRPCClient(HOST, server.port, timeout=10).execute("exclamation", "a") == "a!"


@pytest.mark.timeout(60)
def test_the_startup_grace_leaves_waiting_for_unserved_functions_to_its_flag() -> None:
    """With ``wait_for_unserved`` (Storm's behaviour) a call to a function nobody serves
    waits for its deadline: the grace's end does not fail it as not served."""
    with (
        running_server(startup_grace=0.5, wait_for_unserved=True, timeout=2.0) as server,
        pytest.raises(DRPCExecutionException) as waited,
    ):
        DRPCClient(HOST, server.port, timeout=30).execute("nobody", "x")
    assert waited.value.type is DRPCExceptionType.SERVER_TIMEOUT
