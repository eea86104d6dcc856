"""The component kinds users write, and the collectors they emit through.

Contract, in Storm's names:

- ``BaseBasicBolt``: ``execute(tuple, collector)``. Every emit is anchored to
  the input and the input is acked when ``execute`` returns; raising any
  exception (``FailedException`` being the expected one) fails the input.
- ``BaseRichBolt``: ``prepare(conf, context, collector)`` and
  ``execute(tuple)``; the bolt anchors, acks and fails explicitly through
  ``collector.emit(values, anchors=..., stream=...)``, ``ack`` and ``fail``.
- ``BaseBatchBolt``: a fresh instance per batch id.
  ``prepare(conf, context, collector, id)``, ``execute(tuple)`` per tuple of
  the batch, ``finish_batch()`` once the task has every tuple of the batch,
  even when it saw none.
- ``BaseRichSpout``: ``open``, ``next_tuple``, ``ack(msg_id)``, ``fail(msg_id)``.

Everything declares its streams in ``declare_output_fields(declarer)``.
Components are pickled to reach their tasks (and Spark workers), so keep
heavy read-only data out of them: see ``drpc.resources``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from drpc.model.anchors import CURRENT_ANCHOR as CURRENT_ANCHOR
from drpc.model.collectors import BasicOutputCollector as BasicOutputCollector
from drpc.model.collectors import BatchOutputCollector as BatchOutputCollector
from drpc.model.collectors import OutputCollector as OutputCollector
from drpc.model.streams import DEFAULT_STREAM_ID, OutputFieldsDeclarer

if TYPE_CHECKING:
    from drpc.errors import Failure
    from drpc.model.context import TopologyContext
    from drpc.model.tuples import Tuple

Conf = dict[str, Any]


STATE_READS = ("anywhere", "finish", "nowhere")


class IComponent:
    """Anything placed in a topology."""

    state_reads: str = "anywhere"
    """Where this component's code may read state while it works on a DRPC request that
    pinned a version (``drpc.state.versions``): "anywhere" (the default), "finish" (only
    in ``finish_batch`` or ``finished_id``) or "nowhere". The engine makes the request's
    versions its thread's only there, so a tuple of a step that reads nothing costs
    nothing more; drpc's own steps declare it. A step that reads where it said it would
    not reads the latest commit there."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the streams this component emits (none by default)."""

    def get_component_configuration(self) -> Conf | None:
        """Configuration overriding the topology's for this component only."""
        return None


class SpoutOutputCollector:
    """What a spout emits through. A ``msg_id`` makes the tuple a tracked root."""

    def emit(
        self, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM_ID
    ) -> list[int]:
        raise NotImplementedError

    def emit_direct(
        self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM_ID
    ) -> None:
        raise NotImplementedError

    def report_error(self, error: BaseException) -> None:
        raise NotImplementedError


class BaseRichBolt(IComponent):
    """A bolt that anchors, acks and fails explicitly."""

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        """Called once per task before the first tuple."""

    def execute(self, tuple: Tuple) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        """Called when the task stops (not guaranteed on a crash)."""


class BaseBasicBolt(IComponent):
    """A bolt whose emits are anchored to its input and whose input is acked for it."""

    def prepare(self, conf: Conf, context: TopologyContext) -> None:
        """Called once per task before the first tuple."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        """Called when the task stops."""


class BaseBatchBolt(IComponent):
    """A bolt instance per batch id: ``execute`` per tuple, ``finish_batch`` once."""

    def prepare(
        self, conf: Conf, context: TopologyContext, collector: BatchOutputCollector, id: Any
    ) -> None:
        """Called on the fresh instance for batch ``id``, before its first tuple."""

    def execute(self, tuple: Tuple) -> None:
        raise NotImplementedError

    def finish_batch(self) -> None:
        """Called once the task has received every tuple of the batch (maybe none)."""


class BaseRichSpout(IComponent):
    """A source of tuples."""

    def open(self, conf: Conf, context: TopologyContext, collector: SpoutOutputCollector) -> None:
        """Called once per task before ``next_tuple``."""

    def next_tuple(self) -> None:
        """Emit zero or more tuples; must not block for long."""
        raise NotImplementedError

    def ack(self, msg_id: Any) -> None:
        """The tuple tree rooted at ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree rooted at ``msg_id`` failed or timed out."""

    def close(self) -> None:
        """Called when the topology stops."""

    def activate(self) -> None:
        """Called when the spout starts emitting."""

    def deactivate(self) -> None:
        """Called when the spout stops emitting."""


@runtime_checkable
class FinishedCallback(Protocol):
    """A bolt told when a coordinated id has received all its tuples."""

    def finished_id(self, id: Any) -> None: ...


@runtime_checkable
class FailedIdCallback(Protocol):
    """A bolt told when a coordinated id failed or timed out: drop its state."""

    def failed_id(self, id: Any) -> None: ...


@runtime_checkable
class FailureAwareSpout(Protocol):
    """A spout that wants to know why a tuple tree failed."""

    def fail_with(self, msg_id: Any, failure: Failure) -> None: ...


class ICommitter:
    """Marker: a batch bolt whose ``finish_batch`` runs in the commit phase."""
