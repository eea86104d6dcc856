"""The collector of one bolt task: what a bolt's emits, acks and fails go through.

Contract. ``TaskCollector(core)`` is the ``OutputCollector`` of the task ``core`` (a
``drpc.executors.task.TaskCore``) owns; the core makes it and hands it to the bolt.

- Every call holds the task's ``lock`` (re-entrant), unless the calling thread holds it
  already (it runs the task's turn), so a bolt may emit, ack and fail from threads of its
  own.
- ``emit`` checks the values against the stream's declared fields
  (``core.router.check``), routes them (``core.router.targets``) and hands them to
  ``core.send`` with the anchors' ids; it returns the receiving task ids. ``emit_many``
  does a batch of emits through ``core.send_many``; ``emit_direct`` sends to one task
  of a direct stream.
- ``ack`` and ``fail`` go to ``core.on_ack`` and ``core.on_fail`` (a fail with its
  reason made a ``Failure`` by the bolt's runner). A tuple acked or failed a second time
  is ignored, the second ack with a warning.
- After the task ended (``core.ended``: a batch task that finished), every call is
  dropped with a warning (``core.late``); an ack or fail still marks the tuple done.
- ``report_error`` logs the error with the task's step and index.
- ``call_in_turn(run)`` hands ``run`` to the effects' ``call_in_turn``; when the
  executor runs no turns, it is called at once under the task's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from drpc.errors import Failure
from drpc.model.collectors import Anchors
from drpc.model.components import OutputCollector
from drpc.model.streams import DEFAULT_STREAM_ID
from drpc.model.tuples import Tuple

if TYPE_CHECKING:
    from drpc.executors.task import TaskCore

log = logging.getLogger(__name__)


class TaskCollector(OutputCollector):
    """The collector of one task: checks, routes and counts every call, under the task's
    lock, whatever thread the bolt calls from."""

    def __init__(self, core: TaskCore) -> None:
        self._core = core
        self._lock = core.lock
        # Whether this thread holds the lock: the RLock's own check (what a Condition on
        # it asks), bound once; it reads the thread's ident without making an int of it.
        self._held: Callable[[], bool] = core.lock._is_owned  # type: ignore[attr-defined]

    # Each call holds the task's lock, unless this thread holds it already (it runs the
    # task's turn): taking a re-entrant lock again costs more than the check.

    def emit(
        self,
        values: Sequence[Any],
        anchors: Anchors = None,
        stream: str = DEFAULT_STREAM_ID,
    ) -> list[int]:
        if self._held():
            return self._emit(values, anchors, stream)
        with self._lock:
            return self._emit(values, anchors, stream)

    def _emit(self, values: Sequence[Any], anchors: Any, stream: str) -> list[int]:
        core = self._core
        if core.ended:
            core.late("emitted")
            return []
        core.router.check(stream, values, direct=False)
        targets = core.router.targets(stream, values)
        core.send(stream, values, targets, core.anchors(anchors))
        return targets

    def emit_many(
        self,
        many: Iterable[Sequence[Any]],
        anchors: Anchors = None,
        stream: str = DEFAULT_STREAM_ID,
    ) -> None:
        if self._held():
            self._emit_many(many, anchors, stream)
            return
        with self._lock:
            self._emit_many(many, anchors, stream)

    def _emit_many(self, many: Iterable[Sequence[Any]], anchors: Any, stream: str) -> None:
        core = self._core
        if core.ended:
            core.late("emitted")
            return
        core.send_many(stream, many, core.anchors(anchors))

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Anchors = None,
        stream: str = DEFAULT_STREAM_ID,
    ) -> None:
        if self._held():
            self._emit_direct(task, values, anchors, stream)
            return
        with self._lock:
            self._emit_direct(task, values, anchors, stream)

    def _emit_direct(self, task: int, values: Sequence[Any], anchors: Any, stream: str) -> None:
        core = self._core
        if core.ended:
            core.late("emitted")
            return
        core.router.check(stream, values, direct=True)
        core.send(stream, values, core.router.direct_target(stream, task), core.anchors(anchors))

    def ack(self, tuple: Tuple) -> None:
        if self._held():
            self._ack(tuple)
            return
        with self._lock:
            self._ack(tuple)

    def _ack(self, tuple: Tuple) -> None:
        core = self._core
        if tuple._done:
            log.warning("step %r acked a tuple twice; ignoring the second ack", core.component_id)
            return
        if core.ended:
            tuple._done = True
            core.late("acked")
            return
        core.on_ack(tuple)

    def fail(self, tuple: Tuple, reason: Failure | BaseException | str | None = None) -> None:
        if self._held():
            self._fail(tuple, reason)
            return
        with self._lock:
            self._fail(tuple, reason)

    def _fail(self, tuple: Tuple, reason: Failure | BaseException | str | None) -> None:
        core = self._core
        if tuple._done:
            return
        if core.ended:
            tuple._done = True
            core.late("failed")
            return
        core.on_fail(tuple, core.runner.failure_from(reason))

    def call_in_turn(self, run: Callable[[], None]) -> None:
        if self._core.effects.call_in_turn(run):
            return
        if self._held():
            run()
            return
        with self._lock:
            run()

    def report_error(self, error: BaseException) -> None:
        log.error(
            "step %r task %d reported: %r", self._core.component_id, self._core.task_id, error
        )
