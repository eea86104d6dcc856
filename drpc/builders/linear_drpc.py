"""``LinearDRPCTopologyBuilder``: a DRPC function as a chain of coordinated steps.

Contract. ``LinearDRPCTopologyBuilder("reach")`` then ``add_bolt(bolt,
parallelism)`` per step, each returning a declarer for how the step receives
the previous step's tuples (``shuffle_grouping()``, ``fields_grouping(...)``,
...; the first step defaults to ``none_grouping``). ``create_topology()``
builds::

    drpc-spout -> prepare-request -> bolt0 -> ... -> boltN-1 -> join-result -> return-results

as the chain of a ``CoordinatedDRPCTopologyBuilder``
(``drpc.builders.coordinated_drpc``, whose rules it follows): each step reads
the one before it, the first reads the request. So bolt1 expects one count
report (only the bolt0 task that got the request knows it), later steps one
per upstream task; the last step, when it finishes per request (a batch
bolt), also waits for the request's id tuple so that exactly one of its tasks
finishes each request. Build-time checks, each an ``InvalidTopologyError``
naming the step: at least one step; steps after the first declare a
grouping; and the DAG builder's (the last step declares exactly one stream
of exactly two fields (id, result); the first step gets each request exactly
once (no all grouping); a last batch step with several tasks is
fields-grouped on the id alone).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drpc.builders.coordinated_drpc import (
    JOIN_ID,
    PREPARE_ID,
    REQUEST,
    RETURN_ID,
    SPOUT_ID,
    CoordinatedDRPCTopologyBuilder,
    check_function_name,
)
from drpc.errors import InvalidTopologyError
from drpc.model.components import IComponent
from drpc.model.fields import Fields
from drpc.model.grouping import (
    AllGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
)
from drpc.model.streams import DEFAULT_STREAM_ID
from drpc.model.topology import BOLT_TYPES, Topology

__all__ = [
    "JOIN_ID",
    "PREPARE_ID",
    "RETURN_ID",
    "SPOUT_ID",
    "LinearDRPCInputDeclarer",
    "LinearDRPCTopologyBuilder",
]


@dataclass
class _Step:
    id: str
    bolt: IComponent
    parallelism: int
    declarations: list[tuple[Grouping, str]] = field(default_factory=list)
    conf: dict[str, Any] = field(default_factory=dict)


class LinearDRPCInputDeclarer:
    """How a step receives the previous step's tuples."""

    def __init__(self, step: _Step) -> None:
        self._step = step

    def _add(self, grouping: Grouping, stream_id: str) -> LinearDRPCInputDeclarer:
        self._step.declarations.append((grouping, stream_id))
        return self

    def grouping(
        self, grouping: Grouping, stream_id: str = DEFAULT_STREAM_ID
    ) -> LinearDRPCInputDeclarer:
        """Any grouping spec (``drpc.model.grouping``), as ``BoltDeclarer.grouping``."""
        return self._add(grouping, stream_id)

    def shuffle_grouping(self, stream_id: str = DEFAULT_STREAM_ID) -> LinearDRPCInputDeclarer:
        return self._add(ShuffleGrouping(), stream_id)

    def fields_grouping(
        self, fields: Fields | Iterable[str] | str, stream_id: str = DEFAULT_STREAM_ID
    ) -> LinearDRPCInputDeclarer:
        return self._add(FieldsGrouping(Fields.of(fields)), stream_id)

    def global_grouping(self, stream_id: str = DEFAULT_STREAM_ID) -> LinearDRPCInputDeclarer:
        return self._add(GlobalGrouping(), stream_id)

    def all_grouping(self, stream_id: str = DEFAULT_STREAM_ID) -> LinearDRPCInputDeclarer:
        return self._add(AllGrouping(), stream_id)

    def none_grouping(self, stream_id: str = DEFAULT_STREAM_ID) -> LinearDRPCInputDeclarer:
        return self._add(NoneGrouping(), stream_id)

    def direct_grouping(self, stream_id: str = DEFAULT_STREAM_ID) -> LinearDRPCInputDeclarer:
        return self._add(DirectGrouping(), stream_id)

    def local_or_shuffle_grouping(
        self, stream_id: str = DEFAULT_STREAM_ID
    ) -> LinearDRPCInputDeclarer:
        return self._add(LocalOrShuffleGrouping(), stream_id)

    def add_configuration(self, key: str, value: Any) -> LinearDRPCInputDeclarer:
        self._step.conf[key] = value
        return self


class LinearDRPCTopologyBuilder:
    def __init__(self, function_name: str) -> None:
        self.function_name = check_function_name(function_name)
        self._steps: list[_Step] = []

    def add_bolt(
        self, bolt: IComponent, parallelism: int = 1, *, name: str | None = None
    ) -> LinearDRPCInputDeclarer:
        step_id = name if name is not None else f"bolt{len(self._steps)}"
        if not isinstance(bolt, BOLT_TYPES):
            raise InvalidTopologyError(
                "add_bolt needs a BaseBasicBolt, BaseRichBolt or BaseBatchBolt, "
                f"got {type(bolt).__name__}",
                step_id,
            )
        if step_id in {SPOUT_ID, PREPARE_ID, JOIN_ID, RETURN_ID} or any(
            s.id == step_id for s in self._steps
        ):
            raise InvalidTopologyError("duplicate component id", step_id)
        step = _Step(step_id, bolt, parallelism)
        self._steps.append(step)
        return LinearDRPCInputDeclarer(step)

    @property
    def step_ids(self) -> list[str]:
        return [step.id for step in self._steps]

    def create_topology(self, conf: Mapping[str, Any] | None = None) -> Topology:
        steps = self._steps
        if not steps:
            raise InvalidTopologyError(
                f"linear DRPC topology {self.function_name!r} needs at least one bolt"
            )
        chain = CoordinatedDRPCTopologyBuilder(self.function_name)
        for index, step in enumerate(steps):
            declarer = chain.set_bolt(step.id, step.bolt, step.parallelism)
            for key, value in step.conf.items():
                declarer.add_configuration(key, value)
            if index == 0:
                for grouping, stream_id in step.declarations or [
                    (NoneGrouping(), DEFAULT_STREAM_ID)
                ]:
                    declarer.grouping(REQUEST, grouping, stream_id)
                continue
            previous = steps[index - 1].id
            if not step.declarations:
                raise InvalidTopologyError(
                    f"declare how the step receives the tuples of {previous!r}, "
                    "e.g. add_bolt(...).shuffle_grouping()",
                    step.id,
                )
            for grouping, stream_id in step.declarations:
                declarer.grouping(previous, grouping, stream_id)
        return chain.create_topology(conf)
