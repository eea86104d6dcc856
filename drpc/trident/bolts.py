"""The bolts a Trident topology compiles to: segments, map-state committers, DRPC results.

Contract.

- ``SegmentBolt(root, streams)``: a batch bolt (a fresh instance per batch
  id: a transaction attempt, or a DRPC request) running one segment's
  processor tree (``drpc.trident.processors``) over the values after field
  0 (the batch id) of every input tuple; it emits ``[batch id, *values]`` on
  the streams ``streams`` declares (stream id -> field names). Its
  ``state_reads`` is what its tree reads (``processors.state_reads``), and
  ``reads_partitions`` the partitioned state its task i queries partition i of.
- ``PersistBolt(state, group, input, aggregator)``: the committer of
  ``persistent_aggregate``. Its input is each task's per-group aggregate of
  the batch (a ``CombinerAggregator``'s partials) or the group's raw tuples
  (a ``ReducerAggregator``); in the commit of the batch's txid (in txid
  order, inside the commit's LMDB transaction) it combines them per group
  and applies them to the map state in one pass: a combiner stores
  ``combine(stored, batch)`` (the batch aggregate when nothing is stored,
  ``multi_combine``), a reducer reduces the group's tuples onto the stored value
  (``init()`` when nothing is stored). The map's kind makes a replayed txid count
  once. Its input may also be ``StagedPartials``: partials a resident task staged
  at this one, taken there (waiting up to ``STAGED_WAIT`` seconds for them). With
  ``partitioned`` (a ``parallelism_hint`` on the state) its tasks write a
  partitioned state named after the map (``partitioned_state``).
- ``PartitionPersistBolt(state, input, updater)``: the committer of
  ``partition_persist``: gathers its task's tuples of the batch and, in the
  batch's commit, calls ``updater.update_state`` once with the map state
  inside the commit and those tuples (none: no call). Partitioned, the updater
  may write only keys its task's partition holds (``PartitionKeyError``).
- ``WindowBolt(step, input, topology_id, stream)``: the committer of a
  window (``drpc.trident.windowing``): gathers its task's batch tuples (the
  window's input fields) and, in the batch's commit, applies them to the
  task's window store (``drpc.trident.window_store``) with the time of the
  step's clock, then runs the aggregator over each window that fires (a
  combiner from ``zero()``, a reducer from ``init()``, an ``Aggregator``
  with the ``Window`` as its batch id) and emits the results on ``stream``,
  in the commit, for the steps after the window.
- ``ReturnTuples``: the last step of a Trident DRPC function: one task per
  request gathers the request's result tuples and answers with their JSON,
  a list of value lists, as Storm's Trident DRPC does (``[[5]]``).
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from drpc.errors import InvalidTupleError, StateError
from drpc.executors.resident.staging import STAGED
from drpc.model.components import BaseBatchBolt, BatchOutputCollector, ICommitter
from drpc.model.fields import Fields
from drpc.model.streams import OutputFieldsDeclarer
from drpc.model.tuples import Tuple
from drpc.state.topology import current_commit, state_for
from drpc.trident.builtins import key_of
from drpc.trident.operations import Aggregator, CombinerAggregator, StateUpdater
from drpc.trident.plan import WindowStep
from drpc.trident.processors import (
    BATCH_FIELD,
    BatchContext,
    Root,
    Selection,
    Values,
    state_reads,
)
from drpc.trident.state import CommitMapState, MapStateFactory
from drpc.trident.tuples import TridentCollector, TridentTuple
from drpc.trident.window_store import WindowTaskStore, commit_window
from drpc.trident.windowing import TIME, Window


@dataclass(frozen=True, slots=True)
class KeyedPartials:
    """A batch's combiner partials by group key (``key_of`` the group's values), in one tuple."""

    partials: dict[Any, Any]


@dataclass(frozen=True, slots=True)
class StagedPartials:
    """A batch's combiner partials of one partition, staged at the task owning it by the
    processing tasks ``senders`` under ``key`` (``drpc.executors.resident.staging``): the
    committer takes them there, so they never pass through the driver."""

    key: tuple[Any, ...]
    senders: tuple[int, ...]


def combine_into(
    partials: dict[Any, Any], pairs: Iterable[tuple[Any, Any]], combine: Callable[[Any, Any], Any]
) -> None:
    """Each (key, partial) of ``pairs`` into ``partials``: combined with the key's partial
    there, if it has one (a ``CombinerAggregator``'s ``combine``)."""
    for key, partial in pairs:
        partials[key] = combine(partials[key], partial) if key in partials else partial


STAGED_WAIT = 30.0
"""Seconds a committer waits for staged partials still on their way (then the commit fails
and the batch is replayed)."""


class SegmentBolt(BaseBatchBolt):
    """One segment of Trident steps per batch (see the module doc)."""

    reads_partitions: str | None = None
    """The partitioned state whose partition i its task i queries (its keys grouped as the
    partitions'): the resident executor places the task with the partition's owner."""

    def __init__(self, root: Root, streams: dict[str, tuple[str, ...]]) -> None:
        self.root = root
        self.streams = streams
        self.state_reads = state_reads(root)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for stream, fields in self.streams.items():
            declarer.declare_stream(stream, Fields(BATCH_FIELD, *fields))

    def prepare(
        self, conf: dict[str, Any], context: Any, collector: BatchOutputCollector, id: Any
    ) -> None:
        def output(stream: str, values: Values) -> None:
            collector.emit([id, *values], stream)

        self.root.prepare(BatchContext(conf, context, id, output))

    def execute(self, tuple: Tuple) -> None:
        self.root.receive(tuple.source_stream, (*tuple.values[1:],))

    def finish_batch(self) -> None:
        self.root.finish()


class PersistBolt(BaseBatchBolt, ICommitter):
    """Applies a batch's per-group aggregates to a map state in its commit (see module doc)."""

    def __init__(
        self,
        state: MapStateFactory,
        group: Selection,
        input: Selection,
        aggregator: Any,
        *,
        partitioned: bool = False,
    ) -> None:
        self.state = state
        self.group = group
        self.input = input
        self.aggregator = aggregator
        self.partitioned = partitioned
        self.partials: dict[Any, Any] = {}
        self.tuples: defaultdict[Any, list[TridentTuple]] = defaultdict(list)

    @property
    def partitioned_state(self) -> str | None:
        """The partitioned state its tasks write (its map state's name), if partitioned."""
        return self.state.name if self.partitioned else None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass

    def prepare(
        self, conf: dict[str, Any], context: Any, collector: BatchOutputCollector, id: Any
    ) -> None:
        self.aggregator.prepare(conf, context)
        self.conf = conf
        self.context = context

    def execute(self, tuple: Tuple) -> None:
        values = (*tuple.values[1:],)
        if len(values) == 1 and isinstance(values[0], KeyedPartials):
            self._absorb(values[0].partials)
            return
        if len(values) == 1 and isinstance(values[0], StagedPartials):
            staged = values[0]
            for partials in STAGED.take(staged.key, staged.senders, STAGED_WAIT):
                self._absorb(partials)
            STAGED.drop(functools.partial(_given_up, staged.key))
            return
        key = key_of(self.group.values(values))
        if isinstance(self.aggregator, CombinerAggregator):
            partial = self.input.values(values)[0]
            if key in self.partials:
                partial = self.aggregator.combine(self.partials[key], partial)
            self.partials[key] = partial
        else:
            self.tuples[key].append(self.input.tuple(values))

    def _absorb(self, partials: dict[Any, Any]) -> None:
        if not isinstance(self.aggregator, CombinerAggregator):
            raise InvalidTupleError(
                f"{type(self.aggregator).__name__} is not a CombinerAggregator: its "
                "persistent_aggregate takes tuples, not a batch's KeyedPartials"
            )
        if not self.partials:
            self.partials = dict(partials)
            return
        combine_into(self.partials, partials.items(), self.aggregator.combine)

    def finish_batch(self) -> None:
        state = _commit_state(self.state, self.context, self.conf)
        aggregator = self.aggregator
        if isinstance(aggregator, CombinerAggregator):
            state.multi_combine(self.partials, aggregator.combine)
        else:

            def reduced(tuples: list[TridentTuple]) -> Any:
                def apply(stored: Any) -> Any:
                    value = aggregator.init() if stored is None else stored
                    for tuple in tuples:
                        value = aggregator.reduce(value, tuple)
                    return value

                return apply

            state.multi_update({key: reduced(tuples) for key, tuples in self.tuples.items()})


def _given_up(taken: tuple[Any, ...], key: Hashable) -> bool:
    """Whether ``key`` was staged for an attempt at or before ``taken``'s txid, of the same
    partition (``fused.stage_key``): no commit will take it any more."""
    return isinstance(key, tuple) and key[:3] == taken[:3] and key[3] <= taken[3]


def _commit_state(
    factory: MapStateFactory, context: Any, conf: dict[str, Any], *, checked: bool = False
) -> CommitMapState:
    """The map state of ``factory`` inside the commit that is finishing this batch
    (``checked``: in a partition, refuse keys other partitions hold)."""
    commit = current_commit()
    if commit is None:
        raise StateError("a Trident state write finished outside its commit")
    txn, txid = commit
    state = state_for(context.services, conf)
    owner = state.owner if checked else None
    return CommitMapState(factory.open(state.env), txn, txid, owner)


class PartitionPersistBolt(BaseBatchBolt, ICommitter):
    """Hands its task's batch tuples to a state updater in the commit (see the module doc)."""

    def __init__(
        self,
        state: MapStateFactory,
        input: Selection,
        updater: StateUpdater,
        *,
        partitioned: bool = False,
    ) -> None:
        self.state = state
        self.input = input
        self.updater = updater
        self.partitioned = partitioned
        self.tuples: list[TridentTuple] = []

    @property
    def partitioned_state(self) -> str | None:
        return self.state.name if self.partitioned else None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass

    def prepare(
        self, conf: dict[str, Any], context: Any, collector: BatchOutputCollector, id: Any
    ) -> None:
        self.updater.prepare(conf, context)
        self.conf = conf
        self.context = context

    def execute(self, tuple: Tuple) -> None:
        self.tuples.append(self.input.tuple((*tuple.values[1:],)))

    def finish_batch(self) -> None:
        if self.tuples:
            state = _commit_state(self.state, self.context, self.conf, checked=True)
            self.updater.update_state(state, self.tuples, _Dropped(0, type(self.updater).__name__))


class _Dropped(TridentCollector):
    """What a state updater emits: dropped (drpc has no new-values stream)."""

    __slots__ = ()

    def emit(self, values: Sequence[Any]) -> None:
        pass


class WindowBolt(BaseBatchBolt, ICommitter):
    """Applies its task's batch tuples to its windows in the commit (see the module doc)."""

    partitioned_state = None
    """Its tasks share the state directory, however many they are: a window store is not
    a map a partition could revert (``drpc.transactional.partitions``)."""

    def __init__(self, step: WindowStep, input: Selection, topology_id: str, stream: str) -> None:
        self.step = step
        self.input = input
        self.topology_id = topology_id
        self.stream = stream
        self.tuples: list[Values] = []

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(self.stream, Fields(BATCH_FIELD, *self.step.output))

    def prepare(
        self, conf: dict[str, Any], context: Any, collector: BatchOutputCollector, id: Any
    ) -> None:
        self.step.aggregator.prepare(conf, context)
        self.collector = collector
        self.id = id
        self.task = context.this_task_index

    def execute(self, tuple: Tuple) -> None:
        self.tuples.append(self.input.values((*tuple.values[1:],)))

    def finish_batch(self) -> None:
        commit = current_commit()
        if commit is None:
            raise StateError("a Trident window finished outside its commit")
        txn, txid = commit
        step = self.step
        store = WindowTaskStore(txn, self.topology_id, step.name, self.task)
        now = round(step.clock() * 1_000_000) if step.config.kind == TIME else 0
        for values in commit_window(store, step.config, txid, self.tuples, now, self._aggregate):
            self.collector.emit([self.id, *values], self.stream)

    def _aggregate(self, window: Window, rows: list[Values]) -> list[Values]:
        """The aggregator's output tuples over one window's tuples."""
        aggregator = self.step.aggregator
        tuples = [TridentTuple(values, self.input.index) for values in rows]
        if isinstance(aggregator, CombinerAggregator):
            value = aggregator.zero()
            for tuple in tuples:
                value = aggregator.combine(value, aggregator.init(tuple))
            return [(value,)]
        if not isinstance(aggregator, Aggregator):
            value = aggregator.init()
            for tuple in tuples:
                value = aggregator.reduce(value, tuple)
            return [(value,)]
        collector = TridentCollector(len(self.step.output), type(aggregator).__name__)
        state = aggregator.init(window, collector)
        for tuple in tuples:
            aggregator.aggregate(state, tuple, collector)
        aggregator.complete(state, collector)
        return collector.take()


class ReturnTuples(BaseBatchBolt):
    """Answers a Trident DRPC request with the JSON of its result tuples (see module doc)."""

    state_reads = "nowhere"

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))

    def prepare(
        self, conf: dict[str, Any], context: Any, collector: BatchOutputCollector, id: Any
    ) -> None:
        self.collector = collector
        self.id = id
        self.rows: list[list[Any]] = []

    def execute(self, tuple: Tuple) -> None:
        self.rows.append(list(tuple.values[1:]))

    def finish_batch(self) -> None:
        self.collector.emit([self.id, json.dumps(self.rows)])
