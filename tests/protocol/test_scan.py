"""drpc.protocol.scan on its own: every container kind and header form, at and past each limit,
against what Thrift's own decoder accepts."""

from __future__ import annotations

import re
import struct

import pytest

from drpc.protocol.gen import DistributedRPC
from drpc.protocol.scan import WireLimits, check_message
from drpc.protocol.wire import ProtocolError, check_call, decode_message, read_struct
from tests.server.hostile import execute_body, nested_field

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
    "header",
    [
        struct.pack(">Ii", 0x80010000 | 1, 7) + b"execute",  # strict: version and type first
        struct.pack(">i", 7) + b"execute" + bytes([1]),  # old style: the type after the name
        struct.pack(">Ii", 0x80010000 | 4, 7) + b"execute",
        struct.pack(">i", 7) + b"execute" + bytes([4]),
        struct.pack(">Ii", 0x80010000 | 1, 8) + "exécute".encode(),
        struct.pack(">i", 0) + bytes([1]),  # an empty name
    ],
    ids=["strict call", "old-style call", "strict oneway", "old-style oneway", "utf-8", "empty"],
)
def test_the_check_reads_the_header_as_the_decoder_does(header: bytes) -> None:
    payload = header + execute_body("f", "a")[4 + 4 + 7 :]
    decoded = decode_message(payload, LIMITS)
    assert check_call(payload, LIMITS) == (decoded.name, decoded.type)


def test_a_method_name_that_is_not_utf8_is_refused_by_the_check_as_by_the_decoder() -> None:
    payload = struct.pack(">Ii", 0x80010000 | 1, 2) + b"\xff\xfe" + execute_body("f", "a")[15:]
    with pytest.raises(ProtocolError) as by_decoder:
        decode_message(payload, LIMITS)
    with pytest.raises(ProtocolError) as by_check:
        check_call(payload, LIMITS)
    assert str(by_check.value) == str(by_decoder.value)
    assert str(by_check.value).startswith("malformed message header: UnicodeDecodeError")


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


BOOL, BYTE, DOUBLE, I16, STRUCT, LIST, STOP = 2, 3, 4, 6, 12, 15, 0


def _field(kind: int, field_id: int) -> bytes:
    return struct.pack(">bh", kind, field_id)


def _string(text: bytes) -> bytes:
    return struct.pack(">i", len(text)) + text


def _struct(*fields: bytes) -> bytes:
    return b"".join(fields) + bytes([STOP])


# Unknown fields of every kind, each within the limits (64 bytes, 4 elements, depth 8):
# a struct holding a string, a list and a struct; a list of two structs; a map of strings
# to lists; a set; empty ones of each; and every fixed-width type.
NESTED_STRUCT = _field(STRUCT, 3) + _struct(
    _field(STRING, 1) + _string(b"s" * 64),
    _field(LIST, 2) + struct.pack(">bi", I32, 4) + bytes(16),
    _field(STRUCT, 3) + _struct(_field(I16, 1) + bytes(2)),
)
LIST_OF_STRUCTS = (
    _field(LIST, 4)
    + struct.pack(">bi", STRUCT, 2)
    + (_struct(_field(I32, 1) + bytes(4)) + _struct(_field(STRING, 2) + _string(b"t")))
)
MAP_OF_LISTS = (
    _field(MAP, 5)
    + struct.pack(">bbi", STRING, LIST, 2)
    + (_string(b"k") + struct.pack(">bi", I64, 1) + bytes(8))
    + (_string(b"") + struct.pack(">bi", I64, 0))
)
EMPTIES = (
    _field(STRING, 6)
    + _string(b"")
    + _field(LIST, 7)
    + struct.pack(">bi", STRING, 0)
    + _field(SET, 8)
    + struct.pack(">bi", I32, 0)
    + _field(MAP, 9)
    + struct.pack(">bbi", I32, I32, 0)
    + _field(STRUCT, 10)
    + _struct()
)
FIXED_WIDTH = (
    _field(BOOL, 11)
    + b"\1"
    + _field(BYTE, 12)
    + b"\x7f"
    + _field(I16, 13)
    + b"\0\1"
    + _field(DOUBLE, 14)
    + struct.pack(">d", 1.5)
    + _field(I64, 15)
    + bytes(8)
    + _field(UUID, 16)
    + bytes(16)
)
ALL_WITHIN = NESTED_STRUCT + LIST_OF_STRUCTS + MAP_OF_LISTS + EMPTIES + FIXED_WIDTH


@pytest.mark.parametrize(
    "extra",
    [NESTED_STRUCT, LIST_OF_STRUCTS, MAP_OF_LISTS, EMPTIES, FIXED_WIDTH, ALL_WITHIN],
    ids=["nested struct", "list of structs", "map of lists", "empty ones", "fixed", "all"],
)
def test_unknown_fields_of_every_kind_within_the_limits_decode(extra: bytes) -> None:
    assert _decoded(extra) == "args"


def test_every_proper_prefix_of_a_message_is_refused() -> None:
    # The scan reads the message to its last STOP byte: it consumes the whole payload,
    # so a message cut anywhere, even right after a nested value, is refused.
    payload = execute_body("f", "args", ALL_WITHIN)
    decode_message(payload, LIMITS)
    for cut in range(len(payload)):
        with pytest.raises(ProtocolError, match="malformed message: "):
            decode_message(payload[:cut], LIMITS)


OVER_LIMIT = {
    "string": (_field(STRING, 20) + _string(b"x" * 65), "a string of 65 bytes exceeds"),
    "list": (_field(LIST, 20) + struct.pack(">bi", I32, 5) + bytes(20), "a list of 5 elements"),
    "unknown type": (_field(99, 20), "unknown Thrift type code 99"),
}


@pytest.mark.parametrize("over", sorted(OVER_LIMIT))
@pytest.mark.parametrize(
    "before",
    [NESTED_STRUCT, LIST_OF_STRUCTS, MAP_OF_LISTS, EMPTIES],
    ids=["nested struct", "list of structs", "map of lists", "empty ones"],
)
def test_a_value_past_a_limit_after_nested_values_is_refused(before: bytes, over: str) -> None:
    extra, reason = OVER_LIMIT[over]
    with pytest.raises(ProtocolError, match=reason):
        decode_message(execute_body("f", "args", before + extra), LIMITS)


@pytest.mark.parametrize(
    ("end", "reason"),
    [
        (_field(LIST, 20) + b"\x08\0\0", "a list header needs 4 bytes but only 2 remain"),
        (
            _field(MAP, 20) + struct.pack(">bbi", I32, I32, 3) + bytes(5),
            "a map of 3 elements cannot fit in the 5 bytes left",
        ),
        (
            _field(LIST, 20) + struct.pack(">bi", BYTE, 4) + bytes(3),
            "a list of 4 elements cannot fit in the 3 bytes left",
        ),
        (  # 4 one-byte elements and not a byte more: they fit, the missing STOP does not
            _field(LIST, 20) + struct.pack(">bi", BYTE, 4) + bytes(4),
            "a field header needs 1 bytes but only 0 remain",
        ),
    ],
    ids=["list header cut", "map", "list", "list to the last byte"],
)
def test_a_container_within_the_limit_must_fit_in_the_bytes_left(end: bytes, reason: str) -> None:
    payload = execute_body("f", "args", end)[:-1]  # the payload ends with ``end``
    with pytest.raises(ProtocolError, match=f"^malformed message: {reason}$"):
        decode_message(payload, LIMITS)


STRICT = execute_body("f", "args")
NON_STRICT = struct.pack(">i", 7) + b"execute" + bytes([1]) + STRICT[4 + 4 + 7 :]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (STRICT[:2], "the message header needs 4 bytes but only 2 remain"),
        (STRICT[:6], "the method name needs 4 bytes but only 2 remain"),
        (STRICT[:10], "the method name needs 7 bytes but only 2 remain"),
        (STRICT[:17], "the sequence id needs 4 bytes but only 2 remain"),
        (STRICT[:19], "a field header needs 1 bytes but only 0 remain"),
        (STRICT[:21], "a field id needs 2 bytes but only 1 remain"),
        (STRICT[:24], "a string needs 4 bytes but only 2 remain"),
        (STRICT[:35], "a string needs 4 bytes but only 1 remain"),
        (NON_STRICT[:8], "the method name needs 7 bytes but only 4 remain"),
        (NON_STRICT[:11], "the message type needs 1 bytes but only 0 remain"),
        (STRICT[:4] + struct.pack(">i", -3), "the method name has a negative length -3"),
        (struct.pack(">I", 0x80020001) + STRICT[4:], "unknown protocol version 0x80020000"),
        (STRICT[:-1] + _field(MAP, 20), "a map header needs 1 bytes but only 0 remain"),
        (STRICT[:-1] + _field(MAP, 20) + bytes([I32]), "a map header needs 1 bytes but only 0"),
        (STRICT[:-1] + _field(LIST, 20), "a list header needs 1 bytes but only 0 remain"),
        (STRICT[:-1] + _field(SET, 20) + bytes([I32]), "a set header needs 4 bytes but only 0"),
        (STRICT[:-1] + _field(STRING, 20) + b"\xff" * 4, "a string has a negative length -1"),
        (execute_body("f", "", nested_field(8)), "nesting deeper than the limit of 8"),
    ],
    ids=lambda value: "" if isinstance(value, bytes) else value,
)
def test_each_refusal_names_what_was_wrong_where(payload: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(reason)}"):
        check_message(payload, LIMITS, ValueError)


@pytest.mark.parametrize(
    "payload",
    [
        NON_STRICT,
        struct.pack(">i", 0) + bytes([1]) + STRICT[15:],  # a non-strict header, no name
        execute_body("f", "", nested_field(7)),  # the deepest nesting allowed
        # containers of one-byte elements that fill the payload up to its STOP
        execute_body("f", "", _field(MAP, 20) + struct.pack(">bbi", BYTE, BYTE, 2) + bytes(4)),
        execute_body("f", "", _field(LIST, 20) + struct.pack(">bi", BYTE, 4) + bytes(4)),
    ],
    ids=["non-strict", "empty name", "depth 8", "map to the end", "list to the end"],
)
def test_messages_at_the_edges_pass(payload: bytes) -> None:
    check_message(payload, LIMITS, ValueError)
