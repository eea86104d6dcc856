"""How drpc's state layer turns txids, names, keys and values into LMDB bytes.

Contract (the on-disk format; changing it makes existing state unreadable):

- **txid**: an ``int`` in ``[0, 2**64)``, stored as 8 bytes big-endian, so
  LMDB's byte order is txid order. Anything else raises ``StateKeyError``.
- **name** (topology id, namespace, map name): a non-empty ``str`` of at most
  ``MAX_NAME_BYTES`` UTF-8 bytes, stored as one length byte then the bytes.
  The length prefix makes concatenated names unambiguous: the names of one
  record form a prefix no other record's names can extend.
- **user key** (a map key): ``str``, ``bytes``, ``int`` in ``[-2**63, 2**63)``
  or a tuple of these (nested tuples allowed), tagged by type:
  ``b"b"`` + bytes, ``b"i"`` + 8 bytes big-endian of ``n + 2**63``,
  ``b"s"`` + UTF-8, ``b"t"`` + each element as a 2-byte big-endian length and
  its encoding. Keys of one type sort as ints numerically, strings and bytes
  by their bytes; tuples sort by their encoding. ``bool``, ``float``, ``None``
  and other types raise ``StateKeyError`` (``True == 1`` would silently merge
  keys otherwise). Decoding gives back an equal key.
- **value**: pickled with protocol ``PICKLE_PROTOCOL``; an unpicklable value
  raises ``StateValueError`` naming what was being stored.

The size limit of a whole LMDB key (511 bytes by default) is checked by the
environment when the key is written or read, not here.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias, TypeVar

from drpc.errors import StateKeyError, StateValueError

K = TypeVar("K")

StateKey: TypeAlias = "str | bytes | int | tuple[StateKey, ...]"

TXID_BYTES = 8
MAX_TXID = 2**64 - 1
MAX_NAME_BYTES = 255
PICKLE_PROTOCOL = 5

_INT_OFFSET = 2**63
_ELEMENT_LENGTH_BYTES = 2


def encode_txid(txid: int) -> bytes:
    if type(txid) is not int:
        raise StateKeyError(f"a txid must be an int, got {type(txid).__name__} {txid!r}")
    if not 0 <= txid <= MAX_TXID:
        raise StateKeyError(f"txid {txid} is out of range [0, {MAX_TXID}]")
    return txid.to_bytes(TXID_BYTES, "big")


def decode_txid(data: bytes) -> int:
    return int.from_bytes(data, "big")


def encode_name(name: str, what: str = "name") -> bytes:
    """One length byte then the UTF-8 of ``name``; ``what`` names it in errors."""
    if not isinstance(name, str):
        raise StateKeyError(f"{what} must be a str, got {type(name).__name__} {name!r}")
    data = name.encode("utf-8")
    if not data:
        raise StateKeyError(f"{what} must not be empty")
    if len(data) > MAX_NAME_BYTES:
        raise StateKeyError(
            f"{what} {name[:40]!r}... is {len(data)} bytes in UTF-8, "
            f"at most {MAX_NAME_BYTES} are allowed"
        )
    return bytes((len(data),)) + data


def decode_names(data: bytes, count: int) -> tuple[list[str], bytes]:
    """Split ``count`` length-prefixed names off the front of ``data``; return them and the rest."""
    names = []
    for _ in range(count):
        length = data[0]
        names.append(data[1 : 1 + length].decode("utf-8"))
        data = data[1 + length :]
    return names, data


_STR_TAG = b"s"
_INT_TAG = b"i"


def encode_key(key: StateKey) -> bytes:
    if isinstance(key, str):
        return _STR_TAG + key.encode("utf-8")
    if isinstance(key, bytes):
        return b"b" + key
    if type(key) is int:
        if not -_INT_OFFSET <= key < _INT_OFFSET:
            raise StateKeyError(f"int key {key} is out of range [-2**63, 2**63)")
        return _INT_TAG + (key + _INT_OFFSET).to_bytes(8, "big")
    if isinstance(key, tuple):
        parts = [b"t"]
        for element in key:
            encoded = encode_key(element)
            if len(encoded) >= 1 << (8 * _ELEMENT_LENGTH_BYTES):
                raise StateKeyError(f"tuple key element {element!r:.40} is too long")
            parts.append(len(encoded).to_bytes(_ELEMENT_LENGTH_BYTES, "big"))
            parts.append(encoded)
        return b"".join(parts)
    raise StateKeyError(
        f"a state key must be str, bytes, int or a tuple of these, "
        f"got {type(key).__name__} {key!r:.60}"
    )


def encode_keys(prefix: bytes, keys: Iterable[StateKey]) -> list[bytes]:
    """``prefix + encode_key(key)`` for each of ``keys``; a ``str`` key and an ``int`` key
    in range, the common ones, without a call per key."""
    tagged, int_tagged = prefix + _STR_TAG, prefix + _INT_TAG
    return [
        tagged + key.encode("utf-8")
        if type(key) is str
        else int_tagged + (key + _INT_OFFSET).to_bytes(8, "big")
        if type(key) is int and -_INT_OFFSET <= key < _INT_OFFSET
        else prefix + encode_key(key)
        for key in keys
    ]


def decode_key(data: bytes) -> StateKey:
    tag, body = data[:1], data[1:]
    if tag == b"s":
        return body.decode("utf-8")
    if tag == b"b":
        return bytes(body)
    if tag == b"i":
        return int.from_bytes(body, "big") - _INT_OFFSET
    if tag == b"t":
        elements: list[StateKey] = []
        while body:
            length = int.from_bytes(body[:_ELEMENT_LENGTH_BYTES], "big")
            start = _ELEMENT_LENGTH_BYTES
            elements.append(decode_key(body[start : start + length]))
            body = body[start + length :]
        return tuple(elements)
    raise StateKeyError(f"stored key {data!r:.60} has an unknown type tag {tag!r}")


def dumps(value: object, what: str | Callable[[], str]) -> bytes:
    """Pickle ``value``; ``what`` (or ``what()``, built only on error) names it in the error."""
    try:
        return pickle.dumps(value, protocol=PICKLE_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as error:
        name = what if isinstance(what, str) else what()
        raise StateValueError(
            f"{name} cannot be stored: {type(value).__name__} value cannot be pickled ({error})"
        ) from error


def dumps_many(values: Mapping[K, object], what: Callable[[K, object], str]) -> dict[K, bytes]:
    """``dumps`` of each value by key; ``what(key, value)`` names a value that cannot be pickled."""
    try:
        return {key: pickle.dumps(value, protocol=PICKLE_PROTOCOL) for key, value in values.items()}
    except (pickle.PicklingError, TypeError, AttributeError):
        return {
            key: dumps(value, functools.partial(what, key, value)) for key, value in values.items()
        }


def loads(data: bytes) -> Any:
    return pickle.loads(data)
