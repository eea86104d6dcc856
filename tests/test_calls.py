"""``Call``, the outcome a caller's thread waits for: set once, waited for, called back."""

from __future__ import annotations

import threading
from concurrent.futures import InvalidStateError

import pytest

from drpc.errors import DRPCExceptionType, DRPCExecutionException
from drpc.executors.local.calls import Call


def test_a_result_set_from_another_thread_releases_every_waiter() -> None:
    call = Call()
    results: list[str] = []
    waiters = [threading.Thread(target=lambda: results.append(call.result())) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    assert not call.done()
    call.set_result("16")
    for waiter in waiters:
        waiter.join(timeout=10)
    assert call.done() and results == ["16", "16", "16"]


def test_an_exception_set_is_raised_by_result_after_wait_returns() -> None:
    call = Call()
    error = DRPCExecutionException("Timed Out", DRPCExceptionType.SERVER_TIMEOUT)
    call.set_exception(error)
    call.wait()
    with pytest.raises(DRPCExecutionException) as raised:
        call.result()
    assert raised.value is error


@pytest.mark.parametrize("second", ["result", "exception"])
def test_an_outcome_is_set_once(second: str) -> None:
    call = Call()
    call.set_result("first")
    with pytest.raises(InvalidStateError, match="set already"):
        if second == "result":
            call.set_result("second")
        else:
            call.set_exception(ValueError("late"))
    assert call.result() == "first"


def test_callbacks_run_once_in_order_on_the_setting_thread_or_at_once_when_done() -> None:
    call = Call()
    seen: list[tuple[str, bool, int]] = []
    call.add_done_callback(lambda done: seen.append(("first", done.done(), threading.get_ident())))
    call.add_done_callback(lambda done: seen.append(("second", done.done(), threading.get_ident())))
    assert seen == []
    setter = threading.Thread(target=call.set_result, args=("x",))
    setter.start()
    setter.join(timeout=10)
    assert [(name, done) for name, done, _ in seen] == [("first", True), ("second", True)]
    assert {thread for _, _, thread in seen} == {setter.ident}
    call.add_done_callback(lambda done: seen.append(("late", done.done(), threading.get_ident())))
    assert seen[-1] == ("late", True, threading.get_ident())
    assert len(seen) == 3
