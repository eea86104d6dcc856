"""What batch-mode tasks send each other: typed records, pickled once per receiving task.

Contract. Within one job, everything a task sends one receiving task is one
``Shipment``: the tuples it emitted to that task, in emit order, as (stream,
values) pairs; the count reports of the ids it finished (``reports``: id ->
tuples it sent that task, zeros included unless the compiler implies them);
and ``failures``, ``FailureNotice``s of ids that failed (the failure travels
with the data to the driver). A shipment is pickled as one blob, so the
per-tuple cost of crossing processes is one (stream, values) pair: no
per-tuple header, and the sender's component and task once per shipment.

``Timing`` is a task's own measurement (``time.time()`` of its worker) for a
traced job: its span and, per id, the seconds it spent on that id. Timings
travel in blobs of their own, to one designated task and on to the driver.

A task's input is a list of shipments; ``TaskRun`` reads them in order:
failures first, then tuples, then reports (``drpc.executors.batch``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from drpc.errors import Failure

Emitted = tuple[str, list[Any]]
"""One emitted tuple in a shipment: (stream, values)."""


class FailureNotice(NamedTuple):
    """``id`` failed upstream; ``forward``: the receiver passes it on as well (fused edges,
    where the task designated to forward it may never see it)."""

    id: Hashable
    failure: Failure
    forward: bool = False


class Timing(NamedTuple):
    """One task's span in a traced job (worker wall clock) and its busy seconds per id."""

    component: str
    task_index: int
    started: float
    ended: float
    busy: dict[Hashable, float] | None


@dataclass(slots=True)
class Shipment:
    """Everything one task (``source``, task id ``source_task``) sends one receiving task
    in a job."""

    source: str
    source_task: int
    tuples: list[Emitted] = field(default_factory=list)
    reports: dict[Hashable, int] = field(default_factory=dict)
    failures: list[FailureNotice] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.tuples or self.reports or self.failures)

    def ids(self) -> Iterator[Hashable]:
        """Every id this shipment carries tuples or reports of (repeats included)."""
        for _, values in self.tuples:
            yield values[0]
        yield from self.reports


def first_failure(shipments: Iterable[Shipment]) -> Failure | None:
    """The first failure any of ``shipments`` carries, if any."""
    for shipment in shipments:
        for notice in shipment.failures:
            return notice.failure
    return None
