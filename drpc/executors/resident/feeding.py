"""Requests from a request table in the driver's process, fed to the resident tasks.

Contract. A DRPC function hosted where its request table lives (the embedded server,
``LocalDRPC``) serves on the tasks path too: each resident task runs a whole copy of the
topology, its DRPC spout, scaffolding and ackers included, and the driver only moves
requests and outcomes over the resident link it already has to every task
(``drpc.executors.resident.transport``: batched frames, one connection per task). No
tuple crosses between processes, and no invocations port is involved, so neither
ACLs nor TLS stand in the way.

- ``RequestFeeder(invocations, function, send, observer, window=..., sample_rate=...)``
  runs on the driver, over a handle that wakes it (``add_listener``: the server's
  table, ``LocalDRPC``). ``start(workers)`` registers for the table's wakeups; on the
  thread of each wakeup, and of each answer that gives a full task room, it takes
  requests (``fetch_request``) while some task has fewer than ``window`` in flight and
  sends each, as a ``FedRequest``, to the task with the fewest in flight (ties: the
  lowest index), several to one task in one item. A request goes marked
  ``observed`` when its caller asked for its trace, and for one in ``1 / sample_rate``
  of the others (``topology.stats.sample.rate``, Storm's stats sampling, default 0.05):
  the task measures and reports the steps of those only, since every reported event
  crosses to the driver. ``settle(outcomes)`` takes what the tasks send back: a
  ``StepStarted`` is reported to ``observer`` at once (a step shows as started while it
  works); a ``FedOutcome`` first has the events the task's engine observed for the
  request replayed into ``observer`` (``ObservedEvent``: step spans, the step a failure
  was in, the versions it read), on this process's clock, then its result or typed
  failure handed to the invocations handle, so a trace is whole when the caller sees it.
  Either for a request not in flight here (failed already) is dropped. An observer that
  raises is logged, never in the way of an outcome (``drpc.observe.bus``).
  ``fail_pending(failure)`` fails every request in flight (the resident job broke or the
  function is undeployed) and returns how many; ``lose(worker, failure)`` fails those
  in flight on one task (lost while the others serve on) and feeds it no more, until
  ``join(worker)``; ``stop()`` stops feeding, and the table
  keeps what was not taken (it waits for a restarted job); ``feeding`` says whether it
  feeds, ``in_flight`` how many requests are out.
- ``FedBlueprint(key)`` travels in the ``Deploy`` message in place of a remote
  runner's settings; on a task, ``build(functions)`` gives the ``FedInvocations`` its
  copy of the topology pulls from: ``arrived(requests)`` buffers what the driver sent
  and wakes the spout, ``result``/``fail_request`` send a ``FedOutcome`` to the driver
  with the request's observed events (``observer``, the engine's observer when the
  deployment is observed: it wants the steps of the requests that came ``observed``,
  sends each ``StepStarted`` as it comes, and keeps every request's failure), all over
  the one connection, so nothing about a request arrives after its outcome. A
  request's deadline travels as the seconds it had left, so it holds on a host whose
  clock differs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from drpc.errors import DRPCExceptionType, DRPCExecutionException, Failure
from drpc.executors.resident.worker import current_worker
from drpc.observe import Observer, bus
from drpc.requests import DRPCRequest, Invocations, ReturnInfo, WakeupSource

log = logging.getLogger(__name__)

DEFAULT_FEED_WINDOW = 128
"""Requests in flight on one resident task at most (sent, not yet answered)."""

KNOWN_REQUESTS = 16384
"""Requests whose observed events a task keeps at most while they are in flight."""


def _as_fields(record: Any) -> tuple[Any, ...]:
    """A record of this wire pickled as its class and its fields in order (``__reduce__``):
    a slotted dataclass's own state takes half as long again, and the fields come from
    the class, so a field added later travels too."""
    return (type(record), tuple(map(record.__getattribute__, record.__match_args__)))


@dataclass(frozen=True, slots=True)
class FedRequest:
    """A request as the driver sends it to a task."""

    request_id: str
    origin: str
    args: str
    seconds_left: float | None
    observed: bool = False

    __reduce__ = _as_fields


@dataclass(frozen=True, slots=True)
class ObservedEvent:
    """One observer event about a request (``drpc.observe``), its times wall-clock:
    ``method`` is the ``Observer`` method, ``args`` what follows the return info."""

    method: str
    args: tuple[Any, ...]

    __reduce__ = _as_fields


@dataclass(frozen=True, slots=True)
class FedOutcome:
    """A request's result (``error_type`` None) or failure, and what was observed of it."""

    request_id: str
    result: str | None
    error_type: int | None
    message: str
    events: tuple[ObservedEvent, ...] = ()

    __reduce__ = _as_fields


@dataclass(frozen=True, slots=True)
class StepStarted:
    """A step began work on a request (wall-clock ``at``), sent as it happens."""

    request_id: str
    step: str
    at: float

    __reduce__ = _as_fields


Send = Callable[[int, list[Any]], bool]
"""``send(worker, requests)``: hand a task its requests; False when it is not connected."""


class FedTable(Invocations, WakeupSource, Protocol):
    """A request table in this process that wakes its feeder (the server's, ``LocalDRPC``)."""


class RequestFeeder:
    """The driver's half: requests from the table to the tasks, outcomes back."""

    def __init__(
        self,
        invocations: FedTable,
        function: str,
        send: Send,
        observer: Observer,
        *,
        window: int = DEFAULT_FEED_WINDOW,
        sample_rate: float = 1.0,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        if not 0 <= sample_rate <= 1:
            raise ValueError(f"sample_rate must be from 0 to 1, got {sample_rate!r}")
        # One request in ``_period`` is observed (0: none but the traced ones).
        self._period = 0 if sample_rate == 0 else max(1, round(1 / sample_rate))
        self._sampled = 0
        self.invocations = invocations
        self.function = function
        self.window = window
        self._send = send
        self._observer = bus(observer)
        self._lock = threading.Lock()
        # Reentrant: a send that loses its connection breaks the cluster, which stops this.
        self._feed_lock = threading.RLock()
        self._workers: list[int] = []
        self._in_flight: dict[int, int] = {}
        self._pending: dict[str, tuple[int, ReturnInfo]] = {}
        self._feeding = False
        self._unsubscribe: Callable[[], None] | None = None

    def start(self, workers: Sequence[int]) -> None:
        with self._lock:
            self._workers = list(workers)
            self._in_flight = dict.fromkeys(self._workers, 0)
            self._feeding = True
        if self._unsubscribe is None:
            self._unsubscribe = self.invocations.add_listener(self.function, self._feed)
        self._feed()  # what waited in the table meanwhile

    def _feed(self) -> None:
        """Send what fits from the table, on the thread that made room or brought a
        request (no hand-off to a thread of the feeder's own: a lone call waits for none);
        one feed at a time, and ``stop()`` waits for the one in progress."""
        with self._feed_lock:
            self._feed_what_fits()

    def _feed_what_fits(self) -> None:
        batches: dict[int, list[FedRequest]] = {}
        while True:
            with self._lock:
                if not self._feeding or not self._workers:
                    break
                worker = min(self._workers, key=lambda w: (self._in_flight[w], w))
                if self._in_flight[worker] >= self.window:
                    break  # the next answer makes room, and feeds what waits
                self._in_flight[worker] += 1  # reserved: the table's lock is taken unheld
            request = self.invocations.fetch_request(self.function)
            with self._lock:
                if request is None:
                    self._in_flight[worker] -= 1
                    break
                self._pending[request.return_info.request_id] = (worker, request.return_info)
            batches.setdefault(worker, []).append(_fed(request, self._sample()))
        for worker, requests in batches.items():
            if not self._send(worker, requests):
                # The task is gone: the cluster breaks and fails what is in flight.
                log.warning(
                    "could not hand %d request(s) for %r to resident task %d: not connected",
                    len(requests),
                    self.function,
                    worker,
                )

    def settle(self, outcomes: list[FedOutcome | StepStarted]) -> None:
        offset = time.monotonic() - time.time()
        for outcome in outcomes:
            if isinstance(outcome, StepStarted):
                with self._lock:
                    found = self._pending.get(outcome.request_id)
                if found is not None:
                    self._observer.step_started(found[1], outcome.step, outcome.at + offset)
                continue
            with self._lock:
                found = self._pending.pop(outcome.request_id, None)
                if found is None:
                    continue
                worker, return_info = found
                self._in_flight[worker] = self._in_flight.get(worker, 1) - 1
                freed = self._in_flight[worker] == self.window - 1
            _replay(self._observer, return_info, outcome.events, offset)
            if outcome.error_type is None:
                assert outcome.result is not None
                self.invocations.result(return_info, outcome.result)
            else:
                self.invocations.fail_request(
                    return_info,
                    DRPCExecutionException(outcome.message, DRPCExceptionType(outcome.error_type)),
                )
            if freed:  # the task was full: requests may wait in the table for its room
                self._feed()

    def fail_pending(self, failure: Failure) -> int:
        with self._lock:
            pending, self._pending = self._pending, {}
            self._in_flight = dict.fromkeys(self._workers, 0)
        error = failure.to_exception()
        for _, return_info in pending.values():
            self.invocations.fail_request(return_info, error)
        return len(pending)

    def lose(self, worker: int, failure: Failure) -> int:
        """Fail the requests in flight on ``worker`` and feed it no more; returns how many."""
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
            self._in_flight.pop(worker, None)
            ids = [rid for rid, (on, _) in self._pending.items() if on == worker]
            lost = [self._pending.pop(rid)[1] for rid in ids]
        error = failure.to_exception()
        for return_info in lost:
            self.invocations.fail_request(return_info, error)
        return len(lost)

    def join(self, worker: int) -> None:
        """Feed ``worker`` again (it came back), and what waited meanwhile."""
        with self._lock:
            if worker not in self._workers:
                self._workers.append(worker)
                self._workers.sort()
                self._in_flight[worker] = 0
        self._feed()

    def stop(self) -> None:
        with self._lock:
            self._feeding = False
        with self._feed_lock:
            pass  # a feed in progress has sent what it took: fail_pending() finds it
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()

    def _sample(self) -> bool:
        """Whether the next request is one of the sample (under the feed lock)."""
        if not self._period:
            return False
        self._sampled = (self._sampled + 1) % self._period
        return self._sampled == 1 % self._period

    @property
    def feeding(self) -> bool:
        """Whether requests go from the table to the tasks now (started, not stopped)."""
        with self._lock:
            return self._feeding

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._pending)


def _fed(request: DRPCRequest, sampled: bool) -> FedRequest:
    left = None if request.deadline is None else request.deadline - time.monotonic()
    info = request.return_info
    return FedRequest(info.request_id, info.origin, request.args, left, request.traced or sampled)


def _replay(
    observer: Observer,
    return_info: ReturnInfo,
    events: tuple[ObservedEvent, ...],
    offset: float,
) -> None:
    """Report a task's events about a request here, its wall-clock times on this
    process's monotonic clock (``offset``)."""
    for event in events:
        args = event.args
        if event.method == "step_finished":
            step, start, end, attrs = args
            observer.step_finished(return_info, step, start + offset, end + offset, attrs)
        elif event.method == "request_failed_in":
            observer.request_failed_in(return_info, *args)
        elif event.method == "state_pinned":
            observer.state_pinned(return_info, *args)


# -- on the resident tasks ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FedBlueprint:
    """What a task builds its ``FedInvocations`` from (``drpc.requests.InvocationsBlueprint``)."""

    key: str

    def build(self, functions: Sequence[str]) -> FedInvocations:
        worker = current_worker()
        return FedInvocations(functions, lambda outcome: worker.answer(self.key, outcome))


class RequestEvents(Observer):
    """A task's observer of its copy of a fed topology: sends each step's start at once
    (``live``) and keeps a request's other events until its outcome takes them (see the
    module doc)."""

    def __init__(self, live: Callable[[StepStarted], None]) -> None:
        self._live = live
        self._lock = threading.Lock()
        self._watched: set[str] = set()
        self._events: OrderedDict[str, list[ObservedEvent]] = OrderedDict()
        self._offset = time.time() - time.monotonic()

    def _add(self, return_info: Any, method: str, args: tuple[Any, ...]) -> None:
        request_id = getattr(return_info, "request_id", None)
        if request_id is None:
            return
        with self._lock:
            events = self._events.get(request_id)
            if events is None:
                events = self._events[request_id] = []
                if len(self._events) > KNOWN_REQUESTS:
                    self._events.popitem(last=False)
            events.append(ObservedEvent(method, args))

    def watch(self, request_id: str) -> None:
        """Measure and report the steps of this request (it came ``observed``)."""
        with self._lock:
            self._watched.add(request_id)

    def wants_steps(self, return_info: Any) -> bool:
        return getattr(return_info, "request_id", None) in self._watched

    def take(self, request_id: str) -> tuple[ObservedEvent, ...]:
        with self._lock:
            self._watched.discard(request_id)
            return tuple(self._events.pop(request_id, ()))

    def step_started(self, return_info: Any, step: str, now: float) -> None:
        self._live(StepStarted(return_info.request_id, step, now + self._offset))

    def step_finished(
        self, return_info: Any, step: str, start: float, end: float, attrs: dict[str, Any]
    ) -> None:
        offset = self._offset
        self._add(return_info, "step_finished", (step, start + offset, end + offset, attrs))

    def request_failed_in(self, return_info: Any, step: str, reason: str) -> None:
        self._add(return_info, "request_failed_in", (step, reason))

    def state_pinned(self, return_info: Any, reads: tuple[tuple[str, int], ...]) -> None:
        if self.wants_steps(return_info):  # what a trace shows
            self._add(return_info, "state_pinned", (reads,))


class FedInvocations:
    """A task's invocations handle on the fed path (see the module doc)."""

    def __init__(
        self, functions: Sequence[str], answer: Callable[[FedOutcome | StepStarted], None]
    ) -> None:
        [self.function] = functions  # one deployment serves one function
        self._answer = answer
        self._lock = threading.Lock()
        self._buffered: deque[DRPCRequest] = deque()
        self._listeners: list[Callable[[], None]] = []
        self.observer = RequestEvents(answer)

    def arrived(self, requests: list[FedRequest]) -> None:
        now = time.monotonic()
        for fed in requests:
            if fed.observed:
                self.observer.watch(fed.request_id)
        with self._lock:
            for fed in requests:
                deadline = None if fed.seconds_left is None else now + fed.seconds_left
                self._buffered.append(
                    DRPCRequest(
                        self.function, fed.args, ReturnInfo(fed.request_id, fed.origin), deadline
                    )
                )
        for listener in list(self._listeners):
            listener()

    def fetch_request(self, function: str) -> DRPCRequest | None:
        with self._lock:
            if not self._buffered:
                return None
            return self._buffered.popleft()

    def result(self, return_info: ReturnInfo, result: str) -> None:
        request_id = return_info.request_id
        self._answer(FedOutcome(request_id, result, None, "", self.observer.take(request_id)))

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        request_id = return_info.request_id
        events = self.observer.take(request_id)
        self._answer(FedOutcome(request_id, None, int(error.type), error.msg, events))

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return remove

    # What the worker calls on every deployment's handle (``RemoteInvocations`` has these too).
    def start(self) -> None:
        pass

    def stop_fetching(self) -> None:
        pass

    def stop(self) -> None:
        pass
