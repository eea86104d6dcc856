"""The request table: ids, at-most-once handout, deadlines, shutdown, late results."""

from __future__ import annotations

import pytest

from drpc.errors import DRPCExceptionType, DRPCExecutionException
from drpc.requests import LOCAL_ORIGIN, DRPCRequest, RequestTable, ReturnInfo


def test_ids_are_decimal_strings_in_order_and_fetch_is_fifo_per_function() -> None:
    table = RequestTable(timeout=10)
    a = table.submit("reach", "a", now=0)
    b = table.submit("square", "b", now=0)
    c = table.submit("reach", "c", now=0)
    assert [a.id, b.id, c.id] == ["1", "2", "3"]
    assert table.queue_depth("reach") == 2
    assert table.fetch("reach") is a
    assert table.fetch("reach") is c
    assert table.fetch("reach") is None  # handed out at most once, never blocks
    assert table.fetch("unknown") is None
    assert table.fetch("square") is b


def test_complete_and_fail_settle_once_and_late_results_are_counted() -> None:
    table = RequestTable(timeout=10)
    a = table.submit("f", "x", now=0)
    b = table.submit("f", "y", now=0)
    assert table.complete(a.id, "42") is a and a.result == "42" and a.done
    assert table.complete(a.id, "43") is None
    error = DRPCExecutionException("Request failed")
    assert table.fail(b.id, error) is b and b.error is error
    assert table.fail("999", error) is None
    assert table.late_results == 2
    assert len(table) == 0


def test_expiry_times_out_and_removes_from_the_queue() -> None:
    table = RequestTable(timeout=10)
    first = table.submit("f", "1", now=0)
    short = table.submit("f", "2", now=1, timeout=2)
    last = table.submit("f", "3", now=5)
    assert table.next_deadline() == 3
    assert table.expire(now=2.9) == []
    assert table.expire(now=3) == [short]
    assert short.error is not None and short.error.type is DRPCExceptionType.SERVER_TIMEOUT
    assert short.error.msg == "Timed Out"
    assert table.expire(now=10) == [first]
    assert table.queue_depth("f") == 1 and table.fetch("f") is last
    assert table.complete(first.id, "late") is None and table.late_results == 1


def test_a_fetched_request_still_times_out() -> None:
    table = RequestTable(timeout=1)
    request = table.submit("f", "1", now=0)
    assert table.fetch("f") is request
    assert table.expire(now=1) == [request]
    assert table.complete(request.id, "too late") is None


def test_shutdown_settles_everything_and_refuses_new_requests() -> None:
    table = RequestTable(timeout=10)
    a = table.submit("f", "1", now=0)
    table.fetch("f")
    b = table.submit("g", "2", now=0)
    assert set(table.shutdown()) == {a, b}
    assert a.error is not None and a.error.type is DRPCExceptionType.SERVER_SHUTDOWN
    assert a.error.msg == "Server Shutting Down"
    with pytest.raises(DRPCExecutionException) as caught:
        table.submit("f", "3", now=1)
    assert caught.value.type is DRPCExceptionType.SERVER_SHUTDOWN
    assert caught.value.msg == "Server Shutting Down"


@pytest.mark.parametrize("timeout", [0, -1])
def test_timeouts_must_be_positive(timeout: float) -> None:
    reason = f"^request timeout must be positive, got {timeout}$"
    with pytest.raises(ValueError, match=reason):
        RequestTable(timeout=timeout)
    with pytest.raises(ValueError, match=reason):
        RequestTable().submit("f", "x", now=0, timeout=timeout)


def test_withdraw_settles_only_what_no_runtime_fetched_and_callers_hold_counts() -> None:
    table = RequestTable(timeout=10)
    queued = table.submit("f", "q", now=0, caller="address 10.0.0.1")
    running = table.submit("f", "r", now=0, caller="address 10.0.0.1")
    other = table.submit("f", "o", now=0, caller="user alice")
    anonymous = table.submit("f", "a", now=0)
    assert (table.held_by("address 10.0.0.1"), table.held_by("user alice")) == (2, 1)
    assert table.fetch("f") is queued and table.fetch("f") is running
    gone = DRPCExecutionException("gone")
    assert table.withdraw(queued.id, gone) is None  # fetched: left to its runtime
    assert table.withdraw(other.id, gone) is other and other.error is gone
    assert table.queue_depth("f") == 1  # the withdrawn one left its queue
    assert table.withdraw(other.id, gone) is None  # settled already
    assert (table.held_by("address 10.0.0.1"), table.held_by("user alice")) == (2, 0)
    table.complete(queued.id, "1")
    table.expire(now=11)
    assert table.held_by("address 10.0.0.1") == 0 and len(table) == 0
    assert anonymous.error is not None  # no caller: counted against nobody


def test_settling_removes_emptied_queues_so_distinct_names_leave_nothing_behind() -> None:
    table = RequestTable(timeout=10)
    for i in range(50):  # a distinct function and timeout each, settled every way
        request = table.submit(f"f{i}", "x", now=i, timeout=1 + i)
        if i % 4 == 0:
            table.complete(request.id, "ok")
        elif i % 4 == 1:
            assert table.fetch(f"f{i}") is request
            table.fail(request.id, DRPCExecutionException("no"))
        elif i % 4 == 2:
            assert table.time_out(request.id) is request
        else:
            assert table.expire(now=i + 1 + i) == [request]
    assert len(table) == 0 and table.queued_functions() == []
    assert table._queues == {} and table._by_timeout == {}  # no entry per name seen
    assert table.next_deadline() is None


def test_settling_one_request_keeps_the_others_of_its_queue_and_timeout() -> None:
    table = RequestTable(timeout=10)
    a = table.submit("f", "a", now=0)
    b = table.submit("f", "b", now=1)
    c = table.submit("g", "c", now=2, timeout=5)
    assert table.queued_functions() == ["f", "g"]
    assert table.complete(a.id, "ok") is a
    assert table.queue_depth("f") == 1 and table.next_deadline() == 7
    assert table.fail(c.id, DRPCExecutionException("no")) is c
    assert table.queued_functions() == ["f"] and table.next_deadline() == 11
    assert table.fetch("f") is b
    assert table.queued_functions() == [] and table.next_deadline() == 11  # fetched, pending
    assert table.expire(now=11) == [b] and table.next_deadline() is None


def test_queue_depth_of_a_function_never_seen_or_drained_is_zero() -> None:
    table = RequestTable(timeout=10)
    assert table.queue_depth("never") == 0
    request = table.submit("f", "x", now=0)
    assert table.queue_depth("f") == 1 and not request.fetched
    assert table.fetch("f") is request and request.fetched
    assert table.queue_depth("f") == 0 and table.get(request.id) is request


def test_a_pending_request_is_handed_out_with_where_its_result_goes() -> None:
    table = RequestTable(timeout=10)
    pending = table.submit("f", "x", now=5)
    assert (pending.submitted, pending.deadline, pending.timeout) == (5, 15, 10)
    assert pending.as_request() == DRPCRequest("f", "x", ReturnInfo("1", LOCAL_ORIGIN), 15)
    assert pending.as_request("b:3773") == DRPCRequest("f", "x", ReturnInfo("1", "b:3773"), 15)
