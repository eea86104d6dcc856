"""Transactional spouts: the same batch for the same txid, or an opaque one that may change.

Three kinds, as in Storm (snake_case):

- ``BaseTransactionalSpout``: ``get_coordinator(conf, context)`` returns an
  object with ``is_ready()`` and ``initialize_transaction(txid,
  prev_metadata) -> metadata`` (cached per txid by drpc, so a replay gets the
  same metadata); ``get_emitter(conf, context)`` returns one with
  ``emit_batch(attempt, metadata, collector)`` (emit the batch; the same one
  for the same metadata) and ``cleanup_before(txid)``.
- ``BasePartitionedTransactionalSpout``: the coordinator says
  ``number_of_partitions()``; the emitter's ``emit_partition_batch_new(attempt,
  collector, partition, last_meta) -> meta`` emits a new batch of one
  partition starting where ``last_meta`` ended, and
  ``emit_partition_batch(attempt, collector, partition, meta)`` replays
  exactly the batch ``meta`` describes. drpc stores each partition's meta per
  txid before processing, so a replay after a failure or a restart is exact.
- ``BaseOpaquePartitionedTransactionalSpout``: ``emit_partition_batch(attempt,
  collector, partition, last_meta) -> meta`` only; drpc stores a partition's
  meta when the batch commits (in the commit's transaction), so a replay
  starts from the last committed meta and may emit a different batch; use
  ``OpaqueMap`` state with it.

A coordinator may watch its source: ``watch(wakeup) -> stop`` calls
``wakeup()`` whenever input may have arrived, until ``stop()`` (the file log
watches its directory); ``watch_of(coordinator, wakeup)`` asks it through
drpc's wrappers. A run over a watching spout opens its next batch when woken
after an empty one; over any other it polls with a growing backoff.

A coordinator may also have ``waiting_for() -> str | None``: what it waits
for while it is not ready (a broker spout: ``"waiting for redis at
HOST:PORT"``); ``waiting_of(coordinator)`` asks it through drpc's wrappers,
and the transactional runner's ``status()`` shows it as ``waiting``.

Every tuple emitted carries the attempt as field 0. Emitter tasks own
partitions ``index, index + tasks, ...``. ``MemoryTransactionalSpout`` and
``OpaqueMemoryTransactionalSpout`` read partitions of in-memory lists
(``data`` maps partition index -> list of tuples, each a list of values),
``take_per_batch`` tuples per partition per batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drpc.model.components import (
    BaseRichBolt,
    BatchOutputCollector,
    Conf,
    FailedIdCallback,
    IComponent,
    OutputCollector,
)
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields
from drpc.model.streams import OutputFieldsDeclarer
from drpc.model.tuples import Tuple
from drpc.transactional.attempt import TransactionAttempt

TRANSACTIONAL_SERVICE = "drpc.transactional"
BATCH_STREAM = "batch"
COMMIT_STREAM = "commit"


class BaseTransactionalSpout(IComponent):
    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        raise NotImplementedError

    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        raise NotImplementedError


class BasePartitionedTransactionalSpout(IComponent):
    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        raise NotImplementedError

    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        raise NotImplementedError


class BaseOpaquePartitionedTransactionalSpout(IComponent):
    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        raise NotImplementedError

    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        raise NotImplementedError


SPOUT_TYPES = (
    BaseTransactionalSpout,
    BasePartitionedTransactionalSpout,
    BaseOpaquePartitionedTransactionalSpout,
)


class _Missing:
    pass


MISSING: Any = _Missing()


class TransactionalServices:
    """What a transactional run lends its components through ``context.services``.

    Long-lived per-task emitters (a task's emitter is made once per process,
    however often its bolt is prepared), tuples emitted per attempt (to know
    when the source ran dry), and the partition metas an opaque emitter
    produced per txid, written when that txid commits.
    """

    def __init__(self, topology_id: str, coordinator_state: Any) -> None:
        self.topology_id = topology_id
        self.coordinator_state = coordinator_state
        self._lock = threading.Lock()
        self._emitters: dict[tuple[str, int], Any] = {}
        self._emitted: dict[TransactionAttempt, int] = {}
        self._opaque: dict[int, dict[int, Any]] = {}
        self.batches: Any = None  # the local backend's queue of batch tuples to emit

    def emitter(self, key: tuple[str, int], make: Any) -> Any:
        with self._lock:
            emitter = self._emitters.get(key)
            if emitter is None:
                emitter = self._emitters[key] = make()
            return emitter

    def emitters(self) -> list[Any]:
        with self._lock:
            return list(self._emitters.values())

    def count_emitted(self, attempt: TransactionAttempt, count: int) -> None:
        with self._lock:
            self._emitted[attempt] = self._emitted.get(attempt, 0) + count

    def take_emitted(self, attempt: TransactionAttempt) -> int:
        with self._lock:
            return self._emitted.pop(attempt, 0)

    def record_opaque_meta(self, txid: int, partition: int, meta: Any) -> None:
        with self._lock:
            self._opaque.setdefault(txid, {})[partition] = meta

    def opaque_meta_before(self, txid: int, partition: int) -> Any:
        """The meta the latest earlier txid emitted for ``partition`` here, if any."""
        with self._lock:
            earlier = [t for t in self._opaque if t < txid and partition in self._opaque[t]]
            return self._opaque[max(earlier)][partition] if earlier else MISSING

    def opaque_metas(self, txid: int) -> dict[int, Any]:
        with self._lock:
            return dict(self._opaque.get(txid, {}))

    def forget_opaque_before(self, txid: int) -> None:
        with self._lock:
            for stale in [t for t in self._opaque if t < txid]:
                del self._opaque[stale]


def services_of(context: TopologyContext) -> TransactionalServices:
    try:
        return context.services[TRANSACTIONAL_SERVICE]
    except KeyError:
        raise RuntimeError(
            f"component {context.this_component_id!r} runs only inside a transactional run "
            "(drpc.transactional.run)"
        ) from None


# -- the generic form of the partitioned kinds --------------------------------------------------


class _PartitionedCoordinator:
    def __init__(self, coordinator: Any) -> None:
        self.coordinator = coordinator

    def is_ready(self) -> bool:
        return bool(self.coordinator.is_ready())

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> int:
        return int(self.coordinator.number_of_partitions())

    def waiting_for(self) -> str | None:
        return waiting_of(self.coordinator)

    def watch(self, wakeup: Callable[[], None]) -> Callable[[], None] | None:
        return watch_of(self.coordinator, wakeup)

    def close(self) -> None:
        _close(self.coordinator)


class _PartitionedEmitter:
    """Owns partitions index, index + tasks, ...; stores each partition's meta per txid."""

    def __init__(
        self, emitter: Any, services: TransactionalServices, index: int, tasks: int
    ) -> None:
        self.emitter = emitter
        self.services = services
        self.index = index
        self.tasks = tasks
        self.partitions = 0

    def emit_batch(
        self, attempt: TransactionAttempt, partitions: int, collector: BatchOutputCollector
    ) -> None:
        self.partitions = max(self.partitions, partitions)
        for partition in range(self.index, partitions, self.tasks):
            state = self.services.coordinator_state.partition_state(partition)

            def new_batch(txid: int, last_meta: Any, partition: int = partition) -> Any:
                return self.emitter.emit_partition_batch_new(
                    attempt, collector, partition, last_meta
                )

            meta = state.get_state_or_create(attempt.txid, new_batch)
            # None: created just now (new_batch emitted it) or a later batch already
            # consumed this partition's range; a stored meta is replayed exactly.
            if meta is not None:
                self.emitter.emit_partition_batch(attempt, collector, partition, meta)

    def cleanup_before(self, txid: int) -> None:
        for partition in range(self.index, self.partitions, self.tasks):
            self.services.coordinator_state.partition_state(partition).cleanup_before(txid)

    def close(self) -> None:
        _close(self.emitter)


class _OpaqueCoordinator:
    def __init__(self, coordinator: Any) -> None:
        self.coordinator = coordinator

    def is_ready(self) -> bool:
        return bool(self.coordinator.is_ready())

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> None:
        return None

    def waiting_for(self) -> str | None:
        return waiting_of(self.coordinator)

    def watch(self, wakeup: Callable[[], None]) -> Callable[[], None] | None:
        return watch_of(self.coordinator, wakeup)

    def close(self) -> None:
        _close(self.coordinator)


class _OpaqueEmitter:
    """Emits from the previous batch's end; the metas are stored when the batch commits."""

    commits = True

    def __init__(
        self, emitter: Any, services: TransactionalServices, index: int, tasks: int
    ) -> None:
        self.emitter = emitter
        self.services = services
        self.index = index
        self.tasks = tasks

    def emit_batch(
        self, attempt: TransactionAttempt, metadata: Any, collector: BatchOutputCollector
    ) -> None:
        txid = attempt.txid
        for partition in range(self.index, int(self.emitter.number_of_partitions()), self.tasks):
            last_meta = self.services.opaque_meta_before(txid, partition)
            if last_meta is MISSING:
                state = self.services.coordinator_state.partition_state(partition)
                last_meta = state.get_last_state()
            meta = self.emitter.emit_partition_batch(attempt, collector, partition, last_meta)
            self.services.record_opaque_meta(txid, partition, meta)

    def cleanup_before(self, txid: int) -> None:
        self.services.forget_opaque_before(txid)

    def close(self) -> None:
        _close(self.emitter)


def commit_opaque_metas(services: TransactionalServices, txid: int, txn: Any) -> None:
    """Store the partition metas batch ``txid`` emitted, inside its commit transaction."""
    for partition, meta in services.opaque_metas(txid).items():
        state = services.coordinator_state.partition_state(partition)
        state.override_state(txid, meta, txn=txn)
        state.cleanup_before(txid, txn=txn)


def watch_of(coordinator: Any, wakeup: Callable[[], None]) -> Callable[[], None] | None:
    """Ask ``coordinator`` to call ``wakeup`` when input may have arrived (``watch``);
    returns what stops it, or None when the coordinator does not watch (the run polls)."""
    watch = getattr(coordinator, "watch", None)
    return None if watch is None else watch(wakeup)


def waiting_of(coordinator: Any) -> str | None:
    """What ``coordinator`` says it waits for (``waiting_for()``), None if nothing or it
    does not say."""
    waiting = getattr(coordinator, "waiting_for", None)
    return None if waiting is None else waiting()


def _close(component: Any) -> None:
    close = getattr(component, "close", None)
    if close is not None:
        close()


def drpc_owns_batch_meta(spout: IComponent) -> bool:
    """Whether the coordinator's batch metadata of ``spout`` is drpc's own (partitioned
    kinds: a partition count or None), stored as plain data, not the user's (pickled)."""
    return isinstance(
        spout, BasePartitionedTransactionalSpout | BaseOpaquePartitionedTransactionalSpout
    )


def spout_coordinator(spout: IComponent, conf: Conf, context: TopologyContext) -> Any:
    if isinstance(spout, BasePartitionedTransactionalSpout):
        return _PartitionedCoordinator(spout.get_coordinator(conf, context))
    if isinstance(spout, BaseOpaquePartitionedTransactionalSpout):
        return _OpaqueCoordinator(spout.get_coordinator(conf, context))
    assert isinstance(spout, BaseTransactionalSpout)
    return spout.get_coordinator(conf, context)


def spout_emitter(spout: IComponent, conf: Conf, context: TopologyContext) -> Any:
    services = services_of(context)
    index, tasks = context.this_task_index, len(context.this_component_tasks)
    if isinstance(spout, BasePartitionedTransactionalSpout):
        return _PartitionedEmitter(spout.get_emitter(conf, context), services, index, tasks)
    if isinstance(spout, BaseOpaquePartitionedTransactionalSpout):
        return _OpaqueEmitter(spout.get_emitter(conf, context), services, index, tasks)
    assert isinstance(spout, BaseTransactionalSpout)
    return spout.get_emitter(conf, context)


class _CountingCollector(OutputCollector):
    def __init__(self, output: OutputCollector) -> None:
        self.output = output
        self.count = 0

    def emit(
        self, values: Sequence[Any], anchors: Any = None, stream: str = "default"
    ) -> list[int]:
        self.count += 1
        return self.output.emit(values, anchors=anchors, stream=stream)

    def emit_direct(
        self, task: int, values: Sequence[Any], anchors: Any = None, stream: str = "default"
    ) -> None:
        self.count += 1
        self.output.emit_direct(task, values, anchors=anchors, stream=stream)

    def emit_many(
        self, many: Iterable[Sequence[Any]], anchors: Any = None, stream: str = "default"
    ) -> None:
        def counted() -> Iterator[Sequence[Any]]:
            for values in many:
                self.count += 1
                yield values

        self.output.emit_many(counted(), anchors=anchors, stream=stream)

    def ack(self, tuple: Tuple) -> None:
        self.output.ack(tuple)

    def fail(self, tuple: Tuple, reason: Any = None) -> None:
        self.output.fail(tuple, reason)

    def report_error(self, error: BaseException) -> None:
        self.output.report_error(error)

    def call_in_turn(self, run: Callable[[], None]) -> None:
        self.output.call_in_turn(run)


class TransactionalSpoutBatchExecutor(BaseRichBolt, FailedIdCallback):
    """The emitter bolt: emits a batch for each batch tuple [attempt, metadata, last committed]."""

    def __init__(self, spout: IComponent) -> None:
        self.spout = spout
        self._emitter: Any = None
        self._collector: OutputCollector | None = None
        self._services: TransactionalServices | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.spout.declare_output_fields(declarer)

    def get_component_configuration(self) -> Conf | None:
        return self.spout.get_component_configuration()

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        self._collector = collector
        self._services = services_of(context)
        key = (context.this_component_id, context.this_task_index)
        self._emitter = self._services.emitter(
            key, lambda: spout_emitter(self.spout, conf, context)
        )

    def execute(self, tuple: Tuple) -> None:
        assert self._collector is not None and self._services is not None
        attempt, metadata, last_committed = tuple[0], tuple[1], tuple[2]
        counting = _CountingCollector(self._collector)
        self._emitter.emit_batch(attempt, metadata, BatchOutputCollector(counting))
        self._services.count_emitted(attempt, counting.count)
        if last_committed is not None:
            self._emitter.cleanup_before(last_committed)
        self._collector.ack(tuple)

    def failed_id(self, id: Any) -> None:
        """Nothing to drop: an emitter keeps no per-batch state of its own."""


# -- in-memory spouts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryMeta:
    index: int
    amount: int

    @property
    def end(self) -> int:
        return self.index + self.amount


class _MemoryEmitter:
    def __init__(self, data: Mapping[int, Sequence[Sequence[Any]]], take: int) -> None:
        self.data = data
        self.take = take

    def number_of_partitions(self) -> int:
        return len(self.data)

    def _emit(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        meta: MemoryMeta,
    ) -> None:
        for values in self.data[partition][meta.index : meta.end]:
            collector.emit([attempt, *values])

    def _next(self, partition: int, last_meta: MemoryMeta | None) -> MemoryMeta:
        start = 0 if last_meta is None else last_meta.end
        available = max(0, len(self.data[partition]) - start)
        return MemoryMeta(start, min(self.take, available))

    def emit_partition_batch_new(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_meta: Any,
    ) -> MemoryMeta:
        meta = self._next(partition, last_meta)
        self._emit(attempt, collector, partition, meta)
        return meta

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        meta: Any,
    ) -> None:
        """Replay exactly the batch ``meta`` describes."""
        self._emit(attempt, collector, partition, meta)


class _OpaqueMemoryEmitter(_MemoryEmitter):
    def emit_partition_batch(  # type: ignore[override]
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_meta: Any,
    ) -> MemoryMeta:
        """Opaque: a new batch from where the last committed (or emitted) one ended."""
        return self.emit_partition_batch_new(attempt, collector, partition, last_meta)


class _AlwaysReady:
    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def is_ready(self) -> bool:
        return True

    def number_of_partitions(self) -> int:
        return self.partitions


class MemoryTransactionalSpout(BasePartitionedTransactionalSpout):
    """Partitions of in-memory tuples, ``take_per_batch`` per partition per batch."""

    def __init__(
        self, data: Mapping[int, Sequence[Sequence[Any]]], fields: Fields, take_per_batch: int
    ) -> None:
        if take_per_batch < 1:
            raise ValueError(f"take_per_batch must be >= 1, got {take_per_batch}")
        if sorted(data) != list(range(len(data))):
            raise ValueError(f"partitions must be numbered 0..n-1, got {sorted(data)}")
        self.data = data
        self.fields = Fields.of(fields)
        self.take_per_batch = take_per_batch

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("tx", *self.fields))

    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        return _AlwaysReady(len(self.data))

    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        return _MemoryEmitter(self.data, self.take_per_batch)


class OpaqueMemoryTransactionalSpout(BaseOpaquePartitionedTransactionalSpout):
    """Like ``MemoryTransactionalSpout``, but opaque: a replay reads from the last commit."""

    def __init__(
        self, data: Mapping[int, Sequence[Sequence[Any]]], fields: Fields, take_per_batch: int
    ) -> None:
        if take_per_batch < 1:
            raise ValueError(f"take_per_batch must be >= 1, got {take_per_batch}")
        self.data = data
        self.fields = Fields.of(fields)
        self.take_per_batch = take_per_batch

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("tx", *self.fields))

    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        return _AlwaysReady(len(self.data))

    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        return _OpaqueMemoryEmitter(self.data, self.take_per_batch)
