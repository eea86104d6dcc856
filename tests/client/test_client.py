"""The Python clients against a real server over 127.0.0.1 sockets."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import pytest
from drpc.client import (
    AsyncDRPCClient,
    AuthorizationException,
    DRPCClient,
    DRPCConnectionError,
    DRPCExecutionException,
    DRPCInvocationsClient,
    DRPCTimeoutError,
    ProtocolError,
)
from drpc.client.calls import parse_address, parse_servers
from drpc.server import DRPCServer, ServerThread

from drpc import client, errors
from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.protocol.gen import DistributedRPC
from drpc.protocol.wire import REPLY, encode_message
from tests.server.helpers import (
    HOST,
    exclamation,
    failing_topology,
    free_port,
    running_server,
    server_options,
)
from tests.topologies.bolts import SleepThenEcho
from tests.waiting import SLACK, wait_until


def _sleeper() -> LinearDRPCTopologyBuilder:
    builder = LinearDRPCTopologyBuilder("sleep")
    builder.add_bolt(SleepThenEcho(), 2)
    return builder


def test_the_exceptions_are_drpcs_own() -> None:
    assert client.DRPCExecutionException is errors.DRPCExecutionException
    assert client.AuthorizationException is errors.AuthorizationException
    assert issubclass(DRPCConnectionError, ConnectionError)
    assert issubclass(DRPCTimeoutError, TimeoutError)
    for error in (DRPCConnectionError, DRPCTimeoutError, ProtocolError):
        assert issubclass(error, errors.DRPCError)


def test_execute_result_and_failure() -> None:
    with running_server(exclamation(), failing_topology()) as server:
        with DRPCClient(HOST, server.port) as drpc:
            assert drpc.execute("exclamation", "hello") == "hello!"
            with pytest.raises(DRPCExecutionException) as failure:
                drpc.execute("failing", "bad")
            assert failure.value.type is errors.DRPCExceptionType.FAILED_REQUEST
            assert drpc.execute("exclamation", "still") == "still!"
        drpc.close()  # closing twice is harmless; a closed client reconnects on use
        assert drpc.execute("exclamation", "again") == "again!"
        drpc.close()


def test_authorization_refusals_raise_authorization_exception() -> None:
    def deny_all(identity: str | None, operation: str, function: str) -> None:
        raise errors.AuthorizationException(f"{operation} {function} refused")

    with (
        running_server(exclamation(), authorizer=deny_all) as server,
        DRPCClient(HOST, server.port) as drpc,
        pytest.raises(AuthorizationException, match="execute exclamation refused"),
    ):
        drpc.execute("exclamation", "x")


def test_failover_skips_an_unreachable_server() -> None:
    dead = free_port()
    with running_server(exclamation()) as server:
        servers = f"{HOST}:{dead},{HOST}:{server.port}"
        with DRPCClient(servers=servers) as drpc:
            assert drpc.execute("exclamation", "a") == "a!"
            assert drpc.execute("exclamation", "b") == "b!"


def test_failover_when_the_current_server_stops() -> None:
    with running_server(exclamation()) as second:
        first = ServerThread(DRPCServer(**server_options()))
        first.start()
        first.server.register(exclamation())
        drpc = DRPCClient(servers=[(HOST, first.server.port), (HOST, second.port)])
        assert drpc.execute("exclamation", "first") == "first!"
        first.stop()
        assert drpc.execute("exclamation", "second") == "second!"
        drpc.close()


def test_no_server_reachable_names_every_address() -> None:
    dead = [free_port(), free_port()]
    with pytest.raises(DRPCConnectionError) as failure:
        DRPCClient(servers=[(HOST, port) for port in dead]).execute("f", "x")
    for port in dead:
        assert f"{HOST}:{port}" in str(failure.value)


def test_a_kept_connection_survives_a_server_restart() -> None:
    with running_server(exclamation()) as server:
        port = server.port
        drpc = DRPCClient(HOST, port)
        assert drpc.execute("exclamation", "before") == "before!"
    with running_server(exclamation(), port=port):
        assert drpc.execute("exclamation", "after") == "after!"
    drpc.close()


def test_timeout_both_sides() -> None:
    with running_server(_sleeper()) as server, DRPCClient(HOST, server.port, timeout=2) as drpc:
        assert drpc.execute("sleep", "0.05") == "slept"
        fast = DRPCClient(HOST, server.port, timeout=0.3)
        with pytest.raises(DRPCTimeoutError):
            fast.execute("sleep", "1.0")
        assert fast.execute("sleep", "0") == "slept"  # not confused by the late reply
        fast.close()


def _reply_size(result: str) -> int:
    reply = DistributedRPC.execute_result(success=result)
    return len(encode_message("execute", REPLY, 1, reply)) - 4


def test_reply_frame_limit_both_sides() -> None:
    limit = _reply_size("x" * 100 + "!")
    with (
        running_server(exclamation()) as server,
        DRPCClient(HOST, server.port, max_frame_size=limit) as drpc,
    ):
        assert drpc.execute("exclamation", "x" * 100) == "x" * 100 + "!"
        with pytest.raises(ProtocolError, match="exceeds the limit"):
            drpc.execute("exclamation", "x" * 101)
        assert drpc.execute("exclamation", "ok") == "ok!"


async def test_async_client_result_failure_and_failover() -> None:
    dead = free_port()
    server = DRPCServer(**server_options())
    server.register(exclamation())
    server.register(failing_topology())
    async with (
        server,
        AsyncDRPCClient(servers=[(HOST, dead), (HOST, server.port)]) as drpc,
    ):
        assert await drpc.execute("exclamation", "a") == "a!"
        with pytest.raises(DRPCExecutionException) as failure:
            await drpc.execute("failing", "bad")
        assert failure.value.type is errors.DRPCExceptionType.FAILED_REQUEST


async def test_async_client_close_fails_the_calls_in_flight_without_sending_them_again() -> None:
    server = DRPCServer(**server_options(wait_for_unserved=True))
    server.register(exclamation())
    async with server:
        drpc = AsyncDRPCClient(HOST, server.port, timeout=20)
        first = asyncio.ensure_future(drpc.execute("unserved", "first"))
        await asyncio.to_thread(wait_until, lambda: server.service.queue_depth("unserved") == 1)
        # made once the connection exists: the path that reconnects a stale connection
        second = asyncio.ensure_future(drpc.execute("unserved", "second"))
        await asyncio.to_thread(wait_until, lambda: server.service.queue_depth("unserved") == 2)
        await drpc.close()
        for call in (first, second):
            with pytest.raises(DRPCConnectionError, match="the client closed the connection"):
                await call
        await asyncio.to_thread(wait_until, lambda: server.service.queue_depth("unserved") == 0)
        await asyncio.sleep(0.2)  # a call sent again would be queued by now
        assert server.service.queue_depth("unserved") == 0
        assert await drpc.execute("exclamation", "x") == "x!"  # a later call connects anew
        await drpc.close()


async def test_async_client_timeout_keeps_the_connection_usable() -> None:
    server = DRPCServer(**server_options())
    server.register(_sleeper())
    async with server, AsyncDRPCClient(HOST, server.port, timeout=0.3) as drpc:
        with pytest.raises(DRPCTimeoutError):
            await drpc.execute("sleep", "0.6")
        assert await drpc.execute("sleep", "0") == "slept"
        await asyncio.sleep(0.5)  # the late reply arrives and is dropped
        assert await drpc.execute("sleep", "0.01") == "slept"


async def test_async_client_reply_frame_limit() -> None:
    server = DRPCServer(**server_options())
    server.register(exclamation())
    limit = _reply_size("y" * 50 + "!")
    async with server, AsyncDRPCClient(HOST, server.port, max_frame_size=limit) as drpc:
        assert await drpc.execute("exclamation", "y" * 50) == "y" * 50 + "!"
        with pytest.raises(ProtocolError, match="exceeds the limit"):
            await drpc.execute("exclamation", "y" * 51)


async def test_a_thrift_client_pointed_at_the_http_port_is_told_so() -> None:
    server = DRPCServer(**server_options())
    server.register(exclamation())
    said = f"{HOST}:{{}} answered in HTTP: it is an HTTP port, not a Thrift one"
    async with server:
        with pytest.raises(ProtocolError, match=said.format(server.http_port)):
            await asyncio.to_thread(
                DRPCClient(HOST, server.http_port, timeout=10).execute, "exclamation", "x"
            )
        async with AsyncDRPCClient(HOST, server.http_port, timeout=10) as drpc:
            with pytest.raises(ProtocolError, match=said.format(server.http_port)):
                await drpc.execute("exclamation", "x")
        async with AsyncDRPCClient(HOST, server.port, timeout=10) as drpc:
            assert await drpc.execute("exclamation", "x") == "x!"


async def test_async_client_with_no_server_reachable() -> None:
    with pytest.raises(DRPCConnectionError):
        await AsyncDRPCClient(HOST, free_port()).execute("f", "x")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("example.com", ("example.com", 3772)),
        ("example.com:4000", ("example.com", 4000)),
        ("[::1]:4000", ("::1", 4000)),
        ("[::1]", ("::1", 3772)),
        ("::1", ("::1", 3772)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text, 3772) == expected


@pytest.mark.parametrize("text", ["", "host:port", "host:70000", ":80"])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_address(text, 3772)


def test_parse_servers() -> None:
    assert parse_servers("a:1, b", 3773) == [("a", 1), ("b", 3773)]
    assert parse_servers([("a", 1), "b:2"], 3773) == [("a", 1), ("b", 2)]


def test_invocations_client_timeout_both_sides() -> None:
    with socket.create_server((HOST, 0)) as silent:  # accepts connections, never answers
        stuck = DRPCInvocationsClient(HOST, silent.getsockname()[1], timeout=0.3)
        started = time.monotonic()
        with pytest.raises(DRPCTimeoutError):
            stuck.fetch_request("f")
        assert 0.3 <= time.monotonic() - started < 0.3 + SLACK
        stuck.close()
    with (
        running_server() as server,
        DRPCInvocationsClient(HOST, server.invocations_port, timeout=0.3) as prompt,
    ):
        assert prompt.fetch_request("f") is None


def _closes_after(delay: float) -> tuple[socket.socket, threading.Thread]:
    """A listener whose connections read the call, then close after ``delay`` seconds
    without a reply: a connection that breaks mid-call, so the client fails over."""
    listener = socket.create_server((HOST, 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                connection.recv(65536)
                time.sleep(delay)
                connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_the_timeout_bounds_a_whole_call_across_failover() -> None:
    """Found by the chaos run: each server tried got the whole timeout, so a call that
    failed over late took up to twice its timeout or more. The timeout is the call's in
    all: two servers that each break the call after 1.2 s use up a 2 s timeout, and the
    third server is never tried."""
    first, _ = _closes_after(1.2)
    second, _ = _closes_after(1.2)
    with first, second, socket.create_server((HOST, 0)) as third:
        third.setblocking(False)
        servers = [first.getsockname()[:2], second.getsockname()[:2], third.getsockname()[:2]]
        drpc = DRPCClient(servers=servers, timeout=2.0)
        started = time.monotonic()
        with pytest.raises(DRPCTimeoutError):
            drpc.execute("exclamation", "x")
        assert time.monotonic() - started < 2.0 + SLACK
        with pytest.raises(BlockingIOError):
            third.accept()  # nobody connected: the time was up before its turn
        drpc.close()
    breaking, _ = _closes_after(0.5)
    with breaking, running_server(exclamation()) as server:
        servers = [breaking.getsockname()[:2], (HOST, server.port)]
        with DRPCClient(servers=servers, timeout=2.0) as drpc:
            assert drpc.execute("exclamation", "x") == "x!"  # failed over in time
