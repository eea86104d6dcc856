"""TransactionalMap and OpaqueMap: Storm's replay rules as state tables, handles, reads."""

from __future__ import annotations

import functools
import operator
import pickle
import re
from collections.abc import Callable
from typing import Any

import pytest

from drpc.errors import StateError, StateKeyError, StateOrderError, StateValueError
from drpc.state import (
    NonTransactionalMap,
    OpaqueMap,
    OpaqueValue,
    StateEnvironment,
    StateTxn,
    TransactionalMap,
    TransactionalValue,
)
from drpc.state.codec import encode_key, encode_name
from drpc.state.env import MAPS_DB

StoredValue = TransactionalValue | OpaqueValue


def add(n: int) -> Any:
    return lambda value: value + n


def seed(env: StateEnvironment, name: str, key: str, record: StoredValue | None) -> None:
    """Write ``record`` for ``key`` in the documented on-disk form (pickled tuple)."""
    if record is None:
        return
    if isinstance(record, OpaqueValue):
        stored: tuple[Any, ...] = (record.value, record.prev, record.txid)
    else:
        stored = (record.value, record.txid)
    raw = encode_name(name) + encode_key(key)
    env.run_write(lambda txn: txn.put(MAPS_DB, raw, pickle.dumps(stored)))


def commit(env: StateEnvironment, state_map: Any, txid: int, action: Any) -> Any:
    return env.run_write(lambda txn: action(state_map.handle(txn, txid)))


# -- the pure values (Storm's OpaqueValue get/update by txid) ------------------------------

OPAQUE = OpaqueValue("v1", "v0", 8)


@pytest.mark.parametrize(("txid", "expected"), [(None, "v1"), (9, "v1"), (100, "v1"), (8, "v0")])
def test_opaque_value_get_by_txid(txid: int | None, expected: str) -> None:
    assert OPAQUE.get(txid) == expected


@pytest.mark.parametrize(
    ("txid", "expected"),
    [
        (8, OpaqueValue("v2", "v0", 8)),
        (9, OpaqueValue("v2", "v1", 9)),
        (20, OpaqueValue("v2", "v1", 20)),
    ],
)
def test_opaque_value_update_by_txid(txid: int, expected: OpaqueValue) -> None:
    assert OPAQUE.update(txid, "v2") == expected


def test_opaque_value_refuses_a_txid_behind_its_own() -> None:
    with pytest.raises(StateOrderError, match="batch txid 7 is behind the state's txid 8"):
        OPAQUE.get(7)
    with pytest.raises(StateOrderError, match="behind"):
        OPAQUE.update(7, "v2")


@pytest.mark.parametrize(
    ("txid", "expected"),
    [(3, TransactionalValue(5, 3)), (4, TransactionalValue(7, 4)), (9, TransactionalValue(7, 9))],
)
def test_transactional_value_update_by_txid(txid: int, expected: TransactionalValue) -> None:
    assert TransactionalValue(5, 3).update(txid, add(2)) == expected


def test_transactional_value_refuses_a_txid_behind_its_own() -> None:
    with pytest.raises(
        StateOrderError,
        match=r"^batch txid 2 is behind the state's txid 3 "
        r"\(TransactionalValue\(value=5, txid=3\)\): "
        r"a commit older than the last one cannot be applied$",
    ):
        TransactionalValue(5, 3).update(2, add(2))


# -- state tables through LMDB: (stored, txid, update) -> stored after the commit ----------


TM, OM = TransactionalMap, OpaqueMap


@pytest.mark.parametrize(
    ("kind", "stored", "txid", "returned", "expected"),
    [
        (TM, None, 1, 3, TransactionalValue(3, 1)),  # absent: starts from the default 0
        (TM, TransactionalValue(5, 2), 2, 5, TransactionalValue(5, 2)),  # replay: no-op
        (TM, TransactionalValue(5, 2), 3, 8, TransactionalValue(8, 3)),
        (TM, TransactionalValue(5, 2), 7, 8, TransactionalValue(8, 7)),  # txids may skip
        (OM, None, 1, 3, OpaqueValue(3, 0, 1)),  # absent: prev is the default
        (OM, OpaqueValue(5, 2, 4), 4, 5, OpaqueValue(5, 2, 4)),  # replay of the same batch
        (OM, OpaqueValue(9, 2, 4), 4, 5, OpaqueValue(5, 2, 4)),  # replay of a changed batch
        (OM, OpaqueValue(9, 2, 4), 5, 12, OpaqueValue(12, 9, 5)),
        (OM, OpaqueValue(9, 2, 4), 8, 12, OpaqueValue(12, 9, 8)),
    ],
)
def test_update_table(
    env: StateEnvironment,
    kind: type,
    stored: StoredValue | None,
    txid: int,
    returned: int,
    expected: StoredValue,
) -> None:
    counts = kind(env, "counts", default=0)
    seed(env, "counts", "k", stored)
    assert commit(env, counts, txid, lambda h: h.update("k", add(3))) == returned
    assert counts.stored("k") == expected
    assert counts.get("k") == expected.value


@pytest.mark.parametrize(
    ("kind", "stored", "txid", "expected"),
    [
        (TM, None, 3, TransactionalValue(7, 3)),
        (TM, TransactionalValue(5, 2), 2, TransactionalValue(7, 2)),
        (TM, TransactionalValue(5, 2), 3, TransactionalValue(7, 3)),
        (OM, None, 3, OpaqueValue(7, "none", 3)),
        (OM, OpaqueValue(9, 2, 4), 4, OpaqueValue(7, 2, 4)),
        (OM, OpaqueValue(9, 2, 4), 5, OpaqueValue(7, 9, 5)),
    ],
)
def test_put_table(
    env: StateEnvironment, kind: type, stored: StoredValue | None, txid: int, expected: StoredValue
) -> None:
    values = kind(env, "values", default="none")
    seed(env, "values", "k", stored)
    commit(env, values, txid, lambda h: h.put("k", 7))
    assert values.stored("k") == expected


@pytest.mark.parametrize(
    ("kind", "stored", "txid", "expected"),
    [
        (OpaqueMap, None, 4, 0),
        (OpaqueMap, OpaqueValue(9, 2, 4), 4, 2),  # as of txid 4: the value before it
        (OpaqueMap, OpaqueValue(9, 2, 4), 5, 9),
        (TransactionalMap, None, 4, 0),
        (TransactionalMap, TransactionalValue(5, 2), 2, 5),
        (TransactionalMap, TransactionalValue(5, 2), 3, 5),
        (TransactionalMap, TransactionalValue(5, 4), 3, 5),  # Storm: a plain read of the value
    ],
)
def test_handle_get_reads_as_of_the_txid(
    env: StateEnvironment, kind: type, stored: StoredValue | None, txid: int, expected: int
) -> None:
    counts = kind(env, "counts", default=0)
    seed(env, "counts", "k", stored)
    assert commit(env, counts, txid, lambda h: h.get("k")) == expected


BEHIND = {
    "update": lambda handle: handle.update("k", add(1)),
    "put": lambda handle: handle.put("k", 1),
    "get": lambda handle: handle.get("k"),
}


@pytest.mark.parametrize(
    ("kind", "stored", "action"),
    [
        (TransactionalMap, TransactionalValue(5, 4), "update"),
        (TransactionalMap, TransactionalValue(5, 4), "put"),
        (OpaqueMap, OpaqueValue(5, 2, 4), "update"),
        (OpaqueMap, OpaqueValue(5, 2, 4), "put"),
        (OpaqueMap, OpaqueValue(5, 2, 4), "get"),
    ],
)
def test_a_txid_behind_the_stored_one_fails_the_commit(
    env: StateEnvironment, kind: type, stored: StoredValue, action: str
) -> None:
    counts = kind(env, "counts", default=0)
    seed(env, "counts", "k", stored)
    with pytest.raises(StateOrderError, match="batch txid 3 is behind the state's txid 4"):
        commit(env, counts, 3, BEHIND[action])
    assert counts.stored("k") == stored


# -- several updates of one key in one commit compose ----------------------------------------


@pytest.mark.parametrize(
    ("kind", "stored", "txid", "expected"),
    [
        (TransactionalMap, None, 3, TransactionalValue(3, 3)),
        (TransactionalMap, TransactionalValue(5, 2), 3, TransactionalValue(8, 3)),
        (TransactionalMap, TransactionalValue(5, 3), 3, TransactionalValue(5, 3)),  # replay
        (OpaqueMap, None, 3, OpaqueValue(3, 0, 3)),
        (OpaqueMap, OpaqueValue(9, 2, 4), 4, OpaqueValue(5, 2, 4)),
        (OpaqueMap, OpaqueValue(9, 2, 4), 5, OpaqueValue(12, 9, 5)),
    ],
)
def test_updates_of_one_key_in_one_commit_compose(
    env: StateEnvironment, kind: type, stored: StoredValue | None, txid: int, expected: StoredValue
) -> None:
    counts = kind(env, "counts", default=0)
    seed(env, "counts", "k", stored)

    def three_updates(txn: StateTxn) -> None:
        counts.handle(txn, txid).update("k", add(1))
        counts.handle(txn, txid).update("k", add(1))  # the same handle, asked again
        counts.handle(txn, txid).multi_update({"k": add(1)})

    env.run_write(three_updates)
    assert counts.stored("k") == expected


def test_after_a_write_the_handle_reads_what_this_commit_wrote(env: StateEnvironment) -> None:
    counts = OpaqueMap(env, "counts", default=0)
    seed(env, "counts", "k", OpaqueValue(9, 2, 4))

    def body(txn: StateTxn) -> list[int]:
        handle = counts.handle(txn, 4)
        before = handle.get("k")
        handle.update("k", add(10))
        return [before, handle.get("k")]

    assert env.run_write(body) == [2, 12]


# -- handles, reads and the catalog ---------------------------------------------------------


def test_multi_operations(env: StateEnvironment) -> None:
    counts = TransactionalMap(env, "counts", default=0)

    def first(txn: StateTxn) -> dict[Any, Any]:
        handle = counts.handle(txn, 1)
        handle.multi_put({"cat": 5, "dog": 7})
        return handle.multi_update({"cat": add(3), "apple": add(2)})

    assert env.run_write(first) == {"cat": 8, "apple": 2}
    assert counts.multi_get(["cat", "dog", "apple", "bucket"]) == [8, 7, 2, 0]
    assert counts.get("bucket", None) is None
    assert counts.stored("bucket") is None
    assert counts.items() == [("apple", 2), ("cat", 8), ("dog", 7)]
    assert commit(env, counts, 2, lambda h: h.multi_get(["cat", "bucket"])) == [8, 0]


def test_plain_reads_never_see_an_open_commit(env: StateEnvironment) -> None:
    counts = TransactionalMap(env, "counts", default=0)
    commit(env, counts, 1, lambda h: h.put("cat", 1))

    def body(txn: StateTxn) -> tuple[Any, ...]:
        counts.handle(txn, 2).multi_update({"cat": add(1), "dog": add(1)})
        return counts.get("cat"), counts.get("dog"), counts.items(), counts.get("cat", txn=txn)

    assert env.run_write(body) == (1, 0, [("cat", 1)], 2)
    assert counts.items() == [("cat", 2), ("dog", 1)]


def test_items_decode_every_key_type_in_key_order(env: StateEnvironment) -> None:
    values = TransactionalMap(env, "values")
    keys = ["b", "a", b"raw", -5, 300, 2, ("hour", 7)]
    commit(env, values, 1, lambda h: h.multi_put({key: repr(key) for key in keys}))
    assert values.items() == [
        (b"raw", "b'raw'"),
        (-5, "-5"),
        (2, "2"),
        (300, "300"),
        ("a", "'a'"),
        ("b", "'b'"),
        (("hour", 7), "('hour', 7)"),
    ]


def test_handle_needs_a_write_transaction_and_is_the_same_per_transaction(
    env: StateEnvironment,
) -> None:
    counts = TransactionalMap(env, "counts")
    with env.read() as txn, pytest.raises(StateError, match="write transaction"):
        counts.handle(txn, 1)

    def body(txn: StateTxn) -> None:
        assert counts.handle(txn, 1) is counts.handle(txn, 1)
        assert TransactionalMap(env, "counts").handle(txn, 1) is counts.handle(txn, 1)
        assert counts.handle(txn, 2) is not counts.handle(txn, 1)

    env.run_write(body)
    handles = []
    env.run_write(lambda txn: handles.append(counts.handle(txn, 3)))
    with pytest.raises(StateError, match="transaction has ended"):
        handles[0].put("k", 1)


def test_a_map_name_is_bound_to_one_kind(env: StateEnvironment) -> None:
    counts = TransactionalMap(env, "counts")
    commit(env, counts, 1, lambda h: h.put("k", 1))
    with pytest.raises(StateError, match=r"holds transactional values.*OpaqueMap"):
        OpaqueMap(env, "counts")
    other = OpaqueMap(env, "other")
    commit(env, other, 1, lambda h: h.put("k", 1))
    with pytest.raises(StateError, match=r"holds opaque values.*TransactionalMap"):
        TransactionalMap(env, "other")


def test_a_map_is_opened_only_by_its_own_kind_with_a_valid_name(env: StateEnvironment) -> None:
    commit(env, TransactionalMap(env, "counts"), 1, lambda h: h.put("k", 1))
    assert TransactionalMap(env, "counts").get("k") == 1  # its own kind opens it again
    with pytest.raises(
        StateError,
        match=rf"^map 'counts' in {re.escape(repr(env.path))} holds transactional values; "
        r"it cannot be opened as a OpaqueMap$",
    ):
        OpaqueMap(env, "counts")
    with pytest.raises(StateKeyError, match=r"^map name must not be empty$"):
        TransactionalMap(env, "")


def test_reads_inside_a_commit_see_what_it_wrote(env: StateEnvironment) -> None:
    counts = TransactionalMap(env, "counts")

    def write_then_read(txn: StateTxn) -> tuple[object, object]:
        counts.handle(txn, 1).put("k", 5)
        return counts.stored("k", txn=txn), counts.items(txn=txn)

    assert env.run_write(write_then_read) == (TransactionalValue(5, 1), [("k", 5)])
    assert counts.items() == [("k", 5)]


def test_maps_do_not_meet_even_when_one_name_starts_the_other(env: StateEnvironment) -> None:
    a, ab = TransactionalMap(env, "a", default=0), TransactionalMap(env, "ab", default=0)
    commit(env, a, 1, lambda h: h.put("bk", 1))
    commit(env, ab, 1, lambda h: h.put("k", 2))
    assert (a.items(), ab.items()) == ([("bk", 1)], [("k", 2)])


def test_map_keys_up_to_the_limit_work_and_longer_ones_are_refused(env: StateEnvironment) -> None:
    values = TransactionalMap(env, "v")
    room = env.max_key_size - len(encode_name("v")) - 1  # 1: the str type tag
    commit(env, values, 1, lambda h: h.put("x" * room, "longest"))
    assert values.get("x" * room) == "longest"
    with pytest.raises(StateKeyError, match=f"LMDB allows {env.max_key_size}"):
        commit(env, values, 2, lambda h: h.put("x" * (room + 1), "too long"))
    with pytest.raises(StateKeyError, match="state key must be"):
        values.get(1.5)  # type: ignore[arg-type]


def test_an_unpicklable_value_fails_the_commit_naming_the_map(env: StateEnvironment) -> None:
    values = TransactionalMap(env, "v")

    def body(txn: StateTxn) -> None:
        handle = values.handle(txn, 1)
        handle.put("fine", 1)
        handle.put("bad", lambda: None)

    with pytest.raises(StateValueError, match="TransactionalMap 'v'"):
        env.run_write(body)
    assert values.items() == []


@pytest.mark.parametrize(
    ("kind", "record"),
    [(TM, "TransactionalValue(value=<function"), (OM, "OpaqueValue(value=<function")],
)
def test_an_update_to_an_unpicklable_value_fails_the_commit_naming_value_and_map(
    env: StateEnvironment, kind: Any, record: str
) -> None:
    values = kind(env, "v", default=0)
    commit(env, values, 1, lambda h: h.put("stored", 1))

    def body(txn: StateTxn) -> None:
        values.handle(txn, 2).multi_update({"stored": add(1), "bad": lambda v: lambda: v})

    with pytest.raises(StateValueError, match=rf"{re.escape(record)}.* in <{kind.__name__} 'v'"):
        env.run_write(body)
    assert values.items() == [("stored", 1)]


@pytest.mark.parametrize("combined", [False, True])
def test_an_update_of_a_key_over_the_limit_is_refused_naming_it(
    env: StateEnvironment, combined: bool
) -> None:
    """By ``multi_update`` and by ``multi_combine`` (which writes the keys it read)."""
    values = TransactionalMap(env, "v", default=0, cache_size=0)

    def update(keys: list[str]) -> Callable[[Any], None]:
        if combined:
            return lambda h: h.multi_combine(dict.fromkeys(keys, 1), operator.add)
        return lambda h: h.multi_update({key: add(1) for key in keys})

    room = env.max_key_size - len(encode_name("v")) - 1
    commit(env, values, 1, update(["k", "x" * room]))
    with pytest.raises(StateKeyError, match=f"key 'xxx.* takes {env.max_key_size + 1} bytes"):
        commit(env, values, 2, update(["k", "x" * (room + 1)]))
    assert values.items() == [("k", 1), ("x" * room, 1)]


def test_a_retried_commit_applies_each_update_once(tmp_path: Any) -> None:
    env = StateEnvironment.open(tmp_path / "s", map_size=64 * 1024)
    counts = TransactionalMap(env, "counts", default=0)
    try:

        def body(txn: StateTxn) -> None:
            handle = counts.handle(txn, 1)
            for key in range(3000):
                handle.update(key, add(1))
                handle.update(key, add(1))

        env.run_write(body)
        assert env.resizes >= 1
        assert counts.multi_get(range(3000)) == [2] * 3000
    finally:
        env.close()


# -- multi_combine: Storm's combiner value updater, one pass for large batches ----------------


def combined_by(batch: int) -> Any:
    """Storm's combiner value updater for a batch partial, as ``multi_update`` takes it."""
    return lambda value: batch if value is None else value + batch


def plus(value: int, partial: int) -> int:
    return value + partial


def apply_batches(
    removed: list[str], batches: list[dict[str, int]], handle: Any, *, by_combine: bool
) -> None:
    handle.multi_remove(removed)
    for batch in batches:
        if by_combine:
            handle.multi_combine(batch, plus)
        else:
            handle.multi_update({key: combined_by(n) for key, n in batch.items()})


# (txid, removed before, batch): a fresh txid, a replay of it in a commit of its own, a
# tombstone combined in the commit that wrote it, and a key combined twice in one commit
COMBINE_COMMITS: list[tuple[int, list[str], list[dict[str, int]]]] = [
    (1, [], [{"a": 1, "b": 2, "c": 3}]),
    (2, [], [{"a": 10, "d": 4, "e": 5}]),
    (2, [], [{"a": 10, "d": 4, "e": 5}]),
    (3, ["b"], [{"b": 5, "c": 1, "f": 6}]),
    (4, [], [{"a": 1, "b": 1, "g": 1}, {"a": 2, "b": 2, "g": 2}]),
    (5, [], [{"a": 100}]),
]


@pytest.mark.parametrize("kind", [TransactionalMap, OpaqueMap, NonTransactionalMap])
@pytest.mark.parametrize("cache_size", [0, 2, 100])  # none; smaller than 3-key batches; all
@pytest.mark.parametrize("default", [None, 0, 1000])  # 1000: a default the combine changes
def test_multi_combine_is_multi_update_with_storms_combiner(
    tmp_path: Any, kind: Any, cache_size: int, default: Any
) -> None:
    envs = [StateEnvironment.open(tmp_path / name) for name in ("combined", "updated")]
    try:
        combined, updated = (kind(env, "m", default=default, cache_size=cache_size) for env in envs)
        for txid, removed, batches in COMBINE_COMMITS:
            for state_map, by_combine in ((combined, True), (updated, False)):
                commit(
                    state_map.env,
                    state_map,
                    txid,
                    functools.partial(apply_batches, removed, batches, by_combine=by_combine),
                )
            keys = sorted({key for _, _, commits in COMBINE_COMMITS for b in commits for key in b})
            assert [combined.stored(key) for key in keys] == [updated.stored(key) for key in keys]
            assert combined.items() == updated.items()
    finally:
        for env in envs:
            env.close()


@pytest.mark.parametrize("cache_size", [0, 2])
def test_multi_combine_on_a_transactional_map_counts_a_replayed_txid_once(
    env: StateEnvironment, cache_size: int
) -> None:
    counts = TransactionalMap(env, "counts", default=None, cache_size=cache_size)
    seed(env, "counts", "done", TransactionalValue(5, 2))  # first in key order
    seed(env, "counts", "old", TransactionalValue(5, 1))
    batch = {"old": 1, "done": 1, "new": 7}

    def body(txn: StateTxn) -> None:
        counts.handle(txn, 2).multi_combine(batch, plus)

    env.run_write(body)
    assert [counts.stored(key) for key in ("done", "new", "old")] == [
        TransactionalValue(5, 2),  # it holds txid 2 already: the replay changes nothing
        TransactionalValue(7, 2),
        TransactionalValue(6, 2),
    ]
    env.run_write(body)
    assert counts.items() == [("done", 5), ("new", 7), ("old", 6)]


@pytest.mark.parametrize("cache_size", [0, 2])
def test_multi_combine_behind_the_stored_txid_fails_the_commit_naming_the_record(
    env: StateEnvironment, cache_size: int
) -> None:
    counts = TransactionalMap(env, "counts", default=0, cache_size=cache_size)
    seed(env, "counts", "k", TransactionalValue(5, 4))

    def body(txn: StateTxn) -> None:
        counts.handle(txn, 3).multi_combine({"j": 1, "k": 1, "l": 1}, plus)

    with pytest.raises(
        StateOrderError,
        match=re.escape("batch txid 3 is behind the state's txid 4 (TransactionalValue(value=5"),
    ):
        env.run_write(body)
    assert counts.items() == [("k", 5)]


def test_multi_combine_after_an_update_in_the_same_commit_composes(env: StateEnvironment) -> None:
    counts = TransactionalMap(env, "counts", default=0)
    seed(env, "counts", "k", TransactionalValue(5, 1))

    def body(txn: StateTxn) -> None:
        handle = counts.handle(txn, 2)
        handle.update("k", add(1))
        handle.multi_combine({"k": 10, "j": 3, "i": 1}, plus)

    env.run_write(body)
    assert counts.items() == [("i", 1), ("j", 3), ("k", 16)]
    assert counts.stored("k") == TransactionalValue(16, 2)


def test_a_combine_to_an_unpicklable_value_fails_the_commit_naming_value_and_map(
    env: StateEnvironment,
) -> None:
    values = TransactionalMap(env, "v", default=0)
    commit(env, values, 1, lambda h: h.put("stored", 1))

    def body(txn: StateTxn) -> None:
        values.handle(txn, 2).multi_combine(
            {"stored": 1, "bad": 1, "also": 2}, lambda value, partial: lambda: value
        )

    with pytest.raises(
        StateValueError, match=r"TransactionalValue\(value=<function.* in <TransactionalMap 'v'"
    ):
        env.run_write(body)
    assert values.items() == [("stored", 1)]
