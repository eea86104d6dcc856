"""Storm's per-component figures of a running topology, as its UI shows them.

Contract. ``ComponentStats`` is one component's figures summed over its tasks:
``emitted`` (emit calls), ``acked`` and ``failed`` (for a spout: tuple trees
completed and failed, each root once; for a bolt: input tuples it acked and
failed), and for a spout ``complete_latency_ms``, the mean time from an emit
with a message id to its tree's ack (None before the first ack).

- ``TaskFigures`` is one task's raw counters, a plain record that crosses
  processes (a resident task sends its own to the driver).
- ``engine_figures(engine)`` reads an in-process engine's tasks (the counters
  are plain integers the tasks' turns bump: a read between turns may lag a
  turn, never tear).
- ``component_stats(topology, figures)`` sums task figures per component, every
  component of the topology listed even when none of its tasks reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from drpc.model.topology import Topology


@dataclass(frozen=True, slots=True)
class TaskFigures:
    """One task's counters (see the module doc)."""

    component: str
    task_id: int
    emitted: int
    acked: int
    failed: int
    complete_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class ComponentStats:
    """One component's figures over its tasks (see the module doc)."""

    component: str
    kind: str
    tasks: int
    emitted: int
    acked: int
    failed: int
    complete_latency_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "component": self.component,
            "kind": self.kind,
            "tasks": self.tasks,
            "emitted": self.emitted,
            "acked": self.acked,
            "failed": self.failed,
            "complete_latency_ms": self.complete_latency_ms,
        }


def engine_figures(engine: Any) -> list[TaskFigures]:
    """The counters of every task an in-process engine (``LocalExecutor``) hosts."""
    figures = [
        TaskFigures(
            task.component_id,
            task.task_id,
            task.emitted,
            task.acked,
            task.failures,
            task.complete_seconds,
        )
        for task in engine.spout_tasks
    ]
    figures += [
        TaskFigures(task.component_id, task.task_id, task.emitted, task.acked, task.failures)
        for task in engine.bolt_tasks
    ]
    return figures


def component_stats(
    topology: Topology, figures: Iterable[TaskFigures]
) -> dict[str, ComponentStats]:
    """Sum ``figures`` per component of ``topology`` (Storm's internal components, the
    ackers and the system streams' bolts, are not listed)."""
    by_component: dict[str, list[TaskFigures]] = {}
    for figure in figures:
        by_component.setdefault(figure.component, []).append(figure)
    stats = {}
    for component, spec in topology.components.items():
        if component.startswith("__"):
            continue
        found = by_component.get(component, [])
        acked = sum(figure.acked for figure in found)
        latency = None
        if spec.kind == "spout" and acked:
            latency = 1000.0 * sum(figure.complete_seconds for figure in found) / acked
        stats[component] = ComponentStats(
            component,
            spec.kind,
            len(topology.component_task_ids[component]),
            sum(figure.emitted for figure in found),
            acked,
            sum(figure.failed for figure in found),
            latency,
        )
    return stats
