"""The collectors bolts emit through: a task's, and a basic and a batch bolt's over it.

Contract:

- ``OutputCollector``: what a rich bolt emits, acks and fails through; an executor's
  task collector subclasses it (``drpc.executors.task.TaskCollector``).
- ``BasicOutputCollector(output, input)``: ``emit`` and ``emit_direct`` anchor to
  ``input``; the executor acks the input when the bolt's ``execute`` returns. An
  executor may point one collector at each input in turn (``_input``), as Storm's
  basic bolt executor does.
- ``BatchOutputCollector(output)``: ``emit``, ``emit_direct`` and ``emit_many`` anchor to
  ``CURRENT_ANCHOR``, which the executor resolves to the input or finish it is running.
  It holds no state of a batch, so one serves every batch of a task.
- ``report_error`` goes to ``output`` as it is.

These wrappers run once per emit, so the compiled build compiles them
(``drpc.compiled``): interpreted, a wrapper's frame cost more than the task collector's
own work for the emit. ``output`` is any ``OutputCollector``: compiled, the base class
here lets a wrapper call a compiled task collector's methods directly, without a Python
method call or parsing its arguments (an interpreted subclass is called as Python).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

from drpc.model.anchors import CURRENT_ANCHOR, _CurrentAnchor
from drpc.model.streams import DEFAULT_STREAM_ID
from drpc.model.tuples import Tuple

_CURRENT_ANCHOR: Final = CURRENT_ANCHOR  # held in a C variable when compiled

if TYPE_CHECKING:
    from drpc.errors import Failure

Anchors = Tuple | Sequence[Tuple] | _CurrentAnchor | None
"""What an emit may be anchored to."""


@mypyc_attr(allow_interpreted_subclasses=True)
class OutputCollector:
    """What a rich bolt emits, acks and fails through. Executors implement it."""

    def emit(
        self,
        values: Sequence[Any],
        anchors: Anchors = None,
        stream: str = DEFAULT_STREAM_ID,
    ) -> list[int]:
        """Send ``values`` on ``stream``; returns the ids of the receiving tasks."""
        raise NotImplementedError

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Anchors = None,
        stream: str = DEFAULT_STREAM_ID,
    ) -> None:
        """Send ``values`` on the direct ``stream`` to task id ``task`` only."""
        raise NotImplementedError

    def emit_many(
        self,
        many: Iterable[Sequence[Any]],
        anchors: Anchors = None,
        stream: str = DEFAULT_STREAM_ID,
    ) -> None:
        """``emit`` each of ``many`` in order, with the same anchors (an executor may do it in
        one step: one lock, one count per receiving task)."""
        for values in many:
            self.emit(values, anchors, stream)

    def ack(self, tuple: Tuple) -> None:
        raise NotImplementedError

    def fail(self, tuple: Tuple, reason: Failure | BaseException | str | None = None) -> None:
        """Fail ``tuple`` and with it its request or batch; ``reason`` ends up in the error."""
        raise NotImplementedError

    def report_error(self, error: BaseException) -> None:
        raise NotImplementedError

    def call_in_turn(self, run: Callable[[], None]) -> None:
        """Call ``run`` on the task's own turn, after the tuples it has queued: for a bolt
        with a thread of its own (a ShellBolt's reader) whose emits, acks and fails then
        cost what the task's own do. Returns at once; ``run`` must not block. An executor
        without turns calls it at once, holding the task's lock."""
        run()


class BasicOutputCollector:
    """Emits anchored to the input being executed; acking is automatic."""

    def __init__(self, output: OutputCollector, input_tuple: Tuple) -> None:
        self._output = output
        self._input = input_tuple

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM_ID) -> list[int]:
        return self._output.emit(values, self._input, stream)

    def emit_direct(
        self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM_ID
    ) -> None:
        self._output.emit_direct(task, values, self._input, stream)

    def report_error(self, error: BaseException) -> None:
        self._output.report_error(error)


class BatchOutputCollector:
    """What a batch bolt emits through; anchoring is the executor's business."""

    def __init__(self, output: OutputCollector) -> None:
        self._output = output

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM_ID) -> list[int]:
        return self._output.emit(values, _CURRENT_ANCHOR, stream)

    def emit_direct(
        self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM_ID
    ) -> None:
        self._output.emit_direct(task, values, _CURRENT_ANCHOR, stream)

    def emit_many(self, many: Iterable[Sequence[Any]], stream: str = DEFAULT_STREAM_ID) -> None:
        """``emit`` each of ``many``, in order."""
        self._output.emit_many(many, _CURRENT_ANCHOR, stream)

    def report_error(self, error: BaseException) -> None:
        self._output.report_error(error)
