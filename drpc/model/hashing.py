"""Stable hashing of tuple values for fields grouping.

Contract: ``stable_hash(values)`` returns the same 32-bit non-negative integer
for equal values in every process, on every run, on every executor. Python's
``hash()`` of a ``str`` is salted per process, so two Spark workers would send
the same key to different tasks; this function never uses it.

Supported values: ``str``, ``bytes``, ``int``, ``bool``, ``float``, ``None``,
``tuple``, ``list``, ``set``, ``frozenset``, ``dict``, ``Enum``, ``UUID``,
``date``/``datetime``/``time`` and dataclass instances (by their fields).
Values that compare equal hash equal (``1 == 1.0 == True``). Anything else
raises ``UnhashableGroupingValueError`` naming the type.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import struct
import uuid
import zlib
from collections.abc import Sequence
from typing import Any, Final

from mypy_extensions import i64

from drpc.errors import UnhashableGroupingValueError
from drpc.state.versions import PinnedRequest

# Final: the compiled build inlines them (a plain module global is a dict look-up per use)
_MASK: Final = 0xFFFFFFFF
_NONE_HASH: Final = 0x9E3779B9
_BYTES_TAG: Final = 0x5BD1E995
_crc32: Final = zlib.crc32  # bound once: a module attribute is a look-up per use
# Short strings' hashes, remembered process-wide (a key recurs: a follower, a word): a
# look-up instead of encoding and checksumming the string again.
_STR_MEMO_ENTRIES: Final = 32768
_STR_MEMO_LENGTH: Final = 64
_str_hashes: Final[dict[str, int]] = {}
_PINNED_REQUEST: Final = PinnedRequest  # held in a C variable when compiled


# The arithmetic is on ``i64``: an int to Python, and to the compiled build a C integer,
# where an int past 2**62 would be a heap object. Every intermediate stays below 2**49, so
# no C overflow either: a 32-bit multiplication is done in two 16-bit halves.


def _times_low32(h: i64, high: i64, low: i64) -> i64:
    """``(h * (high << 16 | low)) & _MASK`` for 32-bit ``h`` and 16-bit halves."""
    return (h * low + (((h * high) & 0xFFFF) << 16)) & _MASK


def _fmix32(h: i64) -> i64:
    """MurmurHash3's finalizer: spreads low-entropy inputs (small ints) over all bits."""
    h ^= h >> 16
    h = _times_low32(h, 0x85EB, 0xCA6B)  # h * 0x85EBCA6B
    h ^= h >> 13
    h = _times_low32(h, 0xC2B2, 0xAE35)  # h * 0xC2B2AE35
    h ^= h >> 16
    return h


def _hash_int(value: int) -> i64:
    h: i64 = 0
    negative = value < 0
    value = -value if negative else value
    while True:
        h = (h * 31 + i64(value & _MASK)) & _MASK
        value >>= 32
        if not value:
            break
    return (~h & _MASK) if negative else h


def _hash_sequence(items: Sequence[Any] | tuple[Any, ...]) -> i64:
    h: i64 = 1
    for item in items:
        h = (31 * h + _hash_value(item)) & _MASK
    return h


def _hash_value(value: Any) -> int:
    kind = type(value)
    if kind is str:
        known = _str_hashes.get(value)
        if known is None:
            known = _crc32(value.encode("utf-8", "surrogatepass"))
            if len(value) <= _STR_MEMO_LENGTH:
                if len(_str_hashes) >= _STR_MEMO_ENTRIES:
                    _str_hashes.clear()
                _str_hashes[value] = known
        return known
    if kind is int:
        return _hash_int(value)
    if kind is bool or kind is _PINNED_REQUEST:  # a pinned request: its number
        return _hash_int(int(value))
    if value is None:
        return _NONE_HASH
    if kind is float:
        if value.is_integer():
            return _hash_int(int(value))
        return zlib.crc32(struct.pack("<d", value))
    if kind is tuple or kind is list:
        return _hash_sequence(value)
    if kind is bytes:
        return zlib.crc32(value) ^ _BYTES_TAG
    if isinstance(value, enum.Enum):
        return _hash_value(value.value)
    if isinstance(value, str):
        return _hash_value(str(value))
    if isinstance(value, (int, float)):
        return _hash_value(int(value) if isinstance(value, int) else float(value))
    if isinstance(value, (tuple, list)):
        return _hash_sequence(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return zlib.crc32(bytes(value)) ^ _BYTES_TAG
    if isinstance(value, (set, frozenset)):
        return sum(_fmix32(_hash_value(item)) for item in value) & _MASK
    if isinstance(value, dict):
        return (
            sum(_fmix32((_hash_value(k) * 31 + _hash_value(v)) & _MASK) for k, v in value.items())
            & _MASK
        )
    if isinstance(value, uuid.UUID):
        return _hash_int(value.int)
    if isinstance(value, (datetime.date, datetime.time)):
        return zlib.crc32(value.isoformat().encode())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _hash_sequence(
            [type(value).__qualname__] + [getattr(value, f.name) for f in dataclasses.fields(value)]
        )
    raise UnhashableGroupingValueError(
        f"fields grouping cannot hash a value of type {kind.__qualname__} stably across "
        "processes; group on str, bytes, int, float, bool, None, tuple, list, set, dict, "
        "Enum, UUID, date/time or dataclass values"
    )


def stable_hash_at(values: Sequence[Any], positions: tuple[int, ...]) -> int:
    """``stable_hash([values[p] for p in positions])`` (``positions`` not empty), without
    making that list."""
    if isinstance(values, list):  # most emits: the list's own indexing, when compiled
        if len(positions) == 1:
            return _fmix32(_hash_value(values[positions[0]]))
        h: i64 = 1
        for position in positions:
            h = (31 * h + _hash_value(values[position])) & _MASK
        return _fmix32(h)
    if len(positions) == 1:
        return _fmix32(_hash_value(values[positions[0]]))
    h = 1
    for position in positions:
        h = (31 * h + _hash_value(values[position])) & _MASK
    return _fmix32(h)


def stable_hash(values: Sequence[Any]) -> int:
    """Hash the selected values of a tuple, identically in every process."""
    if len(values) == 1:
        return _fmix32(_hash_value(values[0]))
    return _fmix32(_hash_sequence(values))
