"""Run a ``DRPCServer`` on its own event loop in a background thread.

Contract: ``with ServerThread(DRPCServer(...)) as server:`` starts the server
on a new loop in a daemon thread and returns once it listens (ports bound,
readable on ``server``), re-raising any error from ``start()``; leaving the
block (or ``stop()``) stops the server and joins the thread; ``run(coroutine)``
runs a coroutine on the server's loop and returns a ``concurrent.futures``
future of its outcome. For synchronous programs, notebooks and tests that
call the server with blocking clients.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from drpc.server.app import DRPCServer

T = TypeVar("T")


class ServerThread:
    def __init__(self, server: DRPCServer, *, start_timeout: float = 30.0) -> None:
        self.server = server
        self.start_timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> DRPCServer:
        started: Future[None] = Future()
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._main(started),), name="drpc-server", daemon=True
        )
        self._thread.start()
        started.result(self.start_timeout)
        return self.server

    async def _main(self, started: Future[None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        try:
            await self.server.start()
        except BaseException as error:
            await self.server.stop()  # runtimes registered before start() stop too
            started.set_exception(error)
            return
        started.set_result(None)
        try:
            await self._stopped.wait()
        finally:
            await self.server.stop()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``coroutine`` on the running server's event loop."""
        if self._loop is None or self._thread is None:
            coroutine.close()
            raise RuntimeError("the server thread is not running")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stopped is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join()
        self._thread = None

    def __enter__(self) -> DRPCServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
