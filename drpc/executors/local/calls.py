"""``Call``: the outcome of one call, for the thread that waits for it.

Contract. ``Call()`` is set once, from any thread, with ``set_result(value)`` or
``set_exception(error)`` (a second setting raises ``InvalidStateError``); ``done()`` tells
whether it is; ``wait()`` blocks until it is, and ``result()`` then returns the value or
raises the exception; ``add_done_callback(fn)`` calls ``fn(call)`` once it is set (at once
when it already is, else on the setting thread, in the order added).

It is the part of ``concurrent.futures.Future`` a waiting caller uses
(``LocalDRPC.execute`` through ``LocalExecutor.call_inline``), compiled and on two plain
locks: a Future's Condition is Python code, and making, setting and reading one cost about
a fiftieth of a whole reach call on the engine. No cancellation, no timeouts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import InvalidStateError
from typing import Any


class Call:
    """One call's outcome (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unset = threading.Lock()  # held until the outcome is set
        self._unset.acquire()
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Call], object]] = []

    def set_result(self, value: Any) -> None:
        self._set(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._set(None, error)

    def _set(self, value: Any, error: BaseException | None) -> None:
        lock = self._lock
        lock.acquire()
        try:
            if self._done:
                raise InvalidStateError("the call's outcome is set already")
            self._value = value
            self._error = error
            self._done = True
            callbacks = self._callbacks
            self._callbacks = []
        finally:
            lock.release()
        self._unset.release()
        for callback in callbacks:
            callback(self)

    def done(self) -> bool:
        return self._done

    def add_done_callback(self, callback: Callable[[Call], object]) -> None:
        lock = self._lock
        lock.acquire()
        try:
            if not self._done:
                self._callbacks.append(callback)
                return
        finally:
            lock.release()
        callback(self)

    def wait(self) -> None:
        """Block until the outcome is set."""
        if not self._done:
            unset = self._unset
            unset.acquire()
            unset.release()  # for any other waiter

    def result(self) -> Any:
        """The value, once set (``wait``); raises the exception if that is the outcome."""
        self.wait()
        error = self._error
        if error is not None:
            raise error
        return self._value
