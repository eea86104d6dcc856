"""What batch-mode tasks send each other: typed records, pickled once per receiving task.

Contract. Within one job, everything a task sends one receiving task is one
``Shipment``: the tuples it emitted to that task, in emit order, as runs of
consecutive emits on one stream (``Run``: the stream once, then each emit's
values); the count reports of the ids it finished (``reports``: id ->
tuples it sent that task, zeros included unless the compiler implies them);
and ``failures``, ``FailureNotice``s of ids that failed (the failure travels
with the data to the driver). A shipment is pickled as one blob, so the
per-tuple cost of crossing processes is its values: no per-tuple header, the
stream once per run, and the sender's component and task once per shipment.
A run whose emits all have the same number of values is pickled column by
column (an id repeated down a column pickles as a reference each time) and
turned back into one list per emit when it is read.

``Timing`` is a task's own measurement (``time.time()`` of its worker) for a
traced job: its span and, per id, the seconds it spent on that id. Timings
travel in blobs of their own, to one designated task and on to the driver.

A task's input is a list of shipments; ``TaskRun`` reads them in order:
failures first, then tuples, then reports (``drpc.executors.batch``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from drpc.errors import Failure

Emitted = tuple[str, list[Any]]
"""One emitted tuple: (stream, values)."""

Run = tuple[str, list[list[Any]]]
"""Consecutive emits on one stream in a shipment: (stream, the values of each)."""


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
    runs: list[Run] = field(default_factory=list)
    reports: dict[Hashable, int] = field(default_factory=dict)
    failures: list[FailureNotice] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.runs or self.reports or self.failures)

    def __reduce__(self) -> tuple[Any, ...]:
        runs = [_columns(stream, rows) for stream, rows in self.runs]
        return _shipment, (self.source, self.source_task, runs, self.reports, self.failures)

    def add(self, stream: str, values: list[Any]) -> None:
        """Append one emit on ``stream``."""
        self.appender(stream)(values)

    def appender(self, stream: str) -> Callable[[list[Any]], None]:
        """Where emits on ``stream`` go next, while nothing else is added: the last run's
        ``append`` if it is on ``stream``, else a new run's."""
        runs = self.runs
        if runs and runs[-1][0] == stream:
            return runs[-1][1].append
        rows: list[list[Any]] = []
        runs.append((stream, rows))
        return rows.append

    def emitted(self) -> Iterator[Emitted]:
        """Every emit, in order, as (stream, values)."""
        for stream, rows in self.runs:
            for values in rows:
                yield stream, values

    def count(self) -> int:
        """How many emits this shipment carries."""
        return sum(len(rows) for _, rows in self.runs)

    def ids(self) -> Iterator[Hashable]:
        """Every id this shipment carries tuples or reports of (repeats included)."""
        for _, rows in self.runs:
            for values in rows:
                yield values[0]
        yield from self.reports


_ByColumn = tuple[str, bool, list[Any]]
"""A run as pickled: (stream, True, its columns) or (stream, False, its rows)."""


def _columns(stream: str, rows: list[list[Any]]) -> _ByColumn:
    widths = set(map(len, rows))
    if len(widths) == 1 and widths.pop() > 0:
        return stream, True, list(zip(*rows, strict=True))
    return stream, False, rows


def _shipment(
    source: str,
    source_task: int,
    runs: list[_ByColumn],
    reports: dict[Hashable, int],
    failures: list[FailureNotice],
) -> Shipment:
    return Shipment(
        source,
        source_task,
        [
            (stream, list(map(list, zip(*payload, strict=True))) if by_column else payload)
            for stream, by_column, payload in runs
        ],
        reports,
        failures,
    )


def first_failure(shipments: Iterable[Shipment]) -> Failure | None:
    """The first failure any of ``shipments`` carries, if any."""
    for shipment in shipments:
        for notice in shipment.failures:
            return notice.failure
    return None
