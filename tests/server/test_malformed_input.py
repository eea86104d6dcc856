"""Malformed input closes only the offending connection: the server logs why, keeps
running, and serves both an existing connection and a new one right after."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import pytest
from drpc.client import DRPCClient
from thrift.Thrift import TApplicationException

from drpc.protocol.gen import DistributedRPC
from drpc.protocol.wire import CALL, decode_message, encode_message, frame, read_struct
from tests.server.helpers import (
    HOST,
    closed_by_server,
    exclamation,
    frame_header,
    raw_connection,
    running_server,
)

LIMIT = 4096


def _execute_frame(function: str, args: str, seqid: int = 1) -> bytes:
    return encode_message(
        "execute", CALL, seqid, DistributedRPC.execute_args(functionName=function, funcArgs=args)
    )


def _execute_frame_of_body_size(size: int) -> bytes:
    overhead = len(_execute_frame("exclamation", "")) - 4
    message = _execute_frame("exclamation", "x" * (size - overhead))
    assert len(message) - 4 == size
    return message


def _application_error(reply: bytes) -> TApplicationException:
    assert reply, "the server closed without a reply"
    return read_struct(decode_message(reply[4:]), TApplicationException)


def _send(connection: socket.socket, data: bytes, *, end: bool = False) -> None:
    connection.sendall(data)
    if end:
        connection.shutdown(socket.SHUT_WR)


MALFORMED: dict[str, Callable[[socket.socket], None]] = {
    "frame over the limit": lambda c: _send(c, _execute_frame_of_body_size(LIMIT + 1)),
    "huge frame length": lambda c: _send(c, frame_header(2**31 - 1)),
    "negative frame length": lambda c: _send(c, frame_header(-1) + b"x" * 16),
    "garbage bytes (an HTTP request)": lambda c: _send(c, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    "garbage inside a frame": lambda c: _send(c, frame(b"\x00\x01\xff\xfe not thrift at all")),
    "truncated frame": lambda c: _send(c, _execute_frame("exclamation", "hello")[:20], end=True),
    "truncated frame header": lambda c: _send(c, b"\x00\x00", end=True),
    "empty frame": lambda c: _send(c, frame_header(0)),
}

REASONS = {
    "frame over the limit": f"exceeds the limit of {LIMIT}",
    "huge frame length": "exceeds the limit",
    "negative frame length": "negative frame length -1",
    "garbage bytes (an HTTP request)": "exceeds the limit",
    "garbage inside a frame": "malformed message",
    "truncated frame": "truncated frame",
    "truncated frame header": "truncated frame header",
    "empty frame": "malformed message",
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_malformed_input_closes_only_that_connection(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="drpc.server.thrift_listener")
    with running_server(exclamation(), max_frame_size=LIMIT) as server:
        with DRPCClient(HOST, server.port) as bystander:
            assert bystander.execute("exclamation", "before") == "before!"
            with raw_connection(server.port) as offender:
                MALFORMED[kind](offender)
                assert closed_by_server(offender) == b""
            assert bystander.execute("exclamation", "after") == "after!"
        with DRPCClient(HOST, server.port) as newcomer:
            assert newcomer.execute("exclamation", "new") == "new!"
    assert any(
        "closing connection" in record.getMessage() and REASONS[kind] in record.getMessage()
        for record in caplog.records
    ), [record.getMessage() for record in caplog.records]


def test_a_frame_at_the_limit_is_served() -> None:
    with (
        running_server(exclamation(), max_frame_size=LIMIT) as server,
        raw_connection(server.port) as connection,
    ):
        connection.sendall(_execute_frame_of_body_size(LIMIT))
        header = connection.recv(4, socket.MSG_WAITALL)
        length = int.from_bytes(header, "big")
        reply = decode_message(connection.recv(length, socket.MSG_WAITALL))
        result = read_struct(reply, DistributedRPC.execute_result)
        assert result.success is not None and result.success.endswith("x!")
        assert reply.seqid == 1


def test_the_invocations_port_refuses_oversized_frames_too() -> None:
    with running_server(exclamation(), max_frame_size=LIMIT) as server:
        with raw_connection(server.invocations_port) as offender:
            offender.sendall(frame_header(LIMIT + 1) + b"x" * (LIMIT + 1))
            assert closed_by_server(offender) == b""
        with DRPCClient(HOST, server.port) as client:
            assert client.execute("exclamation", "ok") == "ok!"


def test_an_unknown_method_is_answered_then_closed() -> None:
    with running_server(exclamation()) as server:
        with raw_connection(server.port) as connection:
            connection.sendall(
                encode_message(
                    "executeTwice",
                    CALL,
                    9,
                    DistributedRPC.execute_args(functionName="exclamation", funcArgs="x"),
                )
            )
            error = _application_error(closed_by_server(connection))
            assert error.type == TApplicationException.UNKNOWN_METHOD
            assert "executeTwice" in (error.message or "")
        with DRPCClient(HOST, server.port) as client:
            assert client.execute("exclamation", "ok") == "ok!"


def test_a_call_missing_an_argument_is_answered_then_closed() -> None:
    with running_server(exclamation()) as server:
        with raw_connection(server.port) as connection:
            connection.sendall(
                encode_message(
                    "execute", CALL, 3, DistributedRPC.execute_args(functionName="exclamation")
                )
            )
            error = _application_error(closed_by_server(connection))
            assert error.type == TApplicationException.PROTOCOL_ERROR
            assert "funcArgs" in (error.message or "")
        with DRPCClient(HOST, server.port) as client:
            assert client.execute("exclamation", "ok") == "ok!"
