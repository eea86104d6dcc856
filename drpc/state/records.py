"""drpc's own records in a state directory, in explicit formats that never run code.

Contract (on-disk formats; ``drpc.state.codec`` pickles user values, this
module never does):

- **commit record** (``encode_commit``/``decode_commit``): ``b"c1"``, the
  txid as 8 bytes big-endian, the commit time as an 8-byte big-endian IEEE
  754 double: 18 bytes.
- **plain data** (``encode_plain``/``decode_plain``): drpc's own batch
  metadata (a partitioned spout's partition count, an opaque spout's None):
  ``b"j1"`` then UTF-8 JSON of None, a bool, an int, a float, a str, or lists
  and str-keyed dicts of these (tuples are written as lists); anything else
  raises ``StateValueError`` naming what was being stored.
- **undo log** (``encode_undo``/``decode_undo``): what one write transaction
  replaced, for reads of the version before it (``drpc.state.versions``):
  ``b"u1"``, the commit time as an 8-byte big-endian double, a section count
  byte, then per section a database tag byte and an entry count (4 bytes
  big-endian), the entries' key lengths and value lengths (4 bytes each,
  little-endian; ``ABSENT_LENGTH`` for a key that did not exist), the keys
  concatenated, then the values concatenated.
- **removed keys** (``encode_removed``/``decode_removed``): the keys a map
  holds tombstones for, until they are reclaimed (``drpc.state.maps``), and
  the last txid that removed one: ``b"k1"``, the txid as 8 bytes big-endian,
  the key count (4 bytes big-endian), each key's length (4 bytes
  little-endian), then the keys concatenated.
- **earlier records**: drpc wrote both as pickles before these formats. A
  record that starts as a pickle is read by an unpickler that resolves no
  class, function or persistent id, so it can only build plain containers
  and scalars; a crafted pickle that names any callable is refused, never
  run. Such a record must still hold what it should (a commit record: an
  ``(int, float)`` tuple).
- a record in none of these forms raises ``StateFormatError`` naming what it
  was meant to be.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Any

from drpc.errors import StateFormatError, StateValueError

COMMIT_TAG = b"c1"
PLAIN_TAG = b"j1"
UNDO_TAG = b"u1"
KEYS_TAG = b"k1"
ABSENT_LENGTH = 0xFFFFFFFF
_COMMIT = struct.Struct(">Qd")
_UNDO_HEADER = struct.Struct(">dB")
_UNDO_SECTION = struct.Struct(">BI")
_REMOVED_HEADER = struct.Struct(">QI")

Undo = dict[int, dict[bytes, "bytes | None"]]
"""Replaced values by database tag, then key: the value before, or None (absent)."""
_PICKLE_START = 0x80  # the PROTO opcode every pickle of protocol 2 or later begins with


def encode_commit(txid: int, committed_at: float) -> bytes:
    return COMMIT_TAG + _COMMIT.pack(txid, committed_at)


def decode_commit(data: bytes) -> tuple[int, float]:
    """The (txid, commit time) of a commit record."""
    if data.startswith(COMMIT_TAG) and len(data) == len(COMMIT_TAG) + _COMMIT.size:
        txid, committed_at = _COMMIT.unpack(data[len(COMMIT_TAG) :])
        return txid, committed_at
    value = _earlier(data, "a commit record")
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and type(value[0]) is int
        and isinstance(value[1], int | float)
        and not isinstance(value[1], bool)
    ):
        return value[0], float(value[1])
    raise StateFormatError(f"a commit record holds {type(value).__name__}, not (txid, time)")


def encode_undo(committed_at: float, sections: Undo) -> bytes:
    parts = [UNDO_TAG, _UNDO_HEADER.pack(committed_at, len(sections))]
    for tag, entries in sections.items():
        keys = list(entries)
        values = [b"" if value is None else value for value in entries.values()]
        value_lengths = [
            ABSENT_LENGTH if value is None else len(value) for value in entries.values()
        ]
        count = len(keys)
        parts.append(_UNDO_SECTION.pack(tag, count))
        parts.append(struct.pack(f"<{count}I", *map(len, keys)))
        parts.append(struct.pack(f"<{count}I", *value_lengths))
        parts.extend(keys)
        parts.extend(values)
    return b"".join(parts)


def decode_undo(data: bytes) -> tuple[float, Undo]:
    """The commit time and replaced values of an undo log (``StateFormatError`` if it is
    none)."""
    try:
        if not data.startswith(UNDO_TAG):
            raise ValueError("it does not start with the undo tag")
        committed_at, section_count = _UNDO_HEADER.unpack_from(data, len(UNDO_TAG))
        at = len(UNDO_TAG) + _UNDO_HEADER.size
        sections: Undo = {}
        for _ in range(section_count):
            tag, count = _UNDO_SECTION.unpack_from(data, at)
            at += _UNDO_SECTION.size
            key_lengths = struct.unpack_from(f"<{count}I", data, at)
            value_lengths = struct.unpack_from(f"<{count}I", data, at + 4 * count)
            key_ends = list(accumulate(key_lengths, initial=at + 8 * count))
            value_ends = list(
                accumulate(
                    (0 if length == ABSENT_LENGTH else length for length in value_lengths),
                    initial=key_ends[-1],
                )
            )
            sections[tag] = {
                data[start:end]: None if length == ABSENT_LENGTH else data[value_start:value_end]
                for start, end, length, value_start, value_end in zip(
                    key_ends[:-1],
                    key_ends[1:],
                    value_lengths,
                    value_ends[:-1],
                    value_ends[1:],
                    strict=True,
                )
            }
            at = value_ends[-1]
        if at != len(data):
            raise ValueError(f"{len(data) - at} bytes follow its last section")
    except (ValueError, struct.error) as error:
        raise StateFormatError(f"an undo log is in no format drpc reads: {error}") from None
    return committed_at, sections


@dataclass(frozen=True, slots=True)
class RemovedKeys:
    """A map's keys removed up to ``txid`` whose tombstones are not reclaimed yet."""

    txid: int
    keys: list[bytes]


def encode_removed(removed: RemovedKeys) -> bytes:
    keys = removed.keys
    count = len(keys)
    return b"".join(
        [
            KEYS_TAG,
            _REMOVED_HEADER.pack(removed.txid, count),
            struct.pack(f"<{count}I", *map(len, keys)),
            *keys,
        ]
    )


def decode_removed(data: bytes) -> RemovedKeys:
    """The removed keys a record holds (``StateFormatError`` if it holds none)."""
    try:
        if not data.startswith(KEYS_TAG):
            raise ValueError("it does not start with the removed keys tag")
        txid, count = _REMOVED_HEADER.unpack_from(data, len(KEYS_TAG))
        at = len(KEYS_TAG) + _REMOVED_HEADER.size
        lengths = struct.unpack_from(f"<{count}I", data, at)
        ends = list(accumulate(lengths, initial=at + 4 * count))
        if ends[-1] != len(data):
            raise ValueError(f"its keys take {ends[-1] - ends[0]} bytes, not {len(data) - ends[0]}")
    except (ValueError, struct.error) as error:
        message = f"a removed keys record is in no format drpc reads: {error}"
        raise StateFormatError(message) from None
    return RemovedKeys(txid, [data[start:end] for start, end in pairwise(ends)])


def encode_plain(value: object, what: str) -> bytes:
    try:
        text = json.dumps(value, allow_nan=True, separators=(",", ":"), default=_refuse)
    except (TypeError, ValueError) as error:
        raise StateValueError(f"{what} cannot be stored as plain data: {error}") from error
    return PLAIN_TAG + text.encode("utf-8")


def decode_plain(data: bytes, what: str) -> Any:
    if data.startswith(PLAIN_TAG):
        try:
            return json.loads(data[len(PLAIN_TAG) :].decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise StateFormatError(f"{what} is not valid plain data: {error}") from error
    return _earlier(data, what)


def _refuse(value: object) -> Any:
    raise TypeError(f"{type(value).__name__} is not plain data")


class _PlainUnpickler(pickle.Unpickler):
    """Reads pickles of containers and scalars only: any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it holds a persistent id")


def _earlier(data: bytes, what: str) -> Any:
    """A record in drpc's earlier pickled form, read without resolving any callable."""
    if not data or data[0] != _PICKLE_START:
        raise StateFormatError(f"{what} is in no format drpc reads ({bytes(data[:8])!r}...)")
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as error:  # any malformed pickle: the record is refused, never run
        raise StateFormatError(f"{what} was refused: {error}") from None
