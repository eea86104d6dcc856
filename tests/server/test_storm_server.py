"""Storm's DRPC server tests, ported: every call over real sockets, the invocations side
through the client the Thrift compiler generates from the IDL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from drpc.client import (
    AuthorizationException,
    DRPCClient,
    DRPCExecutionException,
    DRPCInvocationsClient,
)
from drpc.server import DRPCServer

from drpc.errors import DRPCExceptionType
from drpc.protocol.gen import DistributedRPCInvocations, ttypes
from tests.server.helpers import HOST, exclamation, generated_client, running_server, wait_until
from tests.waiting import SLACK


def _call_in_background(server: DRPCServer, function: str, args: str) -> Future[str]:
    pool = ThreadPoolExecutor(1)

    def call() -> str:
        with DRPCClient(HOST, server.port) as client:
            return client.execute(function, args)

    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


def _fetch_when_queued(invocations: object, function: str) -> ttypes.DRPCRequest:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        request = invocations.fetchRequest(function)  # type: ignore[attr-defined]
        if request.request_id:
            return request
        time.sleep(0.01)
    raise AssertionError(f"no request for {function!r} arrived")


def test_good_call() -> None:
    with (
        running_server() as server,
        generated_client(DistributedRPCInvocations, server.invocations_port) as invocations,
    ):
        empty = invocations.fetchRequest("test")
        assert (empty.func_args, empty.request_id) == ("", "")
        pending = _call_in_background(server, "test", "tester")
        request = _fetch_when_queued(invocations, "test")
        assert (request.func_args, request.request_id) == ("tester", "1")
        invocations.result(request.request_id, "tested")
        assert pending.result(10) == "tested"
        second = _call_in_background(server, "test", "again")
        assert _fetch_when_queued(invocations, "test").request_id == "2"
        invocations.result("2", "done")
        assert second.result(10) == "done"


@pytest.fixture
def storm() -> Iterator[tuple[DRPCServer, Any]]:
    """A server and a compiler-generated invocations client of it."""
    with (
        running_server() as server,
        generated_client(DistributedRPCInvocations, server.invocations_port) as invocations,
    ):
        yield server, invocations


def _issue(storm: tuple[DRPCServer, Any], args: str) -> tuple[Future[str], ttypes.DRPCRequest]:
    """Call "test" in the background; returns the pending call and its fetched request."""
    server, invocations = storm
    invocations.fetchRequest("test")  # a runner polls first, so "test" is served
    pending = _call_in_background(server, "test", args)
    return pending, _fetch_when_queued(invocations, "test")


def test_failed_call(storm: tuple[DRPCServer, Any]) -> None:
    pending, request = _issue(storm, "tester")
    storm[1].failRequest(request.request_id)
    with pytest.raises(DRPCExecutionException) as failure:
        pending.result(10)
    assert failure.value.type is DRPCExceptionType.FAILED_REQUEST
    assert failure.value.msg == "Request failed"


def test_failed_call_v2_carries_the_type_and_message(storm: tuple[DRPCServer, Any]) -> None:
    pending, request = _issue(storm, "tester")
    storm[1].failRequestV2(
        request.request_id,
        ttypes.DRPCExecutionException(
            msg="counts did not add up", type=ttypes.DRPCExceptionType.INTERNAL_ERROR
        ),
    )
    with pytest.raises(DRPCExecutionException) as failure:
        pending.result(10)
    assert failure.value.type is DRPCExceptionType.INTERNAL_ERROR
    assert failure.value.msg == "counts did not add up"


def test_timeout_then_dequeued_and_a_late_result_is_ignored_and_counted() -> None:
    timeout = 1.0
    with (
        running_server(timeout=timeout) as server,
        generated_client(DistributedRPCInvocations, server.invocations_port) as invocations,
    ):
        invocations.fetchRequest("test")
        started = time.monotonic()
        with DRPCClient(HOST, server.port) as client, pytest.raises(DRPCExecutionException) as e:
            client.execute("test", "tester")
        elapsed = time.monotonic() - started
        assert timeout <= elapsed < timeout + SLACK  # at the deadline, not before; no hang
        assert e.value.type is DRPCExceptionType.SERVER_TIMEOUT
        assert e.value.msg == "Timed Out"
        empty = invocations.fetchRequest("test")
        assert (empty.func_args, empty.request_id) == ("", "")
        invocations.result("1", "too late")
        invocations.failRequest("1")
        invocations.result("404", "never issued")
        assert server.service.late_results == 3
        assert server.service.outstanding() == 0


def test_shutdown_fails_waiting_calls() -> None:
    with running_server(wait_for_unserved=True) as server:
        pending = [_call_in_background(server, "test", str(i)) for i in range(3)]
        wait_until(lambda: server.service.outstanding() == 3)
    for call in pending:
        with pytest.raises(DRPCExecutionException) as failure:
            call.result(10)
        assert failure.value.type is DRPCExceptionType.SERVER_SHUTDOWN
        assert failure.value.msg == "Server Shutting Down"


def test_each_request_is_handed_out_at_most_once() -> None:
    calls = 40
    with running_server(wait_for_unserved=True) as server:
        pending = [_call_in_background(server, "test", str(i)) for i in range(calls)]
        wait_until(lambda: server.service.outstanding() == calls)

        def drain() -> list[str]:
            fetched = []
            with DRPCInvocationsClient(HOST, server.invocations_port) as invocations:
                while (request := invocations.fetch_request("test")) is not None:
                    fetched.append(request.return_info.request_id)
                    invocations.result(request.return_info.request_id, request.args + "!")
            return fetched

        with ThreadPoolExecutor(4) as pool:
            fetchers = [pool.submit(drain) for _ in range(4)]
            handed_out = [request_id for fetcher in fetchers for request_id in fetcher.result()]
        assert sorted(handed_out, key=int) == [str(i) for i in range(1, calls + 1)]
        assert sorted(call.result(10) for call in pending) == sorted(f"{i}!" for i in range(calls))
        assert server.service.late_results == 0


def test_an_unserved_function_fails_at_once_naming_the_served_ones() -> None:
    with running_server(exclamation()) as server, DRPCClient(HOST, server.port) as client:
        started = time.monotonic()
        with pytest.raises(DRPCExecutionException) as failure:
            client.execute("nope", "x")
        assert time.monotonic() - started < SLACK  # at once, not at the 30 s deadline
        assert failure.value.type is DRPCExceptionType.FAILED_REQUEST
        assert "'nope' is not served" in failure.value.msg
        assert "served functions: exclamation" in failure.value.msg
        assert server.service.outstanding() == 0
        assert client.execute("exclamation", "hi") == "hi!"


def test_waiting_for_unserved_functions_as_storm_does_times_out() -> None:
    with running_server(wait_for_unserved=True, timeout=0.3) as server:
        with DRPCClient(HOST, server.port) as client, pytest.raises(DRPCExecutionException) as e:
            client.execute("nope", "x")
        assert e.value.type is DRPCExceptionType.SERVER_TIMEOUT


def test_a_runner_fetch_serves_a_function_for_runner_liveness_seconds() -> None:
    liveness = 2 * SLACK  # the queued call below comes well within it
    with (
        running_server(runner_liveness=liveness) as server,
        DRPCInvocationsClient(HOST, server.invocations_port) as invocations,
        DRPCClient(HOST, server.port) as client,
    ):
        assert invocations.fetch_request("remote") is None
        fetched_at = time.monotonic()
        assert server.functions == ["remote"]
        pending = _call_in_background(server, "remote", "within")
        wait_until(lambda: server.service.outstanding() == 1)  # queued, not refused
        assert time.monotonic() - fetched_at < liveness
        request = invocations.fetch_request("remote")
        assert request is not None and request.args == "within"
        invocations.result(request.return_info.request_id, "served")
        assert pending.result(10) == "served"
    # Past the window (a short one: nothing has to happen within it here) it is not served.
    liveness = 0.5
    with (
        running_server(runner_liveness=liveness) as server,
        DRPCInvocationsClient(HOST, server.invocations_port) as invocations,
        DRPCClient(HOST, server.port) as client,
    ):
        assert invocations.fetch_request("remote") is None
        time.sleep(liveness + 0.1)
        assert server.functions == []
        with pytest.raises(DRPCExecutionException) as failure:
            client.execute("remote", "after")
        assert failure.value.type is DRPCExceptionType.FAILED_REQUEST


def test_a_result_just_inside_the_deadline_is_delivered() -> None:
    timeout = 1.0
    with (
        running_server(timeout=timeout) as server,
        DRPCInvocationsClient(HOST, server.invocations_port) as invocations,
    ):
        invocations.fetch_request("test")
        started = time.monotonic()
        pending = _call_in_background(server, "test", "tester")
        request = None
        while request is None:
            request = invocations.fetch_request("test")
        time.sleep(max(0.0, started + 0.8 * timeout - time.monotonic()))
        invocations.result(request.return_info.request_id, "in time")
        assert pending.result(10) == "in time"
        assert server.service.late_results == 0


def test_the_invocations_side_is_authorized_too() -> None:
    def only_public(identity: str | None, operation: str, function: str) -> None:
        if function != "public":
            raise AuthorizationException(f"{operation} on {function} refused")

    with (
        running_server(authorizer=only_public) as server,
        DRPCInvocationsClient(HOST, server.invocations_port) as invocations,
    ):
        assert invocations.fetch_request("public") is None
        with pytest.raises(AuthorizationException, match="fetchRequest on secret refused"):
            invocations.fetch_request("secret")
        assert server.functions == ["public"]  # a refused fetch does not serve a function
