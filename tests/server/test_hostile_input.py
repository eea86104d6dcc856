"""Malformed and hostile input on both protocols, each case on both sides of its limit.

One server (small limits) serves the whole module. After every case a well-formed call
succeeds, on a connection opened before the case and on a new one, and the process's
open file descriptors return to what they were before the case."""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable, Iterator

import pytest
from drpc.client import DRPCClient, DRPCExecutionException, DRPCInvocationsClient
from drpc.server import DRPCServer, ServerThread
from drpc.server.limits import Limits

from drpc.errors import DRPCExceptionType
from drpc.protocol.gen import DistributedRPC
from drpc.protocol.wire import decode_message, frame, read_struct
from tests.server.helpers import (
    HOST,
    closed_by_server,
    exclamation,
    frame_header,
    raw_connection,
    server_options,
    wait_until,
)
from tests.server.hostile import (
    execute_body,
    execute_frame,
    list_field,
    nested_field,
    open_fds,
)
from tests.waiting import SLACK

LIMITS = Limits(
    max_frame_size=4096,
    max_string_length=2048,
    max_container_length=100,
    max_nesting_depth=64,
    max_body_size=4096,
    max_header_size=1024,
    read_timeout=0.5,
    max_functions=50,
)


@pytest.fixture(scope="module")
def server() -> Iterator[DRPCServer]:
    drpc = DRPCServer(**server_options(), limits=LIMITS)
    drpc.register(exclamation())
    with ServerThread(drpc) as running:
        yield running


@pytest.fixture
def guard(server: DRPCServer) -> Iterator[None]:
    """Around a case: a bystander connection before it; after it, both a well-formed call
    on that connection and on a new one, and the fd count back at its baseline."""
    with DRPCClient(HOST, server.port, timeout=10) as bystander:
        assert bystander.execute("exclamation", "before") == "before!"
        baseline = open_fds()
        yield
        assert bystander.execute("exclamation", "after") == "after!"
        with DRPCClient(HOST, server.port, timeout=10) as newcomer:
            assert newcomer.execute("exclamation", "new") == "new!"
        wait_until(lambda: open_fds() == baseline, 5)


def _string_of(size: int) -> str:
    return "s" * size


def _frame_body_of(size: int) -> bytes:
    """An execute payload of exactly ``size`` bytes, no string over the string limit."""
    overhead = len(execute_body("exclamation", ""))
    args = (size - overhead) // 2
    extra_bytes = size - overhead - args
    # Pad with an unknown string field (id 4) so the args string stays under its own limit.
    pad = struct.pack(">bhi", 11, 4, extra_bytes - 7) + b"p" * (extra_bytes - 7)
    payload = execute_body("exclamation", "x" * args, pad)
    assert len(payload) == size
    return payload


SERVED: dict[str, Callable[[], bytes]] = {
    "frame at the limit": lambda: frame(_frame_body_of(LIMITS.max_frame_size)),
    "string at the limit": lambda: execute_frame("exclamation", _string_of(2048)),
    "list at the container limit": lambda: execute_frame("exclamation", "l", list_field(100)),
    "64-deep nesting": lambda: execute_frame("exclamation", "n", nested_field(63)),
}

REFUSED: dict[str, tuple[Callable[[], bytes], str]] = {
    "frame over the limit": (
        lambda: frame(_frame_body_of(LIMITS.max_frame_size + 1)),
        "exceeds the limit of 4096",
    ),
    "negative frame length": (lambda: frame_header(-5) + b"x" * 8, "negative frame length"),
    "zero frame length": (lambda: frame_header(0), "malformed message"),
    "string over the limit": (
        lambda: execute_frame("exclamation", _string_of(2049)),
        "a string of 2049 bytes exceeds the limit of 2048",
    ),
    "negative string length": (
        lambda: frame(execute_body("exclamation", "")[:-5] + struct.pack(">i", -1) + b"\0"),
        "negative length -1",
    ),
    "list over the container limit": (
        lambda: execute_frame("exclamation", "l", list_field(101)),
        "a list of 101 elements exceeds the limit of 100",
    ),
    "list header claiming 2**31-1 elements": (
        lambda: execute_frame("exclamation", "l", list_field(2**31 - 1, 0)),
        "a list of 2147483647 elements exceeds the limit",
    ),
    "65-deep nesting": (
        lambda: execute_frame("exclamation", "n", nested_field(64)),
        "nesting deeper than the limit of 64",
    ),
    "non-Thrift bytes": (
        lambda: b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        "exceeds the limit",
    ),
    "garbage inside a frame": (lambda: frame(b"\xff" * 64), "malformed message"),
    "truncated frame": (lambda: execute_frame("exclamation", "cut")[:-3], "did not arrive whole"),
    "truncated frame header": (lambda: b"\x00\x00", "did not arrive whole"),
}


@pytest.mark.parametrize("case", list(SERVED))
def test_thrift_inside_a_limit_is_served(server: DRPCServer, guard: None, case: str) -> None:
    with raw_connection(server.port) as connection:
        connection.sendall(SERVED[case]())
        header = connection.recv(4, socket.MSG_WAITALL)
        reply = decode_message(connection.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL))
        result = read_struct(reply, DistributedRPC.execute_result)
        assert result.success is not None and result.success.endswith("!")


@pytest.mark.parametrize("case", list(REFUSED))
def test_thrift_past_a_limit_closes_that_connection(
    server: DRPCServer, guard: None, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="drpc.server.thrift_listener")
    make, reason = REFUSED[case]
    with raw_connection(server.port) as connection:
        connection.sendall(make())
        started = time.monotonic()
        assert closed_by_server(connection) == b""
        assert time.monotonic() - started < LIMITS.read_timeout + SLACK
    messages = [record.getMessage() for record in caplog.records]
    assert any("closing connection" in m and reason in m for m in messages), messages


def test_a_frame_sent_slowly_but_within_the_read_deadline_is_served(
    server: DRPCServer, guard: None
) -> None:
    data = execute_frame("exclamation", "slow")
    with raw_connection(server.port) as connection:
        for piece in (data[:2], data[2:10], data[10:]):
            connection.sendall(piece)
            time.sleep(LIMITS.read_timeout / 5)
        header = connection.recv(4, socket.MSG_WAITALL)
        reply = decode_message(connection.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL))
        assert read_struct(reply, DistributedRPC.execute_result).success == "slow!"


def test_a_half_sent_frame_is_closed_at_the_read_deadline_but_idle_is_fine(
    server: DRPCServer, guard: None
) -> None:
    with raw_connection(server.port) as idle, raw_connection(server.port) as slow:
        slow.sendall(execute_frame("exclamation", "never finished")[:12])
        started = time.monotonic()
        assert closed_by_server(slow) == b""
        elapsed = time.monotonic() - started
        assert LIMITS.read_timeout * 0.8 <= elapsed < LIMITS.read_timeout + SLACK
        time.sleep(0.2)  # an idle connection outlives the deadline and is then served
        idle.sendall(execute_frame("exclamation", "idle"))
        header = idle.recv(4, socket.MSG_WAITALL)
        reply = decode_message(idle.recv(int.from_bytes(header, "big"), socket.MSG_WAITALL))
        assert read_struct(reply, DistributedRPC.execute_result).success == "idle!"


def test_unknown_function_names_in_volume_track_nothing(server: DRPCServer, guard: None) -> None:
    with DRPCClient(HOST, server.port, timeout=10) as client:
        for i in range(2000):
            with pytest.raises(DRPCExecutionException) as refused:
                client.execute(f"nope-{i}", "x")
            assert refused.value.type is DRPCExceptionType.FAILED_REQUEST
    assert server.service.tracked_functions() == 0
    assert server.service.outstanding() == 0
    with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as runner:
        for i in range(500):
            assert runner.fetch_request(f"fetched-{i}") is None
    assert server.service.tracked_functions() == LIMITS.max_functions


# -- HTTP -----------------------------------------------------------------------------------


def _http(server: DRPCServer, request: bytes, *, end: bool = False) -> tuple[int, bytes]:
    """Send raw bytes to the HTTP port; returns the status (0 if closed without one) and
    the whole answer."""
    with raw_connection(server.http_port) as connection:
        connection.sendall(request)
        if end:
            connection.shutdown(socket.SHUT_WR)
        answer = closed_by_server(connection)
    if not answer.startswith(b"HTTP/1."):
        return 0, answer
    return int(answer[9:12]), answer


def _get(path: bytes, headers: bytes = b"") -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers + b"\r\n"


def _post(path: bytes, body: bytes) -> bytes:
    head = f"POST {path.decode()} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    return head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def _header_of(size: int) -> bytes:
    """A header whose value is ``size`` bytes."""
    return b"X-Pad: " + b"p" * size + b"\r\n"


HTTP_CASES: dict[str, tuple[bytes, int, bytes]] = {
    # name: (request, status, something the answer holds)
    "body at the limit": (_post(b"/drpc/exclamation", b"b" * 4096), 200, b"b!"),
    "body over the limit": (_post(b"/drpc/exclamation", b"b" * 4097), 413, b""),
    "header at the limit": (_get(b"/drpc/exclamation/h", _header_of(1024)), 200, b"h!"),
    "header over the limit": (_get(b"/drpc/exclamation/h", _header_of(1025)), 400, b""),
    "UTF-8 path": (_get(b"/drpc/exclamation/%C3%A9t%C3%A9"), 200, "\u00e9t\u00e9!".encode()),
    "non-UTF-8 path": (_get(b"/drpc/exclamation/%FF%FE"), 400, b"not UTF-8"),
    "raw non-UTF-8 path": (_get(b"/drpc/exclamation/\xff\xfe"), 400, b""),
    "non-UTF-8 body": (_post(b"/drpc/exclamation", b"\xff\xfe"), 400, b"not UTF-8"),
    "unknown function": (_get(b"/drpc/no-such-function/x"), 400, b"is not served"),
    "not HTTP at all": (b"\x00\x00\x00\x10" + b"\xff" * 16, 400, b""),
}


@pytest.mark.parametrize("case", list(HTTP_CASES))
def test_http_both_sides_of_each_limit(server: DRPCServer, guard: None, case: str) -> None:
    request, status, holds = HTTP_CASES[case]
    got, answer = _http(server, request)
    assert got == status, answer[:300]
    assert holds in answer


def test_http_a_half_sent_request_is_closed_at_the_read_deadline(
    server: DRPCServer, guard: None
) -> None:
    half_header = b"GET /drpc/exclamation/x HTTP/1.1\r\nHost:"
    half_body = _post(b"/drpc/exclamation", b"x" * 100)[:-50]
    for partial, status in ((half_header, 0), (half_body, 408)):
        started = time.monotonic()
        got, answer = _http(server, partial)
        elapsed = time.monotonic() - started
        assert got == status, answer[:300]
        assert LIMITS.read_timeout * 0.9 <= elapsed < 2 * LIMITS.read_timeout + SLACK


def test_http_unknown_function_names_in_volume(server: DRPCServer, guard: None) -> None:
    with raw_connection(server.http_port) as connection:
        for i in range(300):
            connection.sendall(f"GET /drpc/unknown-{i}/x HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answer = connection.recv(65536)
            assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert server.service.tracked_functions() <= LIMITS.max_functions
    assert server.service.outstanding() == 0
