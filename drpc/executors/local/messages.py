"""The messages of the in-process engine's mailboxes.

Tasks and ackers exchange these within one process:

- ``Tuple`` (``drpc.model.tuples``): a tuple for a bolt task, made by its sender
  for that task alone, with its acking ``message_id`` (root id -> edge id); its
  values are the receiver's own (copied, or unpickled, per receiver: see
  ``drpc.semantics.routing.receiver_tuple``);
- ``TupleMessage``: a tuple between processes (the resident executor), its
  values frozen in ``payload``; the receiving engine makes it a ``Tuple``
  (``LocalExecutor.tuple_of``);
- ``ReportMessage``: a coordination count report (a tuple on the ``__coord``
  stream, anchored like any other, but engine-made: it carries its id and
  count as they are instead of a pickled payload);
- ``AckInit``, ``Ack``, ``AckFail``: a spout's new root, a task's ack (its
  edge id XOR its children's), a failed tuple, for the acker owning the root;
- ``RootDone``: to the spout owning a root, its tree completed (``failure``
  None) or failed;
- ``Abandon``: to coordinated tasks, a root failed, drop its ids;
- ``Tick``: the clock reached ``now`` (timeouts);
- ``NEXT``: a spout should call ``next_tuple``;
- ``Activation``: a spout is activated or deactivated (Storm's ``activate`` and
  ``deactivate``, on the spout's own turn), then ``done`` is set;
- ``Call``: a bolt task calls ``run()`` on its own turn (work a thread of the bolt's
  own hands to the task: ``OutputCollector.call_in_turn``).

Each is a ``Value`` (``drpc.semantics.values``): compared and matched by its fields.

A turn may fold what it takes from a mailbox before handling it, where
handling the folded message comes to the same as handling each:
``fold_reports`` makes each run of consecutive count reports of one id (and
one set of roots) one report standing for them all (their counts summed,
their edges XORed per root); ``fold_acks`` makes each run of consecutive
``Ack`` messages one per root. A run is never reordered past another message.

An ``Outbox`` collects what one turn of a task sends, for the engine to send
as the turn ends: the messages for the tasks in the order sent (each
destination's in order), and for
the ackers every ``Ack`` of a root folded into one (its values XORed: the
acker's ledger is order-independent, so one ack carrying the XOR of several
is the same as each of them) beside the other acker messages in order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

from drpc.errors import Failure
from drpc.model.tuples import Tuple
from drpc.semantics.routing import Payload, freeze_values
from drpc.semantics.values import Value


class TupleMessage(Value):
    __slots__ = ("message_id", "payload", "source", "source_task", "stream")
    __match_args__ = ("source", "stream", "source_task", "payload", "message_id")

    def __init__(
        self,
        source: str,
        stream: str,
        source_task: int,
        payload: Payload,
        message_id: dict[int, int],
    ) -> None:
        self.source = source
        self.stream = stream
        self.source_task = source_task
        self.payload = payload
        self.message_id = message_id

    def fields(self) -> tuple[object, ...]:
        return (self.source, self.stream, self.source_task, self.payload, self.message_id)


class ReportMessage(Value):
    __slots__ = ("id", "message_id", "reports", "source", "source_task", "tuples")
    __match_args__ = ("source", "source_task", "id", "tuples", "message_id", "reports")

    def __init__(
        self,
        source: str,
        source_task: int,
        id: Any,
        tuples: int,
        message_id: dict[int, int],
        reports: int = 1,
    ) -> None:
        self.source = source
        self.source_task = source_task
        self.id = id
        self.tuples = tuples  # how many tuples of ``id`` the source task sent the receiving one
        self.message_id = message_id
        self.reports = reports  # how many reports this one stands for (``fold_reports``)

    def fields(self) -> tuple[object, ...]:
        return (self.source, self.source_task, self.id, self.tuples, self.message_id, self.reports)


class AckInit(Value):
    __slots__ = ("ack_val", "owner", "root")
    __match_args__ = ("root", "ack_val", "owner")

    def __init__(self, root: int, ack_val: int, owner: int) -> None:
        self.root = root
        self.ack_val = ack_val
        self.owner = owner

    def fields(self) -> tuple[object, ...]:
        return (self.root, self.ack_val, self.owner)


class Ack(Value):
    __slots__ = ("ack_val", "root")
    __match_args__ = ("root", "ack_val")

    def __init__(self, root: int, ack_val: int) -> None:
        self.root = root
        self.ack_val = ack_val

    def fields(self) -> tuple[object, ...]:
        return (self.root, self.ack_val)


class AckFail(Value):
    __slots__ = ("failure", "root")
    __match_args__ = ("root", "failure")

    def __init__(self, root: int, failure: Failure) -> None:
        self.root = root
        self.failure = failure


class RootDone(Value):
    __slots__ = ("failure", "root")
    __match_args__ = ("root", "failure")

    def __init__(self, root: int, failure: Failure | None) -> None:
        self.root = root
        self.failure = failure


class Abandon(Value):
    __slots__ = ("root",)
    __match_args__ = ("root",)

    def __init__(self, root: int) -> None:
        self.root = root


class Tick(Value):
    __slots__ = ("now",)
    __match_args__ = ("now",)

    def __init__(self, now: float) -> None:
        self.now = now


class TickTuple(Value):
    """Time for a bolt task's tick tuple (``topology.tick.tuple.freq.secs``)."""

    __slots__ = ()


TICK_TUPLE: Final = TickTuple()


class Next(Value):
    __slots__ = ()


NEXT: Final = Next()


class Activation(Value):
    __slots__ = ("active", "done")
    __match_args__ = ("active", "done")

    def __init__(self, active: bool, done: threading.Event) -> None:
        self.active = active
        self.done = done


class Call(Value):
    __slots__ = ("run",)
    __match_args__ = ("run",)

    def __init__(self, run: Callable[[], None]) -> None:
        self.run = run


Message = (
    Tuple
    | TupleMessage
    | ReportMessage
    | AckInit
    | Ack
    | AckFail
    | RootDone
    | Abandon
    | Tick
    | TickTuple
    | Next
    | Activation
    | Call
)


_NO_ACKS: Final[dict[int, int]] = {}
_NO_ACKER: Final[list[tuple[int, Message]]] = []


class Outbox:
    """What one turn sends (see the module doc). The acks of the turn's first root (most
    turns ack one root) are folded in ``ack_root``/``ack_value``, without a dict look-up;
    any other root's in ``acks``."""

    __slots__ = ("ack_root", "ack_value", "acker", "acks", "began", "messages", "targets")

    def __init__(self) -> None:
        # the task messages as sent, each with its destination task at the same position:
        # two appends per message, no look-up (``Scheduler.post_each`` takes them as they are)
        self.targets: list[int] = []
        self.messages: list[Message] = []
        self.ack_root = 0  # the first root acked, 0 until one is (roots are never 0)
        self.ack_value = 0  # the XOR of its acks' values
        # Most turns ack one root and send no other acker message: these two start as
        # shared empty ones, replaced by their own at the first write (never written).
        self.acks: dict[int, int] = _NO_ACKS  # every other root -> the XOR of its acks' values
        self.acker: list[tuple[int, Message]] = _NO_ACKER  # (root, message): inits and fails
        self.began = 0.0  # when its turn began, if the actor read the clock (else 0)

    def empty(self) -> None:
        """Forget everything collected, to collect a next turn's (once it is sent)."""
        self.targets.clear()
        self.messages.clear()
        self.ack_root = 0
        self.ack_value = 0
        self.acks = _NO_ACKS
        self.acker = _NO_ACKER
        self.began = 0.0

    def add(self, task_id: int, message: Message) -> None:
        self.targets.append(task_id)
        self.messages.append(message)

    def to(self, task_id: int) -> list[Message]:
        """The messages for task ``task_id``, in order."""
        messages = self.messages
        return [messages[i] for i, target in enumerate(self.targets) if target == task_id]

    def add_acker(self, root: int, message: Message) -> None:
        if type(message) is Ack:
            self.add_ack(root, message.ack_val)
        elif self.acker is _NO_ACKER:
            self.acker = [(root, message)]
        else:
            self.acker.append((root, message))

    def add_ack(self, root: int, ack_val: int) -> None:
        """``add_acker(root, Ack(root, ack_val))``, without making the ``Ack``."""
        # a first value is stored as it is: XORing an id with 0 copies it (the ids are too
        # large for the compiled build's unboxed ints)
        first = self.ack_root
        if first == root:
            self.ack_value ^= ack_val
            return
        if not first:
            self.ack_root = root
            self.ack_value = ack_val
            return
        acks = self.acks
        if acks is _NO_ACKS:
            self.acks = {root: ack_val}
            return
        value = acks.get(root)
        acks[root] = ack_val if value is None else value ^ ack_val

    def ack_values(self) -> list[tuple[int, int]]:
        """Each root acked and the XOR of its acks' values, in the order first acked."""
        if not self.ack_root:
            return []
        return [(self.ack_root, self.ack_value), *self.acks.items()]

    def take(self, other: Outbox) -> None:
        """Add what ``other`` collected after what this one has."""
        self.targets.extend(other.targets)
        self.messages.extend(other.messages)
        for root, value in other.ack_values():
            self.add_ack(root, value)
        if other.acker:
            self.acker = [*self.acker, *other.acker]

    def split_foreign(self, modulus: int, residue: int) -> list[tuple[int, Message]]:
        """Take out the acker messages of roots not congruent to ``residue`` modulo
        ``modulus`` (their ackers are elsewhere) and return them as ``acker_messages``
        orders them."""
        foreign = [(root, message) for root, message in self.acker if root % modulus != residue]
        if foreign:
            self.acker = [(root, m) for root, m in self.acker if root % modulus == residue]
        values = self.ack_values()
        if any(root % modulus != residue for root, _ in values):
            self.ack_root = self.ack_value = 0
            self.acks = {}
            for root, value in values:
                if root % modulus == residue:
                    self.add_ack(root, value)
                else:
                    foreign.append((root, Ack(root, value)))
        return foreign

    def acker_messages(self) -> list[tuple[int, Message]]:
        """Every acker message, ``(root, message)``: the others first, then one ``Ack``
        per root."""
        return [*self.acker, *[(root, Ack(root, value)) for root, value in self.ack_values()]]


def fold_reports(batch: list[Message]) -> list[Message]:
    """``batch`` with each run of consecutive count reports of one id and one set of roots
    folded into one (see the module doc); ``batch`` itself when none folds."""
    folded: list[Message] | None = None  # made at the first run that folds
    count = len(batch)
    index = 0
    while index < count:
        first = batch[index]
        start = index
        index += 1
        if type(first) is not ReportMessage:
            if folded is not None:
                folded.append(first)
            continue
        end = index
        while end < count:
            message = batch[end]
            if (
                type(message) is not ReportMessage
                or message.id != first.id
                or not _same_keys(message.message_id, first.message_id)
            ):
                break
            end += 1
        if end == index:
            if folded is not None:
                folded.append(first)
            continue
        if folded is None:
            folded = batch[:start]
        tuples, reports, edges = first.tuples, first.reports, dict(first.message_id)
        for message in batch[index:end]:
            assert type(message) is ReportMessage
            tuples += message.tuples
            reports += message.reports
            for root, edge in message.message_id.items():
                edges[root] ^= edge
        last = batch[end - 1]
        assert type(last) is ReportMessage
        folded.append(
            ReportMessage(last.source, last.source_task, first.id, tuples, edges, reports)
        )
        index = end
    return batch if folded is None else folded


def _same_keys(one: dict[int, int], other: dict[int, int]) -> bool:
    # ``one.keys() == other.keys()`` without the two views a compiled build would make
    return len(one) == len(other) and all(key in other for key in one)


def fold_acks(batch: list[Message]) -> list[Message]:
    """``batch`` with each run of consecutive ``Ack`` messages made one per root, in the
    order of each root's first (see the module doc)."""
    folded: list[Message] = []
    run: dict[int, int] = {}
    for message in batch:
        if type(message) is Ack:
            value = run.get(message.root)
            run[message.root] = message.ack_val if value is None else value ^ message.ack_val
            continue
        if run:
            folded.extend(Ack(root, value) for root, value in run.items())
            run = {}
        folded.append(message)
    folded.extend(Ack(root, value) for root, value in run.items())
    return folded


# -- on the wire (the resident executor): plain tuples, a kind number first ---------------------

_KINDS: tuple[type[Message], ...] = (
    TupleMessage,
    ReportMessage,
    AckInit,
    Ack,
    AckFail,
    RootDone,
    Abandon,
    Tick,
    Next,
)
_KIND_OF: Final = {kind: number for number, kind in enumerate(_KINDS)}


def encode(message: Message) -> tuple[object, ...]:
    """``message`` as a plain tuple of its kind's number and its fields (pickles far
    cheaper than an object); a ``Tuple`` as the ``TupleMessage`` of its values."""
    if isinstance(message, Tuple):
        return (
            _KIND_OF[TupleMessage],
            message.source_component,
            message.source_stream,
            message.source_task,
            freeze_values(message.source_component, message.source_stream, message.values),
            message.message_id,
        )
    return (_KIND_OF[type(message)], *message.fields())


def decode(encoded: tuple[Any, ...]) -> Message:
    """The message ``encode`` made ``encoded`` from."""
    message: Message = _KINDS[encoded[0]](*encoded[1:])
    return message
