"""``Mutex``: a lock the compiled engine takes for a third of ``threading.Lock``'s cost.

Contract. ``acquire()`` blocks until the mutex is free and takes it; ``release()`` frees
it (from any thread, as ``threading.Lock`` allows); ``with mutex:`` does both. It is not
reentrant: a thread that takes it twice without releasing it waits forever.

Why. ``threading.Lock.acquire`` parses its optional arguments with the generic
``PyArg_ParseTupleAndKeywords`` at every call, which costs several times the locking
itself, and the engine takes its scheduler's lock twice per turn. The mutex is a
``queue.SimpleQueue`` holding one token: taking it is ``get_nowait`` (no arguments to
parse), and only when another thread holds it a blocking ``get``, which waits with the
GIL released; ``put`` gives it back and wakes one waiter. They are C methods called
through bound methods made once, so an uncontended acquire and release are a list pop
and a list append.
"""

from __future__ import annotations

from collections.abc import Callable
from queue import Empty, SimpleQueue
from types import TracebackType
from typing import Any, Final

_TOKEN: Final = True


class Mutex:
    """A lock (see the module doc)."""

    __slots__ = ("_get", "_put", "_take")

    def __init__(self) -> None:
        tokens: SimpleQueue[bool] = SimpleQueue()
        tokens.put(_TOKEN)
        self._take: Callable[[], Any] = tokens.get_nowait
        self._get: Callable[[], Any] = tokens.get
        self._put: Callable[[bool], None] = tokens.put

    def acquire(self) -> None:
        try:
            self._take()
        except Empty:  # held by another thread: wait for it
            self._get()

    def release(self) -> None:
        self._put(_TOKEN)

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._put(_TOKEN)
