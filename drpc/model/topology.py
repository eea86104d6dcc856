"""Topologies: components, their parallelism and subscriptions, validated at build time.

Contract: ``TopologyBuilder.create_topology()`` either returns a ``Topology``
every executor can run, or raises ``InvalidTopologyError`` naming the
component at fault: duplicate or reserved component id, non-positive
parallelism, a subscription to an unknown component or undeclared stream, a
fields grouping on an undeclared field, a direct grouping on a non-direct
stream or the reverse, a bolt with no input.

Task ids are assigned as in Storm: components sorted by id, tasks numbered
consecutively from 1, so ``context.component_tasks(c)`` is stable.

``CoordinatedBolt`` wraps a bolt in the CoordinatedBolt rules (see
``drpc.semantics.coordination``); it is a declaration that executors
interpret, not code that runs by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from drpc.errors import InvalidTopologyError
from drpc.model.components import (
    BaseBasicBolt,
    BaseBatchBolt,
    BaseRichBolt,
    BaseRichSpout,
    FinishedCallback,
    IComponent,
)
from drpc.model.fields import Fields
from drpc.model.grouping import (
    Grouping,
    NamedGroupings,
)
from drpc.model.streams import (
    COORDINATED_STREAM_FIELDS,
    COORDINATED_STREAM_ID,
    DEFAULT_STREAM_ID,
    GlobalStreamId,
    OutputFieldsDeclarer,
    StreamInfo,
)

BOLT_TYPES = (BaseBasicBolt, BaseRichBolt, BaseBatchBolt)


@dataclass(frozen=True)
class SourceArgs:
    """How many tasks of a source report counts to each task for an id.

    ``single``: exactly one task of the source knows the id (the one that got
    the request); ``all``: every task of the source reports.
    """

    single: bool

    @classmethod
    def one(cls) -> SourceArgs:
        return cls(True)

    @classmethod
    def all(cls) -> SourceArgs:
        return cls(False)


class CoordinatedBolt(IComponent):
    """Storm's CoordinatedBolt as a declaration.

    ``sources`` maps each upstream coordinated component to ``SourceArgs``;
    empty means this is a first step that receives exactly one request tuple
    per id. ``id_stream``: a stream (fields-grouped on the id) whose tuple an
    id's owner task must receive before finishing; tasks that do not own the
    id never call finish for it. ``deliver_id_tuple`` also hands that tuple to
    the bolt (not counted as data). ``commit_stream``: transactional commit
    notifications (committers finish only after receiving one).
    """

    def __init__(
        self,
        delegate: IComponent,
        sources: Mapping[str, SourceArgs] | None = None,
        *,
        id_stream: GlobalStreamId | None = None,
        deliver_id_tuple: bool = False,
        commit_stream: GlobalStreamId | None = None,
    ) -> None:
        if not isinstance(delegate, BOLT_TYPES):
            raise TypeError(f"CoordinatedBolt wraps bolts, got {type(delegate).__name__}")
        self.delegate = delegate
        self.sources = dict(sources or {})
        self.id_stream = id_stream
        self.deliver_id_tuple = deliver_id_tuple
        self.commit_stream = commit_stream

    @property
    def has_finish(self) -> bool:
        return isinstance(self.delegate, (BaseBatchBolt, FinishedCallback))

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.delegate.declare_output_fields(declarer)
        declarer.streams[COORDINATED_STREAM_ID] = StreamInfo(COORDINATED_STREAM_FIELDS, True)

    def get_component_configuration(self) -> dict[str, Any] | None:
        return self.delegate.get_component_configuration()


def user_component(component: IComponent) -> IComponent:
    """The user's object behind a possible ``CoordinatedBolt`` wrapper."""
    return component.delegate if isinstance(component, CoordinatedBolt) else component


@dataclass
class ComponentSpec:
    """One component of a topology and everything executors need to run it."""

    id: str
    component: IComponent
    kind: str  # "spout" or "bolt"
    parallelism: int
    inputs: dict[GlobalStreamId, Grouping] = field(default_factory=dict)
    outputs: dict[str, StreamInfo] = field(default_factory=dict)
    conf: dict[str, Any] = field(default_factory=dict)

    @property
    def user_component(self) -> IComponent:
        return user_component(self.component)

    @property
    def coordination(self) -> CoordinatedBolt | None:
        return self.component if isinstance(self.component, CoordinatedBolt) else None

    def describe(self) -> str:
        return f"{self.id} ({type(self.user_component).__name__} x{self.parallelism})"


class _Declarer:
    def __init__(self, spec: ComponentSpec) -> None:
        self._spec = spec

    def add_configuration(self, key: str, value: Any) -> _Declarer:
        self._spec.conf[key] = value
        return self

    def add_configurations(self, conf: Mapping[str, Any]) -> _Declarer:
        self._spec.conf.update(conf)
        return self


class BoltDeclarer(_Declarer, NamedGroupings):
    """Declares a bolt's subscriptions: ``set_bolt(...).shuffle_grouping("spout")``."""

    def grouping(
        self, component_id: str, grouping: Grouping, stream_id: str = DEFAULT_STREAM_ID
    ) -> Self:
        key = GlobalStreamId(component_id, stream_id)
        if key in self._spec.inputs:
            raise InvalidTopologyError(f"subscribes to {key} twice", self._spec.id)
        self._spec.inputs[key] = grouping
        return self


class SpoutDeclarer(_Declarer):
    """Declares a spout's configuration."""


def _check_component_id(component_id: object) -> str:
    if not isinstance(component_id, str) or not component_id:
        raise InvalidTopologyError(f"component ids must be non-empty strings, got {component_id!r}")
    if component_id.startswith("__"):
        raise InvalidTopologyError(
            "component ids starting with '__' are reserved for drpc", component_id
        )
    return component_id


def _check_parallelism(component_id: str, parallelism: object) -> int:
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise InvalidTopologyError(
            f"parallelism must be a positive integer, got {parallelism!r}", component_id
        )
    return parallelism


class TopologyBuilder:
    """Storm's TopologyBuilder: ``set_spout``, ``set_bolt``, ``create_topology``."""

    def __init__(self) -> None:
        self._specs: dict[str, ComponentSpec] = {}

    def _add(
        self, component_id: str, component: IComponent, kind: str, parallelism: int
    ) -> ComponentSpec:
        component_id = _check_component_id(component_id)
        if component_id in self._specs:
            raise InvalidTopologyError("duplicate component id", component_id)
        spec = ComponentSpec(
            component_id, component, kind, _check_parallelism(component_id, parallelism)
        )
        self._specs[component_id] = spec
        return spec

    def set_spout(
        self, component_id: str, spout: BaseRichSpout, parallelism: int = 1
    ) -> SpoutDeclarer:
        if not isinstance(spout, BaseRichSpout):
            raise InvalidTopologyError(
                f"set_spout needs a BaseRichSpout, got {type(spout).__name__}", component_id
            )
        return SpoutDeclarer(self._add(component_id, spout, "spout", parallelism))

    def set_bolt(self, component_id: str, bolt: IComponent, parallelism: int = 1) -> BoltDeclarer:
        if not isinstance(bolt, (*BOLT_TYPES, CoordinatedBolt)):
            raise InvalidTopologyError(
                "set_bolt needs a BaseBasicBolt, BaseRichBolt or BaseBatchBolt, "
                f"got {type(bolt).__name__}",
                component_id,
            )
        return BoltDeclarer(self._add(component_id, bolt, "bolt", parallelism))

    def create_topology(
        self, name: str = "topology", conf: Mapping[str, Any] | None = None
    ) -> Topology:
        return Topology(name, list(self._specs.values()), dict(conf or {}))


class Topology:
    """A validated topology with task ids assigned."""

    def __init__(self, name: str, specs: list[ComponentSpec], conf: dict[str, Any]) -> None:
        self.name = name
        self.conf = conf
        self.drpc_function: str | None = None
        self.drpc_steps: list[str] = []  # a DRPC topology's own steps, upstream first
        self.transactional: Any = None  # drpc.transactional.builder.TransactionalInfo
        self.components: dict[str, ComponentSpec] = {spec.id: spec for spec in specs}
        for spec in specs:
            declarer = OutputFieldsDeclarer(spec.id)
            try:
                spec.component.declare_output_fields(declarer)
            except InvalidTopologyError:
                raise
            except Exception as error:
                raise InvalidTopologyError(
                    f"declare_output_fields raised {type(error).__name__}: {error}", spec.id
                ) from error
            spec.outputs = declarer.streams
        self._validate()
        self.component_task_ids: dict[str, list[int]] = {}
        self.task_component: dict[int, str] = {}
        next_task = 1
        for component_id in sorted(self.components):
            tasks = list(range(next_task, next_task + self.components[component_id].parallelism))
            next_task += len(tasks)
            self.component_task_ids[component_id] = tasks
            for task in tasks:
                self.task_component[task] = component_id
        self._subscribers: dict[GlobalStreamId, list[tuple[str, Grouping]]] = {}
        for spec in specs:
            for stream, grouping in spec.inputs.items():
                self._subscribers.setdefault(stream, []).append((spec.id, grouping))

    def _validate(self) -> None:
        for spec in self.components.values():
            if spec.kind == "bolt" and not spec.inputs:
                raise InvalidTopologyError("bolt subscribes to no stream", spec.id)
            for stream, grouping in spec.inputs.items():
                source = self.components.get(stream.component_id)
                if source is None:
                    raise InvalidTopologyError(
                        f"subscribes to unknown component {stream.component_id!r}", spec.id
                    )
                info = source.outputs.get(stream.stream_id)
                if info is None:
                    raise InvalidTopologyError(
                        f"subscribes to stream {stream.stream_id!r} that component "
                        f"{stream.component_id!r} does not declare "
                        f"(it declares {sorted(source.outputs)})",
                        spec.id,
                    )
                if grouping.needs_direct_stream and not info.direct:
                    raise InvalidTopologyError(
                        f"direct grouping on {stream}, which is not declared direct", spec.id
                    )
                if info.direct and not grouping.needs_direct_stream:
                    raise InvalidTopologyError(
                        f"{grouping.describe()} grouping on direct stream {stream}; "
                        "direct streams need direct_grouping",
                        spec.id,
                    )
                grouping.validate(info.fields, spec.id, str(stream))

    def component(self, component_id: str) -> ComponentSpec:
        return self.components[component_id]

    def subscribers(self, component_id: str, stream_id: str) -> list[tuple[str, Grouping]]:
        """``(subscriber id, grouping)`` for every subscription to the stream."""
        return self._subscribers.get(GlobalStreamId(component_id, stream_id), [])

    def output_fields(self, component_id: str, stream_id: str = DEFAULT_STREAM_ID) -> Fields:
        return self.components[component_id].outputs[stream_id].fields

    def downstream_tasks(self, component_id: str, stream_id: str) -> list[int]:
        """Every task subscribed to a stream, sorted."""
        tasks: set[int] = set()
        for subscriber, _ in self.subscribers(component_id, stream_id):
            tasks.update(self.component_task_ids[subscriber])
        return sorted(tasks)

    def expected_reports(self, component_id: str) -> int:
        """How many count reports each task of a coordinated bolt expects per id."""
        coordination = self.components[component_id].coordination
        if coordination is None:
            return 0
        return sum(
            1 if args.single else self.components[source].parallelism
            for source, args in coordination.sources.items()
        )

    def __repr__(self) -> str:
        parts = ", ".join(spec.describe() for spec in self.components.values())
        return f"Topology({self.name!r}: {parts})"
