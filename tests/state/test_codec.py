"""The documented byte encodings: txid order, names, keys, values."""

from __future__ import annotations

import pytest

from drpc.errors import StateKeyError, StateValueError
from drpc.state.codec import (
    MAX_NAME_BYTES,
    MAX_TXID,
    StateKey,
    decode_key,
    decode_names,
    decode_txid,
    dumps,
    encode_key,
    encode_keys,
    encode_name,
    encode_txid,
    loads,
)


def test_txids_are_eight_bytes_big_endian_so_byte_order_is_txid_order() -> None:
    txids = [0, 1, 2, 9, 10, 255, 256, 65_535, 65_536, 2**32, 2**40 + 7, MAX_TXID]
    encoded = [encode_txid(txid) for txid in txids]
    assert encode_txid(1) == b"\x00\x00\x00\x00\x00\x00\x00\x01"
    assert encode_txid(256) == b"\x00\x00\x00\x00\x00\x00\x01\x00"
    assert all(len(data) == 8 for data in encoded)
    assert sorted(encoded) == encoded
    assert [decode_txid(data) for data in encoded] == txids


@pytest.mark.parametrize("txid", [-1, MAX_TXID + 1, True, 1.0, "1", None])
def test_txids_outside_the_range_or_not_ints_are_refused(txid: object) -> None:
    with pytest.raises(StateKeyError, match="txid"):
        encode_txid(txid)  # type: ignore[arg-type]


def test_names_are_length_prefixed_utf8_up_to_the_limit() -> None:
    assert encode_name("ab") == b"\x02ab"
    assert encode_name("é") == b"\x02\xc3\xa9"
    longest = "x" * MAX_NAME_BYTES
    assert encode_name(longest) == bytes((MAX_NAME_BYTES,)) + longest.encode()
    names, rest = decode_names(encode_name("topo") + encode_name("meta") + b"tail", 2)
    assert (names, rest) == (["topo", "meta"], b"tail")


@pytest.mark.parametrize("name", ["", "x" * (MAX_NAME_BYTES + 1), "é" * 128, 5])
def test_empty_too_long_or_non_str_names_are_refused(name: object) -> None:
    with pytest.raises(StateKeyError, match="topology id"):
        encode_name(name, "topology id")  # type: ignore[arg-type]


def test_a_name_cannot_be_confused_with_a_longer_one_sharing_its_start() -> None:
    short = encode_name("a") + encode_name("bc")
    assert not (encode_name("ab") + encode_name("c")).startswith(short)
    assert not (encode_name("ab") + encode_name("c")).startswith(encode_name("a"))


@pytest.mark.parametrize(
    "key",
    [
        "cat",
        "",
        "naïve",
        b"\x00\xff",
        b"",
        0,
        -(2**63),
        2**63 - 1,
        ("hour", 7),
        (("nested", b"x"), -3, ""),
        (),
    ],
)
def test_keys_round_trip(key: object) -> None:
    encoded = encode_key(key)  # type: ignore[arg-type]
    assert decode_key(encoded) == key
    assert type(decode_key(encoded)) is type(key)


def test_int_keys_sort_numerically_and_str_keys_by_their_bytes() -> None:
    ints = [-(2**63), -1000, -1, 0, 1, 255, 256, 2**40, 2**63 - 1]
    assert sorted(encode_key(n) for n in ints) == [encode_key(n) for n in ints]
    words = ["apple", "banana", "cat", "catalogue", "dog"]
    assert sorted(encode_key(w) for w in words) == [encode_key(w) for w in words]


def test_tuple_elements_cannot_run_into_each_other() -> None:
    assert encode_key(("ab", "c")) != encode_key(("a", "bc"))
    assert encode_key((1, 2)) != encode_key((12,))


REFUSED_KEYS = [True, False, None, 1.5, ["list"], {"a": 1}, 2**63, -(2**63) - 1]


@pytest.mark.parametrize("key", REFUSED_KEYS)
def test_unsupported_or_out_of_range_keys_are_refused(key: object) -> None:
    with pytest.raises(StateKeyError):
        encode_key(key)  # type: ignore[arg-type]
    with pytest.raises(StateKeyError):
        encode_keys(b"\x03map", ["fine", key])  # type: ignore[list-item]


def test_many_keys_encode_as_each_one_does_after_the_prefix() -> None:
    keys: list[StateKey] = ["word", "", 0, 1, -1, 2**63 - 1, -(2**63), b"raw", ("a", 7), "é"]
    prefix = b"\x03map"
    assert encode_keys(prefix, keys) == [prefix + encode_key(key) for key in keys]


def test_values_pickle_round_trip_and_unpicklable_ones_raise_naming_what() -> None:
    value = {"count": 3, "words": ["a", "b"], "nested": (1, None)}
    assert loads(dumps(value, "value")) == value
    with pytest.raises(StateValueError, match="value of 'k' cannot be stored"):
        dumps(lambda: None, "value of 'k'")
