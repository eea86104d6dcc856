"""A private asyncio event loop on a thread of its own, for an asyncio client used from plain code.

Contract. ``LoopThread(name)`` starts a daemon thread running a new event
loop; ``run(coroutine, timeout)`` runs a coroutine on it from any other
thread and returns its result, or raises what it raised (``TimeoutError``
after ``timeout`` seconds, the coroutine cancelled); ``close()`` cancels
what still runs, stops the loop and joins the thread (idempotent). Nothing
of the caller's own event loop, if it has one, is touched: a spout's emitter
owns its loop, so its client's connections live and die with the emitter,
in whichever process (driver or Spark executor) made it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = False
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None) -> T:
        if self._closed:
            coroutine.close()
            raise RuntimeError("this event loop thread is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g} s") from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        # a task that ignores cancellation: the loop stops under it anyway
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(5.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()
