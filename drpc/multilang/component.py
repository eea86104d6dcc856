"""What ``ShellBolt`` and ``ShellSpout`` share: the command they run and its subprocess's
limits, checked once, a pickled form without the running subprocess, and the rules their
shells apply alike.

Contract. ``ShellComponent._take(kind, command, ...)`` checks that ``command`` is one or
more non-empty strings (``ValueError`` naming ``kind`` otherwise) and keeps it with the
settings as attributes (``command``, ``cwd``, ``env``, ``heartbeat_timeout``,
``start_timeout``, ``max_message_bytes``, ``stderr_tail_bytes``, ``stop_grace``).
The running shell (``_shell``) belongs to the task: a pickled component carries None.

``heartbeat_timeout_of(conf, given)`` is the heartbeat timeout (``given``, else Storm's
``topology.subprocess.timeout.secs``, else ``supervisor.worker.timeout.secs``, else 30 s);
``ERRORS`` the typed error of each fault; ``logger_for(component)`` the logger a
component's subprocess logs to.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from drpc.errors import (
    ShellHandshakeError,
    ShellHeartbeatTimeoutError,
    ShellProcessError,
    ShellProcessExitedError,
    ShellProtocolError,
)
from drpc.model.components import Conf
from drpc.multilang.bolt_protocol import DEFAULT_HEARTBEAT_TIMEOUT
from drpc.multilang.decisions import FaultKind

SUBPROCESS_TIMEOUT_CONF: Final = "topology.subprocess.timeout.secs"
WORKER_TIMEOUT_CONF: Final = "supervisor.worker.timeout.secs"
DEFAULT_STOP_GRACE: Final = 0.5
EXIT_GRACE: Final = 1.0

ERRORS: Final[dict[FaultKind, type[ShellProcessError]]] = {
    FaultKind.EXITED: ShellProcessExitedError,
    FaultKind.PROTOCOL: ShellProtocolError,
    FaultKind.HEARTBEAT: ShellHeartbeatTimeoutError,
    FaultKind.HANDSHAKE: ShellHandshakeError,
}


def heartbeat_timeout_of(conf: Conf, given: float | None) -> float:
    """``given``, else Storm's conf keys, else ``DEFAULT_HEARTBEAT_TIMEOUT``."""
    if given is not None:
        return float(given)
    for key in (SUBPROCESS_TIMEOUT_CONF, WORKER_TIMEOUT_CONF):
        value = conf.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return DEFAULT_HEARTBEAT_TIMEOUT


def logger_for(component_id: str) -> logging.Logger:
    return logging.getLogger(f"drpc.multilang.{component_id}")


class ShellComponent:
    """The settings half of a multilang component (see the module doc)."""

    _shell: Any

    def _take(
        self,
        kind: str,
        command: tuple[str, ...],
        *,
        cwd: str | None,
        env: dict[str, str] | None,
        heartbeat_timeout: float | None,
        start_timeout: float,
        max_message_bytes: int,
        stderr_tail_bytes: int,
        stop_grace: float,
    ) -> None:
        if not command or not all(isinstance(part, str) and part for part in command):
            raise ValueError(f"{kind} needs a command of non-empty strings, got {command!r}")
        self.command = tuple(command)
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.heartbeat_timeout = heartbeat_timeout
        self.start_timeout = start_timeout
        self.max_message_bytes = max_message_bytes
        self.stderr_tail_bytes = stderr_tail_bytes
        self.stop_grace = stop_grace
        self._shell = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_shell"] = None
        return state
