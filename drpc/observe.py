"""Observation hooks: what executors, runners and servers report for metrics, dashboards and traces.

Contract. An ``Observer`` receives events as they happen; ``Observer`` itself
ignores every event, so an implementation overrides only what it needs.
Events come from any thread and must be cheap. ``FanOut`` is the bus: it
passes each event to every observer it holds, and an observer's exception is
logged and dropped, never reaching the engine that reported it nor the other
observers. Engines report to ``bus(observer)`` (the observer itself when it is
a ``FanOut`` or ``NULL_OBSERVER``, else a ``FanOut`` around it) by calling the
event's method: every event is a typed method of ``Observer``.

``wants_steps(return_info)`` is the one question an engine asks: whether any observer
wants the step events of a request (default: every request's); an engine measures only
the steps of requests that are wanted.

Runtimes find their observer in their services under ``OBSERVER_SERVICE``
(``observer_of(services)``; missing means ``NULL_OBSERVER``). Times are
``time.monotonic()`` of the reporting process, in seconds.

Request events, from the DRPC server's request table
(``drpc.server.service.DRPCService``; ``request`` a ``drpc.requests.PendingRequest``):
``request_submitted(request)`` and ``request_fetched(request, now)`` (called
with the table's lock held: must not call back into the service),
``request_settled(request, now)`` (before the caller is woken) and
``request_refused(function, error, known, now)`` (an execute call answered
without queueing; ``known``: the function is served).

Step events (``return_info`` names the request and the server that issued it):

- ``step_started(return_info, step, now)``: a step began work on the request;
- ``step_finished(return_info, step, start, end, attrs)``: a step's span for
  the request (``attrs`` e.g. ``{"spark_job_id": 3}``);
- ``request_failed_in(return_info, step, reason)``: the step where a request failed;
- ``state_pinned(return_info, reads)``: the request reads each state directory at one
  committed version; ``reads`` its ``(state directory, version)`` pairs.

Executor events: ``job_started(function, job, request_count, now)`` and
``job_finished(function, job, ok, seconds)`` (a Spark job, ``job`` its tag),
``batch_coalesced(function, size)``.

Transactional events (``topology`` is the transactional topology id):
``tx_started(topology, txid, attempt_id, now)``, ``tx_committed(topology,
txid, commit_seconds, tuples)``, ``tx_replayed(topology, txid, cause)``
(``cause``: "failed", "timeout", "commit-failed", "after-earlier-failure",
"state-full", "restart"), ``tx_phases(topology, txid, phases)`` (a committed
batch's seconds by phase: "emit", "process", "wait", "commit").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drpc.requests import PendingRequest

log = logging.getLogger(__name__)

OBSERVER_SERVICE = "drpc.observer"


class Observer:
    """Ignores every event; subclass and override what you need."""

    def wants_steps(self, return_info: Any) -> bool:
        """Whether the step events of this request are wanted (an engine measures the
        steps of the requests some observer wants); default: every request's."""
        return True

    def step_started(self, return_info: Any, step: str, now: float) -> None:
        pass

    def step_finished(
        self, return_info: Any, step: str, start: float, end: float, attrs: dict[str, Any]
    ) -> None:
        pass

    def request_failed_in(self, return_info: Any, step: str, reason: str) -> None:
        pass

    def state_pinned(self, return_info: Any, reads: tuple[tuple[str, int], ...]) -> None:
        pass

    def job_started(self, function: str, job: str, request_count: int, now: float) -> None:
        pass

    def job_finished(self, function: str, job: str, ok: bool, seconds: float) -> None:
        pass

    def batch_coalesced(self, function: str, size: int) -> None:
        pass

    def tx_started(self, topology: str, txid: int, attempt_id: int, now: float) -> None:
        pass

    def tx_committed(self, topology: str, txid: int, commit_seconds: float, tuples: int) -> None:
        pass

    def tx_replayed(self, topology: str, txid: int, cause: str) -> None:
        pass

    def tx_phases(self, topology: str, txid: int, phases: dict[str, float]) -> None:
        pass

    def request_submitted(self, request: PendingRequest) -> None:
        pass

    def request_fetched(self, request: PendingRequest, now: float) -> None:
        pass

    def request_settled(self, request: PendingRequest, now: float) -> None:
        pass

    def request_refused(self, function: str, error: BaseException, known: bool, now: float) -> None:
        pass


NULL_OBSERVER = Observer()


class FanOut(Observer):
    """The bus: passes every event to each of several observers (``observers``, a list you
    may extend), isolating each: an exception is logged, the others still hear it."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = [o for o in observers if o is not NULL_OBSERVER]


def _fan_out(event: str) -> Any:
    def fan_out(self: FanOut, *args: Any) -> None:
        for observer in self.observers:
            try:
                getattr(observer, event)(*args)
            except Exception:
                log.exception("observer %r failed on %s", observer, event)

    fan_out.__name__ = event
    return fan_out


# One plain method per event, made once: an event costs a loop, not a closure per call.
for _event in [name for name in vars(Observer) if not name.startswith(("_", "wants_"))]:
    setattr(FanOut, _event, _fan_out(_event))


def _wants_steps(self: FanOut, return_info: Any) -> bool:
    for observer in self.observers:
        try:
            if observer.wants_steps(return_info):
                return True
        except Exception:
            log.exception("observer %r failed on wants_steps", observer)
    return False


FanOut.wants_steps = _wants_steps  # type: ignore[method-assign,assignment]


def observer_of(services: dict[str, Any] | None) -> Observer:
    observer = services.get(OBSERVER_SERVICE) if services else None
    return NULL_OBSERVER if observer is None else observer  # not `or`: an observer may be falsy


def bus(observer: Observer | None) -> Observer:
    """``observer`` as an engine reports to it: ``NULL_OBSERVER`` for None, a ``FanOut``
    as it is, anything else inside a ``FanOut`` (so its exceptions stay there)."""
    if observer is None or observer is NULL_OBSERVER:
        return NULL_OBSERVER
    return observer if isinstance(observer, FanOut) else FanOut(observer)
