"""``ShellSpout``: a spout whose ``next_tuple``, ``ack`` and ``fail`` run in a subprocess
speaking Storm's multilang protocol.

Contract. Subclass it as in Storm: the command in ``__init__``, the output fields in
``declare_output_fields``. ``open`` starts the subprocess and waits for its handshake
(``ShellHandshakeError`` when it does not come within ``start_timeout`` seconds, default
30). ``next_tuple``, ``ack(msg_id)``, ``fail(msg_id)``, ``activate`` and ``deactivate``
each send their command and block, as Storm's ShellSpout does, until the subprocess
answers with ``sync``, carrying out its emits (with their message ids), logs (logger
``drpc.multilang.<component id>``), errors and metrics meanwhile
(``drpc.multilang.spout_protocol``). A subprocess that exits, writes garbage or does not
sync within ``heartbeat_timeout`` seconds (default as ``ShellBolt``'s) is killed, its
typed error (``drpc.errors.ShellProcessError``, naming the command, exit status and
stderr tail) goes to the log and the collector's ``report_error``, and a new subprocess
serves the next call; the tuples it had emitted with message ids time out and are
failed to the new one, as any spout's tuples are. ``close`` kills the subprocess.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
import time
from typing import Any

from drpc.errors import ShellHandshakeError, ShellProcessError, ShellReportedError
from drpc.model.components import BaseRichSpout, Conf, SpoutOutputCollector
from drpc.model.context import TopologyContext
from drpc.multilang.bolt_protocol import DEFAULT_START_TIMEOUT, State
from drpc.multilang.component import (
    DEFAULT_STOP_GRACE,
    ERRORS,
    EXIT_GRACE,
    ShellComponent,
    heartbeat_timeout_of,
    logger_for,
)
from drpc.multilang.decisions import (
    Decision,
    Emit,
    Fault,
    Log,
    Metrics,
    ReportError,
    Restart,
    Send,
    Started,
    Synced,
)
from drpc.multilang.handshake import setup_message
from drpc.multilang.process import DEFAULT_STDERR_TAIL_BYTES, ShellProcess
from drpc.multilang.spout_protocol import SpoutProtocol
from drpc.multilang.wire import DEFAULT_MAX_MESSAGE_BYTES

_CLOSED = b""


class ShellSpout(ShellComponent, BaseRichSpout):
    """A spout run by a multilang subprocess (see the module doc)."""

    def __init__(
        self,
        *command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        heartbeat_timeout: float | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES,
        stop_grace: float = DEFAULT_STOP_GRACE,
    ) -> None:
        self._take(
            "ShellSpout",
            command,
            cwd=cwd,
            env=env,
            heartbeat_timeout=heartbeat_timeout,
            start_timeout=start_timeout,
            max_message_bytes=max_message_bytes,
            stderr_tail_bytes=stderr_tail_bytes,
            stop_grace=stop_grace,
        )
        self._shell: _SpoutShell | None = None

    def open(self, conf: Conf, context: TopologyContext, collector: SpoutOutputCollector) -> None:
        shell = _SpoutShell(self, conf, context, collector)
        shell.open()
        self._shell = shell

    def _query(self, command: str, id: Any = "") -> None:
        if self._shell is None:
            raise RuntimeError(f"ShellSpout.{command} before open")
        self._shell.query(command, id)

    def next_tuple(self) -> None:
        self._query("next")

    def ack(self, msg_id: Any) -> None:
        self._query("ack", msg_id)

    def fail(self, msg_id: Any) -> None:
        self._query("fail", msg_id)

    def activate(self) -> None:
        self._query("activate")

    def deactivate(self) -> None:
        self._query("deactivate")

    def close(self) -> None:
        shell, self._shell = self._shell, None
        if shell is not None:
            shell.close()

    def update_metric(self, name: str, params: Any) -> None:
        """As ``ShellBolt.update_metric``."""
        logger_for(type(self).__name__).debug("metric %s: %r", name, params)


class _SpoutShell:
    """The IO around one task's ``SpoutProtocol``, all on the spout's own thread."""

    def __init__(
        self,
        spout: ShellSpout,
        conf: Conf,
        context: TopologyContext,
        collector: SpoutOutputCollector,
    ) -> None:
        self.spout = spout
        self.collector = collector
        self.log = logger_for(context.this_component_id)
        self.extra = {"component": context.this_component_id, "task": context.this_task_id}
        self.machine = SpoutProtocol(
            heartbeat_timeout=heartbeat_timeout_of(conf, spout.heartbeat_timeout),
            start_timeout=spout.start_timeout,
            max_message_bytes=spout.max_message_bytes,
        )
        self.pid_dir = tempfile.mkdtemp(prefix="drpc-multilang-")
        self.setup = setup_message(conf, context, self.pid_dir)
        self.inbox: queue.SimpleQueue[tuple[int, bytes]] = queue.SimpleQueue()
        self.process: ShellProcess | None = None
        self.period = max(0.01, min(self.machine.heartbeat_timeout, spout.start_timeout) / 4)
        self.last_error: ShellProcessError | None = None

    def open(self) -> None:
        self._start()
        self._pump(until_started=True)
        if self.machine.state is not State.READY:
            error = self.last_error or ShellHandshakeError(self.spout.command, "did not start")
            self.close()
            raise error

    def query(self, command: str, id: Any) -> None:
        machine = self.machine
        if machine.state is State.STOPPED:
            if any(isinstance(d, Restart) for d in machine.command(command, id, time.monotonic())):
                self._start()
            else:
                return
        if machine.state is State.STARTING:
            self._pump(until_started=True)
            if machine.state is not State.READY:
                return
        if self._carry_out(machine.command(command, id, time.monotonic())):
            self._pump(until_started=False)

    def close(self) -> None:
        self.machine.stop()
        process, self.process = self.process, None
        if process is not None:
            process.stop(self.spout.stop_grace)
        shutil.rmtree(self.pid_dir, ignore_errors=True)

    def _start(self) -> None:
        decisions = self.machine.start(self.setup, time.monotonic())
        generation = self.machine.generation
        process = ShellProcess(
            self.spout.command,
            cwd=self.spout.cwd,
            env=self.spout.env,
            on_output=lambda data: self.inbox.put((generation, data)),
            on_closed=lambda: self.inbox.put((generation, _CLOSED)),
            on_stderr=lambda line: self.log.info("stderr: %s", line, extra=self.extra),
            stderr_tail_bytes=self.spout.stderr_tail_bytes,
        )
        try:
            process.start()
        except OSError as error:
            self.last_error = ShellHandshakeError(
                self.spout.command, f"could not be started ({error})"
            )
            self.log.error("%s", self.last_error, extra=self.extra)
            self.machine.lost()
            return
        self.process = process
        self._carry_out(decisions)

    def _pump(self, *, until_started: bool) -> None:
        """Feed the machine the subprocess's output until it synced (or started), or broke."""
        machine = self.machine
        while True:
            if until_started and machine.state is not State.STARTING:
                return
            if not until_started and not machine.waiting:
                return
            try:
                generation, data = self.inbox.get(timeout=self.period)
            except queue.Empty:
                decisions = machine.tick(time.monotonic())
            else:
                if generation != machine.generation:
                    continue
                if not data:  # _CLOSED
                    decisions = machine.output_closed()
                else:
                    decisions = machine.received(data, time.monotonic())
            if not self._carry_out(decisions):
                return

    def _carry_out(self, decisions: list[Decision]) -> bool:
        """Carry ``decisions`` out; False when the subprocess broke."""
        for decision in decisions:
            if isinstance(decision, Send):
                if self.process is not None:
                    self.process.write(decision.data)
            elif isinstance(decision, Emit):
                if decision.task is None:
                    ids = self.collector.emit(decision.values, decision.msg_id, decision.stream)
                    if decision.need_task_ids:
                        self._carry_out(self.machine.task_ids(ids))
                else:
                    self.collector.emit_direct(
                        decision.task, decision.values, decision.msg_id, decision.stream
                    )
            elif isinstance(decision, Log):
                self.log.log(decision.level, "%s", decision.message, extra=self.extra)
            elif isinstance(decision, ReportError):
                self.collector.report_error(
                    ShellReportedError(f"Shell Process Exception: {decision.message}")
                )
            elif isinstance(decision, Metrics):
                self.spout.update_metric(decision.name, decision.params)
            elif isinstance(decision, Started):
                self.log.info(
                    "started multilang subprocess (pid %d)", decision.pid, extra=self.extra
                )
            elif isinstance(decision, Fault):
                self._recover(decision)
                return False
            elif isinstance(decision, Synced | Restart):
                pass
        return True

    def _recover(self, fault: Fault) -> None:
        process, self.process = self.process, None
        grace = EXIT_GRACE if process is not None and process.output_ended else 0.0
        status = process.kill(grace) if process is not None else None
        tail = process.stderr_tail() if process is not None else ""
        error = ERRORS[fault.kind](self.spout.command, fault.detail, status, tail)
        self.last_error = error
        self.log.error("%s", error, extra=self.extra)
        if self.machine.lost():  # it had served: tell the topology, and serve on
            self.collector.report_error(error)
            self._start()
