"""The in-process engine's spout tasks.

Contract. ``SpoutTask`` polls its spout again at once after an emit (unless it
declares its wake-ups: it asks then), else with a short idle back-off (``wake``
polls at once; a spout that declares wake-ups waits ``max_idle_wait``), gives
each emit with a message id a root and tells the acker, and hands ``ack``/``fail``
back to the spout when the root settles. It counts ``emitted``, ``acked`` and
``failures``, and sums the acked roots' ``complete_seconds`` (Storm's complete
latency; ``drpc.executors.stats``). What the spout emits on its turn's thread goes
into the turn's outbox; from a thread of its own, straight to the targets.
``SpoutCollector`` is the spout's collector. ``Activation`` runs the spout's
``activate``/``deactivate`` on its own turn (each only when the spout's state changes:
``open`` activates it, ``close`` deactivates an active one); ``next_tuple`` is called only
while the task is ``active`` and its spout activated.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from drpc import config
from drpc.errors import Failure
from drpc.executors.local.actors import Actor
from drpc.executors.local.messages import (
    NEXT,
    AckInit,
    Activation,
    Message,
    Next,
    Outbox,
    RootDone,
)
from drpc.executors.local.spans import HANDLING
from drpc.executors.local.tasks import task_conf
from drpc.model.components import BaseRichSpout, FailureAwareSpout, SpoutOutputCollector
from drpc.model.context import TopologyContext
from drpc.model.streams import DEFAULT_STREAM_ID
from drpc.model.topology import ComponentSpec
from drpc.requests import ReturnInfo
from drpc.semantics.acker import new_edge_id, new_root_id
from drpc.semantics.routing import OutputRouter, receiver_tuple
from drpc.semantics.runners import instantiate

if TYPE_CHECKING:
    from drpc.executors.local.executor import LocalExecutor

log = logging.getLogger(__name__)
_get_ident: Final = threading.get_ident

MAX_IDLE_WAIT = 0.02
"""Default longest pause, in seconds, between polls of a spout that has nothing to emit
(``LocalExecutor``'s ``max_idle_wait``)."""


class SpoutCollector(SpoutOutputCollector):
    def __init__(self, task: SpoutTask) -> None:
        self._task = task

    def emit(
        self, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM_ID
    ) -> list[int]:
        router = self._task.router
        router.check(stream, values, direct=False)
        targets = router.targets(stream, values)
        self._task.send(stream, values, targets, msg_id)
        return targets

    def emit_direct(
        self,
        task_id: int,
        values: Sequence[Any],
        msg_id: Any = None,
        stream: str = DEFAULT_STREAM_ID,
    ) -> None:
        router = self._task.router
        router.check(stream, values, direct=True)
        self._task.send(stream, values, router.direct_target(stream, task_id), msg_id)

    def report_error(self, error: BaseException) -> None:
        log.error(
            "spout %r task %d reported: %r", self._task.component_id, self._task.task_id, error
        )


_MISSING: Final = object()


class SpoutTask(Actor):
    """One task of a spout on the in-process engine (see the module doc)."""

    def __init__(self, engine: LocalExecutor, spec: ComponentSpec, task_id: int) -> None:
        super().__init__()
        self.engine = engine
        self.component_id = spec.id
        self.task_id = task_id
        self.name = f"{spec.id}[{task_id}]"
        self.router = OutputRouter(engine.topology, spec.id, task_id)
        self.conf = task_conf(engine, spec)
        spout = instantiate(spec.component, spec.id)
        assert isinstance(spout, BaseRichSpout)
        self.spout = spout
        self.collector = SpoutCollector(self)
        self.pending: dict[int, Any] = {}
        self.emitted_at: dict[int, float] = {}  # each pending root's emit (complete latency)
        self.acked = 0
        self.failures = 0
        self.complete_seconds = 0.0  # summed over the acked roots
        self.max_pending: int | None = self.conf[config.TOPOLOGY_MAX_SPOUT_PENDING]
        self.active = False  # polled (cleared at once by a hold, before its Activation)
        self.activated = False  # the spout's activate() was called last, not deactivate()
        self.emitted = 0
        self.idle_wait = 0.0
        self.next_posted = False
        self.timer_armed = False
        self.context: TopologyContext | None = None
        self.turn_outbox: Outbox | None = None  # the running turn's (``handle_batch``)
        self.turn_thread = 0  # the thread running the turn

    def open(self) -> None:
        self.context = context = TopologyContext(
            self.engine.topology,
            self.component_id,
            self.task_id,
            services=self.engine.services,
            wakeup=self.wake,
            conf=self.conf,
        )
        self.spout.open(self.conf, context, self.collector)
        self.spout.activate()
        self.activated = self.active = True

    def wake(self) -> None:
        """Have ``next_tuple`` run soon. Safe from any thread."""
        if self.next_posted or not self.active:
            return
        self.next_posted = True
        self.idle_wait = 0.0
        self.engine.post(self, NEXT)

    def _timer_fired(self) -> None:
        self.timer_armed = False
        self.wake()

    def handle_batch(self, batch: list[Message], turn: object = None) -> None:
        # what the spout sends during its turn goes into the turn's outbox (``send``)
        self.turn_outbox = turn if isinstance(turn, Outbox) else None
        self.turn_thread = _get_ident()
        try:
            super().handle_batch(batch, turn)
        finally:
            self.turn_outbox = None
            self.turn_thread = 0

    def handle(self, message: Message) -> None:
        match message:
            case Next():
                self.next_posted = False
                self.next_tuple()
            case RootDone(root, failure):
                self.root_done(root, failure)
            case Activation(active, done):
                self.apply_activation(active)
                done.set()

    def apply_activation(self, active: bool) -> None:
        if active != self.activated:
            self.activated = active
            try:
                if active:
                    self.spout.activate()
                else:
                    self.spout.deactivate()
            except Exception:
                log.exception(
                    "spout %r %s raised", self.component_id, "activate" if active else "deactivate"
                )
        if active and self.active:
            self.wake()  # a poll taken while it was not yet activated did nothing

    def next_tuple(self) -> None:
        if not (self.active and self.activated):
            return
        if self.max_pending is not None and len(self.pending) >= self.max_pending:
            return
        before = self.emitted
        try:
            self.spout.next_tuple()
        except Exception:
            log.exception("spout %r next_tuple raised", self.component_id)
        declared = self.context is not None and self.context.wakeups_declared
        if declared:
            # it asks for its next poll while more waits, also after an emit: the idle
            # poll is the safety net
            if self.next_posted:
                return
            self.idle_wait = self.engine.max_idle_wait
        elif self.emitted > before:
            self.wake()
            return
        else:
            self.idle_wait = min(max(self.idle_wait * 2, 0.001), self.engine.max_idle_wait)
        if not self.timer_armed:
            self.timer_armed = True
            self.engine.timer.schedule(self.idle_wait, self._timer_fired)

    def root_done(self, root: int, failure: Failure | None) -> None:
        msg_id = self.pending.pop(root, _MISSING)
        if msg_id is _MISSING:
            return
        emitted_at = self.emitted_at.pop(root, None)
        if failure is not None:
            self.failures += 1
        else:
            self.acked += 1
            if emitted_at is not None:
                self.complete_seconds += time.monotonic() - emitted_at
        spans = self.engine.spans
        if spans is not None and failure is not None:
            spans.failed(root, failure)
            # the spout's own span: from hearing of the failure to failing the request
            HANDLING.current = (self.component_id, self.task_id, time.monotonic())
        try:
            if failure is None:
                self.spout.ack(msg_id)
            elif isinstance(self.spout, FailureAwareSpout):
                self.spout.fail_with(msg_id, failure)
            else:
                self.spout.fail(msg_id)
        except Exception:
            log.exception(
                "spout %r %s raised", self.component_id, "ack" if failure is None else "fail"
            )
        if spans is not None:
            HANDLING.current = None
            spans.forget(root)
        if self.max_pending is not None:
            self.wake()

    def send(self, stream: str, values: Sequence[Any], targets: list[int], msg_id: Any) -> None:
        pickled = self.router.pickled(stream, values)
        fields = self.router.fields(stream)
        self.emitted += 1
        # into the turn's outbox when the turn's own thread emits (a spout emitting from a
        # thread of its own delivers directly)
        outbox = self.turn_outbox if self.turn_thread == _get_ident() else None
        engine = self.engine
        if msg_id is None:
            for target in targets:
                message = receiver_tuple(
                    values, pickled, fields, self.component_id, stream, self.task_id, {}
                )
                if outbox is not None:
                    outbox.add(target, message)
                else:
                    engine.deliver(target, message)
            return
        modulus = engine.root_modulus
        root = new_root_id(modulus, engine.root_residue) if modulus else new_edge_id()
        self.pending[root] = msg_id
        self.emitted_at[root] = time.monotonic()
        spans = self.engine.spans
        if spans is not None and isinstance(msg_id, ReturnInfo):
            spans.opened(root, msg_id)
        if not targets:
            self.engine.post(self, RootDone(root, None))
            return
        ack_val = 0
        messages = []
        for target in targets:
            edge = new_edge_id()
            ack_val ^= edge
            message = receiver_tuple(
                values, pickled, fields, self.component_id, stream, self.task_id, {root: edge}
            )
            messages.append((target, message))
        if outbox is not None:
            outbox.add_acker(root, AckInit(root, ack_val, self.task_id))
            for target, message in messages:
                outbox.add(target, message)
            return
        engine.to_acker(root, AckInit(root, ack_val, self.task_id))
        for target, message in messages:
            engine.deliver(target, message)

    def close(self) -> None:
        self.active = False
        try:
            if self.activated:
                self.activated = False
                self.spout.deactivate()
        finally:
            self.spout.close()
