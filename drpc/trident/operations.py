"""What Trident users implement: functions, filters, aggregators and state queries (Storm's API).

Contract. Every operation is a plain object that travels to the tasks that
run it (pickled with cloudpickle, so lambdas and ``__main__`` classes work);
``prepare(conf, context)`` runs once per batch instance before use and
``cleanup()`` is never needed (override either when you want).

- ``Function.execute(tuple, collector)``: emit zero or more tuples of the
  operation's output fields; each is appended to the input tuple.
- ``Filter.is_keep(tuple) -> bool``.
- ``MapFunction.execute(tuple) -> values`` (one output tuple replaces the
  input), ``FlatMapFunction.execute(tuple) -> iterable of values``,
  ``Consumer.accept(tuple)`` (``peek``: sees every tuple, changes nothing).
- ``CombinerAggregator``: ``init(tuple) -> T``, ``combine(a, b) -> T``,
  ``zero() -> T``; drpc combines within each partition before any shuffle,
  so ``combine`` must be associative and commutative.
- ``ReducerAggregator``: ``init() -> T``, ``reduce(current, tuple) -> T``,
  applied to a group's tuples in arrival order in one task.
- ``Aggregator``: ``init(batch_id, collector) -> S``, ``aggregate(S, tuple,
  collector)``, ``complete(S, collector)``; emits any number of tuples.
- ``QueryFunction``: ``batch_retrieve(state, keys) -> results`` once per
  batch and partition, then ``execute(tuple, result, collector)`` per tuple.
- ``StateUpdater``: ``update_state(state, tuples, collector)`` once per batch
  and partition (``partition_persist``), in the batch's commit: ``state`` is
  the map state inside the commit (``multi_get``, ``multi_put``,
  ``multi_update``); what it emits is dropped (drpc has no new-values
  stream).

Plain callables are accepted where a one-method operation is expected
(``each``, ``filter``, ``map``, ``flat_map``, ``peek``); ``as_*`` wrap them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from drpc.trident.tuples import TridentCollector, TridentTuple

T = TypeVar("T")


class Operation:
    """Shared by every operation: optional per-instance setup."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        """Called once on the task's instance before its first tuple of a batch."""


class Function(Operation):
    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        raise NotImplementedError


class Filter(Operation):
    def is_keep(self, tuple: TridentTuple) -> bool:
        raise NotImplementedError


class MapFunction(Operation):
    def execute(self, tuple: TridentTuple) -> Sequence[Any]:
        raise NotImplementedError


class FlatMapFunction(Operation):
    def execute(self, tuple: TridentTuple) -> Iterable[Sequence[Any]]:
        raise NotImplementedError


class Consumer(Operation):
    def accept(self, tuple: TridentTuple) -> None:
        raise NotImplementedError


class CombinerAggregator(Operation, Generic[T]):
    def init(self, tuple: TridentTuple) -> T:
        raise NotImplementedError

    def combine(self, a: T, b: T) -> T:
        raise NotImplementedError

    def zero(self) -> T:
        raise NotImplementedError


class ReducerAggregator(Operation, Generic[T]):
    def init(self) -> T:
        raise NotImplementedError

    def reduce(self, current: T, tuple: TridentTuple) -> T:
        raise NotImplementedError


class Aggregator(Operation, Generic[T]):
    def init(self, batch_id: Any, collector: TridentCollector) -> T:
        raise NotImplementedError

    def aggregate(self, state: T, tuple: TridentTuple, collector: TridentCollector) -> None:
        raise NotImplementedError

    def complete(self, state: T, collector: TridentCollector) -> None:
        raise NotImplementedError


AnyAggregator = CombinerAggregator[Any] | ReducerAggregator[Any] | Aggregator[Any]


class QueryFunction(Operation):
    def batch_retrieve(self, state: Any, keys: Sequence[TridentTuple]) -> Sequence[Any]:
        raise NotImplementedError

    def execute(self, tuple: TridentTuple, result: Any, collector: TridentCollector) -> None:
        raise NotImplementedError


class StateUpdater(Operation):
    def update_state(
        self, state: Any, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        raise NotImplementedError


# -- plain callables as operations ---------------------------------------------------------


class _CallableFunction(Function):
    def __init__(self, fn: Callable[[TridentTuple, TridentCollector], None]) -> None:
        self.fn = fn

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        self.fn(tuple, collector)


class _CallableFilter(Filter):
    def __init__(self, fn: Callable[[TridentTuple], bool]) -> None:
        self.fn = fn

    def is_keep(self, tuple: TridentTuple) -> bool:
        return bool(self.fn(tuple))


class _CallableMap(MapFunction):
    def __init__(self, fn: Callable[[TridentTuple], Sequence[Any]]) -> None:
        self.fn = fn

    def execute(self, tuple: TridentTuple) -> Sequence[Any]:
        return self.fn(tuple)


class _CallableFlatMap(FlatMapFunction):
    def __init__(self, fn: Callable[[TridentTuple], Iterable[Sequence[Any]]]) -> None:
        self.fn = fn

    def execute(self, tuple: TridentTuple) -> Iterable[Sequence[Any]]:
        return self.fn(tuple)


class _CallableConsumer(Consumer):
    def __init__(self, fn: Callable[[TridentTuple], object]) -> None:
        self.fn = fn

    def accept(self, tuple: TridentTuple) -> None:
        self.fn(tuple)


def as_function(op: Function | Callable[[TridentTuple, TridentCollector], None]) -> Function:
    return op if isinstance(op, Function) else _CallableFunction(op)


def as_filter(op: Filter | Callable[[TridentTuple], bool]) -> Filter:
    return op if isinstance(op, Filter) else _CallableFilter(op)


def as_map(op: MapFunction | Callable[[TridentTuple], Sequence[Any]]) -> MapFunction:
    return op if isinstance(op, MapFunction) else _CallableMap(op)


def as_flat_map(
    op: FlatMapFunction | Callable[[TridentTuple], Iterable[Sequence[Any]]],
) -> FlatMapFunction:
    return op if isinstance(op, FlatMapFunction) else _CallableFlatMap(op)


def as_consumer(op: Consumer | Callable[[TridentTuple], object]) -> Consumer:
    return op if isinstance(op, Consumer) else _CallableConsumer(op)
