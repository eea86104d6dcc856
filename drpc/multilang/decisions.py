"""What the multilang state machines decide, for their IO shells to carry out.

Contract: each decision is a frozen value; the machines (``drpc.multilang.bolt_protocol``,
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
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from drpc.multilang.wire import encode

T = TypeVar("T")


class FaultKind(enum.Enum):
    EXITED = "exited"
    PROTOCOL = "protocol"
    HEARTBEAT = "heartbeat"
    HANDSHAKE = "handshake"


@dataclass(frozen=True)
class Send:
    message: Any
    data: bytes = field(compare=False, repr=False, default=b"")

    @classmethod
    def of(cls, message: Any) -> Send:
        """A ``Send`` with its bytes; raises ``TypeError``/``ValueError`` as ``encode``."""
        return cls(message, encode(message))


@dataclass(frozen=True)
class Started:
    pid: int


@dataclass(frozen=True)
class Emit(Generic[T]):
    values: list[Any]
    anchors: tuple[T, ...] = ()
    stream: str = "default"
    task: int | None = None
    need_task_ids: bool = True
    msg_id: Any = None


@dataclass(frozen=True)
class Ack(Generic[T]):
    tuple: T


@dataclass(frozen=True)
class Fail(Generic[T]):
    tuple: T
    error: BaseException | None = None


@dataclass(frozen=True)
class Log:
    level: int
    message: str


@dataclass(frozen=True)
class ReportError:
    message: str


@dataclass(frozen=True)
class Metrics:
    name: str
    params: Any


@dataclass(frozen=True)
class Synced:
    pass


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    detail: str


@dataclass(frozen=True)
class Restart:
    pass


Decision = (
    Send | Started | Emit[Any] | Ack[Any] | Fail[Any] | Log | ReportError | Metrics | Synced
) | (Fault | Restart)
