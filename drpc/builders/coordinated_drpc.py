"""``CoordinatedDRPCTopologyBuilder``: a DRPC function as a DAG of coordinated steps.

Contract. ``CoordinatedDRPCTopologyBuilder("f")`` then ``set_bolt(step_id,
bolt, parallelism)`` per step, each returning a declarer of the streams the
step reads: ``shuffle_grouping(component_id, stream_id)``,
``fields_grouping(component_id, fields, stream_id)``, ... as on Storm's
``TopologyBuilder``. A step reads other steps, or the request itself
(``REQUEST``, the ``[request, args]`` tuples of ``prepare-request``; a step
that declares no input reads it by none grouping). ``create_topology()``
builds::

    drpc-spout -> prepare-request -> the steps' DAG -> join-result -> return-results

with every step wrapped in Storm's CoordinatedBolt
(``drpc.semantics.coordination``), per request id: a step that reads the
request (a first step) finishes once it has the request's one tuple; any
other step expects one count report from each task of each step it reads
(one only from a first step: only the task that got the request knows it),
so a step with several inputs finishes a request only once every branch has
reported, and then reports to every task reading it. The one step that no
step reads (the sink) produces ``(id, result)`` for ``join-result``; when it
finishes per request and is not a first step, it also waits for the
request's id tuple, so exactly one of its tasks finishes each request.

Build-time checks, each an ``InvalidTopologyError`` naming the step: at
least one step; no duplicate or reserved step id; inputs are steps of this
builder or ``REQUEST`` (its default stream, never by all grouping); a step
reads the request or other steps, not both; no cycle; exactly one sink,
which declares exactly one stream of exactly two fields (id, result), and,
with several tasks and a finish per request, reads every input
fields-grouped on that input's id field alone. Stream and field checks are
``TopologyBuilder``'s. ``Topology.drpc_steps`` lists the steps in
topological order (executors run them on Spark, the scaffolding on the
driver).

``spread_scaffolding(topology, tasks)`` gives a built DRPC topology one
scaffolding task per worker of a deployment that runs the scaffolding beside
the steps (the resident Spark executor, fetching from remote servers): the
spout, ``prepare-request``, ``join-result`` and ``return-results`` get
``tasks`` tasks each, wired task index to task index (local-or-shuffle), so
a request stays with the worker that fetched it from entry to answer; its
steps are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Self

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
    FieldsGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NamedGroupings,
    NoneGrouping,
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
REQUEST = PREPARE_ID
"""The component id a step reads the request from: ``[request, args]`` per request."""
SCAFFOLDING = frozenset({SPOUT_ID, PREPARE_ID, JOIN_ID, RETURN_ID})


def check_function_name(function_name: object) -> str:
    """``function_name`` if a DRPC function may have it, else ``InvalidTopologyError``."""
    if not isinstance(function_name, str) or not function_name.strip():
        raise InvalidTopologyError(
            f"a DRPC function name must be a non-empty string, got {function_name!r}"
        )
    if any(ch in function_name for ch in "/\r\n\t"):
        raise InvalidTopologyError(
            f"DRPC function name {function_name!r} may not contain '/' or control characters"
        )
    return function_name


@dataclass(frozen=True, slots=True)
class StepInput:
    """One stream a step reads: ``source`` (a step id or ``REQUEST``), how, which stream."""

    source: str
    grouping: Grouping
    stream_id: str = DEFAULT_STREAM_ID


@dataclass
class Step:
    id: str
    bolt: IComponent
    parallelism: int
    declared: list[StepInput] = field(default_factory=list)
    conf: dict[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> list[StepInput]:
        """The declared inputs; none declared: the request, by none grouping."""
        return self.declared or [StepInput(REQUEST, NoneGrouping())]

    @property
    def finishes_per_request(self) -> bool:
        return isinstance(self.bolt, (BaseBatchBolt, FinishedCallback))

    @property
    def sources(self) -> list[str]:
        """The components this step reads, each once, in declaration order."""
        return list(dict.fromkeys(input.source for input in self.inputs))

    @property
    def reads_request(self) -> bool:
        return any(input.source == REQUEST for input in self.inputs)


class CoordinatedDRPCInputDeclarer(NamedGroupings):
    """Which streams a step reads and how they spread over its tasks."""

    def __init__(self, step: Step) -> None:
        self._step = step

    def grouping(
        self, component_id: str, grouping: Grouping, stream_id: str = DEFAULT_STREAM_ID
    ) -> Self:
        self._step.declared.append(StepInput(component_id, grouping, stream_id))
        return self

    def add_configuration(self, key: str, value: Any) -> CoordinatedDRPCInputDeclarer:
        self._step.conf[key] = value
        return self


class CoordinatedDRPCTopologyBuilder:
    """A DRPC function whose steps form a DAG (see the module doc)."""

    REQUEST = REQUEST

    def __init__(self, function_name: str) -> None:
        self.function_name = check_function_name(function_name)
        self._steps: dict[str, Step] = {}

    def set_bolt(
        self, step_id: str, bolt: IComponent, parallelism: int = 1
    ) -> CoordinatedDRPCInputDeclarer:
        if not isinstance(bolt, BOLT_TYPES):
            raise InvalidTopologyError(
                "set_bolt needs a BaseBasicBolt, BaseRichBolt or BaseBatchBolt, "
                f"got {type(bolt).__name__}",
                step_id,
            )
        if step_id in SCAFFOLDING or step_id in self._steps:
            raise InvalidTopologyError("duplicate component id", step_id)
        step = Step(step_id, bolt, parallelism)
        self._steps[step_id] = step
        return CoordinatedDRPCInputDeclarer(step)

    @property
    def step_ids(self) -> list[str]:
        return list(self._steps)

    def create_topology(self, conf: Mapping[str, Any] | None = None) -> Topology:
        steps = self._steps
        if not steps:
            raise InvalidTopologyError(
                f"DRPC topology {self.function_name!r} needs at least one bolt"
            )
        for step in steps.values():
            self._check_inputs(step)
        order = _topological_order(steps)
        sink = self._sink(order)
        result_stream, result_fields = _result_stream(sink)
        builder = TopologyBuilder()
        builder.set_spout(SPOUT_ID, DRPCSpout(self.function_name))
        builder.set_bolt(PREPARE_ID, PrepareRequest()).none_grouping(SPOUT_ID)
        for step_id in order:
            step = steps[step_id]
            waits_for_id = step is sink and not step.reads_request and step.finishes_per_request
            coordinated = CoordinatedBolt(
                step.bolt,
                {source: self._source_args(source) for source in step.sources if source != REQUEST},
                id_stream=GlobalStreamId(PREPARE_ID, ID_STREAM) if waits_for_id else None,
            )
            declarer = builder.set_bolt(step.id, coordinated, step.parallelism)
            declarer.add_configurations(step.conf)
            if waits_for_id:
                declarer.fields_grouping(PREPARE_ID, "request", ID_STREAM)
                if step.parallelism > 1:
                    self._check_sink_grouping(step)
            for input in step.inputs:
                declarer.grouping(input.source, input.grouping, input.stream_id)
            for source in step.sources:
                if source != REQUEST:
                    declarer.direct_grouping(source, COORDINATED_STREAM_ID)

        sink_reports_once = sink.reads_request or sink.finishes_per_request
        join = CoordinatedBolt(
            JoinResult(PREPARE_ID, sink.id),
            {sink.id: SourceArgs.one() if sink_reports_once else SourceArgs.all()},
            id_stream=GlobalStreamId(PREPARE_ID, RETURN_STREAM),
            deliver_id_tuple=True,
        )
        (
            builder.set_bolt(JOIN_ID, join)
            .fields_grouping(sink.id, result_fields[0], result_stream)
            .fields_grouping(PREPARE_ID, "request", RETURN_STREAM)
            .direct_grouping(sink.id, COORDINATED_STREAM_ID)
        )
        builder.set_bolt(RETURN_ID, ReturnResults()).none_grouping(JOIN_ID)
        topology = builder.create_topology(f"drpc-{self.function_name}", conf)
        topology.drpc_function = self.function_name
        topology.drpc_steps = order
        return topology

    # -- checks and wiring -------------------------------------------------------------

    def _check_inputs(self, step: Step) -> None:
        for input in step.inputs:
            if input.source == REQUEST:
                if input.stream_id != DEFAULT_STREAM_ID:
                    raise InvalidTopologyError(
                        f"reads stream {input.stream_id!r} of the request; steps read its "
                        f"{DEFAULT_STREAM_ID!r} stream, [request, args]",
                        step.id,
                    )
                if isinstance(input.grouping, AllGrouping):
                    raise InvalidTopologyError(
                        "a step reading the request must receive each request exactly once; "
                        "all grouping would hand it to every task",
                        step.id,
                    )
            elif input.source not in self._steps:
                what = "drpc's own component" if input.source in SCAFFOLDING else "unknown step"
                raise InvalidTopologyError(
                    f"reads {what} {input.source!r}; a step reads steps of this topology "
                    f"({sorted(self._steps)}) or the request ({REQUEST!r})",
                    step.id,
                )
        if step.reads_request and len(step.sources) > 1:
            others = [source for source in step.sources if source != REQUEST]
            raise InvalidTopologyError(
                f"reads the request and step(s) {others}; a step that reads the request "
                "reads nothing else (let a step pass the request on instead)",
                step.id,
            )

    def _source_args(self, source: str) -> SourceArgs:
        # Only the task of a first step that got the request knows its id and reports it;
        # every task of a later step hears of every id from upstream and reports it.
        return SourceArgs.one() if self._steps[source].reads_request else SourceArgs.all()

    def _sink(self, order: list[str]) -> Step:
        read = {source for step in self._steps.values() for source in step.sources}
        sinks = [step_id for step_id in order if step_id not in read]
        if len(sinks) != 1:
            raise InvalidTopologyError(
                "a DRPC topology ends in one step, whose (id, result) tuples answer the "
                f"request; steps {sinks} are read by no step",
                sinks[-1],
            )
        return self._steps[sinks[0]]

    def _check_sink_grouping(self, sink: Step) -> None:
        for input in sink.inputs:
            declarer = OutputFieldsDeclarer(input.source)
            self._steps[input.source].bolt.declare_output_fields(declarer)
            info = declarer.streams.get(input.stream_id)
            id_field = info.fields[0] if info is not None and len(info.fields) else None
            grouping = input.grouping
            if not (isinstance(grouping, FieldsGrouping) and list(grouping.fields) == [id_field]):
                raise InvalidTopologyError(
                    f"the last step has {sink.parallelism} tasks and finishes per request, so its "
                    f"input must be fields-grouped on the request id field {id_field!r} alone "
                    f"(got {grouping.describe()} grouping on stream {input.stream_id!r} of "
                    f"{input.source!r})",
                    sink.id,
                )


def spread_scaffolding(topology: Topology, tasks: int) -> Topology:
    """``topology`` with ``tasks`` tasks of each scaffolding component (see the module doc)."""
    if topology.drpc_function is None:
        raise InvalidTopologyError(f"topology {topology.name!r} serves no DRPC function")
    if tasks < 1:
        raise ValueError(f"a spread scaffolding needs at least one task each, got {tasks}")
    specs = []
    for spec in topology.components.values():
        inputs = dict(spec.inputs)
        if spec.id in SCAFFOLDING:
            if spec.id in (PREPARE_ID, RETURN_ID):  # the one input: the task of the same index
                inputs = dict.fromkeys(inputs, LocalOrShuffleGrouping())
            spec = replace(spec, parallelism=tasks, inputs=inputs, conf=dict(spec.conf))
        else:
            spec = replace(spec, inputs=inputs, conf=dict(spec.conf))
        specs.append(spec)
    spread = Topology(topology.name, specs, topology.conf)
    spread.drpc_function = topology.drpc_function
    spread.drpc_steps = list(topology.drpc_steps)
    return spread


def _result_stream(sink: Step) -> tuple[str, Fields]:
    declarer = OutputFieldsDeclarer(sink.id)
    sink.bolt.declare_output_fields(declarer)
    streams = declarer.streams
    if len(streams) != 1:
        raise InvalidTopologyError(
            "the last step of a DRPC topology must declare exactly one stream, "
            f"it declares {len(streams)} ({sorted(streams)})",
            sink.id,
        )
    stream_id, info = next(iter(streams.items()))
    if len(info.fields) != 2:
        raise InvalidTopologyError(
            "the output stream of the last step must have exactly two fields, the request "
            f"id and the result; it has {info.fields.to_list()}",
            sink.id,
        )
    return stream_id, info.fields


def _topological_order(steps: Mapping[str, Step]) -> list[str]:
    """The step ids, each after every step it reads (declaration order among equals);
    ``InvalidTopologyError`` naming a step of a cycle."""
    order: list[str] = []
    done: set[str] = set()
    path: list[str] = []

    def visit(step_id: str) -> None:
        if step_id in done:
            return
        if step_id in path:
            cycle = [*path[path.index(step_id) :], step_id]
            raise InvalidTopologyError(
                f"the steps form a cycle ({' -> '.join(reversed(cycle))}); a DRPC topology's "
                "steps form a DAG",
                step_id,
            )
        path.append(step_id)
        for source in steps[step_id].sources:
            if source != REQUEST:
                visit(source)
        path.pop()
        done.add(step_id)
        order.append(step_id)

    for step_id in steps:
        visit(step_id)
    return order
