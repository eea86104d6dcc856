"""``TopologyContext``: what a task knows about itself and the topology.

Contract: read-only facts (this task's id and index, every component's task
ids and output fields, this component's sources and targets) plus hooks an
executor fills in: ``request_wakeup()`` (a spout whose source can notify asks
for ``next_tuple`` to run soon; one that calls ``declare_wakeups()`` promises to
ask whenever its source has something, so it is not polled again after an emit
and idle polls become a slow safety net),
``services`` (objects the executor lends to
built-in components, such as the DRPC invocations handle) and ``state`` (the
LMDB state maps of a transactional run, see ``drpc.state.topology``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from drpc.model.streams import DEFAULT_STREAM_ID, GlobalStreamId
from drpc.state.topology import state_for

if TYPE_CHECKING:
    from drpc.model.fields import Fields
    from drpc.model.grouping import Grouping
    from drpc.model.topology import Topology


class TopologyContext:
    def __init__(
        self,
        topology: Topology,
        component_id: str,
        task_id: int,
        *,
        services: dict[str, Any] | None = None,
        wakeup: Callable[[], None] | None = None,
        conf: dict[str, Any] | None = None,
    ) -> None:
        self._topology = topology
        self.this_component_id = component_id
        self.this_task_id = task_id
        tasks = topology.component_task_ids[component_id]
        self.this_task_index = tasks.index(task_id)
        self.services: dict[str, Any] = services if services is not None else {}
        self.conf: dict[str, Any] = conf if conf is not None else {}
        self._wakeup = wakeup
        self.wakeups_declared = False

    @property
    def topology_name(self) -> str:
        return self._topology.name

    def component_tasks(self, component_id: str) -> list[int]:
        return list(self._topology.component_task_ids[component_id])

    @property
    def this_component_tasks(self) -> list[int]:
        return self.component_tasks(self.this_component_id)

    def component_id(self, task_id: int) -> str:
        return self._topology.task_component[task_id]

    def component_output_fields(
        self, component_id: str, stream_id: str = DEFAULT_STREAM_ID
    ) -> Fields:
        return self._topology.output_fields(component_id, stream_id)

    def this_output_fields(self, stream_id: str = DEFAULT_STREAM_ID) -> Fields:
        return self.component_output_fields(self.this_component_id, stream_id)

    def this_sources(self) -> dict[GlobalStreamId, Grouping]:
        return dict(self._topology.components[self.this_component_id].inputs)

    def this_targets(self) -> dict[str, dict[str, Grouping]]:
        targets: dict[str, dict[str, Grouping]] = {}
        for stream_id in self._topology.components[self.this_component_id].outputs:
            for subscriber, grouping in self._topology.subscribers(
                self.this_component_id, stream_id
            ):
                targets.setdefault(stream_id, {})[subscriber] = grouping
        return targets

    @property
    def state(self) -> Any:
        """The state maps of this run (``drpc.state.topology.TopologyState``)."""
        return state_for(self.services, self.conf)

    def request_wakeup(self) -> None:
        """Ask the executor to call this spout's ``next_tuple`` soon. Thread-safe."""
        if self._wakeup is not None:
            self._wakeup()

    def declare_wakeups(self) -> None:
        """Promise that this spout calls ``request_wakeup()`` whenever its source has
        something to emit, also after an emit while more waits: it is then not polled
        again at once after an emit, and while idle only at the executor's longest idle
        pause, not with Storm's back-off from 1 ms."""
        self.wakeups_declared = True
