"""Request tracing: ``?trace=1`` over real HTTP, the Python client and ``drpc-client --trace``.

The acceptance test: a traced reach request, on each executor, returns a timing
for every step of the topology, and those timings account for the request's
total time as the server measured it (within 10%)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from drpc.client import DRPCExecutionException, HTTPDRPCClient
from drpc.client.cli import main as client_main
from drpc.server import DRPCServer

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.errors import DRPCExceptionType
from drpc.examples.reach import build_reach
from drpc.examples.vocabulary_counts import (
    QUERY,
    TXID,
    VOCABULARY,
    build_vocabulary_counts,
    counts_function,
    counts_of,
)
from drpc.runner import RemoteRunner
from drpc.state import CoordinatorState, StateEnvironment
from drpc.trident import run
from tests.server.helpers import HOST, exclamation, failing_topology, running_server, wait_until
from tests.topologies.bolts import FailOn, SleepThenEcho
from tests.waiting import SLACK

pytestmark = pytest.mark.timeout(120)

REACH_STEPS = [
    "prepare-request",
    "bolt0",
    "bolt1",
    "bolt2",
    "bolt3",
    "join-result",
    "return-results",
]


def traced_get(server: DRPCServer, path: str) -> tuple[int, str, dict[str, Any]]:
    url = f"http://{HOST}:{server.http_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            status, content_type, body = (
                response.status,
                response.headers.get_content_type(),
                response.read(),
            )
    except urllib.error.HTTPError as error:
        status, content_type, body = error.code, error.headers.get_content_type(), error.read()
    return status, content_type, json.loads(body)


UNACCOUNTED_MS = 250.0
"""What thread hand-offs after the last step may add to a request on a loaded machine."""


def check_accounts_for_total(answer: dict[str, Any], *, covered: bool = True) -> None:
    """Entries in order, each span inside the request, their sum the total, and (when
    ``covered``) the steps, not the remainder, making up the total: within 10% or
    ``UNACCOUNTED_MS``, whichever is more (a request of a few ms on a loaded machine)."""
    total = answer["total_ms"]
    trace = answer["trace"]
    assert total > 0
    assert trace[0]["step"] == "queue" and trace[-1]["step"] == "return"
    assert all(entry["ms"] >= 0 for entry in trace)
    assert sum(entry["ms"] for entry in trace) == pytest.approx(total, rel=0.1)
    timed = sum(entry["ms"] for entry in trace[:-1])  # queue and the steps, not "return"
    if covered:
        unaccounted = max(0.1 * total, UNACCOUNTED_MS)
        assert abs(total - timed) <= unaccounted, f"steps account for {timed} of {total} ms"
    previous_end = 0.0
    for entry in trace[1:-1]:
        # the measured spans are unclamped: a wrong clock would put one outside the request
        assert 0 <= entry["start_ms"] <= entry["end_ms"] <= total + 0.001, entry
        assert entry["end_ms"] >= previous_end - 0.001, "entries not in order of their ends"
        previous_end = entry["end_ms"]


def test_a_traced_reach_request_times_every_step_within_ten_percent(executor: str) -> None:
    with running_server(build_reach(), executor=executor) as server:
        for _ in range(3):
            status, content_type, answer = traced_get(
                server, "/drpc/reach/foo.com%2Fblog%2F1?trace=1"
            )
            assert (status, content_type) == (200, "application/json")
            assert answer["result"] == "16" and answer["function"] == "reach"
            assert answer["request_id"].isdigit()
            steps = [entry["step"] for entry in answer["trace"]]
            expected = REACH_STEPS
            if executor == "spark-batch":
                expected = [
                    "coalesce",
                    "prepare-request",
                    "bolt0",
                    "bolt1",
                    "bolt2",
                    "bolt3",
                    "spark-job",
                    "join-result",
                    "return-results",
                ]
            assert steps == ["queue", *expected, "return"]
            check_accounts_for_total(answer)
            by_step = {entry["step"]: entry for entry in answer["trace"]}
            assert by_step["bolt1"]["busy_ms"] > 0
            if executor == "spark-batch":
                job_id = by_step["spark-job"]["spark_job_id"]
                assert isinstance(job_id, int)
                for step in ("bolt0", "bolt1", "bolt2", "bolt3"):
                    assert by_step[step]["spark_job_id"] == job_id
                    assert by_step[step]["batch_size"] == 1
        assert server.service.tracer.watching == 0  # settled traces are not kept


def test_untraced_calls_answer_plain_text_and_leave_no_trace() -> None:
    with running_server(exclamation()) as server:
        url = f"http://{HOST}:{server.http_port}/drpc/exclamation/hi?trace=0"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.headers.get_content_type() == "text/plain"
            assert response.read() == b"hi!"
        assert server.service.tracer.watching == 0


def test_a_traced_failure_says_where_it_failed() -> None:
    builder = LinearDRPCTopologyBuilder("failing")
    builder.add_bolt(SleepThenEcho(), 1)  # "0" sleeps 0 s, emits "slept"
    builder.add_bolt(FailOn("slept"), 2).shuffle_grouping()
    with running_server(builder) as server:
        status, _, answer = traced_get(server, "/drpc/failing/0?trace=1")
    assert status == 400
    assert answer["error"] == "FAILED_REQUEST"
    assert "cannot handle 'slept'" in answer["errorMessage"]
    assert answer["failed_in"]["step"] == "bolt1"
    assert answer["failed_in"]["reason"].startswith("FAILED_REQUEST: ")
    steps = [entry["step"] for entry in answer["trace"]]
    assert steps[0] == "queue" and {"prepare-request", "bolt0", "bolt1", "drpc-spout"} <= set(steps)
    # a ~1 ms call: the observers' work on its last span is a visible part of "return"
    check_accounts_for_total(answer, covered=False)


def test_a_traced_timeout_shows_the_step_it_was_in() -> None:
    builder = LinearDRPCTopologyBuilder("sleepy")
    builder.add_bolt(SleepThenEcho(), 1)
    with running_server(builder, timeout=1.0) as server:
        status, _, answer = traced_get(server, "/drpc/sleepy/3?trace=1")
    assert status == 504 and answer["error"] == "SERVER_TIMEOUT"
    assert 750 <= answer["total_ms"] < 1000 + 1000 * SLACK  # the deadline, and no hang
    queue, unaccounted = answer["trace"]
    assert (queue["step"], unaccounted["step"]) == ("queue", "return")
    # nothing finished within the deadline: the whole wait after the queue is unaccounted
    assert unaccounted["ms"] == pytest.approx(answer["total_ms"] - queue["ms"], abs=0.002)


def test_a_remote_runner_shows_queue_and_runner_time() -> None:
    with running_server() as server:
        runner = RemoteRunner(
            [exclamation()],
            f"{HOST}:{server.invocations_port}",
            executor="local",
            poll_interval=0.01,
        )
        with runner:
            wait_until(lambda: "exclamation" in server.functions)
            with HTTPDRPCClient(f"http://{HOST}:{server.http_port}") as client:
                traced = client.execute_traced("exclamation", "far")
    assert traced.result == "far!"
    assert [entry["step"] for entry in traced.trace] == ["queue", "runner", "return"]
    assert traced.trace[-1]["ms"] == 0  # the runner's result is where the total ends
    assert sum(entry["ms"] for entry in traced.trace) == pytest.approx(traced.total_ms, rel=0.1)


def test_the_python_client_returns_and_raises_traces() -> None:
    with (
        running_server(build_reach(), failing_topology()) as server,
        HTTPDRPCClient(f"http://{HOST}:{server.http_port}") as client,
    ):
        traced = client.execute_traced("reach", "tech.backtype.com/blog/123")
        assert client.execute("reach", "foo.com/blog/1") == "16"  # plain calls still plain
        with pytest.raises(DRPCExecutionException) as failure:
            client.execute_traced("failing", "bad")
    assert traced.result == "7"
    assert [entry["step"] for entry in traced.trace] == ["queue", *REACH_STEPS, "return"]
    assert "bolt1" in traced.describe()
    assert failure.value.type is DRPCExceptionType.FAILED_REQUEST
    assert failure.value.trace["failed_in"]["step"] == "bolt0"  # type: ignore[attr-defined]


def test_the_client_cli_prints_the_timings(capsys: pytest.CaptureFixture[str]) -> None:
    with running_server(build_reach(), failing_topology()) as server:
        url = f"http://{HOST}:{server.http_port}"
        assert client_main(["--http", url, "--trace", "reach", "foo.com/blog/1"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert client_main(["--http", url, "--trace", "failing", "bad"]) == 1
        err = capsys.readouterr().err
    assert out[0] == 'reach "foo.com/blog/1" => "16"'
    assert out[1].startswith("request ") and out[1].endswith(" ms")
    assert [line.split()[0] for line in out[2:]] == ["queue", *REACH_STEPS, "return"]
    assert 'failing "bad" failed: FAILED_REQUEST' in err
    assert "failed in bolt0" in err and "prepare-request" in err


def test_a_traced_state_query_reports_the_version_and_txid_it_read_at(
    executor: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    run(build_vocabulary_counts(3), state_dir=str(state), executor="local")
    with (
        running_server(counts_function(str(state)), executor=executor) as server,
        HTTPDRPCClient(f"http://{HOST}:{server.http_port}") as client,
    ):
        status, _, answer = traced_get(server, f"/drpc/counts/{VOCABULARY[0]}?trace=1")
        traced = client.execute_traced("counts", QUERY)
        url = f"http://{HOST}:{server.http_port}"
        assert client_main(["--http", url, "--trace", "counts", VOCABULARY[1]]) == 0
        printed = capsys.readouterr().out.splitlines()
    env = StateEnvironment.open(state)
    latest, committed = env.latest_version(), CoordinatorState(env, TXID).last_commit()
    assert committed is not None  # the 3 batches, then the empty one that found nothing new
    [read] = answer["reads"]
    assert status == 200 and json.loads(answer["result"]) == [[VOCABULARY[0], 3]]
    assert read == {"state_dir": env.path, "version": latest, "txids": {TXID: committed.txid}}
    assert traced.reads == [read]
    assert {tuple(value) for value in counts_of(traced.result).values()} == {(3,)}
    assert printed[-1] == f"  read {env.path} at version {latest} ({TXID} txid {committed.txid})"


def test_a_function_without_state_reports_no_reads() -> None:
    with running_server(exclamation()) as server:
        _, _, answer = traced_get(server, "/drpc/exclamation/x?trace=1")
    assert answer["result"] == "x!" and "reads" not in answer
