"""Compiling a Trident graph into drpc topologies: segments of fused steps, cut at repartitions.

Contract. ``transactional_topology(topology, state_dir)`` compiles the spout
stream of a ``TridentTopology`` into a transactional topology
(``drpc.transactional``): the spout's emitter, then one ``SegmentBolt`` per
segment (the steps between two repartitions run fused in one task, batch
by batch) and one committer ``PersistBolt`` per ``persistent_aggregate``,
so commits are strictly ordered and exactly once by the transactional
machinery and the map kinds' txid rules. ``drpc_topology(topology, function,
state_dir)`` compiles one DRPC stream into a coordinated DRPC topology
(``drpc.builders.coordinated_drpc``): its segments as a DAG, each request
a batch, then ``ReturnTuples`` reading the stream's one final tip. The
stream may branch, query several states, and merge or join its branches
again (compiled as for spout streams, below); it may not write state, and
branches that end apart are an ``InvalidTopologyError`` (Storm would answer
with whichever node was declared last). ``drpc_topologies`` compiles them
all. Both carry ``state_dir``, made absolute, as ``drpc.state.dir`` so state
queries read that directory's committed state.

Several spout streams run as one ``drpc.trident.spouts`` multi-spout: each
stream's first segment reads its own stream of the spout component. A
``merge`` or ``join`` ends each input's segment with an emit to a stream of
its own; the merge's (join's) segment subscribes to all of them (a join by
fields grouping on each side's join fields, so equal keys meet in one task)
and starts with a ``Root`` (a ``JoinRoot``). A ``partition_persist`` is a
committer ``PartitionPersistBolt`` fed by its segment's tasks (local or
shuffle grouping). A window is a committer ``WindowBolt`` fed the same way,
whose tasks emit the windows that fire, in the commit, to the segment of
the steps after it (as many tasks, local grouping); its store is keyed by
the transactional topology's id.

Segment parallelism: a ``parallelism_hint`` on any step of the segment, else
that of the segment feeding it (the spout's for the first: its
``new_stream(parallelism=)``, or a hint right after ``new_stream``; the
largest of the inputs' after a merge or join), 1 after a global or
batch-global repartition. A committer's: the hint on its ``TridentState``,
else its input segment's (a ``persistent_aggregate``'s keys are fields
grouped over its tasks, so each key is written by one task). A hint of more
than one on the state itself makes it a partitioned state, a partition per task
(``drpc.transactional.partitions``); a ``partition_persist`` so hinted after a
``partition_by`` reads that repartition's stream directly, grouped by its fields.
Streams between components are named ``s0``, ``s1``, ...

Repartitions become groupings (``Input.grouping``): ``batch_global`` a
batch-global grouping (``processors.BATCH_GLOBAL``), ``local``
local-or-shuffle, ``identity`` local-or-shuffle too, checked once every
component has its tasks to have as many tasks as its input (so it keeps
each task index), ``custom`` the user's grouping itself. The ungrouped aggregates of a
segment fed by a global or batch-global repartition get that grouping as
``single_emit``, so they answer each batch once (``drpc.trident.processors``).

Component ids: ``b<n>`` for segments, ``persist<n>`` and ``window<n>`` for
committers, then the names (``Stream.name``) of the steps they run, each
once in a row in declaration order (``b0-split``); a repartition's own name
counts for no component. A component's configuration holds the sum of its
steps' resource hints under Storm's keys (``plan.Resources``); a hint on a
repartition counts for the segment before it, as its parallelism hint does.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from drpc.builders.coordinated_drpc import REQUEST, CoordinatedDRPCTopologyBuilder
from drpc.errors import InvalidTopologyError
from drpc.model.fields import Fields
from drpc.model.grouping import (
    AllGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    KeyGroupGrouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
)
from drpc.model.streams import DEFAULT_STREAM_ID
from drpc.model.topology import Topology
from drpc.state.keygroups import DEFAULT_KEY_GROUPS
from drpc.state.topology import STATE_DIR_CONF
from drpc.transactional.builder import KEY_GROUPS_CONF, TransactionalTopologyBuilder
from drpc.trident.bolts import (
    PartitionPersistBolt,
    PersistBolt,
    ReturnTuples,
    SegmentBolt,
    WindowBolt,
)
from drpc.trident.fused import (
    FusedBackend,
    LocalFusedBackend,
    ResidentFusedBackend,
    fused_plan,
)
from drpc.trident.plan import (
    DRPCSource,
    Each,
    FilterStep,
    FlatMapStep,
    Join,
    MapStep,
    Merge,
    Names,
    Node,
    PartitionAggregate,
    PartitionPersist,
    Peek,
    Persist,
    Project,
    Repartition,
    Resources,
    SpoutSource,
    StateQuery,
    WindowStep,
)
from drpc.trident.processors import (
    BATCH_FIELD,
    BATCH_GLOBAL,
    EachProcessor,
    Emit,
    FilterProcessor,
    FlatMapProcessor,
    JoinRoot,
    MapProcessor,
    PartitionAggregateProcessor,
    PeekProcessor,
    Processor,
    ProjectProcessor,
    Root,
    Selection,
    StateQueryProcessor,
)
from drpc.trident.spouts import multi_spout, source_stream
from drpc.trident.stream import TridentTopology, topology_nodes

SPOUT_ID = "spout"
RESULT_STREAM = "result"
RETURN_STEP = "return-tuples"


@dataclass(frozen=True, slots=True)
class Input:
    """Where a component's tuples come from and how they are spread over its tasks."""

    component: str
    stream: str
    how: str  # "fields", "global", "batch_global", "all", "shuffle", "local" (stay in the
    # task if possible), "none" (the DRPC request, to any one task), "key_group" (fields,
    # to the task of the partition holding the key: ``key_groups`` of them)
    fields: Names = ()
    key_groups: int = DEFAULT_KEY_GROUPS
    custom: Grouping | None = None  # "custom": a user's grouping (``Stream.partition``)

    @property
    def grouping(self) -> Grouping:
        if self.custom is not None:
            return self.custom
        if self.how == "fields":
            return FieldsGrouping(Fields(*self.fields))
        if self.how == "key_group":
            return KeyGroupGrouping(Fields(*self.fields), self.key_groups)
        if self.how == "batch_global":
            return BATCH_GLOBAL
        if self.how == "global":
            return GlobalGrouping()
        if self.how == "all":
            return AllGrouping()
        if self.how in ("local", "identity"):  # identity: checked to have equal tasks
            return LocalOrShuffleGrouping()
        if self.how == "none":
            return NoneGrouping()
        return ShuffleGrouping()

    @property
    def is_global(self) -> bool:
        """Every tuple of a batch reaches one task (``processors``' batch-global steps)."""
        return self.how in ("global", "batch_global")


@dataclass(slots=True)
class Component:
    name: str
    inputs: list[Input]
    parallelism: int
    root: Root | None = None  # a segment's processors
    persist: PersistBolt | PartitionPersistBolt | WindowBolt | None = None
    streams: dict[str, Names] = field(default_factory=dict)
    reads_partitions: str | None = None  # its task i reads partition i of this state
    names: dict[int, str] = field(default_factory=dict)  # its steps' names by creation
    resources: Resources = field(default_factory=Resources)

    @property
    def input(self) -> Input:
        return self.inputs[0]

    def runs(self, node: Node) -> None:
        """Count step ``node`` in this component's name and resources."""
        if node.name is not None:
            self.names[node.created] = node.name
        self.resources = self.resources + node.resources

    def labelled(self) -> str:
        """Its id with its steps' names, as Storm names a bolt: each name once in a row, in
        the order the steps were declared (``b1-split-count``)."""
        labels: list[str] = []
        for _, name in sorted(self.names.items()):
            if not labels or labels[-1] != name:
                labels.append(name)
        return "-".join([self.name, *labels])


@dataclass(slots=True)
class _Gathering:
    """The inputs of a merge or join node placed so far: (input index, its stream, tasks)."""

    arrived: list[tuple[int, Input, int]] = field(default_factory=list)


class _Compiler:
    def __init__(
        self,
        topology_id: str = "",
        partitioned: Mapping[str, int] | None = None,
        key_groups: int = DEFAULT_KEY_GROUPS,
    ) -> None:
        """:param partitioned: the partitions of each partitioned map state, by name: a
        segment grouped by the key it queries such a state with gets a task per
        partition, each keyed like the partition (Storm's routing)."""
        self.topology_id = topology_id
        self.partitioned = dict(partitioned or {})
        self.key_groups = key_groups
        self.components: list[Component] = []
        self._streams = 0
        self._gathering: dict[int, _Gathering] = {}

    def stream_id(self) -> str:
        name = f"s{self._streams}"
        self._streams += 1
        return name

    def segment(self, inputs: list[Input], parallelism: int, root: Root | None = None) -> Component:
        component = Component(f"b{len(self.components)}", inputs, parallelism, root=root or Root())
        self.components.append(component)
        return component

    def place(
        self,
        origin: Node,
        children: list[Node],
        fields: Names,
        parent: Processor,
        segment: Component,
    ) -> None:
        """Place steps ``children`` of ``origin`` (over tuples of ``fields``, after
        ``parent``) in ``segment``."""
        for child in children:
            operation = child.operation
            if isinstance(operation, Merge | Join):
                self.gather(child, operation, origin, fields, parent, segment)
                continue
            if isinstance(operation, PartitionPersist):  # its hint is its committer's
                self.partition_persist(child, operation, fields, parent, segment)
                continue
            if child.parallelism is not None:
                segment.parallelism = child.parallelism
            if isinstance(operation, Repartition):
                # like its parallelism hint, a repartition's resources are its segment's
                segment.resources = segment.resources + child.resources
                self.repartition(child, operation, parent, segment)
                continue
            if isinstance(operation, WindowStep):
                self.window(child, operation, fields, parent, segment)
                continue
            segment.runs(child)
            processor = _processor(child, fields)
            if isinstance(processor, PartitionAggregateProcessor) and not processor.grouped:
                processor.single_emit = _single_emit(segment)
            parent.children.append(processor)
            self.place(child, child.children, child.fields, processor, segment)

    def emit(self, parent: Processor, segment: Component, fields: Names) -> str:
        """End ``parent``'s branch of ``segment`` with an emit of ``fields`` on a new stream."""
        stream = self.stream_id()
        parent.children.append(Emit(stream))
        segment.streams[stream] = fields
        return stream

    def gather(
        self,
        node: Node,
        operation: Merge | Join,
        origin: Node,
        fields: Names,
        parent: Processor,
        segment: Component,
    ) -> None:
        """Feed input ``origin`` to merge/join ``node``; start its segment once all are fed."""
        stream = self.emit(parent, segment, fields)
        side = next(i for i, input in enumerate(operation.inputs) if input is origin)
        if isinstance(operation, Join):
            input = Input(segment.name, stream, "fields", operation.keys[side])
        else:
            input = Input(segment.name, stream, "local")
        gathering = self._gathering.setdefault(id(node), _Gathering())
        gathering.arrived.append((side, input, segment.parallelism))
        if len(gathering.arrived) < len(operation.inputs):
            return
        arrived = sorted(gathering.arrived, key=lambda entry: entry[0])
        inputs = [input for _, input, _ in arrived]
        parallelism = node.parallelism or max(tasks for _, _, tasks in arrived)
        root = Root() if isinstance(operation, Merge) else _join_root(operation, inputs)
        after = self.segment(inputs, parallelism, root)
        after.runs(node)
        self.place(node, node.children, node.fields, root, after)

    def repartition(
        self, node: Node, operation: Repartition, parent: Processor, segment: Component
    ) -> None:
        stream = self.emit(parent, segment, node.fields)
        input = Input(segment.name, stream, operation.how, operation.fields)
        if operation.grouping is not None:
            input = dataclasses.replace(input, custom=operation.grouping)
        parallelism = 1 if input.is_global else segment.parallelism
        queried = self.queried_partitions(node, operation)
        if queried is not None:
            parallelism = queried[1]
            input = Input(segment.name, stream, "key_group", operation.fields, self.key_groups)
        persists = [
            child
            for child in node.children
            if isinstance(child.operation, Persist)
            or (_partitioned_persist(child) and operation.how == "fields")
        ]
        steps = [child for child in node.children if child not in persists]
        for child in persists:
            if isinstance(child.operation, Persist):
                self.persist(child, node.fields, input, parallelism)
            else:
                assert isinstance(child.operation, PartitionPersist)
                self.partition_persist_of(child, child.operation, node.fields, input)
        if steps or not persists:  # a stream ending in a repartition still gets its tasks
            after = self.segment([input], parallelism)
            if queried is not None:
                after.reads_partitions = queried[0]
            self.place(node, steps, node.fields, self.root_of(after), after)

    def queried_partitions(self, node: Node, operation: Repartition) -> tuple[str, int] | None:
        """The partitioned state (name, partitions) a grouping by fields feeds a query of,
        keyed by those very fields, if any: the segment after it runs where the keys are."""
        if operation.how != "fields":
            return None
        for child in node.children:
            query = child.operation
            if (
                isinstance(query, StateQuery)
                and query.state.name in self.partitioned
                and tuple(query.input) == tuple(operation.fields)
            ):
                return query.state.name, self.partitioned[query.state.name]
        return None

    def partition_persist(
        self,
        node: Node,
        operation: PartitionPersist,
        fields: Names,
        parent: Processor,
        segment: Component,
    ) -> None:
        stream = self.emit(parent, segment, fields)
        input = Input(segment.name, stream, "local")
        self.partition_persist_of(node, operation, fields, input, segment.parallelism)

    def partition_persist_of(
        self,
        node: Node,
        operation: PartitionPersist,
        fields: Names,
        input: Input,
        parallelism: int = 1,
    ) -> None:
        """The committer of ``partition_persist`` ``node`` over ``input`` (see module doc)."""
        bolt = PartitionPersistBolt(
            operation.state,
            Selection(fields, operation.input),
            operation.updater,
            partitioned=_partitioned_persist(node),
        )
        tasks = node.parallelism or parallelism
        component = Component(f"persist{len(self.components)}", [input], tasks, persist=bolt)
        component.runs(node)
        self.components.append(component)

    def window(
        self,
        node: Node,
        operation: WindowStep,
        fields: Names,
        parent: Processor,
        segment: Component,
    ) -> None:
        stream = self.emit(parent, segment, fields)
        output = self.stream_id()
        bolt = WindowBolt(operation, Selection(fields, operation.input), self.topology_id, output)
        name = f"window{len(self.components)}"
        input = Input(segment.name, stream, "local")
        component = Component(name, [input], segment.parallelism, persist=bolt)
        component.runs(node)
        self.components.append(component)
        if node.children:
            after = self.segment([Input(name, output, "local")], segment.parallelism)
            self.place(node, node.children, node.fields, self.root_of(after), after)

    @staticmethod
    def root_of(component: Component) -> Root:
        assert component.root is not None
        return component.root

    def persist(self, node: Node, fields: Names, input: Input, parallelism: int) -> None:
        operation = node.operation
        assert isinstance(operation, Persist)
        bolt = PersistBolt(
            operation.state,
            Selection(fields, operation.group),
            Selection(fields, operation.input),
            operation.aggregator,
            partitioned=_partitioned_persist(node),
        )
        component = Component(
            f"persist{len(self.components)}",
            [input],
            node.parallelism or parallelism,
            persist=bolt,
        )
        component.runs(node)
        self.components.append(component)

    def finish(self) -> None:
        """Check identity repartitions and give the components their names' ids."""
        tasks = {component.name: component.parallelism for component in self.components}
        for component in self.components:
            for input in component.inputs:
                if input.how == "identity" and tasks[input.component] != component.parallelism:
                    raise InvalidTopologyError(
                        f"identity_partition from {tasks[input.component]} tasks to "
                        f"{component.parallelism}: each task's tuples stay in the task of its "
                        "index, so both sides need as many tasks (Storm's IdentityGrouping)",
                        component.name,
                    )
        ids = {component.name: component.labelled() for component in self.components}
        for component in self.components:
            component.name = ids[component.name]
            component.inputs = [
                dataclasses.replace(input, component=ids.get(input.component, input.component))
                for input in component.inputs
            ]


def _partitioned_states(topology: TridentTopology) -> dict[str, int]:
    """The partitions of each map state a ``parallelism_hint`` partitions, by name."""
    return {
        node.operation.state.name: node.parallelism or 1
        for node in topology_nodes(topology)
        if isinstance(node.operation, Persist | PartitionPersist) and _partitioned_persist(node)
    }


def _partitioned_persist(node: Node) -> bool:
    """Whether a state's committer writes a partitioned state: a ``parallelism_hint`` of
    more than one task on the state itself (without one its tasks share one directory)."""
    return isinstance(node.operation, Persist | PartitionPersist) and (node.parallelism or 1) > 1


def _single_emit(segment: Component) -> Grouping | None:
    """The grouping that sends each batch of ``segment`` to one task, if it has one."""
    if len(segment.inputs) == 1 and segment.input.is_global:
        return segment.input.grouping
    return None


def _join_root(operation: Join, inputs: list[Input]) -> JoinRoot:
    sides = {input.stream: side for side, input in enumerate(inputs)}
    fields = tuple(input.fields for input in operation.inputs)
    keys = (Selection(fields[0], operation.keys[0]), Selection(fields[1], operation.keys[1]))
    rest = tuple(
        Selection(fields[side], tuple(f for f in fields[side] if f not in operation.keys[side]))
        for side in (0, 1)
    )
    return JoinRoot(sides, keys, (rest[0], rest[1]))


def _processor(node: Node, fields: Names) -> Processor:
    """The processor of step ``node`` over tuples of ``fields``."""
    operation = node.operation
    if isinstance(operation, Each):
        return EachProcessor(
            Selection(fields, operation.input), operation.function, len(operation.output)
        )
    if isinstance(operation, FilterStep):
        return FilterProcessor(Selection(fields, operation.input), operation.filter)
    if isinstance(operation, Project):
        return ProjectProcessor(Selection(fields, operation.fields))
    if isinstance(operation, MapStep):
        return MapProcessor(Selection(fields, fields), operation.function, len(node.fields))
    if isinstance(operation, FlatMapStep):
        return FlatMapProcessor(Selection(fields, fields), operation.function, len(node.fields))
    if isinstance(operation, Peek):
        return PeekProcessor(Selection(fields, fields), operation.consumer)
    if isinstance(operation, StateQuery):
        return StateQueryProcessor(
            operation.state,
            Selection(fields, operation.input),
            operation.function,
            len(operation.output),
        )
    if isinstance(operation, PartitionAggregate):
        return PartitionAggregateProcessor(
            Selection(fields, operation.group),
            Selection(fields, operation.input),
            operation.aggregator,
            len(operation.output),
        )
    raise InvalidTopologyError(f"{type(operation).__name__} cannot run inside a segment")


def _conf(state_dir: str, conf: Mapping[str, Any] | None) -> dict[str, Any]:
    # Absolute: tasks in other processes (Spark executors) resolve it from elsewhere.
    return {**(conf or {}), STATE_DIR_CONF: os.path.abspath(state_dir)}


def transactional_topology(
    topology: TridentTopology,
    state_dir: str,
    conf: Mapping[str, Any] | None = None,
    *,
    fused: bool = True,
) -> Topology:
    """The spout stream of ``topology`` as a transactional topology (see the module doc);
    ``fused``: on Spark, the compiled path (``drpc.trident.fused``) when it can take it."""
    sources = [node for node in topology.sources if isinstance(node.operation, SpoutSource)]
    if not sources:
        raise InvalidTopologyError("this Trident topology has no spout stream (new_stream)")
    spouts = [_spout_of(source) for source in sources]
    spout_parallelism = max(
        source.parallelism or spout.parallelism
        for source, spout in zip(sources, spouts, strict=True)
    )
    txid = "+".join(s.txid for s in spouts)
    compiler = _Compiler(txid)
    for index, source in enumerate(sources):
        stream = DEFAULT_STREAM_ID if len(sources) == 1 else source_stream(index)
        first = compiler.segment([Input(SPOUT_ID, stream, "local")], spout_parallelism)
        compiler.place(source, source.children, source.fields, compiler.root_of(first), first)
    compiler.finish()
    spout = spouts[0].spout if len(spouts) == 1 else multi_spout([s.spout for s in spouts])
    builder = TransactionalTopologyBuilder(txid, SPOUT_ID, spout, spout_parallelism)
    for component in compiler.components:
        if component.persist is not None:
            declarer = builder.set_committer_bolt(
                component.name, component.persist, component.parallelism
            )
            declarer.add_configurations(component.resources.conf())
            for input in component.inputs:
                _subscribe(declarer, input)
        else:
            _declare_segment(builder, component)
    compiled = builder.create_topology(_conf(state_dir, conf))
    spout_resources = sum((source.resources for source in sources), Resources())
    compiled.components[SPOUT_ID].conf.update(spout_resources.conf())
    if fused and fused_plan(compiled) is not None:
        compiled.transactional = dataclasses.replace(
            compiled.transactional,
            spark_backend=FusedBackend,
            resident_backend=ResidentFusedBackend,
            local_backend=LocalFusedBackend,
        )
    return compiled


def _spout_of(source: Node) -> SpoutSource:
    assert isinstance(source.operation, SpoutSource)
    return source.operation


def _subscribe(declarer: Any, input: Input) -> None:
    declarer.grouping(input.component, input.grouping, input.stream)


def _declare_segment(
    builder: TransactionalTopologyBuilder | CoordinatedDRPCTopologyBuilder, component: Component
) -> None:
    """``component``'s segment as a ``SegmentBolt`` of ``builder``, reading its inputs."""
    assert component.root is not None
    bolt = SegmentBolt(component.root, component.streams)
    if component.reads_partitions is not None and component.parallelism > 1:
        bolt.reads_partitions = component.reads_partitions
    declarer = builder.set_bolt(component.name, bolt, component.parallelism)
    for key, value in component.resources.conf().items():
        declarer.add_configuration(key, value)
    for input in component.inputs:
        _subscribe(declarer, input)


def drpc_topology(
    topology: TridentTopology,
    function: str,
    state_dir: str,
    conf: Mapping[str, Any] | None = None,
) -> Topology:
    """The DRPC stream of ``function`` as a coordinated DRPC topology (see the module doc)."""
    sources = [
        node
        for node in topology.sources
        if isinstance(node.operation, DRPCSource) and node.operation.function == function
    ]
    if not sources:
        raise InvalidTopologyError(f"this Trident topology has no DRPC stream {function!r}")
    source = sources[0]
    tip = _drpc_tip(source, function)
    key_groups = int((conf or {}).get(KEY_GROUPS_CONF) or DEFAULT_KEY_GROUPS)
    compiler = _Compiler(partitioned=_partitioned_states(topology), key_groups=key_groups)
    first = compiler.segment([Input(REQUEST, DEFAULT_STREAM_ID, "none")], 1)
    first.resources = source.resources  # the DRPC spout is the server's: its first step's
    compiler.place(source, source.children, source.fields, compiler.root_of(first), first)
    compiler.finish()
    # Every branch leads to the one tip, so the tip's segment is the last one made (a
    # merge's or join's segment is made once all its inputs are placed) and holds no
    # branch: the steps from its root to the tip are one chain.
    last = compiler.components[-1]
    _append_to_tip(compiler.root_of(last), Emit(RESULT_STREAM))
    last.streams[RESULT_STREAM] = tip.fields
    builder = CoordinatedDRPCTopologyBuilder(function)
    for component in compiler.components:
        _declare_segment(builder, component)
    builder.set_bolt(RETURN_STEP, ReturnTuples()).fields_grouping(
        last.name, Fields(BATCH_FIELD), RESULT_STREAM
    )
    return builder.create_topology(_conf(state_dir, conf))


def _drpc_tip(source: Node, function: str) -> Node:
    """The one node ending DRPC stream ``source``; ``InvalidTopologyError`` when the
    stream writes state or ends in several branches."""
    tips: list[Node] = []
    seen: set[int] = set()
    pending = collections.deque([source])
    while pending:
        node = pending.popleft()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node.operation, Persist):
            raise InvalidTopologyError(
                f"DRPC stream {function!r} writes state; DRPC streams only query state"
            )
        if not node.children:
            tips.append(node)
        pending.extend(node.children)
    if len(tips) > 1:
        raise InvalidTopologyError(
            f"DRPC stream {function!r} ends in {len(tips)} branches (fields "
            f"{', '.join(str(list(tip.fields)) for tip in tips)}); a DRPC function answers "
            "with its one final stream: merge or join the branches, or drop the extra ones"
        )
    return tips[0]


def _append_to_tip(processor: Processor, leaf: Processor) -> None:
    while processor.children:
        processor = processor.children[-1]
    processor.children.append(leaf)


def drpc_topologies(
    topology: TridentTopology, state_dir: str, conf: Mapping[str, Any] | None = None
) -> list[Topology]:
    """Every DRPC stream of ``topology``, each as a coordinated DRPC topology."""
    return [
        drpc_topology(topology, node.operation.function, state_dir, conf)
        for node in topology.sources
        if isinstance(node.operation, DRPCSource)
    ]
