"""What ``ShellBolt`` and ``ShellSpout`` share: the command they run and its subprocess's
limits, checked once, and a pickled form without the running subprocess.

Contract. ``ShellComponent._take(kind, command, ...)`` checks that ``command`` is one or
more non-empty strings (``ValueError`` naming ``kind`` otherwise) and keeps it with the
settings as attributes (``command``, ``cwd``, ``env``, ``heartbeat_timeout``,
``start_timeout``, ``max_message_bytes``, ``stderr_tail_bytes``, ``stop_grace``).
The running shell (``_shell``) belongs to the task: a pickled component carries None.
"""

from __future__ import annotations

from typing import Any


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
