"""DRPC requests: the request table and the invocations interface runtimes pull from.

``RequestTable`` is Storm's DRPC server bookkeeping as a pure state machine:
requests get decimal ids "1", "2", ...; each function has a FIFO queue; a
request is handed out at most once (``fetch`` removes it from its queue);
``complete``/``fail`` settle a request once and ignore unknown or settled ids
(counted as ``late_results``); ``expire(now)`` settles every request past its
deadline with SERVER_TIMEOUT "Timed Out" and removes it from its queue;
``shutdown`` settles everything with SERVER_SHUTDOWN. The caller owns threads,
locks, clocks and waiters (``PendingRequest.waiter`` is theirs to use).

``Invocations`` is what a topology's DRPC spout and ReturnResults talk to:
an in-process table (LocalDRPC, the embedded server) or a Thrift client of a
remote server's invocations port. ``ReturnInfo`` says which server issued a
request so the result goes back there.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from drpc.errors import DRPCExceptionType, DRPCExecutionException

DEFAULT_REQUEST_TIMEOUT = 600.0
LOCAL_ORIGIN = "local"


@dataclass(frozen=True, slots=True)
class ReturnInfo:
    """Where a request's result must go: its id at the server (``origin``) that issued it."""

    request_id: str
    origin: str = LOCAL_ORIGIN


@dataclass(frozen=True, slots=True)
class DRPCRequest:
    """A request handed to a runtime."""

    function: str
    args: str
    return_info: ReturnInfo
    deadline: float | None = None  # time.monotonic() of the issuing process, if known


class Invocations(Protocol):
    """Where a runtime gets requests and sends outcomes."""

    def fetch_request(self, function: str) -> DRPCRequest | None:
        """The next request for ``function``, or None at once if there is none."""
        ...

    def result(self, return_info: ReturnInfo, result: str) -> None: ...

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None: ...


class WakeupSource(Protocol):
    """Invocations that can call back when a request for a function arrives."""

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Register ``callback``; returns a function that unregisters it."""
        ...


SHUTDOWN_MESSAGE = "Server Shutting Down"
TIMEOUT_MESSAGE = "Timed Out"


@dataclass(slots=True, eq=False)
class PendingRequest:
    id: str
    function: str
    args: str
    submitted: float
    deadline: float
    timeout: float
    fetched: bool = False
    done: bool = False
    result: str | None = None
    error: DRPCExecutionException | None = None
    waiter: Any = field(default=None, repr=False)

    def as_request(self, origin: str = LOCAL_ORIGIN) -> DRPCRequest:
        return DRPCRequest(self.function, self.args, ReturnInfo(self.id, origin), self.deadline)


class RequestTable:
    """Outstanding DRPC requests, per-function queues and deadlines. Not thread-safe."""

    def __init__(self, *, timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        if timeout <= 0:
            raise ValueError(f"request timeout must be positive, got {timeout!r}")
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._requests: dict[str, PendingRequest] = {}
        self._queues: dict[str, OrderedDict[str, PendingRequest]] = {}
        # One FIFO per distinct timeout: deadlines within a FIFO are in submission order.
        self._by_timeout: dict[float, OrderedDict[str, PendingRequest]] = {}
        self.late_results = 0
        self.closed = False

    def __len__(self) -> int:
        return len(self._requests)

    def get(self, request_id: str) -> PendingRequest | None:
        return self._requests.get(request_id)

    def queue_depth(self, function: str) -> int:
        queue = self._queues.get(function)
        return len(queue) if queue else 0

    def queued_functions(self) -> list[str]:
        return [name for name, queue in self._queues.items() if queue]

    def submit(
        self, function: str, args: str, now: float, timeout: float | None = None
    ) -> PendingRequest:
        if self.closed:
            raise DRPCExecutionException(SHUTDOWN_MESSAGE, DRPCExceptionType.SERVER_SHUTDOWN)
        timeout = self.timeout if timeout is None else timeout
        if timeout <= 0:
            raise ValueError(f"request timeout must be positive, got {timeout!r}")
        request = PendingRequest(str(next(self._ids)), function, args, now, now + timeout, timeout)
        self._requests[request.id] = request
        self._queues.setdefault(function, OrderedDict())[request.id] = request
        self._by_timeout.setdefault(timeout, OrderedDict())[request.id] = request
        return request

    def fetch(self, function: str) -> PendingRequest | None:
        """Hand out the oldest queued request for ``function``, at most once."""
        queue = self._queues.get(function)
        if not queue:
            return None
        _, request = queue.popitem(last=False)
        request.fetched = True
        return request

    def complete(self, request_id: str, result: str) -> PendingRequest | None:
        request = self._settle(request_id)
        if request is not None:
            request.result = result
        return request

    def fail(self, request_id: str, error: DRPCExecutionException) -> PendingRequest | None:
        request = self._settle(request_id)
        if request is not None:
            request.error = error
        return request

    def time_out(self, request_id: str) -> PendingRequest | None:
        """Settle one request with SERVER_TIMEOUT (its waiter gave up at the deadline)."""
        return self.fail(
            request_id, DRPCExecutionException(TIMEOUT_MESSAGE, DRPCExceptionType.SERVER_TIMEOUT)
        )

    def next_deadline(self) -> float | None:
        heads = [next(iter(fifo.values())).deadline for fifo in self._by_timeout.values() if fifo]
        return min(heads) if heads else None

    def expire(self, now: float) -> list[PendingRequest]:
        expired: list[PendingRequest] = []
        for fifo in list(self._by_timeout.values()):
            while fifo:
                request = next(iter(fifo.values()))
                if request.deadline > now:
                    break
                self.time_out(request.id)
                expired.append(request)
        return expired

    def shutdown(self) -> list[PendingRequest]:
        """Refuse new requests and settle every outstanding one with SERVER_SHUTDOWN."""
        self.closed = True
        settled = []
        for request_id in list(self._requests):
            request = self.fail(
                request_id,
                DRPCExecutionException(SHUTDOWN_MESSAGE, DRPCExceptionType.SERVER_SHUTDOWN),
            )
            if request is not None:
                settled.append(request)
        return settled

    def _settle(self, request_id: str) -> PendingRequest | None:
        request = self._requests.pop(request_id, None)
        if request is None:
            self.late_results += 1
            return None
        request.done = True
        queue = self._queues.get(request.function)
        if queue is not None:
            queue.pop(request_id, None)
            if not queue:
                del self._queues[request.function]
        fifo = self._by_timeout.get(request.timeout)
        if fifo is not None:
            fifo.pop(request_id, None)
            if not fifo:
                del self._by_timeout[request.timeout]
        return request
