"""What the multilang state machines decide, for their IO shells to carry out.

Contract: each decision is an immutable value (a named tuple that equals only a decision
of its own class with equal fields, and hashes so); the machines (``drpc.multilang.bolt_protocol``,
``drpc.multilang.spout_protocol``) return lists of them and the shells carry them out in
order:

- ``Send(message)``: write ``data`` (the message encoded, ``drpc.multilang.wire``) to the
  subprocess; equality looks at ``message`` only, so traces read as JSON values;
- ``Started(pid)``: the subprocess answered the handshake;
- ``Emit(values, anchors, stream, task, need_task_ids, msg_id)``: emit through the
  collector, directly to ``task`` when it is not None; a bolt's ``anchors`` are its input
  tuples, a spout's ``msg_id`` makes the tuple a tracked root. When ``need_task_ids``
  the shell hands the receiving task ids back to the machine (``task_ids``);
- ``Ack(tuple)`` / ``Fail(tuple, error)``: settle an input tuple; ``error`` is None when
  the subprocess failed it, else the typed error it failed with;
- ``Log(level, message)``: a Python logging level and the subprocess's message;
- ``ReportError(message)``, ``Metrics(name, params)``;
- ``Synced()``: a spout's subprocess ended its answer to a command;
- ``Fault(kind, detail)``: the subprocess broke the protocol, went silent or exited;
  the shell kills it and reports ``lost(error)`` to the machine;
- ``Restart()``: start a new subprocess (the shell then calls ``start``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

from drpc.multilang.wire import encode

T = TypeVar("T")
D = TypeVar("D")


class FaultKind(enum.Enum):
    EXITED = "exited"
    PROTOCOL = "protocol"
    HEARTBEAT = "heartbeat"
    HANDSHAKE = "handshake"


def _decision(compared: int | None = None) -> Callable[[type[D]], type[D]]:
    """A named tuple made a decision: equal to (and hashed with) decisions of its own
    class only, over its first ``compared`` fields (all by default). Named tuples, not
    frozen dataclasses: a machine makes a few per tuple, and a frozen dataclass costs
    four times as much to make."""

    def made(cls: type[D]) -> type[D]:
        def key(self: Any) -> tuple[Any, ...]:
            return tuple.__getitem__(self, slice(compared))

        def __eq__(self: Any, other: object) -> bool:
            return type(other) is type(self) and key(self) == key(other)

        def __ne__(self: Any, other: object) -> bool:
            return not __eq__(self, other)

        def __hash__(self: Any) -> int:
            return hash((type(self), key(self)))

        cls.__eq__ = __eq__  # type: ignore[method-assign]
        cls.__ne__ = __ne__  # type: ignore[method-assign]
        cls.__hash__ = __hash__  # type: ignore[method-assign]
        return cls

    return made


@_decision(compared=1)
class Send(NamedTuple):
    message: Any
    data: bytes = b""

    def __repr__(self) -> str:
        return f"Send(message={self.message!r})"

    @classmethod
    def of(cls, message: Any) -> Send:
        """A ``Send`` with its bytes; raises ``TypeError``/``ValueError`` as ``encode``."""
        return cls(message, encode(message))


@_decision()
class Started(NamedTuple):
    pid: int


@_decision()
class Emit(NamedTuple, Generic[T]):
    values: list[Any]
    anchors: tuple[T, ...] = ()
    stream: str = "default"
    task: int | None = None
    need_task_ids: bool = True
    msg_id: Any = None


@_decision()
class Ack(NamedTuple, Generic[T]):
    tuple: T


@_decision()
class Fail(NamedTuple, Generic[T]):
    tuple: T
    error: BaseException | None = None


@_decision()
class Log(NamedTuple):
    level: int
    message: str


@_decision()
class ReportError(NamedTuple):
    message: str


@_decision()
class Metrics(NamedTuple):
    name: str
    params: Any


@_decision()
class Synced(NamedTuple):
    pass


@_decision()
class Fault(NamedTuple):
    kind: FaultKind
    detail: str


@_decision()
class Restart(NamedTuple):
    pass


Decision = (
    Send | Started | Emit[Any] | Ack[Any] | Fail[Any] | Log | ReportError | Metrics | Synced
) | (Fault | Restart)
