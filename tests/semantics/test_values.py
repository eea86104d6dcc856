"""The engine's value records: equal by class and fields, matched by position, shown by
field, and each message kind the same after the resident wire's encode and decode."""

from __future__ import annotations

import pickle

import pytest

from drpc.errors import DRPCExceptionType, Failure
from drpc.executors.local.messages import (
    NEXT,
    Abandon,
    Ack,
    AckFail,
    AckInit,
    Message,
    ReportMessage,
    RootDone,
    Tick,
    TupleMessage,
    decode,
    encode,
)
from drpc.semantics.coordination import Abandoned, Completed, FinishBatch, Ignored, SendReports

FAILURE = Failure(DRPCExceptionType.FAILED_REQUEST, "boom")


def test_values_are_equal_by_class_and_fields() -> None:
    assert SendReports("r1", {3: 2}) == SendReports(id="r1", counts={3: 2})
    assert SendReports("r1", {3: 2}) != SendReports("r1", {3: 1})
    assert FinishBatch("r1") == FinishBatch("r1")
    # same fields, another class: not equal, though they share a base
    assert FinishBatch("r1") != Completed("r1")
    assert Abandoned("r1") != Ignored("r1")
    assert Ack(1, 2) != (1, 2)


def test_a_value_shows_its_class_and_fields() -> None:
    assert repr(SendReports("r1", {3: 2})) == "SendReports(id='r1', counts={3: 2})"
    assert repr(NEXT) == "Next()"
    assert repr(Ack(1, 2)) == "Ack(root=1, ack_val=2)"


def test_values_are_not_hashable() -> None:
    with pytest.raises(TypeError):
        hash(Completed("r1"))


def test_match_takes_fields_by_position() -> None:
    def kind(message: Message) -> str:
        match message:
            case Ack(root, ack_val):
                return f"ack {root} {ack_val}"
            case Tick(now):
                return f"tick {now:g}"
            case ReportMessage(_, _, id, tuples):
                return f"report {id} {tuples}"
        return "other"

    assert kind(Ack(7, 9)) == "ack 7 9"
    assert kind(Tick(1.5)) == "tick 1.5"
    assert kind(ReportMessage("bolt0", 4, "r1", 3, {})) == "report r1 3"
    assert kind(Abandon(1)) == "other"


EVERY_KIND: list[Message] = [
    TupleMessage("bolt0", "default", 4, b"payload", {11: 12}),
    ReportMessage("bolt0", 4, "r1", 3, {11: 13}, 2),
    AckInit(11, 99, 1),
    Ack(11, 12),
    AckFail(11, FAILURE),
    RootDone(11, None),
    RootDone(11, FAILURE),
    Abandon(11),
    Tick(123.5),
    NEXT,
]


@pytest.mark.parametrize("message", EVERY_KIND, ids=lambda m: type(m).__name__)
def test_every_message_kind_crosses_the_wire_unchanged(message: Message) -> None:
    encoded = encode(message)
    assert type(encoded) is tuple
    assert decode(pickle.loads(pickle.dumps(encoded))) == message
