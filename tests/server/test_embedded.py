"""Topologies hosted in the server process, called end to end over real sockets."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from drpc.client import AsyncDRPCClient, DRPCClient, DRPCExecutionException
from drpc.server import DRPCServer

from drpc.errors import DRPCError, DRPCExceptionType
from drpc.examples.reach import EXPECTED_REACH, build_reach
from drpc.protocol.gen import DistributedRPC
from tests.server.helpers import (
    HOST,
    exclamation,
    failing_topology,
    generated_client,
    running_server,
    server_options,
)


def test_a_compiler_generated_client_gets_the_reach() -> None:
    with (
        running_server(build_reach()) as server,
        generated_client(DistributedRPC, server.port) as client,
    ):
        assert client.execute("reach", "foo.com/blog/1") == "16"
        assert client.execute("reach", "notaurl.com") == "0"


def test_a_compiler_generated_client_gets_storm_failures() -> None:
    with (
        running_server(failing_topology()) as server,
        generated_client(DistributedRPC, server.port) as client,
    ):
        assert client.execute("failing", "good") == "good!"
        with pytest.raises(Exception) as failure:
            client.execute("failing", "bad")
        wire_error = failure.value
        assert type(wire_error).__name__ == "DRPCExecutionException"
        assert wire_error.type == DRPCExceptionType.FAILED_REQUEST  # type: ignore[attr-defined]
        assert "ValueError" in wire_error.msg  # type: ignore[attr-defined]


def test_every_reference_url_over_the_python_client() -> None:
    with running_server(build_reach()) as server, DRPCClient(HOST, server.port) as client:
        for url, reach in EXPECTED_REACH.items():
            assert client.execute("reach", url) == reach


def test_a_failing_request_fails_alone() -> None:
    with running_server(failing_topology()) as server, DRPCClient(HOST, server.port) as client:
        with pytest.raises(DRPCExecutionException) as failure:
            client.execute("failing", "bad")
        assert failure.value.type is DRPCExceptionType.FAILED_REQUEST
        assert "ValueError: cannot handle 'bad'" in failure.value.msg
        assert client.execute("failing", "fine") == "fine!"


async def test_2000_concurrent_calls_through_the_async_client_all_return_correct_answers() -> None:
    calls = 2000
    urls = list(EXPECTED_REACH)
    server = DRPCServer(**server_options(http_port=None))
    server.register(build_reach())
    server.register(exclamation())
    async with server, AsyncDRPCClient(HOST, server.port) as client:
        started = time.monotonic()
        answers = await asyncio.gather(
            *(
                client.execute("reach", urls[i % len(urls)])
                if i % 2
                else client.execute("exclamation", str(i))
                for i in range(calls)
            )
        )
        elapsed = time.monotonic() - started
        expected = [EXPECTED_REACH[urls[i % len(urls)]] if i % 2 else f"{i}!" for i in range(calls)]
        assert answers == expected
        assert server.service.outstanding() == 0
        print(f"{calls} concurrent calls in {elapsed:.2f} s")


async def test_calls_wait_concurrently_without_a_thread_each() -> None:
    # Every call waits at once on a function answered only after all have arrived: 500
    # calls (ten times the thread bound below; 2000 outlasted the timeout at load 49), 100
    # on each of 5 connections (within max_calls_per_connection, 128 by default).
    calls, per_connection = 500, 100
    server = DRPCServer(**server_options(http_port=None, wait_for_unserved=True))
    async with server:
        clients = [AsyncDRPCClient(HOST, server.port) for _ in range(calls // per_connection)]
        pending = [
            asyncio.ensure_future(clients[i // per_connection].execute("held", str(i)))
            for i in range(calls)
        ]
        while server.service.queue_depth("held") < calls:
            await asyncio.sleep(0.01)
        assert threading.active_count() < 50
        for _ in range(calls):
            request = server.service.fetch("held", "test", remote=False)
            assert request is not None
            server.service.complete(request.return_info.request_id, request.args + "?")
        assert await asyncio.gather(*pending) == [f"{i}?" for i in range(calls)]
        for client in clients:
            await client.close()


def test_registering_a_function_twice_is_refused() -> None:
    server = DRPCServer(**server_options())
    server.register(exclamation())
    try:
        with pytest.raises(DRPCError, match="already registered"):
            server.register(exclamation())
    finally:
        asyncio.run(server.stop())
