"""The collectors a basic bolt and a batch bolt emit through, over their task's collector.

Contract:

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
own work for the emit. ``output`` is any ``OutputCollector``; methods take their
arguments by position, since the task collector parses keyword arguments far slower.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from drpc.model.anchors import CURRENT_ANCHOR
from drpc.model.streams import DEFAULT_STREAM_ID

if TYPE_CHECKING:
    from drpc.model.components import OutputCollector
    from drpc.model.tuples import Tuple


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
        return self._output.emit(values, CURRENT_ANCHOR, stream)

    def emit_direct(
        self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM_ID
    ) -> None:
        self._output.emit_direct(task, values, CURRENT_ANCHOR, stream)

    def emit_many(self, many: Iterable[Sequence[Any]], stream: str = DEFAULT_STREAM_ID) -> None:
        """``emit`` each of ``many``, in order."""
        self._output.emit_many(many, CURRENT_ANCHOR, stream)

    def report_error(self, error: BaseException) -> None:
        self._output.report_error(error)
