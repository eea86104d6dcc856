"""Hand-made hostile bytes for the malformed-input tests: Thrift messages with extra
lists, deep nesting and long strings, raw HTTP requests, and the open-fd count."""

from __future__ import annotations

import os
import socket
import struct

from drpc.protocol.gen import DistributedRPC
from drpc.protocol.wire import decode_message, frame, read_struct

_VERSION_CALL = 0x80010001
STRING, STRUCT, LIST, I32, STOP = 11, 12, 15, 8, 0


def _string(text: bytes) -> bytes:
    return struct.pack(">i", len(text)) + text


def execute_body(function: str, args: bytes | str, extra: bytes = b"", seqid: int = 1) -> bytes:
    """An ``execute`` call's payload; ``extra`` is inserted as more fields before STOP."""
    raw = args.encode() if isinstance(args, str) else args
    return (
        struct.pack(">I", _VERSION_CALL)
        + _string(b"execute")
        + struct.pack(">i", seqid)
        + struct.pack(">bh", STRING, 1)
        + _string(function.encode())
        + struct.pack(">bh", STRING, 2)
        + _string(raw)
        + extra
        + bytes([STOP])
    )


def list_field(count: int, present: int | None = None) -> bytes:
    """Field 3: a list<i32> announcing ``count`` elements, ``present`` of them sent."""
    sent = count if present is None else present
    return struct.pack(">bhbi", LIST, 3, I32, count) + b"\0\0\0\1" * sent


def nested_field(depth: int) -> bytes:
    """Field 3: ``depth`` structs, each the field 1 of the one around it."""
    return (
        struct.pack(">bh", STRUCT, 3)
        + struct.pack(">bh", STRUCT, 1) * (depth - 1)
        + bytes([STOP]) * depth
    )


def execute_frame(function: str, args: str, extra: bytes = b"") -> bytes:
    return frame(execute_body(function, args, extra))


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def read_reply(connection: socket.socket) -> DistributedRPC.execute_result:
    payload = receive(connection, int.from_bytes(receive(connection, 4), "big"))
    return read_struct(decode_message(payload), DistributedRPC.execute_result)


def receive(connection: socket.socket, size: int) -> bytes:
    received = bytearray()
    while len(received) < size:
        chunk = connection.recv(size - len(received))
        assert chunk, "the server closed the connection"
        received += chunk
    return bytes(received)
