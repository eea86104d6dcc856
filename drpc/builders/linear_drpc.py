"""``LinearDRPCTopologyBuilder``: a DRPC function as a chain of coordinated steps.

Contract. ``LinearDRPCTopologyBuilder("reach")`` then ``add_bolt(bolt,
parallelism)`` per step, each returning a declarer for how the step receives
the previous step's tuples (``shuffle_grouping()``, ``fields_grouping(...)``,
...; the first step defaults to ``none_grouping``). ``create_topology()``
builds::

    drpc-spout -> prepare-request -> bolt0 -> ... -> boltN-1 -> join-result -> return-results

with every step wrapped in coordination (``drpc.semantics.coordination``):
bolt1 expects one count report (only the bolt0 task that got the request
knows it), later steps one per upstream task; the last step, when it
finishes per request (a batch bolt), also waits for the request's id tuple so
that exactly one of its tasks finishes each request. Build-time checks, each
an ``InvalidTopologyError`` naming the step: at least one step; the last step
declares exactly one stream of exactly two fields (id, result); the first
step gets each request exactly once (no all grouping); steps after the first
declare a grouping; a last batch step with several tasks is fields-grouped on
the id alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drpc.builders.drpc_components import (
    ID_STREAM,
    RETURN_STREAM,
    DRPCSpout,
    JoinResult,
    PrepareRequest,
    ReturnResults,
)
from drpc.errors import InvalidTopologyError
from drpc.model.components import BaseBatchBolt, FinishedCallback, IComponent
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
from drpc.model.streams import (
    COORDINATED_STREAM_ID,
    DEFAULT_STREAM_ID,
    GlobalStreamId,
    OutputFieldsDeclarer,
)
from drpc.model.topology import (
    BOLT_TYPES,
    CoordinatedBolt,
    SourceArgs,
    Topology,
    TopologyBuilder,
)

SPOUT_ID = "drpc-spout"
PREPARE_ID = "prepare-request"
JOIN_ID = "join-result"
RETURN_ID = "return-results"


@dataclass
class _Step:
    id: str
    bolt: IComponent
    parallelism: int
    declarations: list[tuple[Grouping, str]] = field(default_factory=list)
    conf: dict[str, Any] = field(default_factory=dict)

    @property
    def finishes_per_request(self) -> bool:
        return isinstance(self.bolt, (BaseBatchBolt, FinishedCallback))


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
        if not isinstance(function_name, str) or not function_name.strip():
            raise InvalidTopologyError(
                f"a DRPC function name must be a non-empty string, got {function_name!r}"
            )
        if any(ch in function_name for ch in "/\r\n\t"):
            raise InvalidTopologyError(
                f"DRPC function name {function_name!r} may not contain '/' or control characters"
            )
        self.function_name = function_name
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

    def _result_stream(self, last: _Step) -> tuple[str, Fields]:
        declarer = OutputFieldsDeclarer(last.id)
        last.bolt.declare_output_fields(declarer)
        streams = declarer.streams
        if len(streams) != 1:
            raise InvalidTopologyError(
                "the last step of a linear DRPC topology must declare exactly one stream, "
                f"it declares {len(streams)} ({sorted(streams)})",
                last.id,
            )
        stream_id, info = next(iter(streams.items()))
        if len(info.fields) != 2:
            raise InvalidTopologyError(
                "the output stream of the last step must have exactly two fields, the request "
                f"id and the result; it has {info.fields.to_list()}",
                last.id,
            )
        return stream_id, info.fields

    def _check_last_step_grouping(self, last: _Step, previous: _Step) -> None:
        declarer = OutputFieldsDeclarer(previous.id)
        previous.bolt.declare_output_fields(declarer)
        for grouping, stream_id in last.declarations:
            info = declarer.streams.get(stream_id)
            id_field = info.fields[0] if info is not None and len(info.fields) else None
            if not (isinstance(grouping, FieldsGrouping) and list(grouping.fields) == [id_field]):
                raise InvalidTopologyError(
                    f"the last step has {last.parallelism} tasks and finishes per request, so its "
                    f"input must be fields-grouped on the request id field {id_field!r} alone "
                    f"(got {grouping.describe()} grouping on stream {stream_id!r})",
                    last.id,
                )

    def create_topology(self, conf: Mapping[str, Any] | None = None) -> Topology:
        steps = self._steps
        if not steps:
            raise InvalidTopologyError(
                f"linear DRPC topology {self.function_name!r} needs at least one bolt"
            )
        result_stream, result_fields = self._result_stream(steps[-1])
        builder = TopologyBuilder()
        builder.set_spout(SPOUT_ID, DRPCSpout(self.function_name))
        builder.set_bolt(PREPARE_ID, PrepareRequest()).none_grouping(SPOUT_ID)
        last_index = len(steps) - 1
        for index, step in enumerate(steps):
            waits_for_id = index == last_index and index > 0 and step.finishes_per_request
            sources: dict[str, SourceArgs] = {}
            if index > 0:
                previous = steps[index - 1]
                sources[previous.id] = SourceArgs.one() if index == 1 else SourceArgs.all()
            coordinated = CoordinatedBolt(
                step.bolt,
                sources,
                id_stream=GlobalStreamId(PREPARE_ID, ID_STREAM) if waits_for_id else None,
            )
            declarer = builder.set_bolt(step.id, coordinated, step.parallelism)
            declarer.add_configurations(step.conf)
            if index == 0:
                for grouping, _ in step.declarations:
                    if isinstance(grouping, AllGrouping):
                        raise InvalidTopologyError(
                            "the first step must receive each request exactly once; "
                            "all grouping would hand it to every task",
                            step.id,
                        )
                for grouping, stream_id in step.declarations or [
                    (NoneGrouping(), DEFAULT_STREAM_ID)
                ]:
                    declarer.grouping(PREPARE_ID, grouping, stream_id)
                continue
            if not step.declarations:
                raise InvalidTopologyError(
                    f"declare how the step receives the tuples of {steps[index - 1].id!r}, "
                    "e.g. add_bolt(...).shuffle_grouping()",
                    step.id,
                )
            if waits_for_id:
                declarer.fields_grouping(PREPARE_ID, "request", ID_STREAM)
                if step.parallelism > 1:
                    self._check_last_step_grouping(step, steps[index - 1])
            for grouping, stream_id in step.declarations:
                declarer.grouping(steps[index - 1].id, grouping, stream_id)
            declarer.direct_grouping(steps[index - 1].id, COORDINATED_STREAM_ID)

        last = steps[-1]
        last_reports_once = last_index == 0 or last.finishes_per_request
        join = CoordinatedBolt(
            JoinResult(PREPARE_ID, last.id),
            {last.id: SourceArgs.one() if last_reports_once else SourceArgs.all()},
            id_stream=GlobalStreamId(PREPARE_ID, RETURN_STREAM),
            deliver_id_tuple=True,
        )
        (
            builder.set_bolt(JOIN_ID, join)
            .fields_grouping(last.id, result_fields[0], result_stream)
            .fields_grouping(PREPARE_ID, "request", RETURN_STREAM)
            .direct_grouping(last.id, COORDINATED_STREAM_ID)
        )
        builder.set_bolt(RETURN_ID, ReturnResults()).none_grouping(JOIN_ID)
        topology = builder.create_topology(f"drpc-{self.function_name}", conf)
        topology.drpc_function = self.function_name
        topology.linear_steps = [step.id for step in steps]
        return topology
