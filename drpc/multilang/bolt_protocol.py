"""Storm's ShellBolt side of the multilang protocol, as a sans-IO state machine.

Contract. ``BoltProtocol`` takes events and returns decisions
(``drpc.multilang.decisions``); it has no threads, no clock (``now`` is passed in, any
monotonic seconds) and does no IO. Tuples are opaque values of the caller's (``T``).

- ``start(setup, now)`` (while stopped): a new subprocess generation; sends the setup
  message (``drpc.multilang.handshake``). The first message back must be ``{"pid": N}``:
  ``Started(pid)``, then every tuple that waited is sent. Anything else, or silence for
  ``start_timeout`` seconds (``tick``), or the output closing is a ``HANDSHAKE`` fault.
- ``execute(tuple, comp, stream, task, values)``: the tuple gets the next id ("1", "2",
  ... never reused, even across restarts) and goes out as Storm's
  ``{"id", "comp", "stream", "task", "tuple"}`` once the subprocess is ready (at once
  when it is; ``__tick`` tuples are no different). A tuple JSON cannot carry fails at
  once with ``UnserializableValueError``.
- ``received(data, now)``: the subprocess's output, any chunk of it. Commands:
  ``emit`` (``anchors``: ids of tuples in flight, or one id; ``stream``, default
  "default"; ``task``: direct when present and not 0; ``need_task_ids``, default
  true: the shell then calls ``task_ids(ids)``, which sends the list back),
  ``ack`` and ``fail`` (``id`` of a tuple in flight, which then leaves it), ``log``
  (``level`` 0-4: trace, debug, info, warn, error; info when absent or unknown),
  ``error``, ``metrics`` (``name``, ``params``), ``sync`` (a heartbeat's answer).
  A ``fail`` whose subprocess reported an ``error`` since the last ack or fail carries
  it (``ShellReportedError``: the error's last line, as pystorm and storm.py report an
  exception raised while processing the tuple and then fail it), so the caller learns
  why.
  Every message counts as a sign of life. An unknown command is logged and ignored
  (as Storm's ShellBolt does). Output that is not the protocol (not JSON, no
  ``command``, an emit without a ``tuple`` list, an ack, fail or anchor naming no tuple
  in flight, a metric without a name) is a ``PROTOCOL`` fault.
- ``tick(now)``: while ready, a heartbeat tuple (stream ``__heartbeat``, task -1, no
  values) every ``heartbeat_interval`` seconds; silence for more than
  ``heartbeat_timeout`` seconds is a ``HEARTBEAT`` fault.
- ``heard(now)``: output arrived that ``received`` gets later (a shell that parses on
  another thread): it counts as a sign of life from ``now``.
- ``output_closed()``: the subprocess's stdout ended: an ``EXITED`` fault.
- After a ``Fault`` the machine ignores the generation's output until the shell reports
  ``lost(error)``: every tuple sent to that subprocess fails with ``error``, and
  ``Restart()`` follows when the subprocess had served (it answered the handshake).
  One that never did is not restarted at once (a command that cannot start would
  otherwise spin): the tuples waiting for it fail too, and the next ``execute``
  decides ``Restart()``.
- ``stop()``: forget everything (the task is ending).
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Iterator
from typing import Any, Final, Generic, TypeVar

from drpc.errors import ShellReportedError, UnserializableValueError
from drpc.multilang.decisions import (
    Ack,
    Decision,
    Emit,
    Fail,
    Fault,
    FaultKind,
    Log,
    Metrics,
    ReportError,
    Restart,
    Send,
    Started,
)
from drpc.multilang.handshake import pid_of
from drpc.multilang.wire import DEFAULT_MAX_MESSAGE_BYTES, Decoder, WireError, encode_tuple

T = TypeVar("T")

HEARTBEAT_STREAM: Final = "__heartbeat"
SYSTEM_TASK: Final = -1
DEFAULT_STREAM: Final = "default"
TRACE: Final = 5
LOG_LEVELS: Final = {
    0: TRACE,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
}
"""Storm's ShellLogLevel numbers and the Python logging levels they become."""

DEFAULT_HEARTBEAT_INTERVAL: Final = 1.0
DEFAULT_HEARTBEAT_TIMEOUT: Final = 30.0
DEFAULT_START_TIMEOUT: Final = 30.0


class State(enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    BROKEN = "broken"  # a fault was decided; waiting for lost()


def log_level(message: dict[str, Any]) -> int:
    level = message.get("level")
    if isinstance(level, int) and not isinstance(level, bool):
        return LOG_LEVELS.get(level, logging.INFO)
    return logging.INFO


def excerpt(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class BoltProtocol(Generic[T]):
    def __init__(
        self,
        *,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.start_timeout = start_timeout
        self.max_message_bytes = max_message_bytes
        self.state = State.STOPPED
        self.generation = 0
        self.pid: int | None = None
        self._ids: Iterator[int] = itertools.count(1)
        self._sent: dict[str, T] = {}  # tuples the current subprocess has, by id
        self._waiting: list[tuple[str, T, Send]] = []  # tuples for the next ready one
        self._decoder = Decoder(max_message_bytes)
        self._started_at = 0.0
        self._heard_at = 0.0
        self._heartbeat_at = 0.0
        self._served = False  # the current generation answered the handshake
        self._restart_on_execute = False
        self._reported: str | None = None  # an error reported since the last ack or fail

    @property
    def in_flight(self) -> int:
        """Tuples executed and neither acked nor failed yet (waiting ones included)."""
        return len(self._sent) + len(self._waiting)

    def _next_id(self) -> str:
        return str(next(self._ids))

    # -- events -------------------------------------------------------------------------

    def start(self, setup: dict[str, Any], now: float) -> list[Decision]:
        if self.state is not State.STOPPED:
            raise RuntimeError(f"start while {self.state.value}")
        self.generation += 1
        self.state = State.STARTING
        self.pid = None
        self._served = False
        self._decoder = Decoder(self.max_message_bytes)
        self._started_at = now
        return [Send.of(setup)]

    def execute(
        self, tuple: T, comp: str, stream: str, task: int, values: list[Any]
    ) -> list[Decision]:
        id = self._next_id()
        message = {"id": id, "comp": comp, "stream": stream, "task": task, "tuple": values}
        try:
            send = Send(message, encode_tuple(id, comp, stream, task, values))
        except (TypeError, ValueError) as error:
            return [
                Fail(
                    tuple,
                    UnserializableValueError(
                        f"a tuple on stream {stream!r} from {comp!r} cannot be sent to the "
                        f"multilang subprocess as JSON: {error}"
                    ),
                )
            ]
        if self.state is State.READY:
            self._sent[id] = tuple
            return [send]
        self._waiting.append((id, tuple, send))
        if self.state is State.STOPPED and self._restart_on_execute:
            self._restart_on_execute = False
            return [Restart()]
        return []

    def received(self, data: bytes, now: float) -> list[Decision]:
        if self.state not in (State.STARTING, State.READY):
            return []
        try:
            messages = self._decoder.feed(data)
        except WireError as error:
            return [self._fault(FaultKind.PROTOCOL, f"wrote {error}")]
        decisions: list[Decision] = []
        if messages:
            self._heard_at = now
        for message in messages:
            if self.state is State.READY:
                decision = self._command(message)
                if decision is not None:
                    decisions.append(decision)
            else:
                decisions += self._handshake(message, now)
            if self.state is State.BROKEN:
                break
        return decisions

    def heard(self, now: float) -> None:
        """The subprocess wrote something, to be handed to ``received`` later: a sign of
        life for the heartbeat timeout already."""
        if self.state in (State.STARTING, State.READY):
            self._heard_at = now

    def task_ids(self, ids: list[int]) -> list[Decision]:
        """The task ids a non-direct emit went to, for the subprocess (in emit order)."""
        if self.state is not State.READY:
            return []
        return [Send.of(list(ids))]

    def tick(self, now: float) -> list[Decision]:
        if self.state is State.STARTING:
            if now - self._started_at > self.start_timeout:
                return [
                    self._fault(
                        FaultKind.HANDSHAKE,
                        f"did not answer the handshake within start_timeout="
                        f"{self.start_timeout:g} s",
                    )
                ]
            return []
        if self.state is not State.READY:
            return []
        silent = now - self._heard_at
        if silent > self.heartbeat_timeout:
            return [
                self._fault(
                    FaultKind.HEARTBEAT,
                    f"wrote nothing for {silent:.1f} s, past heartbeat_timeout="
                    f"{self.heartbeat_timeout:g} s",
                )
            ]
        if now - self._heartbeat_at >= self.heartbeat_interval:
            self._heartbeat_at = now
            heartbeat: dict[str, Any] = {
                "id": self._next_id(),
                "comp": None,
                "stream": HEARTBEAT_STREAM,
                "task": SYSTEM_TASK,
                "tuple": [],
            }
            return [Send.of(heartbeat)]
        return []

    def output_closed(self) -> list[Decision]:
        if self.state not in (State.STARTING, State.READY):
            return []
        return [self._fault(FaultKind.EXITED, "exited")]

    def lost(self, error: BaseException) -> list[Decision]:
        """The subprocess of the current generation is gone (killed after a fault)."""
        failed: list[Decision] = [Fail(tuple, error) for tuple in self._sent.values()]
        self._sent.clear()
        self.state = State.STOPPED
        if self._served:
            return [*failed, Restart()]
        failed += [Fail(tuple, error) for _, tuple, _ in self._waiting]
        self._waiting.clear()
        self._restart_on_execute = True
        return failed

    def stop(self) -> None:
        self.state = State.STOPPED
        self._sent.clear()
        self._waiting.clear()
        self._restart_on_execute = False

    # -- the subprocess's messages --------------------------------------------------------

    def _fault(self, kind: FaultKind, detail: str) -> Fault:
        if self.state is State.STARTING:
            if kind is FaultKind.EXITED:
                detail = "exited before answering the handshake"
            elif kind is FaultKind.PROTOCOL:
                detail = f"{detail}, not the handshake's answer"
            kind = FaultKind.HANDSHAKE
        self.state = State.BROKEN
        return Fault(kind, detail)

    def _handshake(self, message: Any, now: float) -> list[Decision]:
        pid = pid_of(message)
        if pid is None:
            return [
                self._fault(
                    FaultKind.HANDSHAKE,
                    f'answered the handshake with {excerpt(message)}, not {{"pid": N}}',
                )
            ]
        self.state = State.READY
        self.pid = pid
        self._served = True
        self._heartbeat_at = now
        decisions: list[Decision] = [Started(pid)]
        for id, tuple, send in self._waiting:
            self._sent[id] = tuple
            decisions.append(send)
        self._waiting.clear()
        return decisions

    def _command(self, message: Any) -> Decision | None:
        command = message.get("command") if type(message) is dict else None
        if command == "emit":
            return self._emit(message)
        if command == "ack" or command == "fail":
            id = message.get("id")
            key = _key(id)
            settled = self._sent.pop(key, None) if key is not None else None
            if settled is None:
                return self._fault(
                    FaultKind.PROTOCOL,
                    f"{command}ed tuple id {excerpt(id)}, which is not in flight "
                    "(unknown, or already acked or failed)",
                )
            reported, self._reported = self._reported, None
            if command == "ack":
                return Ack(settled)
            return Fail(settled, None if reported is None else reported_error(reported))
        if command == "sync":
            return None
        if not isinstance(command, str):
            return self._fault(
                FaultKind.PROTOCOL, f"wrote a message without a command: {excerpt(message)}"
            )
        if command == "log":
            return Log(log_level(message), str(message.get("msg")))
        if command == "error":
            self._reported = str(message.get("msg"))
            return ReportError(self._reported)
        if command == "metrics":
            name = message.get("name")
            if not isinstance(name, str) or not name:
                return self._fault(
                    FaultKind.PROTOCOL, f"sent metrics without a name: {excerpt(message)}"
                )
            return Metrics(name, message.get("params"))
        return Log(logging.WARNING, f"ignored a message with unknown command {command!r}")

    def _emit(self, message: dict[str, Any]) -> Decision:
        values = message.get("tuple")
        stream = message.get("stream", DEFAULT_STREAM)
        task = message.get("task")
        need = message.get("need_task_ids")
        anchors = message.get("anchors")
        if (
            type(values) is not list
            or (stream is not None and type(stream) is not str)
            or (task is not None and type(task) is not int)
            or (need is not None and type(need) is not bool)
        ):
            if not isinstance(values, list):
                detail = f"emitted without a 'tuple' list: {excerpt(message)}"
            else:
                detail = f"emitted a malformed message: {excerpt(message)}"
            return self._fault(FaultKind.PROTOCOL, detail)
        if anchors is None:
            anchored: tuple[T, ...] = ()
        else:
            sent = self._sent
            anchored_list: list[T] = []
            for anchor in anchors if type(anchors) is list else [anchors]:
                key = _key(anchor)
                tuple_ = sent.get(key) if key is not None else None
                if tuple_ is None:
                    return self._fault(
                        FaultKind.PROTOCOL,
                        f"anchored onto tuple id {excerpt(anchor)}, which is not in flight "
                        "(unknown, or already acked or failed)",
                    )
                anchored_list.append(tuple_)
            anchored = tuple(anchored_list)
        direct = task if task else None
        return Emit(
            values,
            anchored,
            DEFAULT_STREAM if stream is None else stream,
            direct,
            need is not False and direct is None,
        )


REPORTED_EXCERPT = 300
"""Characters of a reported error a failure carries."""


def reported_error(message: str) -> ShellReportedError:
    """The error a fail after an ``error`` report carries: its last non-empty line (a
    traceback's exception), cut to ``REPORTED_EXCERPT`` characters."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    last = lines[-1] if lines else "(an empty error report)"
    if len(last) > REPORTED_EXCERPT:
        last = last[: REPORTED_EXCERPT - 1] + "…"
    return ShellReportedError(f"the multilang subprocess reported {last}")


def _key(id: Any) -> str | None:
    """The key of a tuple id as the subprocess wrote it back: ours are strings, but a client
    that turned one into a number still names it."""
    if isinstance(id, str):
        return id
    if isinstance(id, int) and not isinstance(id, bool):
        return str(id)
    return None
