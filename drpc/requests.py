"""DRPC requests: the request table and the invocations interface runtimes pull from.

``RequestTable`` is Storm's DRPC server bookkeeping as a pure state machine:
requests get decimal ids "1", "2", ...; each function has a FIFO queue; a
request is handed out at most once (``fetch`` removes it from its queue);
``complete``/``fail`` settle a request once and ignore unknown or settled ids
(counted as ``late_results``); ``withdraw`` settles a request nobody fetched
yet (its caller went away) and leaves a fetched one to its runtime;
``expire(now)`` settles every request past its deadline with SERVER_TIMEOUT
"Timed Out" and removes it from its queue; ``shutdown`` settles everything
with SERVER_SHUTDOWN. A request may name its ``caller`` (whoever submitted
it, as the issuer identifies callers); ``held_by(caller)`` counts the
requests a caller holds. The caller owns threads, locks, clocks and waiters
(``PendingRequest.waiter`` is theirs to use).

``Invocations`` is what a topology's DRPC spout and ReturnResults talk to:
an in-process table (LocalDRPC, the embedded server) or a Thrift client of a
remote server's invocations port. ``ReturnInfo`` says which server issued a
request so the result goes back there.

Tracing. A request submitted with a ``RequestTrace`` collects its spans:
the issuer stamps ``submitted``, ``fetched`` (and whether a remote runner
fetched it) and ``settled`` (its result or failure reached the issuer, the
end of the request's total time), and ``TraceCollector``, an observer
(``drpc.observe``) in the runtimes' services, adds each ``step_finished``
span reported for a watched request id of its origin, and the versions of
state it reads (``state_pinned``: ``reads``, with the txids committed there). ``timeline()`` lays
them out as contiguous entries whose ``ms`` sum to ``total`` (settled minus
submitted):

- ``queue``: submitted until a runtime fetched it (until settled, if never);
- each step in the order it finished the request, with ``ms`` = its end minus
  the previous entry's end: the time this step added to the request (its own
  wait, e.g. Spark scheduling or a mailbox, counts as its time); ``start_ms``
  and ``end_ms`` are its measured span from the submission, unclamped (steps
  overlap on the streaming engine: ``start_ms`` may precede the previous
  entry's end), and the step's ``attrs`` are copied in (``busy_ms``,
  ``spark_job_id``, ...);
- ``runner`` instead of steps for a request a remote runner fetched (its
  spans stay in the runner's process: Storm's ``result`` call has no room
  for them): fetched until settled;
- ``return``: the last span's end until settled: what no step accounts for.

For ``ms`` a span is clamped to [fetched, settled]; a trace whose steps
cover the request leaves a small ``return``.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from drpc.errors import DRPCExceptionType, DRPCExecutionException
from drpc.observe import Observer
from drpc.state import CoordinatorState, StateEnvironment

DEFAULT_REQUEST_TIMEOUT = 600.0
LOCAL_ORIGIN = "local"


@dataclass(frozen=True, slots=True)
class ReturnInfo:
    """Where a request's result must go: its id at the server (``origin``) that issued it."""

    request_id: str
    origin: str = LOCAL_ORIGIN

    def __reduce__(self) -> tuple[type[ReturnInfo], tuple[str, str]]:
        # Pickled with every tuple carrying it, several per call: a slots dataclass's own
        # way goes through dataclasses.fields() each time.
        return (ReturnInfo, (self.request_id, self.origin))


@dataclass(frozen=True, slots=True)
class DRPCRequest:
    """A request handed to a runtime."""

    function: str
    args: str
    return_info: ReturnInfo
    deadline: float | None = None  # time.monotonic() of the issuing process, if known
    traced: bool = False  # the caller asked for its trace (``?trace=1``)


class Invocations(Protocol):
    """Where a runtime gets requests and sends outcomes."""

    def fetch_request(self, function: str) -> DRPCRequest | None:
        """The next request for ``function``, or None at once if there is none."""
        ...

    def result(self, return_info: ReturnInfo, result: str) -> None: ...

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None: ...


class InvocationsBlueprint(Protocol):
    """What an invocations handle was built from, picklable: another process (a resident
    Spark task) builds its own handle from it, fetching ``functions``."""

    def build(self, functions: Sequence[str]) -> Invocations: ...


@runtime_checkable
class ShippableInvocations(Protocol):
    """An invocations handle other processes can rebuild (a remote runner's): they fetch a
    function themselves once this one hands it off."""

    settings: InvocationsBlueprint

    def hand_off(self, function: str) -> None:
        """Fetch ``function`` no more here: handles built from ``settings`` fetch it."""
        ...


class WakeupSource(Protocol):
    """Invocations that can call back when a request for a function arrives."""

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Register ``callback``; returns a function that unregisters it."""
        ...

    def has_requests(self, function: str) -> bool:
        """Whether a request for ``function`` waits to be fetched (a hint: one may arrive,
        calling the listeners, or be fetched elsewhere, at once)."""
        ...


SHUTDOWN_MESSAGE = "Server Shutting Down"
TIMEOUT_MESSAGE = "Timed Out"


@dataclass(frozen=True, slots=True)
class Span:
    """One step's work on a request: ``time.monotonic()`` of the issuing server."""

    step: str
    start: float
    end: float
    attrs: dict[str, Any]


class RequestTrace:
    """The spans of one traced request. Spans may be added from any thread."""

    __slots__ = (
        "failed_in",
        "fetched",
        "function",
        "reads",
        "remote",
        "request_id",
        "settled",
        "spans",
        "submitted",
    )

    def __init__(self, function: str = "") -> None:
        self.function = function
        self.request_id: str | None = None
        self.submitted: float | None = None
        self.fetched: float | None = None
        self.remote = False
        self.settled: float | None = None
        self.spans: list[Span] = []
        self.failed_in: tuple[str, str] | None = None
        self.reads: list[dict[str, Any]] = []

    def add(self, step: str, start: float, end: float, attrs: dict[str, Any]) -> None:
        self.spans.append(Span(step, start, end, attrs))  # list.append is atomic

    @property
    def total(self) -> float:
        """Seconds from submission to the outcome (0 before both are stamped)."""
        if self.submitted is None or self.settled is None:
            return 0.0
        return max(0.0, self.settled - self.submitted)

    def timeline(self) -> list[dict[str, Any]]:
        """Contiguous entries (see the module docstring) whose ``ms`` sum to the total."""
        if self.submitted is None:
            return []
        origin = self.submitted
        settled = max(origin, self.settled if self.settled is not None else origin)
        fetched = settled if self.fetched is None else min(max(self.fetched, origin), settled)
        entries: list[dict[str, Any]] = [{"step": "queue", "ms": _ms(fetched - origin)}]
        cursor = fetched
        if self.remote:
            entries.append({"step": "runner", "ms": _ms(settled - cursor)})
            cursor = settled
        else:
            for span in sorted(self.spans, key=lambda s: (s.end, s.start)):
                end = min(max(span.end, cursor), settled)
                entry: dict[str, Any] = {
                    "step": span.step,
                    "ms": _ms(end - cursor),
                    "start_ms": _ms(span.start - origin),
                    "end_ms": _ms(span.end - origin),
                }
                for key, value in span.attrs.items():
                    entry.setdefault(key, value)
                entries.append(entry)
                cursor = end
        entries.append({"step": "return", "ms": _ms(settled - cursor)})
        return entries

    def as_json(self) -> dict[str, Any]:
        """``{"request_id", "function", "total_ms", "trace": [...]}`` (+ ``reads``,
        ``failed_in``)."""
        answer: dict[str, Any] = {
            "request_id": self.request_id,
            "function": self.function,
            "total_ms": _ms(self.total),
            "trace": self.timeline(),
        }
        if self.reads:
            answer["reads"] = self.reads
        if self.failed_in is not None:
            answer["failed_in"] = {"step": self.failed_in[0], "reason": self.failed_in[1]}
        return answer


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class TraceCollector(Observer):
    """Adds the spans runtimes report to the traces of watched requests of one origin."""

    def __init__(self, origin: str = LOCAL_ORIGIN) -> None:
        self.origin = origin
        self._traces: dict[str, RequestTrace] = {}

    def watch(self, request_id: str, trace: RequestTrace) -> None:
        self._traces[request_id] = trace

    def unwatch(self, request_id: str) -> None:
        self._traces.pop(request_id, None)

    @property
    def watching(self) -> int:
        """How many requests are watched now."""
        return len(self._traces)

    def _trace(self, return_info: Any) -> RequestTrace | None:
        if not self._traces or getattr(return_info, "origin", None) != self.origin:
            return None
        return self._traces.get(return_info.request_id)

    def step_finished(
        self, return_info: Any, step: str, start: float, end: float, attrs: dict[str, Any]
    ) -> None:
        trace = self._trace(return_info)
        if trace is not None:
            trace.add(step, start, end, attrs)

    def request_failed_in(self, return_info: Any, step: str, reason: str) -> None:
        trace = self._trace(return_info)
        if trace is not None and trace.failed_in is None:
            trace.failed_in = (step, reason)

    def state_pinned(self, return_info: Any, reads: tuple[tuple[str, int], ...]) -> None:
        trace = self._trace(return_info)
        if trace is not None:
            trace.reads = [described_read(path, version) for path, version in reads]


def described_read(path: str, version: int) -> dict[str, Any]:
    """What a trace says of a read of state directory ``path`` at ``version``: the
    directory, the version, and the txid each transactional topology had committed
    there (none when the directory is not open in this process)."""
    env = StateEnvironment.opened(path)
    txids: dict[str, int] = {}
    if env is not None:
        with env.read(version=version) as txn:
            commits = CoordinatorState.topologies(env, txn=txn)
        txids = {topology: record.txid for topology, record in sorted(commits.items())}
    return {"state_dir": path, "version": version, "txids": txids}


@dataclass(slots=True, eq=False)
class PendingRequest:
    id: str
    function: str
    args: str
    submitted: float
    deadline: float
    timeout: float
    caller: str | None = None
    fetched: bool = False
    done: bool = False
    result: str | None = None
    error: DRPCExecutionException | None = None
    waiter: Any = field(default=None, repr=False)
    trace: RequestTrace | None = field(default=None, repr=False)

    def as_request(self, origin: str = LOCAL_ORIGIN) -> DRPCRequest:
        return DRPCRequest(
            self.function,
            self.args,
            ReturnInfo(self.id, origin),
            self.deadline,
            self.trace is not None,
        )


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
        self._held: dict[str, int] = {}
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

    def queued_ids(self, function: str) -> list[str]:
        """The ids of ``function``'s requests no runtime fetched yet, oldest first."""
        queue = self._queues.get(function)
        return list(queue) if queue else []

    def held_by(self, caller: str) -> int:
        """Requests ``caller`` submitted that are not settled yet."""
        return self._held.get(caller, 0)

    def submit(
        self,
        function: str,
        args: str,
        now: float,
        timeout: float | None = None,
        caller: str | None = None,
    ) -> PendingRequest:
        if self.closed:
            raise DRPCExecutionException(SHUTDOWN_MESSAGE, DRPCExceptionType.SERVER_SHUTDOWN)
        timeout = self.timeout if timeout is None else timeout
        if timeout <= 0:
            raise ValueError(f"request timeout must be positive, got {timeout!r}")
        request = PendingRequest(
            str(next(self._ids)), function, args, now, now + timeout, timeout, caller
        )
        if caller is not None:
            self._held[caller] = self._held.get(caller, 0) + 1
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

    def withdraw(self, request_id: str, error: DRPCExecutionException) -> PendingRequest | None:
        """Settle a request with ``error`` if no runtime fetched it yet (it leaves its
        queue); a fetched one stays until its runtime answers or its deadline, and None
        is returned for it as for an unknown or settled id."""
        request = self._requests.get(request_id)
        if request is None or request.fetched:
            return None
        return self.fail(request_id, error)

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
        if request.caller is not None:
            held = self._held[request.caller] - 1
            if held:
                self._held[request.caller] = held
            else:
                del self._held[request.caller]
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
