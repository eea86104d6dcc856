"""Storm's ShellSpout side of the multilang protocol, as a sans-IO state machine.

Contract. ``SpoutProtocol`` takes events and returns decisions
(``drpc.multilang.decisions``); no threads, no clock (``now`` is passed in), no IO.
Shell spouts are synchronous:

- ``start(setup, now)`` and the handshake as for bolts (``bolt_protocol``): ``Started``
  on ``{"pid": N}``, a ``HANDSHAKE`` fault on anything else or on silence for
  ``start_timeout`` seconds.
- ``command(name, id, now)``: ``next``, ``ack``, ``fail``, ``activate`` or
  ``deactivate`` goes out as ``{"command": name, "id": id}``; the machine then waits for
  the subprocess's ``sync``: ``Synced()``. Meanwhile: ``emit`` (``id`` the message id,
  absent for an unreliable emit; ``stream``; ``task`` for a direct emit;
  ``need_task_ids``: answer with ``task_ids(ids)``), ``log``, ``error``, ``metrics``.
  An unknown command or output that is not the protocol is a ``PROTOCOL`` fault (as in
  Storm's ShellSpout), and so is a command given while the last one is unanswered.
- ``tick(now)``: waiting for a ``sync`` with nothing heard for ``heartbeat_timeout``
  seconds is a ``HEARTBEAT`` fault (Storm's spout heartbeat: only while it waits).
- ``output_closed()``: an ``EXITED`` fault; ``lost()`` after any fault: stopped, and
  ``Restart()`` when the subprocess had served (else the next ``command`` decides it).
"""

from __future__ import annotations

from typing import Any

from drpc.multilang.bolt_protocol import (
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STREAM,
    State,
    excerpt,
    log_level,
)
from drpc.multilang.decisions import (
    Decision,
    Emit,
    Fault,
    FaultKind,
    Log,
    Metrics,
    ReportError,
    Restart,
    Send,
    Started,
    Synced,
)
from drpc.multilang.handshake import pid_of
from drpc.multilang.wire import DEFAULT_MAX_MESSAGE_BYTES, Decoder, WireError

COMMANDS = ("next", "ack", "fail", "activate", "deactivate")


class SpoutProtocol:
    def __init__(
        self,
        *,
        heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.heartbeat_timeout = heartbeat_timeout
        self.start_timeout = start_timeout
        self.max_message_bytes = max_message_bytes
        self.state = State.STOPPED
        self.waiting = False  # a command is unanswered
        self.generation = 0
        self.pid: int | None = None
        self._decoder = Decoder(max_message_bytes)
        self._started_at = 0.0
        self._heard_at = 0.0
        self._served = False
        self._restart_on_command = False

    def start(self, setup: dict[str, Any], now: float) -> list[Decision]:
        if self.state is not State.STOPPED:
            raise RuntimeError(f"start while {self.state.value}")
        self.generation += 1
        self.state = State.STARTING
        self.waiting = False
        self.pid = None
        self._served = False
        self._decoder = Decoder(self.max_message_bytes)
        self._started_at = now
        return [Send.of(setup)]

    def command(self, name: str, id: Any, now: float) -> list[Decision]:
        if name not in COMMANDS:
            raise ValueError(f"unknown spout command {name!r}")
        if self.state is State.STOPPED and self._restart_on_command:
            self._restart_on_command = False
            return [Restart()]
        if self.state is not State.READY:
            return []
        if self.waiting:
            return [self._fault(FaultKind.PROTOCOL, f"got {name!r} before the last sync")]
        self.waiting = True
        self._heard_at = now
        return [Send.of({"command": name, "id": id})]

    def received(self, data: bytes, now: float) -> list[Decision]:
        if self.state not in (State.STARTING, State.READY):
            return []
        try:
            messages = self._decoder.feed(data)
        except WireError as error:
            return [self._fault(FaultKind.PROTOCOL, f"wrote {error}")]
        decisions: list[Decision] = []
        for message in messages:
            self._heard_at = now
            if self.state is State.STARTING:
                pid = pid_of(message)
                if pid is None:
                    decisions.append(
                        self._fault(
                            FaultKind.HANDSHAKE,
                            f'answered the handshake with {excerpt(message)}, not {{"pid": N}}',
                        )
                    )
                else:
                    self.state, self.pid, self._served = State.READY, pid, True
                    decisions.append(Started(pid))
            else:
                decisions += self._message(message)
            if self.state is State.BROKEN:
                break
        return decisions

    def task_ids(self, ids: list[int]) -> list[Decision]:
        return [Send.of(list(ids))] if self.state is State.READY else []

    def tick(self, now: float) -> list[Decision]:
        if self.state is State.STARTING and now - self._started_at > self.start_timeout:
            return [
                self._fault(
                    FaultKind.HANDSHAKE,
                    f"did not answer the handshake within start_timeout={self.start_timeout:g} s",
                )
            ]
        if self.state is State.READY and self.waiting:
            silent = now - self._heard_at
            if silent > self.heartbeat_timeout:
                return [
                    self._fault(
                        FaultKind.HEARTBEAT,
                        f"did not sync for {silent:.1f} s, past heartbeat_timeout="
                        f"{self.heartbeat_timeout:g} s",
                    )
                ]
        return []

    def output_closed(self) -> list[Decision]:
        if self.state not in (State.STARTING, State.READY):
            return []
        return [self._fault(FaultKind.EXITED, "exited")]

    def lost(self) -> list[Decision]:
        self.state = State.STOPPED
        self.waiting = False
        if self._served:
            return [Restart()]
        self._restart_on_command = True
        return []

    def stop(self) -> None:
        self.state = State.STOPPED
        self.waiting = False
        self._restart_on_command = False

    def _fault(self, kind: FaultKind, detail: str) -> Fault:
        if self.state is State.STARTING:
            if kind is FaultKind.EXITED:
                detail = "exited before answering the handshake"
            kind = FaultKind.HANDSHAKE
        self.state = State.BROKEN
        self.waiting = False
        return Fault(kind, detail)

    def _message(self, message: Any) -> list[Decision]:
        command = message.get("command") if isinstance(message, dict) else None
        if command == "sync":
            self.waiting = False
            return [Synced()]
        if command == "emit":
            values = message.get("tuple")
            stream = message.get("stream")
            task = message.get("task")
            need = message.get("need_task_ids")
            if (
                not isinstance(values, list)
                or not isinstance(stream, str | None)
                or (task is not None and (not isinstance(task, int) or isinstance(task, bool)))
                or (need is not None and not isinstance(need, bool))
            ):
                return [
                    self._fault(
                        FaultKind.PROTOCOL, f"emitted a malformed message: {excerpt(message)}"
                    )
                ]
            direct = task if task else None
            return [
                Emit(
                    values,
                    (),
                    DEFAULT_STREAM if stream is None else stream,
                    direct,
                    need is not False and direct is None,
                    message.get("id"),
                )
            ]
        if command == "log":
            return [Log(log_level(message), str(message.get("msg")))]
        if command == "error":
            return [ReportError(str(message.get("msg")))]
        if command == "metrics":
            name = message.get("name")
            if isinstance(name, str) and name:
                return [Metrics(name, message.get("params"))]
            return [
                self._fault(FaultKind.PROTOCOL, f"sent metrics without a name: {excerpt(message)}")
            ]
        if command is None:
            return [
                self._fault(
                    FaultKind.PROTOCOL, f"wrote a message without a command: {excerpt(message)}"
                )
            ]
        return [self._fault(FaultKind.PROTOCOL, f"sent an unknown command: {excerpt(message)}")]


__all__ = ["SpoutProtocol"]
