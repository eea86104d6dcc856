"""Per-request spans on the in-process engine, reported to the observer.

Observation (``drpc.observe``; only when ``services`` holds an observer and
the topology serves a DRPC function, otherwise nothing is measured; and only for
the requests the observer ``wants_steps`` of: of any other, only a failure is
reported, ``request_failed_in`` naming the failing component). Every
tuple of a request's tree carries its spout root, so a step's span for a
request runs from the first message of that tree a task of the step began
handling to the end of the last one it handled (count reports only where
they finished the request at a task: the rest are not timed, so a task's
wait for reports is not busy time). A message whose handling sent tuples on
ends, for its span, when the last of them left: the next step may finish with
the request before this thread looks at the clock again, and a step never
ends after the step it feeds; a count report that only closed the books on
a request the task had already passed on (nothing sent, nothing failed) adds
busy time without moving the end. ``step_started`` comes live, as a task
of the step starts on the request's first tuple; when the request settles (the
runtime hands its result or failure to the invocations handle)
``step_finished`` comes for every step it went through, before the outcome,
so an issuer sees all spans by the time it sees the outcome. Steps are the
topology's components: ``prepare-request``, the user's steps,
``join-result`` and ``return-results`` (whose span ends when it hands the
result over). ``attrs`` hold ``busy_ms`` (time this step's tasks spent
handling the request's messages) and ``tasks`` (how many of its tasks did).
While a step handles a request's tuple, log lines carry its ``request_id``
and ``function`` (``drpc.logs`` context). A failed tree reports
``request_failed_in`` with the failure's step (a timed-out tree names the
step where it was stuck; else the step that began last) and ``"TYPE:
message"``; its spans then include ``drpc-spout``,
from the moment the spout heard of the failure until it failed the request.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Container, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from drpc.errors import Failure
from drpc.observe import Observer
from drpc.requests import ReturnInfo


class StepRecorder(Protocol):
    """What bolt tasks report about the messages they handle (``RequestSpans`` here, or
    ``ShippedSpans`` in a process that hosts only part of the topology). ``watched``: the
    spout roots whose spans are measured here (a message of no other root is handled
    untimed), or None when every message must be reported."""

    watched: Container[int] | None

    def holding(self) -> AbstractContextManager[None]: ...

    def begin(
        self, step: str, task: int, roots: dict[int, int], started: float
    ) -> dict[str, Any] | None: ...

    def saw(
        self,
        step: str,
        task: int,
        roots: dict[int, int],
        started: float,
        now: float,
        moves_end: bool = True,
    ) -> None: ...


class StepSpan:
    """One step's work on one request so far."""

    __slots__ = ("busy", "end", "start", "tasks")

    def __init__(self, start: float, end: float, task: int) -> None:
        self.start = start
        self.end = end
        self.busy = end - start
        self.tasks = {task}


class Tree:
    __slots__ = ("log_fields", "return_info", "steps")

    def __init__(self, return_info: ReturnInfo, function: str | None) -> None:
        self.return_info = return_info
        self.steps: dict[str, StepSpan] = {}
        self.log_fields = {"request_id": return_info.request_id, "function": function}


class Handling(threading.local):
    """The message this worker thread is handling now, when spans are kept:
    (step, task, started)."""

    current: tuple[str, int, float] | None = None


HANDLING = Handling()


class RequestSpans:
    """The steps each request's tuple tree went through, by spout root; reports them
    to the observer when the request settles (see the module docstring).

    A data tuple costs a call before it is handled (``begin``: the step starts for its
    request, live) and one after (``saw``), a count report only ``saw`` and only when
    it finished an id; the message
    a thread is handling when the request settles (``return-results`` handing the
    outcome over, or the spout failing the request) is found in ``HANDLING``.
    No lock: every dict and set operation here is atomic under the GIL, and two
    tasks of one step updating a span at the same instant can at worst lose a
    microsecond-sized update of its end or busy time (a lock here cost the
    engine a tenth of its throughput under load)."""

    def __init__(self, observer: Observer, function: str | None = None) -> None:
        self.observer = observer
        self.function = function
        self._trees: dict[int, Tree] = {}
        self.watched: Container[int] | None = self._trees
        self._roots: dict[ReturnInfo, int] = {}
        self._unwatched: dict[int, ReturnInfo] = {}

    def __len__(self) -> int:
        return len(self._trees)

    def holding(self) -> AbstractContextManager[None]:
        """Nothing to hold: every step reports here, in this process."""
        return nullcontext()

    def opened(self, root: int, return_info: ReturnInfo) -> None:
        if not self.observer.wants_steps(return_info):
            # Not measured: only a failure is reported, naming its component.
            self._unwatched[root] = return_info
            return
        self._roots[return_info] = root
        self._trees[root] = Tree(return_info, self.function)

    def begin(
        self, step: str, task: int, roots: dict[int, int], started: float
    ) -> dict[str, Any] | None:
        """A task of ``step`` starts on a data tuple of these trees: a request this step
        had not reached starts it now (``step_started``, live). Returns the log fields of
        the tuple's request."""
        fields = None
        for root in roots:
            tree = self._trees.get(root)
            if tree is None:
                continue
            if fields is None:
                fields = tree.log_fields
            if step not in tree.steps:
                new = StepSpan(started, started, task)
                if tree.steps.setdefault(step, new) is new:
                    self.observer.step_started(tree.return_info, step, started)
        return fields

    def saw(
        self,
        step: str,
        task: int,
        roots: dict[int, int],
        started: float,
        now: float,
        moves_end: bool = True,
    ) -> None:
        """Task ``task`` of ``step`` handled a message of these trees from ``started`` to
        ``now``; with ``moves_end`` false, only its busy time counts."""
        for root in roots:
            tree = self._trees.get(root)
            if tree is None:
                continue
            steps = tree.steps
            span = steps.get(step)
            if span is None:
                new = StepSpan(started, now, task)
                span = steps.setdefault(step, new)
                if span is new:
                    self.observer.step_started(tree.return_info, step, started)
                    continue
                if started < span.start:  # another task of the step got there first
                    span.start = started
            span.busy += now - started
            if moves_end and now > span.end:
                span.end = now
            span.tasks.add(task)

    def failed(self, root: int, failure: Failure) -> None:
        tree = self._trees.get(root)
        if tree is None:
            unwatched = self._unwatched.get(root)
            if unwatched is not None:
                self.observer.request_failed_in(
                    unwatched,
                    failure.component or "unknown",
                    f"{failure.type.name}: {failure.message}",
                )
            return
        step = failure.component
        if step is None:
            steps = list(tree.steps.items())
            latest = max(steps, key=lambda item: item[1].start, default=None)
            step = latest[0] if latest is not None else "unknown"
        return_info = tree.return_info
        self.observer.request_failed_in(
            return_info,
            step,
            f"{failure.type.name}: {failure.message}",
        )

    def settle(self, return_info: ReturnInfo) -> None:
        """Report every span of the request; call just before its outcome is handed over.

        The step handing the outcome over (this thread's message) ends after the others
        were reported, so the request's remaining time is the hand-over alone."""
        root = self._roots.pop(return_info, None)
        tree = self._trees.pop(root, None) if root is not None else None
        if tree is None:
            return
        current = HANDLING.current
        steps = sorted(list(tree.steps.items()), key=lambda item: item[1].end)
        for step, span in steps:
            if current is not None and step == current[0]:
                continue
            attrs = {"busy_ms": round(span.busy * 1000.0, 3), "tasks": len(span.tasks)}
            self.observer.step_finished(return_info, step, span.start, span.end, attrs)
        if current is not None:
            step, task, started = current
            last = tree.steps.get(step)
            if last is None:
                self.observer.step_started(return_info, step, started)
            end = time.monotonic()
            start = started if last is None else last.start
            busy = end - started + (0.0 if last is None else last.busy)
            tasks = 1 if last is None else len(last.tasks | {task})
            attrs = {"busy_ms": round(busy * 1000.0, 3), "tasks": tasks}
            self.observer.step_finished(return_info, step, start, end, attrs)

    def log_fields(self, root: int) -> dict[str, Any] | None:
        """The log fields of the request of ``root`` (``request_id``, ``function``)."""
        tree = self._trees.get(root)
        return tree.log_fields if tree is not None else None

    def forget(self, root: int) -> None:
        tree = self._trees.pop(root, None)
        if tree is not None:
            self._roots.pop(tree.return_info, None)
        else:
            self._unwatched.pop(root, None)


class ObservedInvocations:
    """The invocations handle the topology sees: reports a request's spans before its
    outcome goes to the real handle."""

    def __init__(self, invocations: Any, spans: RequestSpans) -> None:
        self._invocations = invocations
        self._spans = spans

    def fetch_request(self, function: str) -> Any:
        return self._invocations.fetch_request(function)

    def result(self, return_info: ReturnInfo, result: str) -> None:
        self._spans.settle(return_info)
        self._invocations.result(return_info, result)

    def fail_request(self, return_info: ReturnInfo, error: Any) -> None:
        self._spans.settle(return_info)
        self._invocations.fail_request(return_info, error)

    def __getattr__(self, name: str) -> Any:  # add_listener, when the real handle has it
        return getattr(self._invocations, name)


KNOWN_REQUESTS = 16384
"""How many requests' log fields a process hosting part of a topology keeps."""

SpanEvent = tuple[Any, ...]
"""("begin", step, task, roots, started) or ("saw", step, task, roots, started, now,
moves_end), with ``time.time()`` times."""


class ShippedSpans:
    """The step recorder of a process hosting part of a topology: each begin and saw goes,
    as a ``SpanEvent`` with wall-clock times, to the process that keeps the requests'
    spans (``ship(events)``): a begin at once (the step shows as started while it works),
    a saw ahead of everything the handling sent on (``hold(before)`` holds this thread's
    sends and calls ``before`` first), so a message of the next step never overtakes the
    span of the step that sent it."""

    def __init__(
        self,
        hold: Callable[[Callable[[], None]], AbstractContextManager[None]],
        ship: Callable[[list[SpanEvent]], None],
    ) -> None:
        self._hold = hold
        self._ship = ship
        self.watched: Container[int] | None = None  # the spans are kept elsewhere
        self._local = threading.local()
        self._offset = time.time() - time.monotonic()
        self._fields: OrderedDict[int, dict[str, Any]] = OrderedDict()

    def learn(self, root: int, fields: dict[str, Any]) -> None:
        """The log fields of ``root``'s request, for this process's log lines about it
        (the latest ``KNOWN_REQUESTS`` are kept)."""
        known = self._fields
        known[root] = fields
        if len(known) > KNOWN_REQUESTS:
            known.popitem(last=False)

    @contextmanager
    def holding(self) -> Iterator[None]:
        events: list[SpanEvent] = []
        self._local.events = events
        try:
            with self._hold(lambda: self._ship(events) if events else None):
                yield
        finally:
            self._local.events = None

    def _add(self, event: SpanEvent) -> None:
        events = getattr(self._local, "events", None)
        if events is not None:
            events.append(event)

    def begin(
        self, step: str, task: int, roots: dict[int, int], started: float
    ) -> dict[str, Any] | None:
        # At once, not held: the step shows as started while it works; nothing this
        # handling sends has left yet, so nothing can overtake it.
        self._ship([("begin", step, task, tuple(roots), started + self._offset)])
        known = self._fields
        for root in roots:
            fields = known.get(root)
            if fields is not None:
                return fields
        return None

    def saw(
        self,
        step: str,
        task: int,
        roots: dict[int, int],
        started: float,
        now: float,
        moves_end: bool = True,
    ) -> None:
        offset = self._offset
        self._add(("saw", step, task, tuple(roots), started + offset, now + offset, moves_end))


def record_shipped(spans: RequestSpans, events: list[SpanEvent]) -> None:
    """Apply span events another process shipped (``ShippedSpans``) to ``spans``."""
    offset = time.time() - time.monotonic()
    for event in events:
        roots = dict.fromkeys(event[3], 0)
        if event[0] == "begin":
            spans.begin(event[1], event[2], roots, event[4] - offset)
        else:
            spans.saw(event[1], event[2], roots, event[4] - offset, event[5] - offset, event[6])
