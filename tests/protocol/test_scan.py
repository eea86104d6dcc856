"""drpc.protocol.scan on its own: every container kind and header form, at and past each limit,
against what Thrift's own decoder accepts."""

from __future__ import annotations

import struct

import pytest

from drpc.protocol.gen import DistributedRPC
from drpc.protocol.scan import WireLimits
from drpc.protocol.wire import ProtocolError, decode_message, read_struct
from tests.server.hostile import execute_body

LIMITS = WireLimits(max_string_length=64, max_container_length=4, max_nesting_depth=8)
MAP, SET, STRING, I32, I64, UUID = 13, 14, 11, 8, 10, 16


def _map(pairs: int) -> bytes:
    entries = b"".join(struct.pack(">i", 8) + b"k" * 8 + struct.pack(">q", i) for i in range(pairs))
    return struct.pack(">bhbbi", MAP, 3, STRING, I64, pairs) + entries


def _set(count: int) -> bytes:
    return struct.pack(">bhbi", SET, 4, I32, count) + b"\0\0\0\7" * count


def _decoded(extra: bytes) -> str:
    message = decode_message(execute_body("f", "args", extra), LIMITS)
    return read_struct(message, DistributedRPC.execute_args).funcArgs


def test_maps_sets_and_fixed_width_fields_within_the_limits_decode() -> None:
    uuid = struct.pack(">bh", UUID, 5) + bytes(16)
    assert _decoded(_map(4) + _set(4) + uuid) == "args"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (_map(5), "a map of 5 elements exceeds the limit of 4"),
        (_set(5), "a set of 5 elements exceeds the limit of 4"),
        (_map(4)[:-3], "a value needs 8 bytes but only 6 remain"),  # 5 of it, then STOP
        (struct.pack(">bhbbi", MAP, 3, I32, I32, -2), "negative size -2"),
        (struct.pack(">bh", 99, 3), "unknown Thrift type code 99"),
    ],
    ids=["map over", "set over", "truncated map", "negative map size", "unknown type"],
)
def test_past_a_limit_or_malformed_is_refused_naming_why(extra: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        decode_message(execute_body("f", "args", extra), LIMITS)


def test_header_forms() -> None:
    old_style = struct.pack(">i", 7) + b"execute" + bytes([1]) + struct.pack(">i", 1)
    body = execute_body("f", "a")[4 + 4 + 7 + 4 :]
    assert decode_message(old_style + body, LIMITS).name == "execute"  # non-strict header
    with pytest.raises(ProtocolError, match="unknown protocol version"):
        decode_message(struct.pack(">I", 0x80020001) + execute_body("f", "a")[4:], LIMITS)
    with pytest.raises(ProtocolError, match="method name of 65 bytes exceeds the limit of 64"):
        decode_message(struct.pack(">i", 65) + b"m" * 65 + bytes([1, 0, 0, 0, 1, 0]), LIMITS)
