"""The multilang wire format and state machines, as exact traces (no IO, no clock)."""

from __future__ import annotations

import json
import logging
import random

import pytest

from drpc import LinearDRPCTopologyBuilder, TopologyContext
from drpc.errors import ShellProcessExitedError, ShellReportedError, UnserializableValueError
from drpc.multilang.bolt_protocol import TRACE, BoltProtocol, State, reported_error
from drpc.multilang.decisions import (
    Ack,
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
    Synced,
)
from drpc.multilang.handshake import context_message, jsonable_conf, setup_message
from drpc.multilang.spout_protocol import SpoutProtocol
from drpc.multilang.wire import Decoder, WireError, encode, encode_tuple
from tests.multilang.bolts import PyExclaim

pytestmark = pytest.mark.timeout(10)

SETUP = {"conf": {}, "pidDir": "/pids", "context": {}}


def frame(*messages: object) -> bytes:
    return b"".join(encode(message) for message in messages)


def ready(**settings: float) -> BoltProtocol[str]:
    machine: BoltProtocol[str] = BoltProtocol(**settings)  # type: ignore[arg-type]
    machine.start(SETUP, 0.0)
    assert machine.received(frame({"pid": 42}), 0.0) == [Started(42)]
    return machine


# -- wire -------------------------------------------------------------------------------------


def test_encode_is_json_then_an_end_line() -> None:
    assert encode({"command": "sync"}) == b'{"command":"sync"}\nend\n'
    assert encode([1, 2]) == b"[1,2]\nend\n"
    with pytest.raises(ValueError):
        encode([float("nan")])
    with pytest.raises(TypeError):
        encode([b"bytes"])


def test_a_tuple_message_is_encoded_as_its_dict_is() -> None:
    for comp, stream, task, values in [
        ("split", "default", 3, [7, "word"]),
        (None, "__heartbeat", -1, []),
        ('quo"te', "s\u00e9", 0, [{"k": [1.5, None, True]}, "\u2603 \n"]),
    ]:
        for id in ("1", "12345"):
            message = {"id": id, "comp": comp, "stream": stream, "task": task, "tuple": values}
            assert encode_tuple(id, comp, stream, task, values) == encode(message)
    with pytest.raises(ValueError):
        encode_tuple("1", "c", "default", 1, [float("inf")])
    with pytest.raises(TypeError):
        encode_tuple("1", "c", "default", 1, [{1, 2}])


def test_a_value_that_holds_itself_is_a_value_error() -> None:
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular"):
        encode(looped)
    assert encode([1]) == b"[1]\nend\n"  # the encoder is fine after it


def test_characters_of_several_bytes_split_across_chunks() -> None:
    messages = [{"command": "emit", "tuple": ["\u00e9\u2603\U0001f600" * n]} for n in range(1, 30)]
    data = frame(*messages)
    for size in (1, 2, 3, 5, 64, len(data)):
        decoder = Decoder()
        out: list[object] = []
        for start in range(0, len(data), size):
            out += decoder.feed(data[start : start + size])
        assert out == messages


def test_max_message_bytes_counts_bytes_not_characters() -> None:
    message = '"' + "\u2603" * 4 + '"'  # 6 characters, 14 bytes of UTF-8
    data = message.encode() + b"\nend\n"
    assert Decoder(max_message_bytes=14).feed(data) == ["\u2603" * 4]
    with pytest.raises(WireError, match="max_message_bytes=13"):
        Decoder(max_message_bytes=13).feed(data)
    # several messages in one chunk, one of them too long
    with pytest.raises(WireError, match="max_message_bytes=13"):
        Decoder(max_message_bytes=13).feed(b"[1]\nend\n" + data)


def test_decisions_equal_only_decisions_of_their_own_class() -> None:
    assert Ack("t") == Ack("t") and hash(Ack("t")) == hash(Ack("t"))
    assert Ack("t") != Fail("t") and Ack("t") != Started("t")  # type: ignore[arg-type]
    assert Restart() != Synced() and Restart() == Restart()
    assert Ack("t") != ("t",)
    assert Send({"a": 1}, b"bytes") == Send({"a": 1})  # the bytes are not compared
    with pytest.raises(AttributeError):
        Ack("t").tuple = "u"  # type: ignore[misc]


def test_decoder_reassembles_messages_from_any_chunks() -> None:
    data = b'{"a":\n1}\nend\n\n[3]\r\nend\r\n{"b": "x"}\nend\n'
    for size in (1, 2, 5, len(data)):
        decoder = Decoder()
        out = []
        for start in range(0, len(data), size):
            out += decoder.feed(data[start : start + size])
        assert out == [{"a": 1}, [3], {"b": "x"}]


def test_whole_messages_and_lines_decode_alike_in_any_chunks() -> None:
    """Whole messages are parsed in one go, partial ones line by line: any split of the
    same output gives the same messages (multi-line JSON and blank lines included)."""
    messages: list[object] = [{"command": "emit", "tuple": [n, "w" * n]} for n in range(40)]
    messages += [{"a": [1, {"b": None}]}, [], "text"]
    parts = []
    for n, message in enumerate(messages):
        text = json.dumps(message, indent=2 if n % 3 == 0 else None).encode()
        parts.append((b"\n" if n % 5 == 0 else b"") + text + b"\nend\n")
    data = b"".join(parts)
    rng = random.Random(7)
    for _ in range(50):
        decoder = Decoder()
        out: list[object] = []
        start = 0
        while start < len(data):
            size = rng.choice([1, 3, 17, 200, len(data)])
            out += decoder.feed(data[start : start + size])
            start += size
        assert out == messages


def test_decoder_refuses_garbage() -> None:
    with pytest.raises(WireError, match="not JSON"):
        Decoder().feed(b"this is not json\nend\n")
    with pytest.raises(WireError, match="not UTF-8"):
        Decoder().feed(b'"\xff"\nend\n')


def test_max_message_bytes_both_sides() -> None:
    exact = b'"' + b"x" * 8 + b'"'  # 10 bytes of JSON
    assert Decoder(max_message_bytes=10).feed(exact + b"\nend\n") == ["x" * 8]
    with pytest.raises(WireError, match="max_message_bytes=9"):
        Decoder(max_message_bytes=9).feed(exact + b"\nend\n")
    # without its end line, garbage cannot grow past the limit either
    decoder = Decoder(max_message_bytes=10)
    decoder.feed(b"x" * 10)
    with pytest.raises(WireError):
        decoder.feed(b"x")


# -- handshake --------------------------------------------------------------------------------


def test_setup_message_is_storms_context() -> None:
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(PyExclaim(), 2)
    topology = builder.create_topology()
    task = topology.component_task_ids["bolt0"][1]
    context = TopologyContext(topology, "bolt0", task)
    message = setup_message({"a": 1, "object": object(), 2: "x"}, context, "/pids")
    assert message["conf"] == {"a": 1}
    assert message["pidDir"] == "/pids"
    ctx = message["context"]
    assert ctx == context_message(context)
    assert ctx["taskid"] == task and ctx["componentid"] == "bolt0"
    assert ctx["task->component"] == {str(t): c for t, c in topology.task_component.items()}
    assert ctx["stream->outputfields"]["default"] == ["id", "result"]
    assert "default" in ctx["streams"]
    # the first step reads prepare-request's default stream (none grouping)
    sources = ctx["source->stream->grouping"]
    assert sources["prepare-request"]["default"] == {"type": "NONE"}
    assert ctx["source->stream->fields"]["prepare-request"]["default"] == ["request", "args"]
    assert jsonable_conf({"n": float("inf")}) == {}


# -- bolt machine -----------------------------------------------------------------------------


def test_handshake_then_tuples_that_waited_go_out() -> None:
    machine: BoltProtocol[str] = BoltProtocol()
    assert machine.start(SETUP, 0.0) == [Send(SETUP)]
    assert machine.state is State.STARTING
    assert machine.execute("t1", "spout", "default", 3, ["a"]) == []
    assert machine.received(frame({"pid": 7}), 0.5) == [
        Started(7),
        Send({"id": "1", "comp": "spout", "stream": "default", "task": 3, "tuple": ["a"]}),
    ]
    assert machine.pid == 7
    assert machine.execute("t2", "__system", "__tick", -1, []) == [
        Send({"id": "2", "comp": "__system", "stream": "__tick", "task": -1, "tuple": []})
    ]


def test_emit_ack_fail_log_error_metrics_sync() -> None:
    machine = ready()
    machine.execute("t1", "c", "default", 1, [1])
    machine.execute("t2", "c", "default", 1, [2])
    out = machine.received(
        frame(
            {"command": "emit", "anchors": ["1", "2"], "tuple": [1, "x"]},
            {"command": "emit", "anchors": "1", "stream": "s", "tuple": [], "need_task_ids": False},
            {"command": "emit", "task": 9, "tuple": [3]},
            {"command": "sync"},
            {"command": "log", "msg": "hi", "level": 0},
            {"command": "log", "msg": "warn", "level": 3},
            {"command": "log", "msg": "default"},
            {"command": "error", "msg": "bad"},
            {"command": "metrics", "name": "m", "params": [1]},
            {"command": "ack", "id": "1"},
            {"command": "fail", "id": 2},
            {"command": "something-new"},
        ),
        1.0,
    )
    assert out == [
        Emit([1, "x"], ("t1", "t2"), "default", None, True),
        Emit([], ("t1",), "s", None, False),
        Emit([3], (), "default", 9, False),
        Log(TRACE, "hi"),
        Log(logging.WARNING, "warn"),
        Log(logging.INFO, "default"),
        ReportError("bad"),
        Metrics("m", [1]),
        Ack("t1"),
        Fail("t2"),
        Log(logging.WARNING, "ignored a message with unknown command 'something-new'"),
    ]
    assert machine.task_ids([4, 5]) == [Send([4, 5])]
    assert machine.in_flight == 0


def test_a_fail_after_an_error_report_carries_the_errors_last_line() -> None:
    machine = ready()
    for tuple in ("t1", "t2", "t3"):
        machine.execute(tuple, "c", "default", 1, [tuple])
    traceback = "Python ValueError raised while processing\nTraceback:\n ...\nValueError: no\n"
    out = machine.received(
        frame(
            {"command": "error", "msg": traceback},
            {"command": "sync"},
            {"command": "fail", "id": "1"},
            {"command": "fail", "id": "2"},  # no error reported since the last fail
            {"command": "error", "msg": "x" * 400},
            {"command": "ack", "id": "3"},  # an ack clears it
        ),
        1.0,
    )
    assert out[0] == ReportError(traceback)
    first = out[1]
    assert isinstance(first, Fail) and first.tuple == "t1"
    assert isinstance(first.error, ShellReportedError)
    assert str(first.error) == "the multilang subprocess reported ValueError: no"
    assert out[2:] == [Fail("t2"), ReportError("x" * 400), Ack("t3")]
    assert str(reported_error("x" * 400)).endswith("x" * 299 + "…")
    assert str(reported_error("\n \n")) == (
        "the multilang subprocess reported (an empty error report)"
    )


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        ({"command": "ack", "id": "99"}, "acked tuple id '99', which is not in flight"),
        ({"command": "emit", "anchors": ["99"], "tuple": []}, "anchored onto tuple id '99'"),
        ({"command": "emit", "tuple": "x"}, "emitted without a 'tuple' list"),
        ({"no": "command"}, "wrote a message without a command"),
        ({"command": "metrics", "name": ""}, "sent metrics without a name"),
    ],
)
def test_protocol_violations_are_faults(message: object, detail: str) -> None:
    machine = ready()
    machine.execute("t1", "c", "default", 1, [1])
    [fault] = machine.received(frame(message, {"command": "ack", "id": "1"}), 1.0)
    assert isinstance(fault, Fault) and fault.kind is FaultKind.PROTOCOL
    assert detail in fault.detail
    assert machine.state is State.BROKEN
    assert machine.received(frame({"command": "ack", "id": "1"}), 1.0) == []  # ignored now


def test_garbage_is_a_protocol_fault() -> None:
    machine = ready()
    [fault] = machine.received(b"Traceback (most recent call last):\nend\n", 1.0)
    assert isinstance(fault, Fault) and fault.kind is FaultKind.PROTOCOL


def test_heartbeats_go_out_every_interval_and_silence_past_the_timeout_is_a_fault() -> None:
    machine = ready(heartbeat_interval=1.0, heartbeat_timeout=3.0)
    heartbeat = {"id": "1", "comp": None, "stream": "__heartbeat", "task": -1, "tuple": []}
    assert machine.tick(0.9) == []
    assert machine.tick(1.0) == [Send(heartbeat)]
    assert machine.tick(1.5) == []
    assert machine.tick(2.0) == [Send({**heartbeat, "id": "2"})]
    assert machine.received(frame({"command": "sync"}), 2.5) == []
    assert machine.tick(5.5) == [Send({**heartbeat, "id": "3"})]  # 3.0 s silent: not past
    [fault] = machine.tick(5.6)
    assert isinstance(fault, Fault) and fault.kind is FaultKind.HEARTBEAT
    assert "past heartbeat_timeout=3 s" in fault.detail


def test_output_heard_before_it_is_parsed_is_a_sign_of_life() -> None:
    machine = ready(heartbeat_interval=10.0, heartbeat_timeout=3.0)
    machine.heard(2.0)  # a chunk arrived at 2.0, for a turn of the task to parse later
    assert machine.tick(5.0) == []  # 3.0 s silent: not past
    [fault] = machine.tick(5.1)
    assert isinstance(fault, Fault) and fault.kind is FaultKind.HEARTBEAT
    stopped = ready()
    stopped.stop()
    stopped.heard(9.0)  # ignored once stopped
    assert stopped.state is State.STOPPED


def test_start_timeout_both_sides() -> None:
    machine: BoltProtocol[str] = BoltProtocol(start_timeout=2.0)
    machine.start(SETUP, 10.0)
    assert machine.tick(12.0) == []
    [fault] = machine.tick(12.1)
    assert fault == Fault(
        FaultKind.HANDSHAKE, "did not answer the handshake within start_timeout=2 s"
    )


def test_a_wrong_handshake_answer_or_an_exit_before_it_is_a_handshake_fault() -> None:
    machine: BoltProtocol[str] = BoltProtocol()
    machine.start(SETUP, 0.0)
    [fault] = machine.received(frame({"pid": "x"}), 0.1)
    assert isinstance(fault, Fault) and fault.kind is FaultKind.HANDSHAKE
    assert 'not {"pid": N}' in fault.detail
    machine = BoltProtocol()
    machine.start(SETUP, 0.0)
    assert machine.output_closed() == [
        Fault(FaultKind.HANDSHAKE, "exited before answering the handshake")
    ]


def test_lost_fails_what_the_subprocess_had_and_restarts_it() -> None:
    machine = ready()
    machine.execute("t1", "c", "default", 1, [1])
    machine.execute("t2", "c", "default", 1, [2])
    machine.received(frame({"command": "ack", "id": "1"}), 0.0)
    assert machine.output_closed() == [Fault(FaultKind.EXITED, "exited")]
    assert machine.execute("t3", "c", "default", 1, [3]) == []  # waits for the next one
    error = ShellProcessExitedError(("x",), "exited", 3, "")
    assert machine.lost(error) == [Fail("t2", error), Restart()]
    assert machine.start(SETUP, 1.0) == [Send(SETUP)]
    assert machine.generation == 2
    assert machine.received(frame({"pid": 8}), 1.0) == [
        Started(8),
        Send({"id": "3", "comp": "c", "stream": "default", "task": 1, "tuple": [3]}),
    ]


def test_a_subprocess_that_never_started_is_restarted_by_the_next_tuple_only() -> None:
    machine: BoltProtocol[str] = BoltProtocol()
    machine.start(SETUP, 0.0)
    machine.execute("t1", "c", "default", 1, [1])
    machine.output_closed()
    error = ShellProcessExitedError(("x",), "exited", 1, "")
    assert machine.lost(error) == [Fail("t1", error)]
    assert machine.execute("t2", "c", "default", 1, [2]) == [Restart()]
    assert machine.execute("t3", "c", "default", 1, [3]) == []


def test_a_tuple_json_cannot_carry_fails_at_once() -> None:
    machine = ready()
    [fail] = machine.execute("t1", "c", "default", 1, [{1, 2}])
    assert isinstance(fail, Fail) and fail.tuple == "t1"
    assert isinstance(fail.error, UnserializableValueError)
    assert machine.in_flight == 0


# -- spout machine ----------------------------------------------------------------------------


def test_spout_next_emit_sync_and_ack() -> None:
    machine = SpoutProtocol(heartbeat_timeout=2.0)
    machine.start(SETUP, 0.0)
    assert machine.received(frame({"pid": 5}), 0.0) == [Started(5)]
    assert machine.command("next", "", 0.0) == [Send({"command": "next", "id": ""})]
    assert machine.received(
        frame(
            {"command": "emit", "id": "m1", "tuple": ["a"]},
            {"command": "emit", "tuple": ["b"], "stream": "s", "task": 4},
            {"command": "log", "msg": "x", "level": 4},
            {"command": "sync"},
        ),
        0.5,
    ) == [
        Emit(["a"], (), "default", None, True, "m1"),
        Emit(["b"], (), "s", 4, False, None),
        Log(logging.ERROR, "x"),
        Synced(),
    ]
    assert machine.task_ids([3]) == [Send([3])]
    assert machine.tick(100.0) == []  # not waiting: no heartbeat to miss
    assert machine.command("ack", "m1", 100.0) == [Send({"command": "ack", "id": "m1"})]
    assert machine.tick(102.0) == []
    [fault] = machine.tick(102.1)
    assert isinstance(fault, Fault) and fault.kind is FaultKind.HEARTBEAT
    assert machine.lost() == [Restart()]


def test_spout_unknown_command_is_a_fault() -> None:
    machine = SpoutProtocol()
    machine.start(SETUP, 0.0)
    machine.received(frame({"pid": 5}), 0.0)
    machine.command("next", "", 0.0)
    [fault] = machine.received(frame({"command": "dance"}), 0.0)
    assert isinstance(fault, Fault) and fault.kind is FaultKind.PROTOCOL
