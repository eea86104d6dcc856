"""A structural check of one binary-protocol Thrift message, before anything decodes it.

Contract. ``check_message(payload, limits)`` walks the message header and
body (every field, struct, list, set and map, known or not) without building
any value, in a loop of its own (no recursion), returns the header's method
name (its bytes, not decoded) and message type, and raises ``error`` (the
caller's ``ProtocolError``) naming the first thing wrong:

- a length or element count that is negative, or that claims more bytes than
  the payload still holds (a list header claiming 2**31-1 elements in a
  40-byte frame, a truncated string);
- a string over ``max_string_length`` bytes, a container over
  ``max_container_length`` elements, nesting deeper than
  ``max_nesting_depth`` (the message's argument struct is depth 1);
- an unknown type code or protocol version.

A message that passes can be decoded by the Thrift library without
allocating more than its own size or recursing deeper than the limit.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

STOP, BOOL, BYTE, DOUBLE, I16, I32, I64, STRING, STRUCT, MAP, SET, LIST, UUID = (
    0, 2, 3, 4, 6, 8, 10, 11, 12, 13, 14, 15, 16,
)  # fmt: skip
_FIXED_SIZE = {BOOL: 1, BYTE: 1, DOUBLE: 8, I16: 2, I32: 4, I64: 8, UUID: 16}
_VERSION_MASK = 0xFFFF0000
_VERSION_1 = 0x80010000
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class WireLimits:
    max_string_length: int = 1024 * 1024
    max_container_length: int = 1024
    max_nesting_depth: int = 64


class _Cursor:
    __slots__ = ("data", "error", "position")

    def __init__(self, data: bytes, error: Callable[[str], Exception]) -> None:
        self.data = data
        self.position = 0
        self.error = error

    def take(self, size: int, what: str) -> int:
        start = self.position
        if size > len(self.data) - start:
            raise self.error(f"{what} needs {size} bytes but only {len(self.data) - start} remain")
        self.position = start + size
        return start

    def byte(self, what: str) -> int:
        return self.data[self.take(1, what)]

    def i32(self, what: str) -> int:
        return _I32.unpack_from(self.data, self.take(4, what))[0]


def check_message(
    payload: bytes, limits: WireLimits, error: Callable[[str], Exception]
) -> tuple[bytes, int]:
    """Raise ``error(reason)`` if ``payload`` is not a message within ``limits``; else
    return its method name's bytes and its message type."""
    cursor = _Cursor(payload, error)
    first = cursor.i32("the message header")
    if first < 0:
        if first & _VERSION_MASK != _VERSION_1:
            raise error(f"unknown protocol version {first & _VERSION_MASK:#x}")
        length = cursor.i32("the method name")
        _check_string_length(length, limits, "the method name", error)
        message_type = first & 0xFF
    else:
        length = first
        _check_string_length(length, limits, "the method name", error)
    start = cursor.take(length, "the method name")
    name = payload[start : start + length]
    if first >= 0:
        message_type = cursor.byte("the message type")
    cursor.i32("the sequence id")
    _walk_struct(cursor, limits)
    return name, message_type


def _check_string_length(
    length: int, limits: WireLimits, what: str, error: Callable[[str], Exception]
) -> None:
    if length < 0:
        raise error(f"{what} has a negative length {length}")
    if length > limits.max_string_length:
        raise error(f"{what} of {length} bytes exceeds the limit of {limits.max_string_length}")


def _string(cursor: _Cursor, limits: WireLimits, what: str) -> None:
    length = cursor.i32(what)
    _check_string_length(length, limits, what, cursor.error)
    cursor.take(length, what)


def _count(cursor: _Cursor, limits: WireLimits, kind: str, per_element: int) -> int:
    size = cursor.i32(f"a {kind} header")
    if size < 0:
        raise cursor.error(f"a {kind} has a negative size {size}")
    if size > limits.max_container_length:
        raise cursor.error(
            f"a {kind} of {size} elements exceeds the limit of {limits.max_container_length}"
        )
    remaining = len(cursor.data) - cursor.position
    if size * per_element > remaining:
        raise cursor.error(f"a {kind} of {size} elements cannot fit in the {remaining} bytes left")
    return size


def _walk_struct(cursor: _Cursor, limits: WireLimits) -> None:
    # Each open struct is None; each open container is [element types, elements left].
    stack: list[list[int] | None] = [None]
    while stack:
        top = stack[-1]
        if top is None:
            kind = cursor.byte("a field header")
            if kind == STOP:
                stack.pop()
                continue
            cursor.take(2, "a field id")
        else:
            if top[-1] == 0:
                stack.pop()
                continue
            top[-1] -= 1
            types = top[:-1]
            kind = types[top[-1] % len(types)] if len(types) == 2 else types[0]
        _value(cursor, limits, kind, stack)


def _value(cursor: _Cursor, limits: WireLimits, kind: int, stack: list[list[int] | None]) -> None:
    size = _FIXED_SIZE.get(kind)
    if size is not None:
        cursor.take(size, "a value")
        return
    if kind == STRING:
        _string(cursor, limits, "a string")
        return
    if kind not in (STRUCT, LIST, SET, MAP):
        raise cursor.error(f"unknown Thrift type code {kind}")
    if len(stack) >= limits.max_nesting_depth:
        raise cursor.error(f"nesting deeper than the limit of {limits.max_nesting_depth}")
    if kind == STRUCT:
        stack.append(None)
    elif kind == MAP:
        key, value = cursor.byte("a map header"), cursor.byte("a map header")
        pairs = _count(cursor, limits, "map", 2)
        # Elements alternate key, value: with 2*pairs left, an odd count left is a key.
        stack.append([value, key, 2 * pairs])
    else:
        element = cursor.byte("a list header")
        stack.append([element, _count(cursor, limits, "list" if kind == LIST else "set", 1)])
