"""The DRPC server's core: request bookkeeping shared by every front end and runtime.

Contract. ``DRPCService`` wraps ``drpc.requests.RequestTable`` (ids "1", "2", …,
a FIFO queue per function, at-most-once handout) for an asyncio server whose
runtimes may live in other threads:

- ``await execute(function, args)`` waits on an asyncio future, never a
  thread, so any number of calls can wait at once; it returns the result or
  raises ``DRPCExecutionException``;
- ``fetch``/``complete``/``fail`` are safe from any thread; outcomes reach the
  waiting call on the event loop (``call_soon_threadsafe`` from other threads);
- one timer on the loop fails requests past their deadline with
  SERVER_TIMEOUT "Timed Out" and removes them from their queue;
- ``shutdown`` fails everything outstanding with SERVER_SHUTDOWN and refuses
  new calls;
- a result or failure for an unknown or settled id is ignored and counted
  (``late_results``);
- a function is *served* while a topology is registered for it in-process or
  a remote runner fetched it within ``runner_liveness`` seconds; a call to a
  function that is not served fails at once with FAILED_REQUEST naming the
  served functions, unless ``wait_for_unserved`` (Storm's behaviour: queue it
  and let it time out);
- every operation from the network passes ``authorize(identity, operation,
  function)`` first; the default allows everything (access control plugs in
  here).

``EmbeddedInvocations`` is the ``Invocations`` handle in-process runtimes pull
from: the same table and the same at-most-once contract remote runners get.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol

from drpc.errors import DRPCExceptionType, DRPCExecutionException
from drpc.hosting import Wakeups
from drpc.requests import (
    DEFAULT_REQUEST_TIMEOUT,
    LOCAL_ORIGIN,
    DRPCRequest,
    PendingRequest,
    RequestTable,
    ReturnInfo,
)

log = logging.getLogger(__name__)

DEFAULT_RUNNER_LIVENESS = 30.0
"""Seconds a remote runner's last ``fetchRequest`` keeps its function served."""

EXECUTE = "execute"
FETCH_REQUEST = "fetchRequest"
RESULT = "result"
FAIL_REQUEST = "failRequest"


class Authorizer(Protocol):
    """Decides whether ``identity`` (None when unauthenticated) may do ``operation`` on
    ``function``; raises ``AuthorizationException`` to refuse."""

    def __call__(self, identity: str | None, operation: str, function: str) -> None: ...


class DRPCService:
    """Thread-safe request bookkeeping bound to one asyncio event loop."""

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        runner_liveness: float = DEFAULT_RUNNER_LIVENESS,
        wait_for_unserved: bool = False,
        authorizer: Authorizer | None = None,
    ) -> None:
        if runner_liveness < 0:
            raise ValueError(f"runner_liveness must be >= 0, got {runner_liveness!r}")
        self._table = RequestTable(timeout=timeout)
        self.runner_liveness = runner_liveness
        self.wait_for_unserved = wait_for_unserved
        self._authorizer = authorizer
        self._lock = threading.Lock()
        self._embedded: set[str] = set()
        self._remote_fetches: dict[str, float] = {}
        self._wakeups = Wakeups()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_deadline = math.inf

    @property
    def timeout(self) -> float:
        return self._table.timeout

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the running loop that awaits results. Call from that loop's thread."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    # -- serving ------------------------------------------------------------------------

    def register_embedded(self, function: str) -> None:
        with self._lock:
            self._embedded.add(function)

    def unregister_embedded(self, function: str) -> None:
        with self._lock:
            self._embedded.discard(function)

    def served_functions(self) -> list[str]:
        with self._lock:
            return self._served(time.monotonic())

    def _served(self, now: float) -> list[str]:
        remote = {
            name
            for name, fetched in self._remote_fetches.items()
            if now - fetched <= self.runner_liveness
        }
        return sorted(self._embedded | remote)

    def _is_served(self, function: str, now: float) -> bool:
        if function in self._embedded:
            return True
        fetched = self._remote_fetches.get(function)
        return fetched is not None and now - fetched <= self.runner_liveness

    def authorize(self, identity: str | None, operation: str, function: str) -> None:
        if self._authorizer is not None:
            self._authorizer(identity, operation, function)

    # -- callers (event loop) -------------------------------------------------------------

    async def execute(self, function: str, args: str) -> str:
        """Queue a request and wait for its outcome. Call on the attached loop."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self.attach(loop)
        waiter: asyncio.Future[str] = loop.create_future()
        now = time.monotonic()
        with self._lock:
            refuse = not (self.wait_for_unserved or self._table.closed)
            if refuse and not self._is_served(function, now):
                served = ", ".join(self._served(now)) or "none"
                raise DRPCExecutionException(
                    f"function {function!r} is not served: no topology is registered "
                    f"for it and no runner fetched it in the last {self.runner_liveness:g} s;"
                    f" served functions: {served}",
                    DRPCExceptionType.FAILED_REQUEST,
                )
            request = self._table.submit(function, args, now)
            request.waiter = waiter
        self._arm_expiry(request.deadline)
        self._wakeups.notify(function)
        return await waiter

    # -- runtimes and runners (any thread) ------------------------------------------------

    def fetch(self, function: str, origin: str, *, remote: bool) -> DRPCRequest | None:
        """Hand out the oldest queued request for ``function`` (at most once), or None."""
        with self._lock:
            if remote:
                self._remote_fetches[function] = time.monotonic()
            request = self._table.fetch(function)
        return None if request is None else request.as_request(origin)

    def function_of(self, request_id: str) -> str | None:
        with self._lock:
            request = self._table.get(request_id)
            return None if request is None else request.function

    def complete(self, request_id: str, result: str) -> bool:
        """Settle a request with its result; False if the id is unknown or already settled."""
        with self._lock:
            request = self._table.complete(request_id, result)
        if request is None:
            log.debug("ignored a late result for request %s", request_id)
            return False
        self._settle([request])
        return True

    def fail(self, request_id: str, error: DRPCExecutionException) -> bool:
        with self._lock:
            request = self._table.fail(request_id, error)
        if request is None:
            log.debug("ignored a late failure for request %s", request_id)
            return False
        self._settle([request])
        return True

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        return self._wakeups.add(function, callback)

    # -- deadlines and shutdown -------------------------------------------------------------

    def _arm_expiry(self, deadline: float) -> None:
        if deadline >= self._expiry_deadline:
            return
        assert self._loop is not None
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry_deadline = deadline
        self._expiry = self._loop.call_later(
            max(0.0, deadline - time.monotonic()), self._expire_due
        )

    def _expire_due(self) -> None:
        self._expiry = None
        self._expiry_deadline = math.inf
        with self._lock:
            expired = self._table.expire(time.monotonic())
            next_deadline = self._table.next_deadline()
        if expired:
            log.info("%d request(s) timed out", len(expired))
        self._settle(expired)
        if next_deadline is not None:
            self._arm_expiry(next_deadline)

    def shutdown(self) -> int:
        """Fail every outstanding request with SERVER_SHUTDOWN; returns how many."""
        with self._lock:
            settled = self._table.shutdown()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
            self._expiry_deadline = math.inf
        self._settle(settled)
        return len(settled)

    @property
    def closed(self) -> bool:
        return self._table.closed

    # -- statistics ---------------------------------------------------------------------------

    @property
    def late_results(self) -> int:
        with self._lock:
            return self._table.late_results

    def outstanding(self) -> int:
        with self._lock:
            return len(self._table)

    def queue_depth(self, function: str) -> int:
        with self._lock:
            return self._table.queue_depth(function)

    # -- handing outcomes to waiters ------------------------------------------------------------

    def _settle(self, requests: list[PendingRequest]) -> None:
        if not requests:
            return
        if threading.get_ident() == self._loop_thread:
            for request in requests:
                _resolve(request)
            return
        loop = self._loop
        if loop is None:
            return  # nobody can be waiting: only execute() creates waiters, on the loop
        try:
            for request in requests:
                loop.call_soon_threadsafe(_resolve, request)
        except RuntimeError:
            log.debug("event loop closed; dropped %d outcome(s)", len(requests))


def _resolve(request: PendingRequest) -> None:
    waiter = request.waiter
    if waiter is None or waiter.done():
        return  # the caller went away (connection closed) before the outcome
    if request.error is not None:
        waiter.set_exception(request.error)
    else:
        waiter.set_result(request.result)


class EmbeddedInvocations:
    """The invocations handle of a runtime hosted in the server's process."""

    def __init__(self, service: DRPCService) -> None:
        self._service = service

    def fetch_request(self, function: str) -> DRPCRequest | None:
        return self._service.fetch(function, LOCAL_ORIGIN, remote=False)

    def result(self, return_info: ReturnInfo, result: str) -> None:
        self._service.complete(return_info.request_id, result)

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        self._service.fail(return_info.request_id, error)

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        return self._service.add_listener(function, callback)
