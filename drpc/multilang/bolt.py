"""``ShellBolt``: a bolt whose work runs in a subprocess speaking Storm's multilang protocol.

Contract. Subclass it as in Storm: ``__init__`` passes the command (``super().__init__(
"python3", "splitsentence.py")``) and ``declare_output_fields`` declares what the
subprocess emits. It is a rich bolt, so it goes wherever a bolt does (a DRPC step, a
plain topology), on every executor; the subprocess starts in ``prepare`` on the task's
process (a Spark executor's Python worker, on Spark), in ``cwd`` (default: that
process's), with ``env`` added to that process's environment.

- ``prepare`` starts the subprocess and waits for its handshake; a subprocess that does
  not answer it within ``start_timeout`` seconds (default 30) with ``{"pid": N}``, or
  cannot be started, fails ``prepare`` with ``ShellHandshakeError``.
- ``execute`` hands the tuple to the subprocess and returns; the subprocess emits,
  acks and fails through the task's collector (a value it emits equal to its first
  anchor's at the same position, a subclass's instance there, is the anchor's: a DRPC
  request id keeps its pinned reads, ``bolt_shell.kept_from_anchors``; ``drpc.multilang.
  bolt_protocol`` has the protocol's rules). In a transactional topology the batch's
  ``TransactionAttempt`` (field 0) goes out as ``"txid:attempt_id"``, Storm's JSON of it,
  and comes back as the attempt when the subprocess emits it anchored. Subprocess ``log``
  messages go to the logger ``drpc.multilang.<component id>`` at their level (trace is
  5, below debug), and so do its stderr lines (info); ``error`` goes to the collector's
  ``report_error`` as a ``ShellReportedError``; ``metrics`` calls
  ``update_metric(name, params)``.
- Faults: a subprocess that exits (``ShellProcessExitedError``), writes nothing, not
  even a heartbeat's ``sync``, for ``heartbeat_timeout`` seconds
  (``ShellHeartbeatTimeoutError``; default: the conf's ``topology.subprocess.timeout.secs``,
  else ``supervisor.worker.timeout.secs``, else 30, as Storm) or writes garbage
  (``ShellProtocolError``) is killed; every tuple it had fails with that error, which
  names the command, the exit status and the last ``stderr_tail_bytes`` bytes of its
  stderr, and a new subprocess starts; tuples that arrive meanwhile wait for it.
  ``heartbeat_interval`` (default 1 s, as Storm) is how often a heartbeat tuple goes out;
  ``max_message_bytes`` (default 16 MiB) bounds one message of the subprocess.
- ``cleanup`` kills the subprocess (after ``stop_grace`` seconds, default 0.5, for it to
  exit when its stdin closes) and removes its pid directory.

The bolt pickles as its settings only: the subprocess and threads belong to the task.
"""

from __future__ import annotations

from typing import Any

from drpc.model.components import BaseRichBolt, Conf, OutputCollector
from drpc.model.context import TopologyContext
from drpc.model.tuples import Tuple
from drpc.multilang.bolt_protocol import DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_START_TIMEOUT
from drpc.multilang.bolt_shell import BoltShell
from drpc.multilang.component import DEFAULT_STOP_GRACE, ShellComponent, logger_for
from drpc.multilang.process import DEFAULT_STDERR_TAIL_BYTES
from drpc.multilang.wire import DEFAULT_MAX_MESSAGE_BYTES


class ShellBolt(ShellComponent, BaseRichBolt):
    """A bolt run by a multilang subprocess (see the module doc)."""

    def __init__(
        self,
        *command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        heartbeat_timeout: float | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES,
        stop_grace: float = DEFAULT_STOP_GRACE,
    ) -> None:
        self._take(
            "ShellBolt",
            command,
            cwd=cwd,
            env=env,
            heartbeat_timeout=heartbeat_timeout,
            start_timeout=start_timeout,
            max_message_bytes=max_message_bytes,
            stderr_tail_bytes=stderr_tail_bytes,
            stop_grace=stop_grace,
        )
        self.heartbeat_interval = heartbeat_interval
        self._shell: BoltShell | None = None

    @property
    def pid(self) -> int | None:
        """The pid the running subprocess answered the handshake with (None before)."""
        return None if self._shell is None else self._shell.machine.pid

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        shell = BoltShell(self, conf, context, collector)
        shell.open()
        self._shell = shell

    def execute(self, tuple: Tuple) -> None:
        if self._shell is None:
            raise RuntimeError("ShellBolt.execute before prepare")
        self._shell.execute(tuple)

    def cleanup(self) -> None:
        shell, self._shell = self._shell, None
        if shell is not None:
            shell.close()

    def update_metric(self, name: str, params: Any) -> None:
        """The subprocess sent ``{"command": "metrics", "name", "params"}`` (Storm's
        ``IShellMetric.updateMetricFromRPC``); override to record it. Logged at debug."""
        logger_for(type(self).__name__).debug("metric %s: %r", name, params)
