"""The IO around one ShellBolt task's protocol machine: the subprocess, its threads, a
ticker, and what carries the machine's decisions out through the task's collector.

Contract. ``BoltShell(bolt, conf, context, collector)``, made in ``ShellBolt.prepare``:
``open()`` starts the subprocess and returns once it answered the handshake (else closes
and raises its ``ShellProcessError``); ``execute(tuple)`` hands a tuple to the machine;
``close()`` stops the subprocess and removes its pid directory. Once the subprocess is
ready, what it writes is settled on the task's own turn (``OutputCollector.
call_in_turn``), in the order it wrote it, its end last. A fault kills the subprocess
and fails its tuples with the fault's typed error (``drpc.multilang.component.ERRORS``),
and a new subprocess starts (``drpc.multilang.bolt`` has the user's side of these rules).

``wire_values`` and ``kept_from_anchors`` are the two conversions between the engine's
values and what JSON carries. The module is compiled with the engine (``drpc.compiled``):
it runs for every tuple.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from drpc.errors import ShellHandshakeError, ShellProcessError, ShellReportedError
from drpc.model.components import Conf, OutputCollector
from drpc.model.context import TopologyContext
from drpc.model.tuples import Tuple
from drpc.multilang.bolt_protocol import BoltProtocol, State
from drpc.multilang.component import ERRORS, EXIT_GRACE, heartbeat_timeout_of, logger_for
from drpc.multilang.decisions import (
    Ack,
    Decision,
    Emit,
    Fail,
    Fault,
    Log,
    Metrics,
    ReportError,
    Restart,
    Send,
    Started,
)
from drpc.multilang.handshake import setup_message
from drpc.multilang.process import ShellProcess
from drpc.transactional.attempt import TransactionAttempt

if TYPE_CHECKING:
    from drpc.multilang.bolt import ShellBolt


def wire_values(values: list[Any]) -> list[Any]:
    """What the subprocess gets for a tuple's values: a transactional batch's
    ``TransactionAttempt`` (field 0) as Storm's JSON writes it, ``"txid:attempt_id"``
    (``kept_from_anchors`` turns it back)."""
    if values and isinstance(values[0], TransactionAttempt):
        return [str(values[0]), *values[1:]]
    return values


def kept_from_anchors(values: list[Any], anchors: tuple[Tuple, ...]) -> list[Any]:
    """``values`` with each one that equals the first anchor's value at its position, and
    whose anchor's value is of a subclass of its type, replaced by the anchor's: JSON
    carries a DRPC request id as a plain int, and the engine's id is a ``PinnedRequest``
    whose pinned reads the steps after this one must keep. Likewise a value equal to the
    wire form of the anchor's ``TransactionAttempt`` (``wire_values``) becomes the attempt,
    so what the subprocess emits stays in its batch."""
    if not anchors:
        return values
    before = anchors[0].values
    kept: list[Any] | None = None
    for at in range(min(len(values), len(before))):
        old, value = before[at], values[at]
        if type(old) is type(value):  # what JSON gave back: the value is the value
            continue
        if (isinstance(old, type(value)) and old == value) or (
            isinstance(old, TransactionAttempt) and value == str(old)
        ):
            if kept is None:
                kept = list(values)
            kept[at] = old
    return values if kept is None else kept


class BoltShell:
    """The IO around one task's ``BoltProtocol``: the subprocess, its threads, a ticker."""

    def __init__(
        self, bolt: ShellBolt, conf: Conf, context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.bolt = bolt
        self.collector = collector
        self.component = context.this_component_id
        self.task = context.this_task_id
        self.log = logger_for(self.component)
        self.machine: BoltProtocol[Tuple] = BoltProtocol(
            heartbeat_interval=bolt.heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout_of(conf, bolt.heartbeat_timeout),
            start_timeout=bolt.start_timeout,
            max_message_bytes=bolt.max_message_bytes,
        )
        self.pid_dir = tempfile.mkdtemp(prefix="drpc-multilang-")
        self.setup = setup_message(conf, context, self.pid_dir)
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.process: ShellProcess | None = None
        self.recovered = 0  # the last generation whose fault was handled
        self.last_error: ShellProcessError | None = None
        self.stopping = threading.Event()
        machine = self.machine
        period = min(machine.heartbeat_interval, machine.heartbeat_timeout, machine.start_timeout)
        self.ticker = threading.Thread(
            target=self._tick, args=(max(0.01, period / 4),), name="multilang-ticker", daemon=True
        )

    def open(self) -> None:
        with self.lock:
            later = self._start()
        self.ticker.start()
        self._carry_out(later, self.machine.generation)
        with self.lock:
            self.changed.wait_for(
                lambda: self.machine.state is State.READY or self.recovered >= 1,
                timeout=self.machine.start_timeout + 10.0,
            )
            ready = self.machine.state is State.READY
            error = self.last_error
        if not ready:
            self.close()
            raise error or ShellHandshakeError(self.bolt.command, "did not start")

    def execute(self, tuple: Tuple) -> None:
        with self.lock:
            generation = self.machine.generation
            later = self._locked(
                self.machine.execute(
                    tuple,
                    tuple.source_component,
                    tuple.source_stream,
                    tuple.source_task,
                    wire_values(tuple.values),
                )
            )
        self._carry_out(later, generation)

    def close(self) -> None:
        self.stopping.set()
        with self.lock:
            self.machine.stop()
            process, self.process = self.process, None
            self.changed.notify_all()
        if process is not None:
            process.stop(self.bolt.stop_grace)
        if self.ticker.is_alive() and self.ticker is not threading.current_thread():
            self.ticker.join(5.0)
        shutil.rmtree(self.pid_dir, ignore_errors=True)

    # -- under the lock -------------------------------------------------------------------

    def _start(self) -> list[Decision]:
        """Start a subprocess for the next generation (holding the lock)."""
        decisions = self.machine.start(self.setup, time.monotonic())
        generation = self.machine.generation
        process = ShellProcess(
            self.bolt.command,
            cwd=self.bolt.cwd,
            env=self.bolt.env,
            on_output=lambda data: self._output(generation, data),
            on_closed=lambda: self._closed(generation),
            on_stderr=self._stderr,
            stderr_tail_bytes=self.bolt.stderr_tail_bytes,
        )
        try:
            process.start()
        except OSError as error:
            self.process = None
            failure = ShellHandshakeError(self.bolt.command, f"could not be started ({error})")
            self.log.error("%s", failure)
            self.recovered = generation
            self.last_error = failure
            self.changed.notify_all()
            return self._locked(self.machine.lost(failure))
        self.process = process
        return self._locked(decisions)

    def _locked(self, decisions: list[Decision]) -> list[Decision]:
        """Write the sends and start what must start; the rest is for after the lock."""
        later: list[Decision] = []
        for decision in decisions:
            if isinstance(decision, Send):
                if self.process is not None:
                    self.process.write(decision.data)
            elif isinstance(decision, Restart):
                if not self.stopping.is_set():
                    later += self._start()
            else:
                if isinstance(decision, Started):
                    self.changed.notify_all()
                later.append(decision)
        return later

    # -- the subprocess's threads -----------------------------------------------------------

    def _output(self, generation: int, data: bytes) -> None:
        now = time.monotonic()
        self._hand_on(generation, lambda: self.machine.received(data, now), now)

    def _closed(self, generation: int) -> None:
        self._hand_on(generation, self.machine.output_closed, None)

    def _hand_on(
        self, generation: int, event: Callable[[], list[Decision]], now: float | None
    ) -> None:
        """Once the subprocess is ready, the task's own turn settles what it wrote (in the
        order it wrote it, its end last): emits and acks cost what the task's own do, and
        this thread does not contend with the task for its lock. Before, this thread
        does: ``prepare`` waits for the handshake, perhaps on the task's turn."""
        with self.lock:
            if generation != self.machine.generation:
                return
            ready = self.machine.state is State.READY
            if not ready:
                later = self._locked(event())
            elif now is not None:
                self.machine.heard(now)
        if ready:
            self.collector.call_in_turn(lambda: self._settle(generation, event))
        else:
            self._carry_out(later, generation)

    def _settle(self, generation: int, event: Callable[[], list[Decision]]) -> None:
        with self.lock:
            if generation != self.machine.generation:
                return
            later = self._locked(event())
        # A fault comes last (the machine stops there). Its recovery waits for the
        # subprocess to exit, which a turn must not: a thread of its own does it.
        fault = later[-1] if later else None
        if isinstance(fault, Fault):
            later.pop()
            threading.Thread(
                target=self._recover, args=(generation, fault), name="multilang-recover"
            ).start()
        self._carry_out(later, generation)

    def _stderr(self, line: str) -> None:
        self.log.info("stderr: %s", line, extra={"component": self.component, "task": self.task})

    def _tick(self, period: float) -> None:
        while not self.stopping.wait(period):
            with self.lock:
                generation = self.machine.generation
                later = self._locked(self.machine.tick(time.monotonic()))
            self._carry_out(later, generation)

    # -- after the lock -----------------------------------------------------------------------

    def _carry_out(self, decisions: list[Decision], generation: int) -> None:
        collector = self.collector
        for decision in decisions:
            if isinstance(decision, Emit):
                self._emit(decision, generation)
            elif isinstance(decision, Ack):
                collector.ack(decision.tuple)
            elif isinstance(decision, Fail):
                collector.fail(
                    decision.tuple,
                    decision.error
                    if decision.error is not None
                    else "the multilang subprocess failed it",
                )
            elif isinstance(decision, Log):
                self.log.log(
                    decision.level,
                    "%s",
                    decision.message,
                    extra={"component": self.component, "task": self.task},
                )
            elif isinstance(decision, ReportError):
                collector.report_error(
                    ShellReportedError(f"Shell Process Exception: {decision.message}")
                )
            elif isinstance(decision, Metrics):
                self.bolt.update_metric(decision.name, decision.params)
            elif isinstance(decision, Started):
                self.log.info(
                    "started multilang subprocess %s (pid %d)",
                    " ".join(self.bolt.command),
                    decision.pid,
                    extra={"component": self.component, "task": self.task},
                )
            elif isinstance(decision, Fault):
                self._recover(generation, decision)

    def _emit(self, emit: Emit[Tuple], generation: int) -> None:
        anchors = emit.anchors
        values = kept_from_anchors(emit.values, anchors)
        anchored = anchors[0] if len(anchors) == 1 else anchors  # one: the collector's fast way
        try:
            if emit.task is None:
                ids = self.collector.emit(values, anchored, emit.stream)
            else:
                self.collector.emit_direct(emit.task, values, anchored, emit.stream)
                ids = []
        except Exception as error:  # an invalid emit fails what it was anchored to
            self.log.error("multilang subprocess emitted an invalid tuple: %s", error)
            for anchor in anchors:
                self.collector.fail(anchor, error)
            ids = []
        if emit.need_task_ids:
            with self.lock:
                if generation == self.machine.generation:
                    self._locked(self.machine.task_ids(ids))

    def _recover(self, generation: int, fault: Fault) -> None:
        with self.lock:
            if generation != self.machine.generation or self.recovered >= generation:
                return
            self.recovered = generation
            process = self.process
        # A subprocess whose output ended is exiting: its own exit status says more.
        grace = EXIT_GRACE if process is not None and process.output_ended else 0.0
        status = process.kill(grace) if process is not None else None
        tail = process.stderr_tail() if process is not None else ""
        error = ERRORS[fault.kind](self.bolt.command, fault.detail, status, tail)
        self.log.error("%s", error, extra={"component": self.component, "task": self.task})
        with self.lock:
            if self.stopping.is_set():
                return
            self.last_error = error
            self.process = None
            later = self._locked(self.machine.lost(error))
            generation = self.machine.generation
            self.changed.notify_all()
        self._carry_out(later, generation)
