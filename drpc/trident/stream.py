"""The Trident API: ``TridentTopology``, ``Stream``, ``GroupedStream``, ``TridentState``.

Contract (Storm's Trident, snake_case). ``TridentTopology()`` records a graph
of streams (``drpc.trident.plan``); nothing runs until it is compiled
(``drpc.trident.compiler``) and run (``drpc.trident.run``) or served.

- ``new_stream(txid, spout, parallelism=1)``: a stream of batches from a
  transactional, partitioned or opaque spout of ``drpc.transactional``;
  ``txid`` names the topology's transactional state (its commits, txids and
  spout metadata). A topology may have several spout streams: they run as
  one transactional topology whose batches hold a batch of every spout, so
  they must be of one kind (all partitioned or all opaque, a plain
  transactional spout only alone); its transactional id is their txids
  joined with ``+``.
- ``merge(*streams)``: one stream of the tuples of all (same number of
  fields; named as the first's). ``join(stream1, fields1, stream2, fields2,
  out_fields)``: the inner join of the two streams' tuples of each batch on
  the join fields, output as Storm's: the join fields, then the other fields
  of ``stream1``, then those of ``stream2``, named ``out_fields``. Both need
  distinct streams, all from spout streams or all branches of one DRPC
  stream (a request is a batch of its own: as in Storm, a DRPC stream meets
  no spout stream and no other function's stream).
- ``new_drpc_stream(function)``: a stream of DRPC requests to ``function``,
  one field ``args``; each request is its own batch, answered with the JSON
  list of the stream's final tuples (``[[5]]``). It may branch, query several
  states and merge or join its branches again, but ends in one final stream
  (checked when compiled, ``drpc.trident.compiler``).
- ``new_static_state(factory)``: a ``TridentState`` for querying a map state
  another topology (or run) writes.
- On a ``Stream``: ``each(fields, function, out_fields)`` appends a function's
  output to each tuple (``each(fields, filter)`` filters); ``filter``,
  ``project``, ``map``, ``flat_map``, ``peek``; ``partition_by(fields)``,
  ``shuffle()``, ``local_or_shuffle()`` (stay in the task when the next
  steps have as many tasks), ``global_()`` (every batch to the first task),
  ``batch_global()`` (every tuple of a batch to one task chosen per batch:
  batches spread over the tasks), ``broadcast()`` (every task) repartition;
  ``parallelism_hint(n)`` sets the number of tasks of the steps since the
  last repartition; ``partition(grouping)`` repartitions by any grouping of
  ``drpc.model.grouping`` (``FieldsGrouping`` is ``partition_by``, the others
  the repartitions above, ``NoneGrouping`` a shuffle; another ``Grouping``
  subclass is a custom grouping, used as it is; ``DirectGrouping`` and
  ``KeyGroupGrouping`` raise ``InvalidTopologyError``);
  ``identity_partition()`` sends task i's tuples to task i of the next steps
  (compiled as a local-or-shuffle grouping, which keeps the task index when
  both sides have as many tasks; the compiler raises
  ``InvalidTopologyError`` when they do not, as Storm's ``IdentityGrouping``
  fails);
- ``name(name)`` (on a ``Stream`` or ``GroupedStream``): a stream whose steps,
  from there until the next ``name``, carry ``name``; the compiler appends a
  component's names to its id, each once in a row in declaration order
  (``b0-split``, ``persist3-counts``), as Storm names its bolts.
- Resource hints (Storm's ``setCPULoad``, ``setMemoryLoad``):
  ``set_cpu_load(load)`` (percent of a core) and ``set_memory_load(on_heap,
  off_heap=None)`` (MB) on a ``Stream`` set them on its last step, on a
  ``TridentState`` on the step writing it; a number > 0 (off-heap >= 0),
  else ``InvalidTopologyError``. A component's are the sum of its steps'
  (after ``new_stream``: the spout's; after ``new_drpc_stream``: the first
  step's), recorded in its configuration under Storm's keys
  (``drpc.trident.plan.CPU_LOAD_CONF``, ``ON_HEAP_CONF``, ``OFF_HEAP_CONF``),
  where its operations' ``prepare`` sees them. No executor enforces them:
  ``local`` runs every task in this process; the resident tasks are
  long-running Spark tasks that host every component, so one task has one resource
  profile for all; ``spark-batch`` fuses components into stages and runs committers
  on the driver, and Spark's task profiles count whole cores where Storm's
  load is a percent of one, with no memory per task; ``local[*]`` honours no
  profile at all. Size executors with ``spark_conf`` instead.
  ``partition_aggregate``, ``aggregate`` (the whole batch),
  ``group_by(fields)``, ``persistent_aggregate(state, [fields,] aggregator,
  out_fields)`` (returns a ``TridentState``), ``state_query(state, fields,
  query, out_fields)``, ``partition_persist(state, fields, updater)`` (a
  ``StateUpdater`` per batch partition in the commit; returns a
  ``TridentState``).
- Batch-global semantics (Storm's): an ungrouped ``aggregate``, and an
  ungrouped aggregate after ``batch_global()`` or ``global_()``, answer
  exactly once per batch whatever their tasks (``aggregate`` is
  ``batch_global``; ``Count`` of an empty batch: one ``[0]``).
- ``chained_agg()`` then ``partition_aggregate(...)`` links or
  ``aggregate(...)`` links (not both), then ``chain_end()``: the aggregators
  in one pass (``drpc.trident.chained``), output fields the concatenation of
  theirs; one row per partition or per batch (per group on a
  ``GroupedStream``), the cross product when an aggregator emits several.
  An aggregate chain of combiners only combines partials first.
- ``min_by(field[, comparator])``, ``max_by``, ``min(comparator)``,
  ``max(comparator)`` (a field name: ``min_by``/``max_by``): the whole tuple
  whose field (whole tuple, by the comparator) is least/greatest, one per
  batch: each partition's winner, then the winner among those (Storm's
  answer one per partition); nothing for an empty batch.
- ``TridentState.parallelism_hint(n)``: the tasks of the committer writing
  the state (``persistent_aggregate``: keys fields grouped over them;
  ``partition_persist``: its updater's tasks).
- ``GroupedStream``: ``aggregate`` and ``partition_aggregate`` per group
  (output: the group fields then the aggregate's), ``persistent_aggregate``
  (the map state's key is the group value, a tuple for several fields),
  ``state_query`` (partitioned by the group fields), ``chained_agg``.
- Combiner aggregators run in two steps: each partition combines its tuples
  per group, then only the partial aggregates cross the repartition. Reducer
  and general aggregators move every tuple to its group's task.
- Windows (``drpc.trident.windowing``): ``tumbling_window(window, store,
  input_fields, aggregator, function_fields)`` (``window``: an int count or
  a ``timedelta``), ``sliding_window(window, slide, store, ...)`` and
  ``window(config, [store,] input_fields, aggregator, function_fields)``
  with a ``WindowConfig``; ``clock=`` (keyword, default ``time.time``)
  gives the time of time windows. The output stream is the aggregator's
  fields for each window that fires, in the commit that fires it
  (``drpc.trident.window_store``); each task of the stream's partitioning
  has its own windows, as in Storm (``global_()`` first for one). Not on
  DRPC streams.
- Misuse (unknown or duplicate fields, an aggregator kind a step does not
  take, spout streams of different kinds) raises ``InvalidTopologyError``
  when declared.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from drpc.errors import InvalidTopologyError
from drpc.model.fields import Fields
from drpc.model.grouping import (
    AllGrouping,
    BatchGlobalGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    KeyGroupGrouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
)
from drpc.model.streams import DEFAULT_STREAM_ID, OutputFieldsDeclarer
from drpc.transactional.spouts import (
    BaseOpaquePartitionedTransactionalSpout,
    BasePartitionedTransactionalSpout,
)
from drpc.trident.builtins import Comparator, Max, Min
from drpc.trident.chained import ChainedAggregator, ChainLink
from drpc.trident.operations import (
    Aggregator,
    AnyAggregator,
    CombinerAggregator,
    Filter,
    ReducerAggregator,
    StateUpdater,
    as_consumer,
    as_filter,
    as_flat_map,
    as_function,
    as_map,
)
from drpc.trident.plan import (
    CombinePartials,
    DRPCSource,
    Each,
    FilterStep,
    FlatMapStep,
    Join,
    MapStep,
    Merge,
    Names,
    Node,
    Operation,
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
    checked_load,
)
from drpc.trident.processors import Selection
from drpc.trident.state import MapStateFactory
from drpc.trident.window_store import LMDBWindowsStoreFactory
from drpc.trident.windowing import WindowConfig

FieldsLike = Fields | Iterable[str] | str
PARTIAL_FIELD = "$partial"


def names(fields: FieldsLike) -> Names:
    return tuple(Fields.of(fields))


class TridentState:
    """A map state a topology writes (``persistent_aggregate``) or reads (``state_query``)."""

    def __init__(
        self, topology: TridentTopology, factory: MapStateFactory, node: Node | None = None
    ) -> None:
        self.topology = topology
        self.factory = factory
        self.node = node  # the step writing it (None: a static state)

    def __repr__(self) -> str:
        return f"TridentState({self.factory!r})"

    def parallelism_hint(self, parallelism: int) -> TridentState:
        """The number of tasks of the step writing this state (its committer)."""
        if self.node is None:
            raise InvalidTopologyError(
                f"parallelism_hint on {self!r}: a static state (new_static_state) is written "
                "elsewhere, so it has no tasks here"
            )
        self.node.parallelism = _checked_parallelism(parallelism)
        return self

    def set_cpu_load(self, load: float) -> TridentState:
        """Storm's ``setCPULoad`` for the step writing this state (see ``Stream``'s)."""
        _set_cpu_load(self._written("set_cpu_load"), load)
        return self

    def set_memory_load(self, on_heap: float, off_heap: float | None = None) -> TridentState:
        """Storm's ``setMemoryLoad`` for the step writing this state (see ``Stream``'s)."""
        _set_memory_load(self._written("set_memory_load"), on_heap, off_heap)
        return self

    def _written(self, what: str) -> Node:
        if self.node is None:
            raise InvalidTopologyError(
                f"{what} on {self!r}: a static state (new_static_state) is written elsewhere, "
                "so it has no tasks here"
            )
        return self.node


def _set_cpu_load(node: Node, load: Any) -> None:
    cpu = checked_load(load, "a CPU load (percent of a core)")
    node.resources = Resources(cpu, node.resources.on_heap, node.resources.off_heap)


def _set_memory_load(node: Node, on_heap: Any, off_heap: Any) -> None:
    heap = checked_load(on_heap, "an on-heap memory load (MB)")
    if off_heap is not None:
        off_heap = checked_load(off_heap, "an off-heap memory load (MB)", zero=True)
    node.resources = Resources(node.resources.cpu_load, heap, off_heap)


REPARTITIONS: dict[type[Grouping], str] = {
    FieldsGrouping: "fields",
    ShuffleGrouping: "shuffle",
    NoneGrouping: "none",
    LocalOrShuffleGrouping: "local",
    GlobalGrouping: "global",
    BatchGlobalGrouping: "batch_global",
    AllGrouping: "all",
}
"""The repartition each of drpc's groupings makes (``Stream.partition``); any other
``Grouping`` subclass is a custom grouping, used as it is."""


def _checked_parallelism(parallelism: Any) -> int:
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise InvalidTopologyError(f"a parallelism hint is an int >= 1, got {parallelism!r}")
    return parallelism


class TridentTopology:
    """A Trident topology being declared (see the module doc)."""

    def __init__(self) -> None:
        self.sources: list[Node] = []

    def new_stream(self, txid: str, spout: Any, parallelism: int = 1) -> Stream:
        for node in self.sources:
            if isinstance(node.operation, SpoutSource):
                if node.operation.txid == txid:
                    raise InvalidTopologyError(f"spout stream {txid!r} is declared twice")
                _check_same_kind(node.operation.spout, spout, txid)
        declarer = OutputFieldsDeclarer(txid)
        spout.declare_output_fields(declarer)
        stream = declarer.streams.get(DEFAULT_STREAM_ID)
        if stream is None or not len(stream.fields):
            raise InvalidTopologyError("a Trident spout declares a default stream", txid)
        node = Node(SpoutSource(txid, spout, parallelism), tuple(stream.fields)[1:], None)
        self.sources.append(node)
        return Stream(self, node)

    def new_drpc_stream(self, function: str) -> Stream:
        if any(
            isinstance(node.operation, DRPCSource) and node.operation.function == function
            for node in self.sources
        ):
            raise InvalidTopologyError(f"DRPC function {function!r} is declared twice")
        node = Node(DRPCSource(function), ("args",), None)
        self.sources.append(node)
        return Stream(self, node)

    def new_static_state(self, factory: MapStateFactory) -> TridentState:
        return TridentState(self, factory)

    def merge(self, *streams: Stream) -> Stream:
        if len(streams) < 2:
            raise InvalidTopologyError(f"merge takes two streams or more, got {len(streams)}")
        self._check_inputs(streams, "merge")
        widths = {len(stream.fields) for stream in streams}
        if len(widths) != 1:
            raise InvalidTopologyError(
                "merge: the streams have different numbers of fields "
                f"{[list(stream.fields) for stream in streams]}"
            )
        return self._from_inputs(Merge(tuple(s.node for s in streams)), streams[0].fields)

    def join(
        self,
        stream1: Stream,
        fields1: FieldsLike,
        stream2: Stream,
        fields2: FieldsLike,
        out_fields: FieldsLike,
    ) -> Stream:
        self._check_inputs((stream1, stream2), "join")
        keys1, keys2 = (
            stream1._check(names(fields1), "join"),
            stream2._check(names(fields2), "join"),
        )
        if len(keys1) != len(keys2) or not keys1:
            raise InvalidTopologyError(
                f"join: as many join fields on each side, at least one; got {list(keys1)} "
                f"and {list(keys2)}"
            )
        width = len(stream1.fields) + len(stream2.fields) - len(keys2)
        output = names(out_fields)
        if len(output) != width or len(set(output)) != width:
            raise InvalidTopologyError(
                f"join: {width} distinct out fields expected (the join fields, then the others "
                f"of each side), got {list(output)}"
            )
        return self._from_inputs(Join((stream1.node, stream2.node), (keys1, keys2)), output)

    def _check_inputs(self, streams: Sequence[Stream], what: str) -> None:
        for stream in streams:
            if not isinstance(stream, Stream) or stream.topology is not self:
                raise InvalidTopologyError(f"{what} takes streams of this topology, got {stream!r}")
        if len({id(stream.node) for stream in streams}) != len(streams):
            raise InvalidTopologyError(f"{what} takes distinct streams, got one twice")
        sources = {id(source): source for s in streams for source in _sources(s.node)}
        functions = [
            source.operation.function
            for source in sources.values()
            if isinstance(source.operation, DRPCSource)
        ]
        if functions and len(sources) > 1:
            others = (
                f"DRPC streams {sorted(functions)}"
                if len(functions) == len(sources)
                else f"DRPC stream {functions[0]!r} with a spout stream"
            )
            raise InvalidTopologyError(
                f"{what} of {others}: each DRPC request is a batch of its own, so a DRPC "
                f"stream may {what} only branches of itself"
            )

    def _from_inputs(self, operation: Merge | Join, fields: Names) -> Stream:
        node = Node(operation, fields, None)
        for input in operation.inputs:
            input.children.append(node)
        return Stream(self, node)


def _sources(node: Node) -> list[Node]:
    """The source nodes (``new_stream``, ``new_drpc_stream``) feeding ``node``."""
    operation = node.operation
    if isinstance(operation, Merge | Join):
        return [source for input in operation.inputs for source in _sources(input)]
    return [node] if node.parent is None else _sources(node.parent)


def topology_nodes(topology: TridentTopology) -> list[Node]:
    """Every node of ``topology``'s graph, once each."""
    seen: set[int] = set()
    pending, nodes = list(topology.sources), []
    while pending:
        node = pending.pop()
        if id(node) not in seen:
            seen.add(id(node))
            nodes.append(node)
            pending.extend(node.children)
    return nodes


def _check_same_kind(first: Any, spout: Any, txid: str) -> None:
    for kind in (BasePartitionedTransactionalSpout, BaseOpaquePartitionedTransactionalSpout):
        if isinstance(first, kind) and isinstance(spout, kind):
            return
    raise InvalidTopologyError(
        f"spout stream {txid!r}: the spout streams of one topology run in one batch, so they "
        f"are all partitioned or all opaque spouts; got {type(first).__name__} and "
        f"{type(spout).__name__}"
    )


def _aggregation(
    args: Sequence[Any], stream_fields: Names, what: str
) -> tuple[Names, AnyAggregator, Names]:
    """``(aggregator, out_fields)`` or ``(input_fields, aggregator, out_fields)``."""
    if len(args) == 2:
        input, (aggregator, output) = stream_fields, args
    elif len(args) == 3:
        input, aggregator, output = names(args[0]), args[1], args[2]
    else:
        raise TypeError(f"{what} takes ([input_fields,] aggregator, out_fields)")
    if not isinstance(aggregator, (CombinerAggregator, ReducerAggregator, Aggregator)):
        raise InvalidTopologyError(
            f"{what} takes a CombinerAggregator, ReducerAggregator or Aggregator, "
            f"got {type(aggregator).__name__}"
        )
    return input, aggregator, names(output)


class Stream:
    """A stream of named tuples (see the module doc)."""

    def __init__(self, topology: TridentTopology, node: Node, label: str | None = None) -> None:
        self.topology = topology
        self.node = node
        self.label = label  # Storm's stream name: the steps declared on it carry it

    @property
    def fields(self) -> Names:
        return self.node.fields

    def get_output_fields(self) -> Fields:
        return Fields(*self.node.fields)

    def __repr__(self) -> str:
        return f"Stream({list(self.fields)})"

    # -- helpers -----------------------------------------------------------------------

    def _check(self, fields: Names, what: str) -> Names:
        unknown = [name for name in fields if name not in self.fields]
        if unknown:
            raise InvalidTopologyError(
                f"{what}: no field(s) {unknown} in the stream's fields {list(self.fields)}"
            )
        return fields

    def _new_fields(self, added: Names, what: str) -> Names:
        clash = [name for name in added if name in self.fields]
        if clash or len(set(added)) != len(added):
            raise InvalidTopologyError(
                f"{what}: output field(s) {list(added)} repeat a field of {list(self.fields)}"
            )
        return self.fields + added

    def _then(self, operation: Operation, fields: Names) -> Stream:
        return Stream(self.topology, self.node.add(operation, fields, self.label), self.label)

    # -- naming and resources ------------------------------------------------------------

    def name(self, name: str) -> Stream:
        """Storm's ``name``: the steps declared from the returned stream on carry ``name``,
        which the compiler appends to the ids of the components running them (``b1-split``)."""
        if not isinstance(name, str) or not name:
            raise InvalidTopologyError(f"a stream's name is a non-empty str, got {name!r}")
        return Stream(self.topology, self.node, name)

    def set_cpu_load(self, load: float) -> Stream:
        """Storm's ``setCPULoad``: the CPU load of this stream's last step, in percent of a
        core; recorded on the component running it, never enforced (see the module doc)."""
        _set_cpu_load(self.node, load)
        return self

    def set_memory_load(self, on_heap: float, off_heap: float | None = None) -> Stream:
        """Storm's ``setMemoryLoad``: the memory of this stream's last step, in MB; recorded
        on the component running it, never enforced (see the module doc)."""
        _set_memory_load(self.node, on_heap, off_heap)
        return self

    # -- per tuple ----------------------------------------------------------------------

    def each(
        self, fields: FieldsLike, function: Any, out_fields: FieldsLike | None = None
    ) -> Stream:
        input = self._check(names(fields), "each")
        if out_fields is None:
            if not isinstance(function, Filter):
                raise InvalidTopologyError("each without out_fields takes a Filter")
            return self._then(FilterStep(input, function), self.fields)
        output = names(out_fields)
        return self._then(
            Each(input, as_function(function), output), self._new_fields(output, "each")
        )

    def filter(self, fields_or_filter: Any, filter: Any = None) -> Stream:
        if filter is None:
            input, filter = self.fields, fields_or_filter
        else:
            input = self._check(names(fields_or_filter), "filter")
        return self._then(FilterStep(input, as_filter(filter)), self.fields)

    def project(self, fields: FieldsLike) -> Stream:
        kept = self._check(names(fields), "project")
        return self._then(Project(kept), kept)

    def map(self, function: Any, out_fields: FieldsLike | None = None) -> Stream:
        output = self.fields if out_fields is None else names(out_fields)
        return self._then(MapStep(as_map(function)), output)

    def flat_map(self, function: Any, out_fields: FieldsLike | None = None) -> Stream:
        output = self.fields if out_fields is None else names(out_fields)
        return self._then(FlatMapStep(as_flat_map(function)), output)

    def peek(self, consumer: Any) -> Stream:
        return self._then(Peek(as_consumer(consumer)), self.fields)

    def state_query(
        self, state: TridentState, fields: FieldsLike, query: Any, out_fields: FieldsLike
    ) -> Stream:
        input = self._check(names(fields), "state_query")
        output = names(out_fields)
        return self._then(
            StateQuery(state.factory, input, query, output),
            self._new_fields(output, "state_query"),
        )

    def partition_persist(
        self, state: MapStateFactory, fields: FieldsLike, updater: StateUpdater
    ) -> TridentState:
        if not isinstance(state, MapStateFactory):
            raise InvalidTopologyError(
                f"partition_persist takes a map state factory (LMDBMapState...), got {state!r}"
            )
        if not isinstance(updater, StateUpdater):
            raise InvalidTopologyError(
                f"partition_persist takes a StateUpdater, got {type(updater).__name__}"
            )
        if any(isinstance(source.operation, DRPCSource) for source in _sources(self.node)):
            raise InvalidTopologyError("partition_persist on a DRPC stream: DRPC only queries")
        input = self._check(names(fields), "partition_persist")
        persisted = self._then(PartitionPersist(state, input, updater), input)
        return TridentState(self.topology, state, persisted.node)

    # -- windowing (drpc.trident.windowing) ----------------------------------------------

    def tumbling_window(
        self,
        window: int | timedelta,
        store: LMDBWindowsStoreFactory,
        input_fields: FieldsLike,
        aggregator: AnyAggregator,
        function_fields: FieldsLike,
        *,
        clock: Callable[[], float] = time.time,
    ) -> Stream:
        """Storm's ``tumblingWindow``: ``window`` is a count (int) or a duration (timedelta)."""
        config = WindowConfig.tumbling(window)
        return self.window(config, store, input_fields, aggregator, function_fields, clock=clock)

    def sliding_window(
        self,
        window: int | timedelta,
        slide: int | timedelta,
        store: LMDBWindowsStoreFactory,
        input_fields: FieldsLike,
        aggregator: AnyAggregator,
        function_fields: FieldsLike,
        *,
        clock: Callable[[], float] = time.time,
    ) -> Stream:
        """Storm's ``slidingWindow``: two counts (ints) or two durations (timedeltas)."""
        config = WindowConfig.sliding(window, slide)
        return self.window(config, store, input_fields, aggregator, function_fields, clock=clock)

    def window(
        self, config: WindowConfig, *args: Any, clock: Callable[[], float] = time.time
    ) -> Stream:
        """``window(config, [store,] input_fields, aggregator, function_fields)``: Storm's
        ``window``; without a store, the default ``LMDBWindowsStoreFactory()``."""
        if len(args) == 3:
            args = (LMDBWindowsStoreFactory(), *args)
        if len(args) != 4:
            raise TypeError(
                "window takes (config, [store,] input_fields, aggregator, function_fields)"
            )
        store, input_fields, aggregator, function_fields = args
        if not isinstance(config, WindowConfig):
            raise InvalidTopologyError(f"window takes a WindowConfig, got {config!r}")
        if not isinstance(store, LMDBWindowsStoreFactory):
            raise InvalidTopologyError(
                f"a window's store is an LMDBWindowsStoreFactory, got {store!r}"
            )
        if not callable(clock):
            raise InvalidTopologyError(f"a window's clock is a callable, got {clock!r}")
        if any(isinstance(source.operation, DRPCSource) for source in _sources(self.node)):
            raise InvalidTopologyError(
                "a window on a DRPC stream: windows span batches, and each DRPC request is a "
                "batch of its own"
            )
        try:
            input, aggregator, output = _aggregation(
                (input_fields, aggregator, function_fields), self.fields, "window"
            )
        except InvalidTopologyError:
            raise
        except ValueError as error:  # fields named twice
            raise InvalidTopologyError(f"window: {error}") from error
        self._check(input, "window")
        if not output:
            raise InvalidTopologyError(
                f"window: function_fields must name at least one field, got {list(output)}"
            )
        if not isinstance(aggregator, Aggregator) and len(output) != 1:
            raise InvalidTopologyError(
                f"window: a {type(aggregator).__name__} outputs one value, so one function "
                f"field; got {list(output)}"
            )
        windows = [
            node.operation.name
            for node in topology_nodes(self.topology)
            if isinstance(node.operation, WindowStep)
        ]
        name = store.name or f"w{len(windows)}"
        if name in windows:
            raise InvalidTopologyError(f"window: two windows of this topology are named {name!r}")
        step = WindowStep(config, store, name, input, aggregator, output, clock)
        return self._then(step, output)

    # -- repartitioning ------------------------------------------------------------------

    def partition_by(self, fields: FieldsLike) -> Stream:
        by = self._check(names(fields), "partition_by")
        return self._then(Repartition("fields", by), self.fields)

    def shuffle(self) -> Stream:
        return self._then(Repartition("shuffle"), self.fields)

    def global_(self) -> Stream:
        return self._then(Repartition("global"), self.fields)

    def batch_global(self) -> Stream:
        """Every tuple of a batch to one task, chosen per batch (batches spread over the
        tasks)."""
        return self._then(Repartition("batch_global"), self.fields)

    def local_or_shuffle(self) -> Stream:
        """Tuples stay in their task when the next steps have as many tasks, else shuffle."""
        return self._then(Repartition("local"), self.fields)

    def broadcast(self) -> Stream:
        return self._then(Repartition("all"), self.fields)

    def partition(self, grouping: Grouping) -> Stream:
        """Storm's ``partition(grouping)``: repartition by any of drpc's groupings, or by a
        ``Grouping`` subclass of the user's (a custom grouping)."""
        if not isinstance(grouping, Grouping):
            raise InvalidTopologyError(f"partition takes a Grouping, got {grouping!r}")
        if isinstance(grouping, DirectGrouping | KeyGroupGrouping) or grouping.needs_direct_stream:
            raise InvalidTopologyError(
                f"partition({grouping.describe()}): Trident steps never emit direct, and key "
                "groups are the compiler's own routing to a partitioned state's tasks; use "
                "partition_by(fields)"
            )
        how = REPARTITIONS.get(type(grouping))
        if how == "fields":
            assert isinstance(grouping, FieldsGrouping)
            return self.partition_by(tuple(grouping.fields))
        if how is not None:
            return self._then(Repartition(how), self.fields)
        try:
            grouping.validate(Fields(*self.fields), "partition", "the stream")
        except InvalidTopologyError as error:
            raise InvalidTopologyError(f"partition({grouping.describe()}): {error}") from error
        return self._then(Repartition("custom", grouping=grouping), self.fields)

    def identity_partition(self) -> Stream:
        """Storm's ``identityPartition``: task i's tuples go to task i of the next steps,
        which must have as many tasks (else ``InvalidTopologyError`` when compiled)."""
        return self._then(Repartition("identity"), self.fields)

    def parallelism_hint(self, parallelism: int) -> Stream:
        self.node.parallelism = _checked_parallelism(parallelism)
        return self

    # -- aggregation ---------------------------------------------------------------------

    def group_by(self, fields: FieldsLike) -> GroupedStream:
        return GroupedStream(self, self._check(names(fields), "group_by"))

    def partition_aggregate(self, *args: Any) -> Stream:
        return self._partition_aggregate((), args)

    def aggregate(self, *args: Any) -> Stream:
        return self._aggregate((), args)

    def persistent_aggregate(self, state: MapStateFactory, *args: Any) -> TridentState:
        return self._persistent_aggregate((), state, args)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        return ChainedAggregatorDeclarer(self, ())

    def min(self, comparator: Comparator | str) -> Stream:
        """The tuple least by ``comparator`` over whole tuples (a field name: ``min_by``)."""
        if isinstance(comparator, str):
            return self.min_by(comparator)
        return self._comparison(Min, None, comparator, "min")

    def max(self, comparator: Comparator | str) -> Stream:
        """The tuple greatest by ``comparator`` over whole tuples (a field name: ``max_by``)."""
        if isinstance(comparator, str):
            return self.max_by(comparator)
        return self._comparison(Max, None, comparator, "max")

    def min_by(self, field: str, comparator: Comparator | None = None) -> Stream:
        """The tuple whose ``field`` is least (by ``<``, or by ``comparator``)."""
        return self._comparison(Min, field, comparator, "min_by")

    def max_by(self, field: str, comparator: Comparator | None = None) -> Stream:
        """The tuple whose ``field`` is greatest (by ``<``, or by ``comparator``)."""
        return self._comparison(Max, field, comparator, "max_by")

    def _comparison(
        self,
        kind: type[Min] | type[Max],
        field: str | None,
        comparator: Comparator | None,
        what: str,
    ) -> Stream:
        """Each partition's winning tuple, then the batch's winner among those."""
        if field is not None:
            self._check((field,), what)
        if (field is None or comparator is not None) and not callable(comparator):
            raise InvalidTopologyError(
                f"{what} takes a comparator(a, b) -> int, got {comparator!r}"
            )
        aggregator = kind(field, comparator)
        fields = self.fields
        partial = self._then(PartitionAggregate((), fields, aggregator, fields), fields)
        moved = partial._repartition(())
        return moved._then(PartitionAggregate((), fields, aggregator, fields), fields)

    def _partition_aggregate(self, group: Names, args: Sequence[Any]) -> Stream:
        input, aggregator, output = _aggregation(args, self.fields, "partition_aggregate")
        self._check(input, "partition_aggregate")
        return self._then(PartitionAggregate(group, input, aggregator, output), group + output)

    def _repartition(self, group: Names, whole: str = "batch_global") -> Stream:
        """To the group's task, or the whole batch to one task (``whole``: how)."""
        return self._then(
            Repartition("fields", group) if group else Repartition(whole), self.fields
        )

    def _aggregate(self, group: Names, args: Sequence[Any]) -> Stream:
        input, aggregator, output = _aggregation(args, self.fields, "aggregate")
        self._check(input, "aggregate")
        if isinstance(aggregator, CombinerAggregator):
            partial = self._then(
                PartitionAggregate(group, input, aggregator, (PARTIAL_FIELD,)),
                (*group, PARTIAL_FIELD),
            )
            moved = partial._repartition(group)
            combine = PartitionAggregate(
                group, (PARTIAL_FIELD,), CombinePartials(aggregator), output
            )
            return moved._then(combine, group + output)
        moved = self._repartition(group)
        return moved._then(PartitionAggregate(group, input, aggregator, output), group + output)

    def _persistent_aggregate(
        self, group: Names, state: MapStateFactory, args: Sequence[Any]
    ) -> TridentState:
        if not isinstance(state, MapStateFactory):
            raise InvalidTopologyError(
                f"persistent_aggregate takes a map state factory (LMDBMapState...), got {state!r}"
            )
        input, aggregator, output = _aggregation(args, self.fields, "persistent_aggregate")
        self._check(input, "persistent_aggregate")
        if len(output) != 1:
            raise InvalidTopologyError("persistent_aggregate stores one value: one out field")
        if isinstance(aggregator, CombinerAggregator):
            partial = self._then(
                PartitionAggregate(group, input, aggregator, (PARTIAL_FIELD,)),
                (*group, PARTIAL_FIELD),
            )
            persisted = partial._repartition(group, "global")._then(
                Persist(state, group, (PARTIAL_FIELD,), aggregator), group + output
            )
        elif isinstance(aggregator, ReducerAggregator):
            persisted = self._repartition(group, "global")._then(
                Persist(state, group, input, aggregator), group + output
            )
        else:
            raise InvalidTopologyError(
                "persistent_aggregate takes a CombinerAggregator or a ReducerAggregator"
            )
        return TridentState(self.topology, state, persisted.node)


class GroupedStream:
    """A stream grouped by some of its fields (see the module doc)."""

    def __init__(self, stream: Stream, group: Names) -> None:
        self.stream = stream
        self.group = group

    def __repr__(self) -> str:
        return f"GroupedStream({list(self.stream.fields)} by {list(self.group)})"

    def to_stream(self) -> Stream:
        return self.stream

    def name(self, name: str) -> GroupedStream:
        return GroupedStream(self.stream.name(name), self.group)

    def partition_aggregate(self, *args: Any) -> Stream:
        return self.stream._partition_aggregate(self.group, args)

    def aggregate(self, *args: Any) -> Stream:
        return self.stream._aggregate(self.group, args)

    def persistent_aggregate(self, state: MapStateFactory, *args: Any) -> TridentState:
        return self.stream._persistent_aggregate(self.group, state, args)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        return ChainedAggregatorDeclarer(self.stream, self.group)

    def state_query(
        self, state: TridentState, fields: FieldsLike, query: Any, out_fields: FieldsLike
    ) -> Stream:
        return self.stream.partition_by(self.group).state_query(state, fields, query, out_fields)


Link = tuple[Names, AnyAggregator, Names]  # a chain's aggregator: input, it, output fields


class ChainedAggregatorDeclarer:
    """Storm's ``chainedAgg()`` ... ``chainEnd()`` on a stream or grouped stream (see the
    module doc)."""

    def __init__(self, stream: Stream, group: Names) -> None:
        self.stream = stream
        self.group = group
        self.links: list[Link] = []
        self.kind: str | None = None  # "partition_aggregate" or "aggregate", the first call's

    def __repr__(self) -> str:
        return f"ChainedAggregatorDeclarer({list(self.stream.fields)}, {len(self.links)} links)"

    def partition_aggregate(self, *args: Any) -> ChainedAggregatorDeclarer:
        return self._link("partition_aggregate", args)

    def aggregate(self, *args: Any) -> ChainedAggregatorDeclarer:
        return self._link("aggregate", args)

    def _link(self, kind: str, args: Sequence[Any]) -> ChainedAggregatorDeclarer:
        what = f"chained_agg().{kind}"
        if self.kind not in (None, kind):
            raise InvalidTopologyError(
                f"{what} after {self.kind}: a chain's aggregators are all partition aggregates "
                "or all whole-batch aggregates"
            )
        input, aggregator, output = _aggregation(args, self.stream.fields, what)
        self.stream._check(input, what)
        if not isinstance(aggregator, Aggregator) and len(output) != 1:
            raise InvalidTopologyError(
                f"{what}: a {type(aggregator).__name__} outputs one value, so one out field; "
                f"got {list(output)}"
            )
        self.kind = kind
        self.links.append((input, aggregator, output))
        return self

    def chain_end(self) -> Stream:
        if not self.links:
            raise InvalidTopologyError("chain_end: the chain has no aggregator")
        stream, group, links = self.stream, self.group, self.links
        output = tuple(name for _, _, out in links for name in out)
        if len(set(group + output)) != len(group + output):
            raise InvalidTopologyError(
                f"chain_end: the out fields {list(output)} repeat one another or a group field "
                f"of {list(group)}"
            )
        input = tuple(dict.fromkeys(name for fields, _, _ in links for name in fields))
        chain = PartitionAggregate(group, input, _chain(input, links), output)
        if self.kind == "partition_aggregate":
            return stream._then(chain, group + output)
        if all(isinstance(aggregator, CombinerAggregator) for _, aggregator, _ in links):
            partials = stream._then(chain, group + output)
            combines: list[Link] = [
                (out, CombinePartials(aggregator), out)
                for _, aggregator, out in links
                if isinstance(aggregator, CombinerAggregator)
            ]
            combined = PartitionAggregate(group, output, _chain(output, combines), output)
            return partials._repartition(group)._then(combined, group + output)
        return stream._repartition(group)._then(chain, group + output)


def _chain(input: Names, links: Sequence[Link]) -> ChainedAggregator:
    return ChainedAggregator(
        tuple(
            ChainLink(Selection(input, fields), aggregator, len(output))
            for fields, aggregator, output in links
        )
    )
