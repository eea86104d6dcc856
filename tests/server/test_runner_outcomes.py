"""A runner's outcomes: queued per server and sent by a thread of that server, bounded, sent
before the runner closes; and its settings, which rebuild it in another process."""

from __future__ import annotations

import logging
import pickle
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from drpc.client import DRPCClient, DRPCInvocationsClient
from drpc.server import DRPCServer
from drpc.server.limits import Limits

from drpc.errors import DRPCExceptionType, DRPCExecutionException
from drpc.protocol.tls import TLSSettings
from drpc.requests import DRPCRequest, ReturnInfo
from drpc.runner import InvocationsSettings, RemoteInvocations
from tests.server.helpers import HOST, running_server, wait_until


@contextmanager
def silent_server() -> Iterator[str]:
    """An address that accepts connections (the kernel's backlog does) and never answers."""
    with socket.socket() as listening:
        listening.bind((HOST, 0))
        listening.listen(16)
        yield f"{HOST}:{listening.getsockname()[1]}"


def invocations_of(server: DRPCServer) -> str:
    return f"{HOST}:{server.invocations_port}"


def take(invocations: RemoteInvocations, function: str = "f") -> DRPCRequest:
    wait_until(lambda: invocations.buffered(function) > 0)
    request = invocations.fetch_request(function)
    assert request is not None
    return request


def call(server: DRPCServer, args: str) -> str:
    with DRPCClient(HOST, server.port, timeout=30) as client:
        return client.execute("f", args)


def test_settings_pickle_and_rebuild_a_handle_that_serves_a_server() -> None:
    with running_server(wait_for_unserved=True) as server, ThreadPoolExecutor(1) as pool:
        built = RemoteInvocations(
            invocations_of(server), ["other"], poll_interval=0.01, max_queued_outcomes=7
        )
        shipped = pickle.loads(pickle.dumps(built.settings))
        assert shipped == built.settings
        assert shipped.servers == ((HOST, server.invocations_port),)
        assert shipped.max_queued_outcomes == 7
        rebuilt = RemoteInvocations.from_settings(shipped, ["f"])
        assert rebuilt.settings is shipped and rebuilt.origins == built.origins
        answer = pool.submit(call, server, "x")
        rebuilt.start()
        try:
            request = take(rebuilt)
            rebuilt.result(request.return_info, request.args + "!")
            assert answer.result(10) == "x!"
        finally:
            rebuilt.stop()
            built.stop()
    secure = InvocationsSettings(((HOST, 1),), tls=TLSSettings("ca.pem", "cert.pem", "key.pem"))
    assert pickle.loads(pickle.dumps(secure)) == secure


def test_settings_refuse_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="max_queued_outcomes must be >= 1, got 0"):
        InvocationsSettings(((HOST, 1),), max_queued_outcomes=0)
    with pytest.raises(ValueError, match="no server"):
        InvocationsSettings(())


def test_a_server_that_never_answers_delays_no_one() -> None:
    with (
        running_server(wait_for_unserved=True) as live,
        silent_server() as silent,
        ThreadPoolExecutor(2) as pool,
    ):
        invocations = RemoteInvocations(
            f"{invocations_of(live)},{silent}",
            ["f"],
            poll_interval=0.01,
            timeout=1.0,
            stop_timeout=0.1,
        )
        answers = [pool.submit(call, live, str(i)) for i in range(2)]
        invocations.start()
        try:
            first = take(invocations)
            started = time.monotonic()
            for request_id in ("1", "2", "3"):  # the first is sent, and hangs there for 1 s
                invocations.result(ReturnInfo(request_id, silent), "lost")
            invocations.fail_request(
                ReturnInfo("4", silent),
                DRPCExecutionException("x", DRPCExceptionType.FAILED_REQUEST),
            )
            invocations.result(first.return_info, "first")
            assert time.monotonic() - started < 0.1  # the topology's thread never waits
            assert answers[int(first.args)].result(10) == "first"
            second = take(invocations)  # the live server's poller was not held up either
            invocations.result(second.return_info, "second")
            assert answers[int(second.args)].result(10) == "second"
            assert time.monotonic() - started < 0.8  # well inside the silent server's timeout
        finally:
            stopping = time.monotonic()
            invocations.stop()
            assert time.monotonic() - stopping < 0.5  # stop_timeout, not the call timeout
        # The outcome in flight fails at its call timeout; the queued ones are dropped.
        wait_until(lambda: invocations.dropped_outcomes == 4, timeout=5)
    assert live.service.late_results == 0


def test_outcomes_past_the_queue_limit_are_dropped_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with silent_server() as silent:
        invocations = RemoteInvocations(
            silent, ["f"], timeout=0.5, stop_timeout=0.1, max_queued_outcomes=2
        )
        invocations.start()
        try:
            invocations.result(ReturnInfo("1", silent), "in flight")
            wait_until(lambda: invocations.queued_outcomes(silent) == 0)  # taken: sending
            invocations.result(ReturnInfo("2", silent), "queued")
            invocations.result(ReturnInfo("3", silent), "queued")
            assert invocations.queued_outcomes(silent) == 2  # at the limit: kept
            assert invocations.dropped_outcomes == 0
            with caplog.at_level(logging.WARNING, logger="drpc.runner"):
                invocations.result(ReturnInfo("4", silent), "one too many")
                invocations.result(ReturnInfo("5", "elsewhere:1"), "unknown server")
            assert invocations.queued_outcomes(silent) == 2
            assert invocations.dropped_outcomes == 2
            assert [record.getMessage() for record in caplog.records] == [
                f"dropped the result of request 4 for {silent}: 2 outcomes queued "
                "(max_queued_outcomes)",
                "dropped the result of request 5 for elsewhere:1: unknown server 'elsewhere:1'",
            ]
            assert caplog.records[0].__dict__["request_id"] == "4"
            assert caplog.records[0].__dict__["server"] == silent
        finally:
            invocations.stop()
        wait_until(lambda: invocations.dropped_outcomes == 5, timeout=5)


def test_stop_sends_the_queued_outcomes_before_closing_the_fetch_connections() -> None:
    with running_server(wait_for_unserved=True) as server, ThreadPoolExecutor(5) as pool:
        answers = [pool.submit(call, server, str(i)) for i in range(5)]
        wait_until(lambda: server.service.queue_depth("f") == 5)
        invocations = RemoteInvocations(invocations_of(server), ["f"], poll_interval=0.01)
        invocations.start()
        requests = [take(invocations) for _ in range(5)]
        invocations.stop_fetching()
        for request in requests:
            invocations.result(request.return_info, "answered " + request.args)
        invocations.stop()
        # Closing the fetch connection first would have failed them with INTERNAL_ERROR.
        assert [answer.result(10) for answer in answers] == [f"answered {i}" for i in range(5)]
        assert invocations.dropped_outcomes == 0
        assert server.service.orphaned == 0


@pytest.mark.parametrize("calls_per_connection", [1, 64], ids=["parked", "concurrent"])
def test_pipelined_fetches_take_what_is_queued_in_order_in_one_round_trip(
    calls_per_connection: int,
) -> None:
    """``fetch_requests`` sends its fetches at once and matches the replies by sequence id,
    whether the server runs them one by one (the rest parked) or side by side."""
    limits = Limits(max_calls_per_connection=calls_per_connection)
    with (
        running_server(wait_for_unserved=True, limits=limits) as server,
        ThreadPoolExecutor(3) as pool,
    ):
        calls = []
        for i in range(3):  # queued one after another: their order is known
            calls.append(pool.submit(call, server, f"a{i}"))
            wait_until(lambda i=i: server.service.queue_depth("f") == i + 1)
        with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as client:
            fetched = client.fetch_requests("f", 5)
            assert [request.args for request in fetched] == ["a0", "a1", "a2"]
            assert client.fetch_requests("f", 4) == []  # nothing queued: every fetch empty
            for request in fetched:
                client.result(request.return_info.request_id, request.args + "!")
        assert [done.result(10) for done in calls] == ["a0!", "a1!", "a2!"]


def test_a_poller_grows_its_batch_while_batches_come_back_full() -> None:
    with running_server(wait_for_unserved=True) as server, ThreadPoolExecutor(12) as pool:
        calls = [pool.submit(call, server, f"b{i}") for i in range(12)]
        wait_until(lambda: server.service.queue_depth("f") == 12)
        invocations = RemoteInvocations(
            invocations_of(server), ["f"], poll_interval=0.01, max_buffered=5
        )
        with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as client:
            batches: dict[str, int] = {}
            sizes = []
            for _ in range(4):
                invocations._poll_round(client, batches)
                sizes.append(invocations.buffered("f"))
                while invocations.fetch_request("f") is not None:
                    pass
            # 1, then 2, then 4; then the buffer's room (5) caps the batch, and the next one
            # would double again
            assert sizes == [1, 2, 4, 5]
            assert batches == {"f": 10}
        invocations.stop()
        for done in calls:  # the fetched ones fail at once: their connection closed
            with pytest.raises(DRPCExecutionException):
                done.result(10)


def test_answers_go_pipelined_results_and_failures_alike() -> None:
    with running_server(wait_for_unserved=True) as server, ThreadPoolExecutor(3) as pool:
        calls = []
        for i in range(3):
            calls.append(pool.submit(call, server, f"c{i}"))
            wait_until(lambda i=i: server.service.queue_depth("f") == i + 1)
        with DRPCInvocationsClient(HOST, server.invocations_port, timeout=10) as client:
            first, second, third = client.fetch_requests("f", 3)
            refused = DRPCExecutionException("no", DRPCExceptionType.FAILED_REQUEST)
            client.answer_many(
                [
                    (first.return_info.request_id, "one"),
                    (second.return_info.request_id, refused),
                    (third.return_info.request_id, "three"),
                ]
            )
        assert calls[0].result(10) == "one" and calls[2].result(10) == "three"
        with pytest.raises(DRPCExecutionException) as failed:
            calls[1].result(10)
        assert failed.value.type is DRPCExceptionType.FAILED_REQUEST and failed.value.msg == "no"


def test_a_poller_with_a_full_buffer_fetches_again_as_soon_as_one_is_taken() -> None:
    """Not after ``poll_interval``: a topology that keeps up is never starved by its own
    buffer filling."""
    with running_server(wait_for_unserved=True) as server, ThreadPoolExecutor(2) as pool:
        calls = [pool.submit(call, server, f"d{i}") for i in range(2)]
        wait_until(lambda: server.service.queue_depth("f") == 2)
        invocations = RemoteInvocations(
            invocations_of(server), ["f"], poll_interval=60.0, max_buffered=1
        )
        invocations.start()
        try:
            taken = [take(invocations)]
            # the buffer had room again: the second is fetched long before the poll interval
            wait_until(lambda: invocations.buffered("f") == 1, 10, "the second fetch")
            taken.append(take(invocations))
            for request in taken:
                invocations.result(request.return_info, request.args + "!")
            assert sorted(done.result(10) for done in calls) == ["d0!", "d1!"]
        finally:
            invocations.stop()


def test_an_idle_poller_backs_off_from_a_millisecond_up_to_the_poll_interval() -> None:
    """A request that arrives soon after the last one is fetched at once, not after
    ``poll_interval`` (60 s here); only a server idle for long is asked that rarely."""
    with running_server(wait_for_unserved=True) as server, ThreadPoolExecutor(1) as pool:
        invocations = RemoteInvocations(invocations_of(server), ["f"], poll_interval=60.0)
        invocations.start()
        try:
            for i in range(3):
                calling = pool.submit(call, server, f"e{i}")
                wait_until(lambda: invocations.buffered("f") == 1, 10, "the fetch")
                request = take(invocations)
                invocations.result(request.return_info, request.args + "!")
                assert calling.result(10) == f"e{i}!"
        finally:
            invocations.stop()
