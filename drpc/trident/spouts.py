"""Several Trident spout streams as one transactional spout: one batch holds a batch of each.

Contract. ``MultiSpout(spouts)`` takes two or more spouts of one kind (all
``BasePartitionedTransactionalSpout`` or all
``BaseOpaquePartitionedTransactionalSpout``; ``multi_spout`` makes the
matching kind) and is a spout of that kind whose partition ``p`` is
partition ``p // n`` of spout ``p % n`` (``n`` spouts). So drpc's
transactional machinery stores and replays every spout's partition metas
as its own, and a spout that gains partitions keeps its old numbering. A
partition a spout does not have (fewer than the largest count) emits
nothing, meta None. Spout ``k``'s tuples go out on stream ``source_stream(k)``
with the fields it declares on its default stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from drpc.model.components import BatchOutputCollector, Conf
from drpc.model.context import TopologyContext
from drpc.model.streams import DEFAULT_STREAM_ID, OutputFieldsDeclarer
from drpc.transactional.spouts import (
    BaseOpaquePartitionedTransactionalSpout,
    BasePartitionedTransactionalSpout,
    waiting_of,
    watch_of,
)


def source_stream(index: int) -> str:
    return f"src{index}"


class _OnStream:
    """A batch collector whose default stream is ``stream``."""

    def __init__(self, collector: BatchOutputCollector, stream: str) -> None:
        self.collector = collector
        self.stream = stream

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM_ID) -> list[int]:
        return self.collector.emit(values, self.stream)

    def emit_direct(
        self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM_ID
    ) -> None:
        self.collector.emit_direct(task, values, self.stream)

    def emit_many(self, many: Iterable[Sequence[Any]], stream: str = DEFAULT_STREAM_ID) -> None:
        self.collector.emit_many(many, self.stream)

    def report_error(self, error: BaseException) -> None:
        self.collector.report_error(error)


def _close_all(parts: list[Any]) -> None:
    for part in parts:
        close = getattr(part, "close", None)
        if close is not None:
            close()


class _Coordinator:
    def __init__(self, coordinators: list[Any]) -> None:
        self.coordinators = coordinators

    def is_ready(self) -> bool:
        return all(coordinator.is_ready() for coordinator in self.coordinators)

    def counts(self) -> list[int]:
        return [int(coordinator.number_of_partitions()) for coordinator in self.coordinators]

    def number_of_partitions(self) -> int:
        return len(self.coordinators) * max(self.counts())

    def waiting_for(self) -> str | None:
        waiting = [waiting_of(coordinator) for coordinator in self.coordinators]
        return "; ".join(w for w in waiting if w) or None

    def watch(self, wakeup: Callable[[], None]) -> Callable[[], None] | None:
        """Watches when every spout does; else None, and the run polls them all."""
        stops = [watch_of(coordinator, wakeup) for coordinator in self.coordinators]
        if any(stop is None for stop in stops):
            for stop in stops:
                if stop is not None:
                    stop()
            return None

        def stop_all() -> None:
            for stop in stops:
                assert stop is not None
                stop()

        return stop_all

    def close(self) -> None:
        _close_all(self.coordinators)


class _Emitter:
    """Dispatches partition ``p`` to spout ``p % n``'s emitter as its partition ``p // n``."""

    def __init__(self, emitters: list[Any], counts: Any) -> None:
        self.emitters = emitters
        self.counts = counts  # () -> each spout's partition count

    def _route(self, partition: int) -> tuple[int, int] | None:
        n = len(self.emitters)
        spout, inner = partition % n, partition // n
        return (spout, inner) if inner < self.counts()[spout] else None

    def number_of_partitions(self) -> int:
        return len(self.emitters) * max(self.counts())

    def _call(
        self, method: str, attempt: Any, collector: BatchOutputCollector, partition: int, meta: Any
    ) -> Any:
        route = self._route(partition)
        if route is None:
            return None
        spout, inner = route
        emit = getattr(self.emitters[spout], method)
        return emit(attempt, _OnStream(collector, source_stream(spout)), inner, meta)

    def emit_partition_batch_new(
        self, attempt: Any, collector: BatchOutputCollector, partition: int, last_meta: Any
    ) -> Any:
        return self._call("emit_partition_batch_new", attempt, collector, partition, last_meta)

    def emit_partition_batch(
        self, attempt: Any, collector: BatchOutputCollector, partition: int, meta: Any
    ) -> Any:
        return self._call("emit_partition_batch", attempt, collector, partition, meta)

    def close(self) -> None:
        _close_all(self.emitters)


class _MultiSpoutBase:
    def __init__(self, spouts: Sequence[Any]) -> None:
        self.spouts = list(spouts)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for index, spout in enumerate(self.spouts):
            own = OutputFieldsDeclarer()
            spout.declare_output_fields(own)
            declarer.declare_stream(source_stream(index), own.streams[DEFAULT_STREAM_ID].fields)

    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        return _Coordinator([spout.get_coordinator(conf, context) for spout in self.spouts])

    def _emitters(self, conf: Conf, context: TopologyContext) -> list[Any]:
        return [spout.get_emitter(conf, context) for spout in self.spouts]


class MultiPartitionedSpout(_MultiSpoutBase, BasePartitionedTransactionalSpout):
    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        # A partitioned emitter need not know its partition count: ask the coordinators.
        coordinators = self.get_coordinator(conf, context)
        return _Emitter(self._emitters(conf, context), coordinators.counts)


class MultiOpaqueSpout(_MultiSpoutBase, BaseOpaquePartitionedTransactionalSpout):
    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        emitters = self._emitters(conf, context)
        return _Emitter(
            emitters, lambda: [int(emitter.number_of_partitions()) for emitter in emitters]
        )


def multi_spout(spouts: Sequence[Any]) -> MultiPartitionedSpout | MultiOpaqueSpout:
    """One spout over ``spouts`` (one kind, checked when the streams were declared)."""
    if isinstance(spouts[0], BaseOpaquePartitionedTransactionalSpout):
        return MultiOpaqueSpout(spouts)
    return MultiPartitionedSpout(spouts)
