"""Trident steps at run time: a tree of processors inside one bolt, fed one batch at a time.

Contract. A bolt of a compiled Trident topology (``drpc.trident.bolts``)
holds the processors of its segment as a tree, built by the compiler with
each step's field positions resolved. Per batch (a fresh copy of the tree
per batch id, as batch bolts get): ``prepare(context)`` once, ``execute(values)``
per input tuple (the values after the batch id), ``finish()`` once after
the batch's last tuple. A processor pushes the tuples it outputs to its
children; ``finish`` first outputs what the processor held back (aggregates,
state queries batched per partition), then finishes its children, so a
whole segment finishes in order. ``Emit`` hands tuples to the bolt's
collector on a stream.

- Each partition of a batch aggregates separately (``PartitionAggregate``);
  without group fields a partition outputs one aggregate even when it saw no
  tuple (a combiner's ``zero()``, a reducer's ``init()``), as in Storm; with
  group fields, one per group seen, in order of first arrival.
- Batch-global steps (Storm's ``SingleEmitAggregator``): an ungrouped
  aggregate in a segment fed by a ``global`` or ``batch_global`` repartition
  has ``single_emit``, that repartition's grouping. Every tuple of a batch
  reaches the one task that grouping chooses for the batch
  (``chosen_task``), so a task that saw no tuple of a batch outputs its
  empty aggregate only when it is that task: exactly one result per batch,
  ``[0]`` for a ``Count`` of an empty batch. ``batch_global`` is
  ``BATCH_GLOBAL``, a ``BatchGlobalGrouping``: batches spread over the tasks
  by a stable hash of the batch id; ``global`` always chooses task 0.
- A segment fed by several streams (``merge``, ``join``) gets each input
  tuple with its stream id (``Root.receive``); a ``JoinRoot`` holds both
  sides of the batch partition and outputs the inner join when it finishes.
- ``StateQuery`` retrieves once per batch partition (``batch_retrieve`` over
  every key), reading the state's committed values. ``state_reads(root)`` says
  where a tree reads state, for the engine's pinned reads.
"""

from __future__ import annotations

import collections
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from drpc.errors import InvalidTupleError
from drpc.model.fields import Fields
from drpc.model.grouping import BatchGlobalGrouping, Grouping
from drpc.trident.builtins import Count
from drpc.trident.operations import (
    Aggregator,
    CombinerAggregator,
    Consumer,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    Operation,
    QueryFunction,
    ReducerAggregator,
)
from drpc.trident.state import MapStateFactory, QueryMapState
from drpc.trident.tuples import TridentCollector, TridentTuple

Values = tuple[Any, ...]
Op = TypeVar("Op", bound=Operation)
Output = Callable[[str, Values], None]
OutputMany = Callable[[str, list[Values]], None]
OutputGroups = Callable[[str, dict[Values, Any]], None]

BATCH_FIELD = "$batch"
"""The name of field 0 of every tuple between a compiled topology's Trident steps."""
BATCH_GLOBAL: Grouping = BatchGlobalGrouping()
"""``batch_global``: every tuple of a batch to one task, chosen by the batch id."""


def chosen_task(grouping: Grouping, batch_id: Any, tasks: int) -> int:
    """The task index to which ``grouping`` (``BATCH_GLOBAL`` or a global grouping) sends
    every tuple of batch ``batch_id`` over ``tasks`` tasks: the grouping's own choice."""
    (index,) = grouping.partitioner(Fields(BATCH_FIELD), 0, 1, tasks).choose((batch_id,))
    return index


@dataclass(slots=True)
class BatchContext:
    """What a segment's processors share for one batch (``output_many``: the tuples of
    one stream at once, where the bolt takes them so; else ``output`` each;
    ``output_groups``: a group aggregate's tuples as ``{group values: aggregate}``, where
    the bolt takes them so, without a tuple built per group)."""

    conf: dict[str, Any]
    topology_context: Any
    batch_id: Any
    output: Output
    output_many: OutputMany | None = None
    output_groups: OutputGroups | None = None


def group_rows(groups: dict[Values, Any]) -> list[Values]:
    """A group aggregate's ``{group values: aggregate}`` as its tuples ``(*key, value)``."""
    return [(*key, value) for key, value in groups.items()]


class Processor:
    def __init__(self) -> None:
        self.children: list[Processor] = []

    def prepare(self, batch: BatchContext) -> None:
        for child in self.children:
            child.prepare(batch)

    def execute(self, values: Values) -> None:
        raise NotImplementedError

    def execute_many(self, rows: list[Values]) -> None:
        """``execute`` of each of ``rows`` in order; processors that gain by it take them
        together."""
        for values in rows:
            self.execute(values)

    def finish(self) -> None:
        for child in self.children:
            child.finish()

    def push(self, values: Values) -> None:
        for child in self.children:
            child.execute(values)

    def execute_groups(self, groups: dict[Values, Any]) -> None:
        """``execute_many`` of the tuples ``(*key, value)`` of ``groups`` in order (a
        group aggregate's output); processors that gain by it take the dict itself."""
        self.execute_many(group_rows(groups))

    def push_many(self, rows: list[Values]) -> None:
        for child in self.children:
            child.execute_many(rows)

    def push_groups(self, groups: dict[Values, Any]) -> None:
        if len(self.children) == 1:
            self.children[0].execute_groups(groups)
        elif self.children:  # the tuples built once for all of them
            self.push_many(group_rows(groups))


class Selection:
    """Positions of some fields in a tuple, and the name index of the selected tuple."""

    __slots__ = ("index", "positions", "values")

    def __init__(self, fields: tuple[str, ...], selected: tuple[str, ...]) -> None:
        self.positions = tuple(fields.index(name) for name in selected)
        self.index: Mapping[str, int] = {name: i for i, name in enumerate(selected)}
        self.values: Callable[[Values], Values] = _selector(self.positions)

    def __getstate__(self) -> tuple[tuple[int, ...], Mapping[str, int]]:
        return self.positions, self.index

    def __setstate__(self, state: tuple[tuple[int, ...], Mapping[str, int]]) -> None:
        self.positions, self.index = state
        self.values = _selector(self.positions)

    def tuple(self, values: Values) -> TridentTuple:
        return TridentTuple(self.values(values), self.index)


def _selector(positions: tuple[int, ...]) -> Callable[[Values], Values]:
    """The values at ``positions`` of a tuple, as a tuple."""
    if not positions:
        return lambda values: ()
    if len(positions) == 1:
        (position,) = positions
        return lambda values: (values[position],)
    return operator.itemgetter(*positions)


class Root(Processor):
    """The entry of a segment: passes the bolt's input tuples on, whatever their stream."""

    def receive(self, stream: str, values: Values) -> None:
        self.execute(values)

    def receive_many(self, stream: str, rows: list[Values]) -> None:
        self.execute_many(rows)

    def execute(self, values: Values) -> None:
        self.push(values)

    def execute_many(self, rows: list[Values]) -> None:
        self.push_many(rows)


class JoinRoot(Root):
    """The entry of a join's segment: the inner join of its two input streams per batch.

    ``sides`` maps each input stream to side 0 or 1; ``keys[side]`` selects a
    side's join fields and ``rest[side]`` its other fields. Output: key, then
    side 0's rest, then side 1's, per pair of tuples with equal keys.
    """

    def __init__(
        self,
        sides: Mapping[str, int],
        keys: tuple[Selection, Selection],
        rest: tuple[Selection, Selection],
    ) -> None:
        super().__init__()
        self.sides, self.keys, self.rest = dict(sides), keys, rest
        self.tables: tuple[dict[Values, list[Values]], dict[Values, list[Values]]] = ({}, {})

    def receive(self, stream: str, values: Values) -> None:
        side = self.sides[stream]
        key = self.keys[side].values(values)
        self.tables[side].setdefault(key, []).append(self.rest[side].values(values))

    def receive_many(self, stream: str, rows: list[Values]) -> None:
        for values in rows:
            self.receive(stream, values)

    def execute(self, values: Values) -> None:
        raise AssertionError("a join's tuples arrive through receive(stream, values)")

    def finish(self) -> None:
        (left, right), self.tables = self.tables, ({}, {})
        for key, lefts in left.items():
            for right_rest in right.get(key, ()):
                for left_rest in lefts:
                    self.push(key + left_rest + right_rest)
        super().finish()


class Applies(Processor, Generic[Op]):
    """A processor applying a user operation to its input fields, with ``width`` outputs."""

    def __init__(self, input: Selection, operation: Op, width: int = 0) -> None:
        super().__init__()
        self.input, self.width = input, width
        self.operation: Op = operation
        self.what = type(operation).__name__

    def prepare(self, batch: BatchContext) -> None:
        self.operation.prepare(batch.conf, batch.topology_context)
        super().prepare(batch)


class EachProcessor(Applies[Function]):
    def execute(self, values: Values) -> None:
        collector = TridentCollector(self.width, self.what)
        self.operation.execute(self.input.tuple(values), collector)
        for emitted in collector.take():
            self.push(values + emitted)


class FilterProcessor(Applies[Filter]):
    def execute(self, values: Values) -> None:
        if self.operation.is_keep(self.input.tuple(values)):
            self.push(values)


class ProjectProcessor(Processor):
    def __init__(self, selection: Selection) -> None:
        super().__init__()
        self.selection = selection

    def execute(self, values: Values) -> None:
        self.push(self.selection.values(values))

    def execute_many(self, rows: list[Values]) -> None:
        self.push_many(list(map(self.selection.values, rows)))


def _checked(values: Any, width: int, what: str) -> Values:
    values = tuple(values)
    if len(values) != width:
        raise InvalidTupleError(
            f"{what} returned {len(values)} value(s) {list(values)!r:.80}; its output fields "
            f"take {width}"
        )
    return values


class MapProcessor(Applies[MapFunction]):
    def execute(self, values: Values) -> None:
        result = self.operation.execute(self.input.tuple(values))
        self.push(_checked(result, self.width, self.what))


class FlatMapProcessor(Applies[FlatMapFunction]):
    def execute(self, values: Values) -> None:
        for result in self.operation.execute(self.input.tuple(values)):
            self.push(_checked(result, self.width, self.what))


class PeekProcessor(Applies[Consumer]):
    def execute(self, values: Values) -> None:
        self.operation.accept(self.input.tuple(values))
        self.push(values)


class StateQueryProcessor(Applies[QueryFunction]):
    def __init__(
        self, state: MapStateFactory, input: Selection, function: QueryFunction, width: int
    ) -> None:
        super().__init__(input, function, width)
        self.state = state
        self.pending: list[Values] = []
        self.query: QueryMapState | None = None

    def prepare(self, batch: BatchContext) -> None:
        services = getattr(batch.topology_context, "services", {})
        self.query = QueryMapState(self.state.query_in(services, batch.conf))
        super().prepare(batch)

    def execute(self, values: Values) -> None:
        self.pending.append(values)

    def finish(self) -> None:
        pending, self.pending = self.pending, []
        if pending:
            assert self.query is not None
            keys = [self.input.tuple(values) for values in pending]
            results = self.operation.batch_retrieve(self.query, keys)
            collector = TridentCollector(self.width, self.what)
            for values, key, result in zip(pending, keys, results, strict=True):
                self.operation.execute(key, result, collector)
                for emitted in collector.take():
                    self.push(values + emitted)
        super().finish()


class PartitionAggregateProcessor(Processor):
    """One batch partition's aggregate per group (see the module doc)."""

    def __init__(self, group: Selection, input: Selection, aggregator: Any, width: int) -> None:
        super().__init__()
        self.group, self.input, self.aggregator, self.width = group, input, aggregator, width
        self.grouped = bool(group.positions)
        self.single_emit: Grouping | None = None  # set by the compiler (see the module doc)
        self.states: dict[Values, Any] = {}
        self.collectors: dict[Values, TridentCollector] = {}
        self.batch_id: Any = None

    def prepare(self, batch: BatchContext) -> None:
        self.aggregator.prepare(batch.conf, batch.topology_context)
        self.batch_id = batch.batch_id
        if not self.grouped and self._answers_empty_batch(batch):
            self._start(())
        super().prepare(batch)

    def _answers_empty_batch(self, batch: BatchContext) -> bool:
        """Whether this task outputs the aggregate of a batch it sees no tuple of (else its
        aggregate starts with the batch's first tuple, if any comes)."""
        if self.single_emit is None:
            return True
        context = batch.topology_context
        tasks = len(context.this_component_tasks)
        return chosen_task(self.single_emit, batch.batch_id, tasks) == context.this_task_index

    def _start(self, key: Values) -> Any:
        aggregator = self.aggregator
        if isinstance(aggregator, CombinerAggregator):
            state: Any = _NOTHING if self.grouped else aggregator.zero()
        elif isinstance(aggregator, ReducerAggregator):
            state = aggregator.init()
        else:
            collector = self.collectors[key] = TridentCollector(
                self.width, type(aggregator).__name__
            )
            state = aggregator.init(self.batch_id, collector)
        self.states[key] = state
        return state

    def execute_many(self, rows: list[Values]) -> None:
        if type(self.aggregator) is not Count:
            super().execute_many(rows)
            return
        # Count's partial of a group is its number of tuples: counted in one pass (in
        # order of first arrival, as one at a time would).
        if self.grouped:
            positions = self.group.positions
            # one field: its 1-tuples made by ``zip`` in C, not by a selector call a row
            keys = (
                zip(map(operator.itemgetter(positions[0]), rows))
                if len(positions) == 1
                else map(self.group.values, rows)
            )
            counts: Mapping[Values, int] = collections.Counter(keys)
        else:
            counts = {(): len(rows)}
        states = self.states
        if not states:  # the batch's first rows here: the counts are the states
            states.update(counts)
            return
        for key, count in counts.items():
            state = states.get(key, _NOTHING)
            states[key] = count if state is _NOTHING else state + count

    def execute(self, values: Values) -> None:
        key = self.group.values(values) if self.grouped else ()
        state = self.states[key] if key in self.states else self._start(key)
        aggregator = self.aggregator
        tuple = self.input.tuple(values)
        if isinstance(aggregator, CombinerAggregator):
            value = aggregator.init(tuple)
            self.states[key] = value if state is _NOTHING else aggregator.combine(state, value)
        elif isinstance(aggregator, ReducerAggregator):
            self.states[key] = aggregator.reduce(state, tuple)
        else:
            aggregator.aggregate(state, tuple, self.collectors[key])

    def finish(self) -> None:
        states, self.states = self.states, {}
        aggregator = self.aggregator
        if not isinstance(aggregator, Aggregator):  # one tuple a group: handed on together
            self.push_groups(states)
        else:
            for key, state in states.items():
                collector = self.collectors.pop(key)
                aggregator.complete(state, collector)
                for emitted in collector.take():
                    self.push(key + emitted)
        super().finish()


def state_reads(root: Processor) -> str:
    """Where the tree under ``root`` reads state (``IComponent.state_reads``): "anywhere"
    when it runs an operation of the user's (which may read a map whenever it runs),
    else "finish" when it queries state (a ``StateQueryProcessor`` runs its query
    function, built-in or the user's, as the batch partition finishes), else
    "nowhere". drpc's built-ins (``drpc.trident.builtins``) read nothing but through a
    state query."""
    queries = False
    pending = [root]
    while pending:
        processor = pending.pop()
        pending.extend(processor.children)
        if isinstance(processor, StateQueryProcessor):
            queries = True  # its query function, the user's too, runs as it finishes
            continue
        operation = (
            processor.operation
            if isinstance(processor, Applies)
            else processor.aggregator
            if isinstance(processor, PartitionAggregateProcessor)
            else None
        )
        if operation is not None and _users(operation):
            return "anywhere"
    return "finish" if queries else "nowhere"


def _users(operation: Any) -> bool:
    """Whether ``operation`` runs the user's code: it is not a built-in, or it wraps (a
    chain's ``wrapped()``) an operation that is not."""
    wrapped = getattr(operation, "wrapped", None)
    if callable(wrapped):
        return any(_users(inner) for inner in wrapped())
    return type(operation).__module__ != BUILTINS


BUILTINS = Count.__module__


class _Nothing:
    def __repr__(self) -> str:
        return "<nothing>"


_NOTHING: Any = _Nothing()


class Emit(Processor):
    """Hands tuples to the bolt's collector on ``stream``."""

    def __init__(self, stream: str) -> None:
        super().__init__()
        self.stream = stream
        self.output: Output | None = None
        self.output_many: OutputMany | None = None
        self.output_groups: OutputGroups | None = None

    def prepare(self, batch: BatchContext) -> None:
        self.output = batch.output
        self.output_many = batch.output_many
        self.output_groups = batch.output_groups
        super().prepare(batch)

    def execute(self, values: Values) -> None:
        assert self.output is not None
        self.output(self.stream, values)

    def execute_many(self, rows: list[Values]) -> None:
        if self.output_many is None:
            super().execute_many(rows)
        else:
            self.output_many(self.stream, rows)

    def execute_groups(self, groups: dict[Values, Any]) -> None:
        if self.output_groups is None:
            super().execute_groups(groups)
        else:
            self.output_groups(self.stream, groups)
