"""Key groups: which partition of a partitioned state holds each key, stable everywhere.

Contract (the assignment is part of the on-disk layout; changing it strands stored keys):

- A key's **key group** is ``key_group(key, key_groups)``: the CRC-32 of the key's stored
  encoding (``drpc.state.codec.encode_key``), times the golden-ratio constant modulo
  2**32 (``key_hash``: a CRC is linear, so keys that differ in a few bits would fill a
  few groups; the high bits of the product depend on every bit), scaled into
  ``[0, key_groups)`` by its high bits. Equal keys get equal groups in every process
  and on every host (never Python's salted ``hash``); keys that the codec cannot store
  raise ``StateKeyError``.
- ``key_groups`` is fixed when a state is created (``DEFAULT_KEY_GROUPS``, 128, as
  Flink's default maximum parallelism): at least the number of partitions and at most
  ``MAX_KEY_GROUPS``.
- Partition ``p`` of ``n`` owns the contiguous range ``groups_of(p, key_groups, n)``,
  and ``partition_of_group(g, key_groups, n)`` is the partition whose range holds
  ``g`` (Flink's ``KeyGroupRangeAssignment``): every group belongs to exactly one
  partition, ranges differ in size by at most one group, and changing ``n`` moves whole
  groups, never part of one.
- ``partition_of(key, partitions, key_groups)`` composes the two; ``key_of(values)`` is
  the state key of a tuple's key fields (the value itself for one field, else a tuple),
  as Trident's map states key them.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from drpc.errors import StateError
from drpc.state.codec import StateKey, encode_key

DEFAULT_KEY_GROUPS = 128
MAX_KEY_GROUPS = 32768
_crc32 = zlib.crc32
_STR_TAG = b"s"
_GOLDEN = 0x9E3779B1
_MASK = 0xFFFFFFFF


def check_layout(partitions: int, key_groups: int) -> None:
    """Raise ``StateError`` unless ``partitions`` and ``key_groups`` make a layout."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise StateError(f"a partitioned state needs at least one partition, got {partitions!r}")
    if (
        isinstance(key_groups, bool)
        or not isinstance(key_groups, int)
        or not partitions <= key_groups <= MAX_KEY_GROUPS
    ):
        raise StateError(
            f"key groups must be an int from the number of partitions ({partitions}) to "
            f"{MAX_KEY_GROUPS}, got {key_groups!r}"
        )


def key_hash(key: StateKey) -> int:
    """The 32-bit hash key groups are taken from (see the module doc)."""
    if type(key) is str:  # the common key, encoded as ``encode_key`` does, without a call
        return _crc32(key.encode("utf-8"), _STR_CRC) * _GOLDEN & _MASK
    return _crc32(encode_key(key)) * _GOLDEN & _MASK


_STR_CRC = _crc32(_STR_TAG)


def key_group(key: StateKey, key_groups: int = DEFAULT_KEY_GROUPS) -> int:
    return key_hash(key) * key_groups >> 32


def partition_of_group(group: int, key_groups: int, partitions: int) -> int:
    """The partition whose range holds key group ``group``."""
    return group * partitions // key_groups


def groups_of(partition: int, key_groups: int, partitions: int) -> range:
    """The key groups partition ``partition`` of ``partitions`` owns."""
    start = (partition * key_groups + partitions - 1) // partitions
    end = ((partition + 1) * key_groups + partitions - 1) // partitions
    return range(start, end)


def partition_of(key: StateKey, partitions: int, key_groups: int = DEFAULT_KEY_GROUPS) -> int:
    """The partition of ``partitions`` that holds ``key``."""
    if partitions == 1:
        encode_key(key)  # the same errors for a key the codec cannot store
        return 0
    return (key_hash(key) * key_groups >> 32) * partitions // key_groups


def key_of(values: Sequence[Any]) -> Any:
    """The state key of a tuple's key fields: the value itself for one field, else a tuple."""
    return values[0] if len(values) == 1 else tuple(values)
