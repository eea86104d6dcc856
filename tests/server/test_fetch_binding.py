"""A fetched request is bound to the connection that fetched it: when that connection closes
unanswered, the caller gets INTERNAL_ERROR at once instead of waiting for the deadline."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from drpc.client import DRPCClient, DRPCExecutionException, DRPCInvocationsClient
from drpc.server import DRPCServer
from drpc.server.fetchers import FetchBindings
from drpc.server.limits import Limits

from drpc.errors import DRPCExceptionType
from drpc.requests import DRPCRequest
from tests.server.helpers import (
    HOST,
    closed_by_server,
    raw_connection,
    running_server,
    wait_until,
)

RUNNER_GONE = re.compile(
    r"^Request failed: the runner at 127\.0\.0\.1:\d+ that fetched it went away "
    r"\(its connection closed\) before answering$"
)


@contextmanager
def calling(server: DRPCServer, count: int) -> Iterator[list[Future[str]]]:
    """``count`` callers of function "f" waiting on ``server``, their requests queued."""
    with ThreadPoolExecutor(count) as pool:

        def call(args: str) -> str:
            with DRPCClient(HOST, server.port, timeout=30) as client:
                return client.execute("f", args)

        calls = [pool.submit(call, str(i)) for i in range(count)]
        wait_until(lambda: server.service.queue_depth("f") == count)
        yield calls


def fetch(runner: DRPCInvocationsClient) -> DRPCRequest:
    request = runner.fetch_request("f")
    assert request is not None
    return request


def test_closing_the_fetching_connection_fails_its_requests_at_once() -> None:
    with running_server(wait_for_unserved=True) as server, calling(server, 2) as calls:
        runner = DRPCInvocationsClient(HOST, server.invocations_port, timeout=10)
        answered, dropped = fetch(runner), fetch(runner)
        runner.result(answered.return_info.request_id, "done")
        closed = time.monotonic()
        runner.close()
        with pytest.raises(DRPCExecutionException) as failure:
            calls[int(dropped.args)].result(5)
        assert time.monotonic() - closed < 1.0
        assert failure.value.type is DRPCExceptionType.INTERNAL_ERROR
        assert RUNNER_GONE.match(failure.value.msg), failure.value.msg
        # answered before the close: unaffected
        assert calls[int(answered.args)].result(5) == "done"
        assert server.service.orphaned == 1
        # An answer arriving after the close is late, as any answer to a settled request.
        with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as other:
            other.result(dropped.return_info.request_id, "too late")
        wait_until(lambda: server.service.late_results == 1)
        assert server.service.outstanding() == 0


def test_an_open_fetching_connection_keeps_storms_behaviour() -> None:
    with running_server(wait_for_unserved=True, timeout=0.5) as server, calling(server, 2) as calls:
        with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as runner:
            first, second = fetch(runner), fetch(runner)
            # Answered on another connection while the fetching one stays open (Storm's
            # runners may answer from anywhere).
            with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as other:
                other.result(first.return_info.request_id, "elsewhere")
            assert calls[int(first.args)].result(5) == "elsewhere"
            # Never answered: the deadline, not the rule, settles it.
            with pytest.raises(DRPCExecutionException) as failure:
                calls[int(second.args)].result(5)
            assert failure.value.type is DRPCExceptionType.SERVER_TIMEOUT
            assert failure.value.msg == "Timed Out"
        assert server.service.orphaned == 0


def test_a_connection_holding_requests_is_not_closed_as_idle() -> None:
    limits = Limits(idle_timeout=0.2)
    with (
        running_server(wait_for_unserved=True, limits=limits) as server,
        calling(server, 1) as calls,
        DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as runner,
    ):
        request = fetch(runner)
        # A connection opened after the fetch and closed as idle: the fetching one passed
        # its idle deadline too, with nothing sent since.
        with raw_connection(server.invocations_port) as bystander:
            assert closed_by_server(bystander) == b""
        assert server.service.orphaned == 0
        assert server.service.outstanding() == 1
        runner.result(request.return_info.request_id, "held")  # on the same connection
        assert calls[0].result(5) == "held"


def test_bindings_forget_settled_requests_and_release_the_rest_in_order() -> None:
    bindings = FetchBindings()
    bindings.bind("a", "1")
    bindings.bind("b", "2")
    bindings.bind("a", "3")
    bindings.bind("a", "4")
    bindings.settled("3")
    bindings.settled("99")  # unknown: ignored
    assert bindings.holds("a") and bindings.held_by("a") == 2 and len(bindings) == 3
    assert bindings.release("a") == ["1", "4"]
    assert not bindings.holds("a") and bindings.release("a") == []
    bindings.settled("2")
    assert not bindings.holds("b") and len(bindings) == 0
