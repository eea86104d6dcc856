"""Bolt runners: every bolt kind behind one task-level interface.

Executors drive a ``BoltRunner`` per task: ``prepare(conf, context,
collector)``, ``execute(tuple)`` (the runner acks or fails the tuple itself
unless the bolt is a rich bolt, which does it explicitly; ``run(tuple)`` does
the same but returns True instead of acking, for the caller to ack), ``finished_id(id)``
and ``failed_id(id)`` for coordinated ids, ``cleanup()``.

- ``BasicBoltRunner``: anchors emits to the input, acks after ``execute``,
  fails the input on any exception (the exception becomes the failure reason).
- ``RichBoltRunner``: passes through; an exception fails the input if the
  bolt had not acked or failed it yet.
- ``BatchBoltRunner``: one fresh bolt instance per id, made by unpickling the
  prototype (so no state leaks between batches, as in Storm), prepared with
  the id, executed per tuple, ``finish_batch`` on ``finished_id``, forgotten
  on ``failed_id``. An id with no tuples still gets an instance at finish.
  When unpickling would only set immutable attributes on a new object of the
  bolt's class (``plain_state``), the runner does just that, without pickle.
"""

from __future__ import annotations

import copyreg
import pickle
from collections.abc import Hashable
from typing import Any

import cloudpickle

from drpc.errors import DRPCExceptionType, Failure, InvalidTopologyError
from drpc.model.collectors import BasicOutputCollector, BatchOutputCollector
from drpc.model.components import (
    BaseBasicBolt,
    BaseBatchBolt,
    BaseRichBolt,
    Conf,
    FailedIdCallback,
    FinishedCallback,
    IComponent,
    OutputCollector,
)
from drpc.model.context import TopologyContext
from drpc.model.tuples import Tuple
from drpc.semantics.routing import SHAREABLE


def freeze(component: object) -> bytes:
    """Pickle a component (or a topology); classes defined in ``__main__`` travel by value
    (cloudpickle)."""
    return cloudpickle.dumps(component, protocol=pickle.HIGHEST_PROTOCOL)


def instantiate(component: IComponent, component_id: str) -> Any:
    """A task's own copy of a component, made the way a remote worker would make it."""
    try:
        return pickle.loads(freeze(component))
    except Exception as error:
        raise InvalidTopologyError(
            f"{type(component).__name__} cannot be pickled, so it cannot be shipped to its "
            f"tasks: {type(error).__name__}: {error}",
            component_id,
        ) from error


def plain_state(instance: object) -> dict[str, Any] | None:
    """The attributes unpickling ``instance`` sets on a new object of its class, when that
    is all unpickling does and none of them can change (each value exactly of a
    ``SHAREABLE`` type): then ``cls.__new__(cls)`` updated with them is the same fresh
    copy, made without pickle. None when the class pickles itself its own way (its own
    ``__new__``, ``__reduce__``, ``__reduce_ex__``, ``__getstate__`` or
    ``__setstate__``, or ``__slots__``) or holds a value that could change."""
    cls = type(instance)
    state = getattr(instance, "__dict__", None)
    if type(state) is not dict or cls in copyreg.dispatch_table:
        return None
    if (
        cls.__new__ is not object.__new__
        or cls.__reduce_ex__ is not object.__reduce_ex__
        or cls.__reduce__ is not object.__reduce__
        or cls.__getstate__ is not object.__getstate__
        or hasattr(cls, "__setstate__")
        or any("__slots__" in vars(base) for base in cls.__mro__)
    ):
        return None
    for name, value in state.items():
        if type(name) is not str or type(value) not in SHAREABLE:
            return None
    return dict(state)


class PrepareFailed(Exception):
    """A batch bolt's ``prepare`` raised (it runs lazily, per batch id)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class BoltRunner:
    """One task's bolt, whatever its kind. ``has_finish``: the bolt has a finish callback;
    ``has_failed_id``: its ``failed_id`` calls the bolt (else giving an id up does nothing
    a bolt could see)."""

    has_finish = False
    has_failed_id = False

    def __init__(self, component_id: str) -> None:
        self.component_id = component_id
        self.task_id: int | None = None
        self.collector: OutputCollector | None = None

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        self.task_id = context.this_task_id
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        raise NotImplementedError

    def run(self, tuple: Tuple) -> bool:
        """``execute`` but for its ack: True when the caller is to ack ``tuple`` (the bolt
        ran, and its kind is acked for it), so a task core acks it without a call through
        its collector; a failure is still reported through the collector."""
        self.execute(tuple)
        return False

    def finished_id(self, id: Hashable) -> None:
        """Every tuple of ``id`` has arrived at this task."""

    def failed_id(self, id: Hashable) -> None:
        """``id`` failed or timed out; finish will not be called for it."""

    def cleanup(self) -> None:
        """The task is stopping."""

    def failure(self, error: BaseException, during: str) -> Failure:
        if isinstance(error, PrepareFailed):
            error, during = error.cause, "prepare"
        return Failure.from_exception(error, self.component_id, self.task_id, during)

    def failure_from(self, reason: Failure | BaseException | str | None) -> Failure:
        """The failure a ``collector.fail(tuple, reason)`` call stands for."""
        if isinstance(reason, Failure):
            return reason
        if isinstance(reason, BaseException):
            return self.failure(reason, "execute")
        detail = f": {reason}" if reason else ""
        return Failure(
            DRPCExceptionType.FAILED_REQUEST,
            f"Request failed: step {self.component_id!r} (task {self.task_id}) "
            f"failed the tuple{detail}",
            self.component_id,
            self.task_id,
        )


class BasicBoltRunner(BoltRunner):
    def __init__(self, bolt: BaseBasicBolt, component_id: str) -> None:
        super().__init__(component_id)
        self.bolt = bolt
        self._basic: BasicOutputCollector | None = None
        self.has_finish = isinstance(bolt, FinishedCallback)
        self.has_failed_id = isinstance(bolt, FailedIdCallback)

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        super().prepare(conf, context, collector)
        self._basic = None
        self.bolt.prepare(conf, context)

    def execute(self, tuple: Tuple) -> None:
        if self.run(tuple):
            assert self.collector is not None
            self.collector.ack(tuple)

    def run(self, tuple: Tuple) -> bool:
        collector = self.collector
        assert collector is not None
        # One BasicOutputCollector per task, pointed at each input in turn, as Storm's
        # BasicBoltExecutor sets its collector's context per tuple.
        basic = self._basic
        if basic is None:
            basic = self._basic = BasicOutputCollector(collector, tuple)
        else:
            basic._input = tuple
        try:
            self.bolt.execute(tuple, basic)
        except Exception as error:
            collector.fail(tuple, self.failure(error, "execute"))
            return False
        return True

    def finished_id(self, id: Hashable) -> None:
        if self.has_finish:
            self.bolt.finished_id(id)  # type: ignore[attr-defined]

    def failed_id(self, id: Hashable) -> None:
        if isinstance(self.bolt, FailedIdCallback):
            self.bolt.failed_id(id)

    def cleanup(self) -> None:
        self.bolt.cleanup()


class RichBoltRunner(BoltRunner):
    def __init__(self, bolt: BaseRichBolt, component_id: str) -> None:
        super().__init__(component_id)
        self.bolt = bolt
        self.has_finish = isinstance(bolt, FinishedCallback)
        self.has_failed_id = isinstance(bolt, FailedIdCallback)

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        super().prepare(conf, context, collector)
        self.bolt.prepare(conf, context, collector)

    def execute(self, tuple: Tuple) -> None:
        assert self.collector is not None
        try:
            self.bolt.execute(tuple)
        except Exception as error:
            # The collector ignores a fail for a tuple the bolt already acked or failed.
            self.collector.fail(tuple, self.failure(error, "execute"))

    def finished_id(self, id: Hashable) -> None:
        if self.has_finish:
            self.bolt.finished_id(id)  # type: ignore[attr-defined]

    def failed_id(self, id: Hashable) -> None:
        if isinstance(self.bolt, FailedIdCallback):
            self.bolt.failed_id(id)

    def cleanup(self) -> None:
        self.bolt.cleanup()


class BatchBoltRunner(BoltRunner):
    has_finish = True

    def __init__(self, bolt: BaseBatchBolt, component_id: str) -> None:
        super().__init__(component_id)
        self._prototype = freeze(bolt)
        template = pickle.loads(self._prototype)
        state = plain_state(template)
        # (class, attributes) when a fresh copy needs no pickle (see plain_state)
        self._plain: tuple[type[BaseBatchBolt], dict[str, Any]] | None = (
            (type(template), state) if state is not None else None
        )
        self._open: dict[Hashable, BaseBatchBolt] = {}
        self._conf: Conf = {}
        self._context: TopologyContext | None = None
        self._batch_collector: BatchOutputCollector | None = None

    @property
    def open_batches(self) -> int:
        return len(self._open)

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        super().prepare(conf, context, collector)
        self._conf = conf
        self._context = context
        # one for every batch: it holds nothing of a batch (anchoring is the executor's)
        self._batch_collector = BatchOutputCollector(collector)

    def instance(self, id: Hashable) -> BaseBatchBolt:
        """The bolt of batch ``id``, made and prepared on first use (``PrepareFailed`` when
        its ``prepare`` raises)."""
        bolt = self._open.get(id)
        if bolt is None:
            assert self._batch_collector is not None and self._context is not None
            plain = self._plain
            if plain is not None:
                cls, state = plain
                bolt = cls.__new__(cls)
                bolt.__dict__.update(state)
            else:
                bolt = pickle.loads(self._prototype)
            try:
                bolt.prepare(self._conf, self._context, self._batch_collector, id)
            except Exception as error:
                raise PrepareFailed(error) from error
            self._open[id] = bolt
        return bolt

    def execute(self, tuple: Tuple) -> None:
        if self.run(tuple):
            assert self.collector is not None
            self.collector.ack(tuple)

    def run(self, tuple: Tuple) -> bool:
        collector = self.collector
        assert collector is not None
        try:
            self.instance(tuple.values[0]).execute(tuple)
        except Exception as error:
            collector.fail(tuple, self.failure(error, "execute"))
            return False
        return True

    def finished_id(self, id: Hashable) -> None:
        try:
            self.instance(id).finish_batch()
        finally:
            self._drop(id)

    def failed_id(self, id: Hashable) -> None:
        self._drop(id)

    def _drop(self, id: Hashable) -> None:
        """Forget ``id``'s bolt instance, if it has one."""
        instances = self._open
        if id in instances:  # not ``pop(id, None)``: compiled, that is a Python call
            del instances[id]


def runner_for(bolt: IComponent, component_id: str) -> BoltRunner:
    """The runner for a task's own bolt instance."""
    if isinstance(bolt, BaseBatchBolt):
        return BatchBoltRunner(bolt, component_id)
    if isinstance(bolt, BaseBasicBolt):
        return BasicBoltRunner(bolt, component_id)
    if isinstance(bolt, BaseRichBolt):
        return RichBoltRunner(bolt, component_id)
    raise InvalidTopologyError(f"{type(bolt).__name__} is not a bolt", component_id)
