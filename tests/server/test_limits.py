"""The server's resource limits, each on both sides: at the limit served, past it refused
at once with a typed answer (Thrift FAILED_REQUEST "server busy", HTTP 503 + Retry-After)."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import aiohttp
import pytest
from drpc.client import (
    AsyncDRPCClient,
    DRPCClient,
    DRPCExecutionException,
    HTTPDRPCClient,
    ServerBusyError,
)
from drpc.server import DRPCServer, ServerThread
from drpc.server.identity import TokenTable
from drpc.server.limits import CALL_COST, Limits
from drpc.server.thrift_listener import FRAMES_PER_TURN

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.errors import DRPCError, DRPCExceptionType
from drpc.examples.exclamation import ExclaimBolt, build_exclamation
from tests.server.helpers import (
    HOST,
    closed_by_server,
    connect_from,
    raw_connection,
    server_options,
    wait_until,
)
from tests.server.hostile import execute_frame, read_reply
from tests.waiting import SLACK


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(16) as executor:
        yield executor


def _serve(**limits: object) -> ServerThread:
    limited = Limits(**limits)  # type: ignore[arg-type]
    return ServerThread(DRPCServer(**server_options(wait_for_unserved=True), limits=limited))


def _call(pool: ThreadPoolExecutor, server: DRPCServer, function: str, args: str) -> Future[str]:
    def call() -> str:
        with DRPCClient(HOST, server.port, timeout=20) as client:
            return client.execute(function, args)

    return pool.submit(call)


def _answer_all(server: DRPCServer, function: str) -> None:
    while (request := server.service.fetch(function, "test", remote=False)) is not None:
        server.service.complete(request.return_info.request_id, request.args + "!")


def _refused_busy(server: DRPCServer, function: str, reason: str) -> None:
    started = time.monotonic()
    with (
        DRPCClient(HOST, server.port, timeout=20) as client,
        pytest.raises(DRPCExecutionException) as refused,
    ):
        client.execute(function, "refused")
    assert time.monotonic() - started < SLACK  # at once, not at the 20 s or 30 s deadline
    assert refused.value.type is DRPCExceptionType.FAILED_REQUEST
    assert refused.value.msg.startswith("server busy: ")
    assert reason in refused.value.msg


def test_queue_depth_per_function(pool: ThreadPoolExecutor) -> None:
    with _serve(max_queue_depth=3) as server:
        calls = [_call(pool, server, "f", str(i)) for i in range(3)]
        wait_until(lambda: server.service.queue_depth("f") == 3)  # at the limit: queued
        _refused_busy(server, "f", "3 requests of 'f' waiting (limit 3)")
        other = _call(pool, server, "g", "other")  # another function still has room
        wait_until(lambda: server.service.queue_depth("g") == 1)
        _answer_all(server, "f")
        _answer_all(server, "g")
        assert sorted(call.result(10) for call in calls) == ["0!", "1!", "2!"]
        assert other.result(10) == "other!"
        assert _call(pool, server, "f", "again").done() is False  # room again
        wait_until(lambda: server.service.queue_depth("f") == 1)
        _answer_all(server, "f")
        assert server.service.refused_busy == 1


def test_total_outstanding(pool: ThreadPoolExecutor) -> None:
    with _serve(max_outstanding=4) as server:
        calls = [_call(pool, server, f"f{i % 2}", str(i)) for i in range(4)]
        wait_until(lambda: server.service.outstanding() == 4)
        # Fetched (running) requests count too.
        assert server.service.fetch("f0", "test", remote=False) is not None
        _refused_busy(server, "f2", "4 requests outstanding (limit 4)")
        server.service.shutdown()
        for call in calls:
            with pytest.raises(DRPCExecutionException):
                call.result(10)


def test_distinct_functions_tracked(pool: ThreadPoolExecutor) -> None:
    with _serve(max_functions=2) as server:
        calls = [_call(pool, server, name, "x") for name in ("a", "b")]
        wait_until(lambda: server.service.tracked_functions() == 2)
        _refused_busy(server, "c", "2 functions have queued requests")
        third = _call(pool, server, "a", "same function")  # a tracked name is no new name
        wait_until(lambda: server.service.queue_depth("a") == 2)
        for name in ("a", "b"):
            _answer_all(server, name)
        assert [call.result(10) for call in [*calls, third]] == ["x!", "x!", "same function!"]


async def test_http_busy_is_503_with_retry_after() -> None:
    with _serve(max_queue_depth=1, retry_after=7) as server:
        base = f"http://{HOST}:{server.http_port}/drpc/f"
        async with aiohttp.ClientSession() as session:
            waiting = asyncio.ensure_future(session.get(f"{base}/first"))
            while server.service.queue_depth("f") < 1:
                await asyncio.sleep(0.01)
            async with session.get(f"{base}/second") as response:
                assert response.status == 503
                assert response.headers["Retry-After"] == "7"
                body = await response.json()
                assert body["error"] == "FAILED_REQUEST"
                assert body["errorMessage"].startswith("server busy: ")
            await asyncio.to_thread(_answer_all, server, "f")
            async with await waiting as response:
                assert (response.status, await response.text()) == (200, "first!")


def test_the_http_client_raises_server_busy_with_retry_after(pool: ThreadPoolExecutor) -> None:
    with _serve(max_queue_depth=1, retry_after=3) as server:
        first = _call(pool, server, "f", "first")
        wait_until(lambda: server.service.queue_depth("f") == 1)
        with (
            HTTPDRPCClient(f"http://{HOST}:{server.http_port}", timeout=10) as http,
            pytest.raises(ServerBusyError) as busy,
        ):
            http.execute("f", "second")
        assert busy.value.retry_after == 3.0
        _answer_all(server, "f")
        assert first.result(10) == "first!"


def test_result_size(pool: ThreadPoolExecutor) -> None:
    with _serve(max_result_size=10) as server:
        fits = _call(pool, server, "f", "x")
        too_big = _call(pool, server, "f", "y")
        wait_until(lambda: server.service.queue_depth("f") == 2)
        for result in ("\u00e9" * 5, "\u00e9" * 5 + "z"):  # 10 and 11 UTF-8 bytes
            request = server.service.fetch("f", "test", remote=False)
            assert request is not None
            server.service.complete(request.return_info.request_id, result)
        outcomes = {}
        for call in (fits, too_big):
            try:
                outcomes["ok"] = call.result(10)
            except DRPCExecutionException as error:
                outcomes["failed"] = error
        assert outcomes["ok"] == "\u00e9" * 5
        assert outcomes["failed"].type is DRPCExceptionType.FAILED_REQUEST
        assert "result of 11 bytes exceeds the limit of 10" in outcomes["failed"].msg


async def test_calls_in_flight_per_connection() -> None:
    with _serve(max_calls_per_connection=2) as server:
        async with AsyncDRPCClient(HOST, server.port, timeout=20) as client:
            calls = [asyncio.ensure_future(client.execute("f", str(i))) for i in range(5)]
            deadline = time.monotonic() + 30
            while server.service.queue_depth("f") < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # time for a third call to arrive, were it read
            # At the limit: two calls running; the other three read and parked, not started.
            assert server.service.queue_depth("f") == 2
            answered = 0
            while answered < 5:
                await asyncio.sleep(0.05)
                depth = server.service.queue_depth("f")
                assert depth <= 2
                if depth:
                    await asyncio.to_thread(_answer_all, server, "f")
                answered = sum(call.done() for call in calls)
            assert await asyncio.gather(*calls) == [f"{i}!" for i in range(5)]


async def test_a_connection_closed_with_calls_parked_withdraws_its_running_ones_at_once() -> None:
    with _serve(max_calls_per_connection=2) as server:
        client = AsyncDRPCClient(HOST, server.port, timeout=20)
        calls = [asyncio.ensure_future(client.execute("f", str(i))) for i in range(50)]
        await asyncio.to_thread(wait_until, lambda: server.service.queue_depth("f") == 2)
        await client.close()
        # The connection is still read while 48 calls are parked, so its end is seen now,
        # not once a running call ends (the 30 s request timeout).
        await asyncio.to_thread(wait_until, lambda: server.service.queue_depth("f") == 0, SLACK)
        await asyncio.gather(*calls, return_exceptions=True)
        assert server.service.queue_depth("f") == 0  # no parked call started after the close


async def _depth_each_turn(server: DRPCServer, function: str, until: int) -> list[int]:
    """``function``'s queue depth once per turn of the server's loop, until it reaches
    ``until`` (or 100 000 turns pass)."""
    depths = [server.service.queue_depth(function)]
    while depths[-1] < until and len(depths) < 100_000:
        await asyncio.sleep(0)
        depths.append(server.service.queue_depth(function))
    return depths


def test_buffered_frames_are_read_many_per_turn_of_the_loop_and_no_more() -> None:
    burst = 4 * FRAMES_PER_TURN
    thread = _serve(max_calls_per_connection=burst, max_pending_bytes=2 * burst * CALL_COST)
    with thread as server, raw_connection(server.port) as connection:
        watching = thread.run(_depth_each_turn(server, "f", burst))
        connection.sendall(execute_frame("f", "x") * burst)
        depths = watching.result(30)
        assert depths[-1] == burst
        most = max(later - earlier for earlier, later in itertools.pairwise(depths))
        # One frame a turn (a burst taking as many turns of a busy loop as it has calls) would
        # start one or two calls a turn.
        assert 16 <= most <= 2 * FRAMES_PER_TURN
        _answer_all(server, "f")


async def _timers_armed_until(server: DRPCServer, function: str, depth: int) -> int:
    """Timers the server's loop arms until ``function``'s queue depth reaches ``depth``."""
    loop = asyncio.get_running_loop()
    call_at = loop.call_at
    armed = 0

    def counting(*args: Any, **options: Any) -> asyncio.TimerHandle:
        nonlocal armed
        armed += 1
        return call_at(*args, **options)

    loop.call_at = counting  # type: ignore[method-assign]
    try:
        await _depth_each_turn(server, function, depth)
    finally:
        del loop.call_at
    return armed


def test_frames_that_have_arrived_whole_are_read_without_arming_deadlines() -> None:
    burst = 4 * FRAMES_PER_TURN
    thread = _serve(max_calls_per_connection=burst, max_pending_bytes=2 * burst * CALL_COST)
    with thread as server, raw_connection(server.port) as connection:
        counting = thread.run(_timers_armed_until(server, "f", burst))
        connection.sendall(execute_frame("f", "x") * burst)
        armed = counting.result(30)
        # Waiting for a frame arms the idle and read deadlines (two timers a frame when
        # every frame is awaited); frames already buffered need neither.
        assert armed < burst // 4
        _answer_all(server, "f")


async def test_each_running_call_counts_a_fixed_cost_against_the_pending_bytes() -> None:
    # Frames of a few dozen bytes: by their size alone hundreds would fit the cap.
    with _serve(max_pending_bytes=3 * CALL_COST) as server:
        async with AsyncDRPCClient(HOST, server.port, timeout=20) as client:
            calls = [asyncio.ensure_future(client.execute("f", str(i))) for i in range(10)]
            await asyncio.to_thread(wait_until, lambda: server.service.queue_depth("f") == 3)
            await asyncio.sleep(0.5)  # time for a fourth call to start, were it read
            assert server.service.queue_depth("f") == 3
            while not all(call.done() for call in calls):
                await asyncio.to_thread(_answer_all, server, "f")
                await asyncio.sleep(0.05)
            assert await asyncio.gather(*calls) == [f"{i}!" for i in range(10)]


def _still_open(connection: socket.socket) -> bool:
    connection.settimeout(0.2)
    try:
        return connection.recv(1) != b""  # nothing is ever sent unasked: b"" means closed
    except TimeoutError:
        return True  # no FIN: open
    except ConnectionResetError:
        return False


def test_at_the_total_idle_connections_make_room_and_working_ones_are_kept() -> None:
    """Two loopback addresses: idle sockets of one never lock the other out; the oldest
    idle one is closed for a newcomer; with every connection working, a newcomer is
    refused instead, and nothing in flight is lost."""
    server_thread = ServerThread(
        DRPCServer(**server_options(wait_for_unserved=True), max_connections=4)
    )
    with server_thread as server, ThreadPoolExecutor(4) as pool:
        listener = server._execute_listener
        assert listener.max_connections_per_address == 2  # follows the total
        first, second = (
            connect_from("127.0.0.2", server.port),
            connect_from("127.0.0.2", server.port),
        )
        wait_until(lambda: listener.connections_from("127.0.0.2") == 2)
        # one address at its cap: its own oldest idle connection makes room
        third = connect_from("127.0.0.2", server.port)
        assert closed_by_server(first) == b""
        wait_until(lambda: listener.reclaimed_connections == 1)
        assert listener.connections_from("127.0.0.2") == 2
        assert _still_open(second) and _still_open(third)
        # idle sockets of 127.0.0.2 and 127.0.0.3 fill the port; a working caller still gets in
        others = [connect_from("127.0.0.3", server.port) for _ in range(2)]
        wait_until(lambda: len(listener._connections) == 4)
        with DRPCClient(HOST, server.port, timeout=20) as client:
            calling = pool.submit(client.execute, "f", "x")
            wait_until(lambda: server.service.queue_depth("f") == 1)
            assert closed_by_server(second) == b""  # the oldest idle one
            assert listener.reclaimed_connections == 2
            _answer_all(server, "f")
            assert calling.result(10) == "x!"
        for connection in (third, *others):
            connection.close()
        wait_until(lambda: len(listener._connections) == 0)
        # every connection working: the newcomer is refused, the working ones kept
        working = [connect_from(f"127.0.0.{2 + i % 2}", server.port) for i in range(4)]
        for i, connection in enumerate(working):
            connection.sendall(execute_frame("f", str(i)))
        wait_until(lambda: server.service.queue_depth("f") == 4)
        with connect_from("127.0.0.4", server.port) as refused:
            assert closed_by_server(refused) == b""
        assert listener.refused_connections == 1
        _answer_all(server, "f")
        assert [read_reply(connection).success for connection in working] == [
            f"{i}!" for i in range(4)
        ]
        for connection in working:
            connection.close()
        assert listener.reclaimed_connections == 2


def test_limits_refuse_non_positive_values() -> None:
    with pytest.raises(ValueError, match="max_queue_depth"):
        Limits(max_queue_depth=0)
    with pytest.raises(ValueError, match="read_timeout"):
        Limits(read_timeout=-1.0)


def test_runner_fetched_names_are_forgotten_when_their_window_passes() -> None:
    server = DRPCServer(**server_options(runner_liveness=0.5))
    with ServerThread(server) as running:
        service = running.service
        for i in range(50):
            assert service.fetch(f"name-{i}", "runner", remote=True) is None
        assert service.tracked_functions() == 50  # inside the window: all served
        assert len(service.served_functions()) == 50
        time.sleep(0.6)
        assert service.fetch("fresh", "runner", remote=True) is None
        assert service.tracked_functions() == 1  # the expired 50 are gone, not just unserved
        assert service.served_functions() == ["fresh"]


def test_the_served_list_is_listed_whole_up_to_its_limit() -> None:
    limited = DRPCServer(**server_options(), limits=Limits(max_listed_functions=3))
    with ServerThread(limited) as server:
        service = server.service
        for name in ("a", "b", "c"):
            service.fetch(name, "runner", remote=True)
        assert service.served_summary() == (["a", "b", "c"], 3)
        with DRPCClient(HOST, server.port, timeout=10) as client:
            with pytest.raises(DRPCExecutionException) as at_the_limit:
                client.execute("d", "x")
            assert at_the_limit.value.msg.endswith("served functions: a, b, c")
            service.fetch("e", "runner", remote=True)
            with pytest.raises(DRPCExecutionException) as over:
                client.execute("d", "x")
            assert over.value.msg.endswith("served functions: a, b, c and 1 more")
        assert service.served_summary() == (["a", "b", "c"], 4)


def test_a_function_name_over_the_limit_cannot_be_registered() -> None:
    server = DRPCServer(**server_options(), limits=Limits(max_function_name=11))
    server.register(build_exclamation())  # "exclamation": 11 bytes, at the limit
    builder = LinearDRPCTopologyBuilder("exclamation!")
    builder.add_bolt(ExclaimBolt())
    with pytest.raises(DRPCError, match="exceeds the limit of 11"):
        server.register(builder)
    with ServerThread(server) as running, DRPCClient(HOST, running.port, timeout=10) as client:
        assert client.execute("exclamation", "x") == "x!"


async def test_each_user_and_each_anonymous_address_has_its_own_quota() -> None:
    tokens = TokenTable({"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"})
    limited = DRPCServer(
        **server_options(wait_for_unserved=True),
        limits=Limits(max_outstanding_per_caller=2),
        tokens=tokens,
    )
    with ServerThread(limited) as server:
        url = f"http://{HOST}:{server.http_port}/drpc/f"
        alice = {"Authorization": "Bearer alice-token-0123456789"}
        bob = {"Authorization": "Bearer bob-token-0123456789"}
        async with aiohttp.ClientSession() as session:
            held = [
                asyncio.ensure_future(session.get(f"{url}/a{i}", headers=alice)) for i in range(2)
            ]
            while server.service.outstanding() < 2:  # alice at her quota: both queued
                await asyncio.sleep(0.01)
            async with session.get(f"{url}/a3", headers=alice) as refused:
                assert refused.status == 503
                assert (await refused.json())["errorMessage"] == (
                    "server busy: 2 requests outstanding for user alice (limit 2 per caller)"
                )
            held.append(asyncio.ensure_future(session.get(f"{url}/b", headers=bob)))
            async with AsyncDRPCClient(HOST, server.port, timeout=20) as anonymous:
                held.append(asyncio.ensure_future(anonymous.execute("f", "anon")))
                while server.service.outstanding() < 4:  # bob and 127.0.0.1: quotas of their own
                    await asyncio.sleep(0.01)
                await asyncio.to_thread(_answer_all, server, "f")
                *responses, anon = await asyncio.gather(*held)
                assert anon == "anon!"
            for response in responses:
                async with response:
                    assert response.status == 200
        assert server.service.refused_busy == 1
