"""Abusive clients against a real ``drpc-server`` process started with every round-2 limit
set small on its command line: each limit on both sides, from client addresses of their
own (127.0.0.2 and up), while a good client on 127.0.0.1 keeps being answered.

After every case (``guard``): a good call on a new connection is answered, nothing is held
(``/health`` outstanding 0), the server's open fds are back to their count at the start of
the module and its RSS within 8 MiB of where the case began."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from drpc.client import DRPCClient, DRPCExecutionException, DRPCInvocationsClient, ProtocolError
from drpc.server.limits import CALL_COST

from drpc.errors import DRPCExceptionType
from drpc.requests import DRPCRequest
from tests.ops.test_metrics import parse, requests_by_outcome
from tests.server.helpers import (
    EPHEMERAL_PORTS,
    HOST,
    ServerProcess,
    closed_by_server,
    connect_from,
    http_get,
    server_process,
    wait_until,
)
from tests.server.hostile import execute_frame, read_reply

NAME_LIMIT = 64
LISTED = 4
PER_CALLER = 6
PER_ADDRESS = 3
IDLE = 1.5
PENDING = 65536
WRITE_TIMEOUT = 1.0
FLAGS = [
    "--executor", "local", "--topology", "drpc.examples.exclamation:topology",
    "--timeout", "30", "--runner-liveness", "600",
    "--max-function-name", str(NAME_LIMIT), "--max-listed-functions", str(LISTED),
    "--max-outstanding-per-caller", str(PER_CALLER),
    "--max-connections-per-address", str(PER_ADDRESS), "--idle-timeout", str(IDLE),
    "--max-pending-bytes", str(PENDING), "--write-timeout", str(WRITE_TIMEOUT),
    "--refusal-logs-per-second", "1000",
]  # fmt: skip
RSS_SLACK_KIB = 8 * 1024
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    command = [sys.executable, "-m", "drpc.server", *EPHEMERAL_PORTS, *FLAGS]
    with server_process(command, cwd=ROOT) as running:
        with DRPCClient(HOST, running.port, timeout=10) as client:
            for i in range(20):  # warm up: the first calls allocate what every later one reuses
                assert client.execute("exclamation", "w" * 20_000 + str(i)).endswith("!")
        health(running)
        yield running


@pytest.fixture(scope="module")
def baseline_fds(server: ServerProcess) -> int:
    """The server's open fds with no client connected (the same for five looks in a row)."""
    counts: list[int] = []

    def steady() -> bool:
        counts.append(server.fds())
        return len(counts) >= 5 and len(set(counts[-5:])) == 1

    wait_until(steady, 10)
    return counts[-1]


@pytest.fixture
def guard(server: ServerProcess, baseline_fds: int) -> Iterator[None]:
    wait_until(lambda: server.fds() == baseline_fds, 10)
    rss = server.rss_kib()
    yield
    with DRPCClient(HOST, server.port, timeout=10) as newcomer:
        assert newcomer.execute("exclamation", "after") == "after!"
    wait_until(lambda: health(server)["outstanding"] == 0, 10)
    wait_until(lambda: server.fds() == baseline_fds, 10)
    assert server.rss_kib() <= rss + RSS_SLACK_KIB, (rss, server.rss_kib())


def health(server: ServerProcess) -> dict[str, Any]:
    status, body = http_get(server.http_port, "/health")
    assert status == 200, body
    answer: dict[str, Any] = json.loads(body)
    return answer


def fetch(runner: DRPCInvocationsClient, function: str) -> DRPCRequest:
    """As a runner: the next request of ``function``, waiting up to 10 s for one."""
    deadline = time.monotonic() + 10
    while (request := runner.fetch_request(function)) is None:
        assert time.monotonic() < deadline, f"no request of {function!r} arrived"
        time.sleep(0.01)
    return request


def answer(server: ServerProcess, function: str, result: str, count: int = 1) -> list[str]:
    """As a runner: fetch ``count`` requests of ``function`` (waiting for them) and answer
    each with ``result``; returns their arguments."""
    args: list[str] = []
    with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as runner:
        for _ in range(count):
            request = fetch(runner, function)
            runner.result(request.return_info.request_id, result)
            args.append(request.args)
    return args


def serve(server: ServerProcess, function: str) -> None:
    """Make ``function`` served (a runner fetched it) without taking any request."""
    with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as runner:
        assert runner.fetch_request(function) is None


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def good_call(pool: ThreadPoolExecutor, server: ServerProcess, function: str) -> Future[str]:
    def call() -> str:
        with DRPCClient(HOST, server.port, timeout=20) as client:
            return client.execute(function, "good")

    return pool.submit(call)


# -- 1. names: bounded at every entry point; nothing echoes the served list whole -------------


def test_function_names_and_ids_at_the_limit_pass_and_past_it_are_refused_everywhere(
    server: ServerProcess, guard: None, pool: ThreadPoolExecutor
) -> None:
    at, over = "\u00e9" * (NAME_LIMIT // 2), "\u00e9" * (NAME_LIMIT // 2) + "x"  # 64, 65 bytes
    serve(server, at)
    served = good_call(pool, server, at)
    assert answer(server, at, "at the limit") == ["good"]
    assert served.result(10) == "at the limit"
    with DRPCClient(HOST, server.port, timeout=10) as client:
        with pytest.raises(DRPCExecutionException) as refused:
            client.execute(over, "x")
        assert refused.value.type is DRPCExceptionType.FAILED_REQUEST
        assert refused.value.msg == (
            f"a function name of {NAME_LIMIT + 1} bytes exceeds the limit of {NAME_LIMIT} "
            "(max_function_name)"
        )
        assert client.execute("exclamation", "next") == "next!"  # same connection
    status, body = http_get(server.http_port, f"/drpc/{urllib.parse.quote(over)}/y")
    assert (status, json.loads(body)["errorMessage"]) == (400, refused.value.msg)
    unserved = "u" * NAME_LIMIT  # at the limit: past the name check, then not served
    status, body = http_get(server.http_port, f"/drpc/{unserved}/y")
    assert status == 400 and " is not served" in json.loads(body)["errorMessage"]
    with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as runner:
        assert runner.fetch_request(at) is None
        runner.result("9" * NAME_LIMIT, "unknown id at the limit: ignored, as in Storm")
        runner.fail_request("9" * NAME_LIMIT)
        refusals = {
            "fetchRequest": lambda: runner.fetch_request(over),
            "result": lambda: runner.result("9" * (NAME_LIMIT + 1), "x"),
            "failRequest": lambda: runner.fail_request("9" * (NAME_LIMIT + 1)),
            "failRequestV2": lambda: runner.fail_request_v2(
                "9" * (NAME_LIMIT + 1), DRPCExecutionException("x")
            ),
        }
        for method, refuse in refusals.items():
            what = "function name" if method == "fetchRequest" else "request id"
            with pytest.raises(ProtocolError, match=f"a {what} of 65 bytes exceeds") as error:
                refuse()
            assert error.value.application_error_type == 0, method  # TApplicationException
            assert runner.fetch_request(at) is None  # answered again (a new connection)


def test_errors_and_health_list_a_bounded_part_of_the_served_functions(
    server: ServerProcess, guard: None
) -> None:
    names = [f"served-{i:03d}-".ljust(NAME_LIMIT, "n") for i in range(200)]
    with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as runner:
        for name in names:
            assert runner.fetch_request(name) is None
    listed = health(server)
    assert len(listed["functions"]) == LISTED
    total = listed["functions_total"]
    assert total >= len(names) + 1
    with connect_from("127.0.0.2", server.port) as attacker:
        attacker.sendall(execute_frame("nope", "") * 100)  # 100 calls of 29 bytes, pipelined
        replies = [read_reply(attacker) for _ in range(100)]
    message = replies[0].e.msg
    assert message.endswith(f" and {total - LISTED} more")
    assert message.count(", ") == LISTED - 1
    assert all(len(reply.e.msg) < 600 for reply in replies)  # was the whole list


# -- 2. replies a client does not read -----------------------------------------------------


def test_a_reader_within_the_unsent_cap_or_the_write_timeout_gets_every_reply(
    server: ServerProcess, guard: None
) -> None:
    # 6 replies of 10 KB (under the cap), then 6 of 30 KB (over it: the server waits for
    # room), each read only after a pause shorter than the write timeout.
    for size in (10_000, 30_000):
        with connect_from("127.0.0.7", server.port) as client:
            client.sendall(
                b"".join(execute_frame("exclamation", f"{i}" * size) for i in range(PER_CALLER))
            )
            time.sleep(WRITE_TIMEOUT / 3)
            got = sorted(read_reply(client).success for _ in range(PER_CALLER))
        assert got == sorted(f"{i}" * size + "!" for i in range(PER_CALLER))


def test_calls_in_flight_count_against_the_pending_bytes(
    server: ServerProcess, guard: None
) -> None:
    serve(server, "held-big")
    frame = execute_frame("held-big", "x" * 30_000)
    read = PENDING // (len(frame) + CALL_COST) + 1  # read while what is held fits: 2
    with connect_from("127.0.0.11", server.port) as client:
        client.sendall(frame * 5)  # 150 KB of calls
        wait_until(lambda: health(server)["outstanding"] == read)
        time.sleep(0.3)
        assert health(server)["outstanding"] == read  # the others wait, unread, in the socket
        assert answer(server, "held-big", "done", 5) == ["x" * 30_000] * 5  # then read
        assert [read_reply(client).success for _ in range(5)] == ["done"] * 5


def test_a_client_that_does_not_read_is_not_read_either_then_closed(
    server: ServerProcess, guard: None, baseline_fds: int
) -> None:
    rss = server.rss_kib()
    frame = execute_frame("exclamation", "x" * 100_000)
    with connect_from("127.0.0.3", server.port) as attacker:
        attacker.settimeout(0.3)
        sent = 0
        try:
            for _ in range(200):  # 20 MB of calls whose replies it never reads
                attacker.sendall(frame)
                sent += 1
        except TimeoutError:
            pass  # the server stopped reading: the kernel buffers filled
        assert sent < 200
        peak = server.rss_kib()
        # Closed by the server (maybe already: the write timeout runs from its first
        # unsent reply past the cap), while the client still holds its socket open.
        wait_until(lambda: "reply bytes not taken within 1 s (write_timeout)" in server.text, 30)
        wait_until(lambda: server.fds() == baseline_fds, 30)
        assert peak - rss < 16 * 1024, (rss, peak)  # was +51 MiB for 200 calls, held


def test_an_http_client_that_does_not_read_is_closed_at_the_write_timeout(
    server: ServerProcess, guard: None
) -> None:
    serve(server, "big")
    stop = threading.Event()

    def runner() -> None:  # answers every call of "big" with nearly a megabyte
        with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as invocations:
            while not stop.is_set():
                request = invocations.fetch_request("big")
                if request is None:
                    time.sleep(0.01)
                else:
                    invocations.result(request.return_info.request_id, "b" * 999_000)

    answering = threading.Thread(target=runner, daemon=True)
    answering.start()
    try:
        attacker = socket.socket()
        attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        attacker.bind(("127.0.0.10", 0))
        attacker.connect((HOST, server.http_port))
        with attacker:
            attacker.sendall(b"GET /drpc/big/x HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
            wait_until(lambda: "HTTP: closing connection from ('127.0.0.10'" in server.text, 20)
            assert "reply bytes not taken within 1 s (write_timeout)" in server.text
            attacker.settimeout(10)
            closed_by_server(attacker)  # returns: the server closed it
    finally:
        stop.set()
        answering.join(10)


# -- 3. abandoned requests and each caller's quota ------------------------------------------


def test_a_closed_connection_withdraws_what_was_not_fetched_and_callers_have_a_quota(
    server: ServerProcess, guard: None, pool: ThreadPoolExecutor
) -> None:
    serve(server, "held")
    with connect_from("127.0.0.4", server.port) as attacker:
        attacker.sendall(execute_frame("held", "q") * PER_CALLER)  # at its quota: queued
        wait_until(lambda: health(server)["outstanding"] == PER_CALLER)
        attacker.sendall(execute_frame("held", "one more"))
        refused = read_reply(attacker).e
        assert refused.msg == (
            f"server busy: {PER_CALLER} requests outstanding for address 127.0.0.4 "
            f"(limit {PER_CALLER} per caller)"
        )
        assert good_call(pool, server, "exclamation").result(10) == "good!"  # others served
        # The runner's connection stays open: closing it would fail what it fetched.
        runner = DRPCInvocationsClient(HOST, server.invocations_port, timeout=10)
        fetched = [fetch(runner, "held") for _ in range(2)]
    # Closed: the four queued are withdrawn, the two fetched stay until answered.
    wait_until(lambda: health(server)["outstanding"] == 2)
    with runner:
        for request in fetched:
            runner.result(request.return_info.request_id, "nobody reads this")
    wait_until(lambda: health(server)["outstanding"] == 0)
    with connect_from("127.0.0.8", server.http_port) as http:  # an HTTP caller going away
        http.sendall(b"GET /drpc/held/x HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: health(server)["outstanding"] == 1)
    wait_until(lambda: health(server)["outstanding"] == 0)
    _, metrics = http_get(server.http_port, "/metrics")
    outcomes = requests_by_outcome(parse(metrics.decode()))
    assert outcomes[("held", "abandoned")] == PER_CALLER - 2 + 1
    assert outcomes[("held", "ok")] == 2
    assert outcomes[("held", "busy")] == 1


# -- 4. idle connections and connections per address ------------------------------------------


def test_idle_connections_are_closed_busy_and_prompt_ones_are_not(
    server: ServerProcess, guard: None
) -> None:
    serve(server, "slow")
    with (
        connect_from("127.0.0.5", server.port) as idle,
        connect_from("127.0.0.5", server.port) as busy,
        connect_from("127.0.0.5", server.port) as prompt,
    ):
        started = time.monotonic()
        busy.sendall(execute_frame("slow", "s"))
        time.sleep(IDLE / 3)
        prompt.sendall(execute_frame("exclamation", "prompt"))  # inside the idle timeout
        assert read_reply(prompt).success == "prompt!"
        # Closed within the socket's 10 s timeout (else recv raises), not before its time.
        assert closed_by_server(idle) == b""
        assert time.monotonic() - started >= IDLE * 0.8
        time.sleep(IDLE / 2)  # the busy connection outlives the idle timeout: a call is out
        threading.Timer(0.1, answer, (server, "slow", "done")).start()
        assert read_reply(busy).success == "done"
        answered = time.monotonic()
        assert closed_by_server(busy) == b""  # idle from its answer on
        assert time.monotonic() - answered >= IDLE * 0.8


def test_connections_per_address(server: ServerProcess, guard: None) -> None:
    serve(server, "kept")
    kept = [connect_from("127.0.0.6", server.port) for _ in range(PER_ADDRESS)]
    try:
        for connection in kept:  # at the limit, each with a call out (so never idle)
            connection.sendall(execute_frame("kept", "k"))
        wait_until(lambda: health(server)["outstanding"] == PER_ADDRESS)
        with connect_from("127.0.0.6", server.port) as over:
            assert closed_by_server(over) == b""  # closed at once
        refused = "connections open from 127.0.0.6 (max_connections_per_address)"
        wait_until(lambda: refused in server.text)  # the reason, not the idle timeout
        with DRPCClient(HOST, server.port, timeout=10) as other:  # another address
            assert other.execute("exclamation", "other") == "other!"
        kept.pop().close()
        wait_until(lambda: health(server)["outstanding"] == PER_ADDRESS - 1)
        with connect_from("127.0.0.6", server.port) as again:
            again.sendall(execute_frame("exclamation", "again"))
            assert read_reply(again).success == "again!"
        answer(server, "kept", "answered", PER_ADDRESS - 1)
        assert [read_reply(connection).success for connection in kept] == ["answered"] * 2
    finally:
        for connection in kept:
            connection.close()


# -- 7 and 9. what clients can write into the log --------------------------------------------


def test_client_text_cannot_forge_log_lines_and_bad_http_is_one_warning(
    server: ServerProcess, guard: None, pool: ThreadPoolExecutor
) -> None:
    forged = "2099-01-01 00:00:00,000 INFO drpc.server.service: forged"
    serve(server, "forge")
    failing = good_call(pool, server, "forge")
    with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as runner:
        request = fetch(runner, "forge")
        error = DRPCExecutionException("boom\n" + forged + "\r\x1b[2K")
        runner.fail_request_v2(request.return_info.request_id, error)
    with pytest.raises(DRPCExecutionException) as failed:
        failing.result(10)
    assert failed.value.msg == "boom\n" + forged + "\r\x1b[2K"  # the caller gets it whole
    for malformed in (b"GET /\x01\x02 HTTP/1.1\r\nHost: x\r\n\r\n", b"BLAH / HTTP/1.1\r\n\r\n"):
        with connect_from("127.0.0.9", server.http_port) as bad:
            bad.sendall(malformed)
            assert closed_by_server(bad).startswith(b"HTTP/1.")
    wait_until(lambda: server.text.count("refused a request from 127.0.0.9") == 2)
    wait_until(lambda: f"boom\\n{forged}\\r\\x1b[2K" in server.text)  # escaped, one line
    log = server.log
    assert not any(line.startswith("2099") for line in log)
    refusals = [line for line in log if "refused a request from 127.0.0.9" in line]
    assert len(refusals) == 2 and all(" WARNING " in line for line in refusals)
    assert "Invalid char in url path" in refusals[0]
    assert "Traceback" not in server.text and " ERROR " not in server.text
