"""Removing keys from the three map kinds (tombstones, replays, reclaiming, versions, the
cache) and listing a map page by page, over real LMDB."""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest

from drpc.errors import InvalidQueryError, StateFormatError, StateOrderError
from drpc.state import (
    NonTransactionalMap,
    OpaqueMap,
    OpaqueValue,
    StateEnvironment,
    TransactionalMap,
    TransactionalValue,
)
from drpc.state.env import MAPS_DB
from drpc.state.maps import REMOVED, MapPage
from drpc.state.records import RemovedKeys, decode_removed, encode_removed

TM, OM, NM = TransactionalMap, OpaqueMap, NonTransactionalMap


def add(n: int) -> Any:
    return lambda value: value + n


def commit(env: StateEnvironment, state_map: Any, txid: int, action: Any) -> Any:
    return env.run_write(lambda txn: action(state_map.handle(txn, txid)))


def removed_lists(env: StateEnvironment) -> list[bytes]:
    """The LMDB keys of every map's lists of removed keys."""
    with env.read() as txn:
        return [key for key, _ in txn.scan(MAPS_DB, b"\x00")]


def seeded(env: StateEnvironment, kind: type, cache_size: int = 0) -> Any:
    """A map with a = 5, b = 7 committed in txid 1."""
    counts = kind(env, "counts", default=0, cache_size=cache_size)
    commit(env, counts, 1, lambda h: h.multi_update({"a": add(5), "b": add(7)}))
    return counts


# -- the rules per kind ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "tombstone"),
    [(TM, TransactionalValue(REMOVED, 2)), (OM, OpaqueValue(REMOVED, 5, 2)), (NM, None)],
)
def test_a_removed_key_reads_as_absent_everywhere(
    env: StateEnvironment, kind: type, tombstone: Any
) -> None:
    counts = seeded(env, kind)
    assert commit(env, counts, 2, lambda h: (h.remove("a"), h.get("a"))[1]) == 0
    assert counts.stored("a") == tombstone
    assert counts.get("a") == 0 and counts.get("a", "gone") == "gone"
    assert counts.multi_get(["a", "b"]) == [0, 7]
    assert counts.items() == [("b", 7)]
    assert commit(env, counts, 3, lambda h: h.get("a")) == 0
    commit(env, counts, 4, lambda h: h.remove("never-stored"))
    assert counts.stored("never-stored") is None


def test_a_transactional_replay_neither_removes_twice_nor_resurrects(
    env: StateEnvironment,
) -> None:
    counts = seeded(env, TM)

    def update_then_remove(handle: Any) -> Any:
        return handle.update("a", add(1)), handle.remove("a")

    def remove_then_update(handle: Any) -> Any:
        return handle.remove("b"), handle.update("b", add(1))

    assert commit(env, counts, 2, update_then_remove) == (6, None)
    assert commit(env, counts, 2, remove_then_update) == (None, 1)  # b: 1 from the default
    # txid 2 again, the same batch: every operation is a no-op
    assert commit(env, counts, 2, update_then_remove) == (0, None)
    assert commit(env, counts, 2, remove_then_update) == (None, 1)
    assert counts.stored("a") == TransactionalValue(REMOVED, 2)
    assert counts.stored("b") == TransactionalValue(1, 2)
    commit(env, counts, 3, lambda h: h.multi_update({"a": add(2), "b": add(2)}))
    assert counts.multi_get(["a", "b"]) == [2, 3]


def test_an_opaque_replay_recomputes_from_the_value_before_the_removal(
    env: StateEnvironment,
) -> None:
    counts = seeded(env, OM)
    commit(env, counts, 2, lambda h: h.remove("a"))
    assert commit(env, counts, 2, lambda h: h.get("a")) == 5  # as of txid 2: before it
    # txid 2 replayed with another batch: it updates a instead, from the value before txid 2
    assert commit(env, counts, 2, lambda h: h.update("a", add(3))) == 8
    assert counts.stored("a") == OpaqueValue(8, 5, 2)
    commit(env, counts, 2, lambda h: h.remove("a"))  # and once more as first emitted
    assert counts.stored("a") == OpaqueValue(REMOVED, 5, 2)
    # in one commit: an update then a removal then an update compose on the commit's writes
    steps = lambda h: (h.update("b", add(1)), h.remove("b"), h.update("b", add(4)))  # noqa: E731
    assert commit(env, counts, 3, steps) == (8, None, 4)
    assert counts.stored("b") == OpaqueValue(4, 7, 3)
    assert counts.get("a") == 0


@pytest.mark.parametrize(
    ("kind", "stored"), [(TM, TransactionalValue(5, 4)), (OM, OpaqueValue(5, 2, 4))]
)
def test_a_removal_behind_the_stored_txid_fails_the_commit(
    env: StateEnvironment, kind: type, stored: Any
) -> None:
    counts = kind(env, "counts", default=0)
    commit(env, counts, 4, lambda h: h.put("k", 5) if kind is TM else h.update("k", add(5)))
    with pytest.raises(StateOrderError, match="batch txid 3 is behind the state's txid 4"):
        commit(env, counts, 3, lambda h: h.remove("k"))
    assert counts.stored("k") == (stored if kind is TM else OpaqueValue(5, 0, 4))


def test_a_non_transactional_map_deletes_and_a_replay_removes_again(
    env: StateEnvironment,
) -> None:
    counts = seeded(env, NM)
    commit(env, counts, 2, lambda h: h.multi_remove(["a", "a", "b"]))
    commit(env, counts, 2, lambda h: h.multi_remove(["a", "b"]))
    assert counts.items() == [] and counts.stored("a") is None
    assert removed_lists(env) == []  # no tombstones, so nothing to reclaim
    assert commit(env, counts, 3, lambda h: (h.remove("z"), h.update("z", add(2)))) == (None, 2)


# -- reclaiming tombstones ----------------------------------------------------------------


@pytest.mark.parametrize("kind", [TM, OM])
def test_the_next_txid_reclaims_the_tombstones_a_replay_still_needs(
    env: StateEnvironment, kind: type
) -> None:
    counts = seeded(env, kind)
    commit(env, counts, 2, lambda h: h.multi_remove(["a", "b"]))
    commit(env, counts, 2, lambda h: h.put("b", 9))  # txid 2 again: keeps its tombstone of a
    assert counts.stored("a") is not None and counts.stored("a").removed
    assert len(removed_lists(env)) == 1
    assert kind(env, "other").items() == []  # another map lists nothing of it
    commit(env, counts, 3, lambda h: h.get("z"))  # a later txid's first handle reclaims
    assert counts.stored("a") is None
    assert counts.get("b") == 9  # set again after its removal: kept
    assert removed_lists(env) == []


def test_a_handle_of_an_older_txid_reclaims_nothing(env: StateEnvironment) -> None:
    counts = seeded(env, TM)
    commit(env, counts, 5, lambda h: h.remove("a"))
    commit(env, counts, 3, lambda h: h.multi_update({"c": add(1), "d": add(1)}))
    commit(env, counts, 4, lambda h: h.remove("c"))  # listed under txid 5, the later one
    assert counts.stored("a") == TransactionalValue(REMOVED, 5)
    commit(env, counts, 5, lambda h: h.remove("d"))
    assert [counts.stored(k) is not None for k in "acd"] == [True, True, True]
    commit(env, counts, 6, lambda h: None)
    assert [counts.stored(k) for k in "acd"] == [None, None, None]
    assert counts.items() == [("b", 7)]


@pytest.mark.parametrize("kind", [TM, OM])
def test_reclaiming_skips_a_key_written_again_in_the_removing_txid(
    env: StateEnvironment, kind: type
) -> None:
    counts = seeded(env, kind)
    commit(env, counts, 2, lambda h: (h.remove("a"), h.update("a", add(1))))
    commit(env, counts, 4, lambda h: h.remove("b"))
    commit(env, counts, 5, lambda h: None)
    assert counts.items() == [("a", 1)]
    assert counts.stored("b") is None


# -- consistent reads ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", [TM, OM, NM])
def test_a_read_at_a_version_before_the_removal_still_sees_the_key(
    env: StateEnvironment, kind: type
) -> None:
    counts = seeded(env, kind)
    pin = env.pin()  # keeps the version before the removal readable
    try:
        commit(env, counts, 2, lambda h: h.remove("a"))
        removed_at = env.latest_version()
        commit(env, counts, 3, lambda h: h.update("c", add(1)))  # reclaims the tombstone
        with env.read(version=pin.version) as txn:
            assert counts.get("a", txn=txn) == 5
            assert counts.items(txn=txn) == [("a", 5), ("b", 7)]
            assert counts.page(1, txn=txn) == MapPage([("a", 5)], "a")
        for version in (removed_at, env.latest_version()):
            with env.read(version=version) as txn:
                assert counts.get("a", txn=txn) == 0
                assert counts.page(5, txn=txn).entries[0] == ("b", 7)
    finally:
        env.release(pin)


# -- the cache ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [TM, OM, NM])
def test_the_cache_follows_removals_and_reclaiming(env: StateEnvironment, kind: type) -> None:
    counts = seeded(env, kind, cache_size=4)
    commit(env, counts, 2, lambda h: h.remove("a"))
    cache = counts.cache
    hits = cache.hits
    assert commit(env, counts, 3, lambda h: h.multi_get(["a", "b"])) == [0, 7]
    assert cache.hits > hits  # served from memory, tombstone or reclaimed record included
    assert commit(env, counts, 4, lambda h: h.update("a", add(2))) == 2
    # a removal over more keys than the cache holds bypasses it
    many = {f"k{i}": add(i) for i in range(6)}
    commit(env, counts, 5, lambda h: h.multi_update(many))
    commit(env, counts, 6, lambda h: h.multi_remove([*many, "b"]))
    assert commit(env, counts, 7, lambda h: h.multi_get(["a", "b", "k1", "k5"])) == [2, 0, 0, 0]
    fresh = kind(env, "counts", default=0)  # no cache: what LMDB holds
    for key in ["a", "b", "k1", "k5"]:
        assert counts.stored(key) == fresh.stored(key)
    assert fresh.items() == [("a", 2)]


def test_a_commit_of_another_map_object_keeps_the_cache_true(env: StateEnvironment) -> None:
    counts = seeded(env, TM, cache_size=4)
    commit(env, counts, 2, lambda h: h.get("a"))  # a in the cache
    other = TM(env, "counts", default=0)
    commit(env, other, 3, lambda h: h.remove("a"))
    assert commit(env, counts, 4, lambda h: h.update("a", add(1))) == 1


# -- replays against a model: any sequence of batches ------------------------------------

KEYS = ["a", "b", "c", ("t", 1)]


def batch(rng: random.Random) -> list[tuple[str, Any, int]]:
    """Operations of one batch: (update | put | remove, key, amount)."""
    return [
        (rng.choice(["update", "put", "remove"]), rng.choice(KEYS), rng.randrange(1, 9))
        for _ in range(rng.randrange(1, 6))
    ]


def apply_to_handle(handle: Any, ops: list[tuple[str, Any, int]]) -> None:
    for op, key, amount in ops:
        if op == "update":
            handle.update(key, add(amount))
        elif op == "put":
            handle.put(key, amount)
        else:
            handle.remove(key)


def apply_to_model(model: dict[Any, int], ops: list[tuple[str, Any, int]]) -> None:
    for op, key, amount in ops:
        if op == "update":
            model[key] = model.get(key, 0) + amount
        elif op == "put":
            model[key] = amount
        else:
            model.pop(key, None)


@pytest.mark.parametrize("cache_size", [0, 2, 8])
@pytest.mark.parametrize("kind", [TM, OM])
def test_random_batches_with_replays_commit_what_a_plain_dict_would(
    env: StateEnvironment, kind: type, cache_size: int
) -> None:
    """A transactional map's replay repeats the batch and changes nothing; an opaque map's
    replay may be another batch: the keys it touches are computed from before the txid
    (the others keep what the first attempt wrote, as in Storm)."""
    rng = random.Random(f"{kind.__name__}-{cache_size}")
    counts = kind(env, "counts", default=0, cache_size=cache_size)
    model: dict[Any, int] = {}
    for txid in range(1, 40):
        before = dict(model)
        ops = batch(rng)
        commit(env, counts, txid, lambda h, ops=ops: apply_to_handle(h, ops))
        apply_to_model(model, ops)
        for _ in range(rng.randrange(3)):  # replays of the last txid
            if kind is OM:
                ops = batch(rng)
                redone = dict(before)
                apply_to_model(redone, ops)
                for key in {key for _, key, _ in ops}:  # the keys it touches: from before
                    if key in redone:
                        model[key] = redone[key]
                    else:
                        model.pop(key, None)
            commit(env, counts, txid, lambda h, ops=ops: apply_to_handle(h, ops))
        assert dict(counts.items()) == model, txid
    assert len(removed_lists(env)) <= 1


# -- listing -------------------------------------------------------------------------------


@pytest.fixture
def listed(env: StateEnvironment) -> TransactionalMap:
    """Keys of every type, and a tombstone among them."""
    items = TM(env, "items", default=0)
    keys = ["ab", "abc", "b", "gone", 3, -1, b"raw", ("x", 1), ("x", 2), ("y", 1)]
    commit(env, items, 1, lambda h: h.multi_put({key: i for i, key in enumerate(keys)}))
    commit(env, items, 2, lambda h: h.remove("gone"))
    return items


def test_pages_walk_every_present_key_in_key_order(listed: TransactionalMap) -> None:
    everything = listed.items()
    assert "gone" not in dict(everything)
    for limit in (1, 3, len(everything), len(everything) + 1):
        seen: list[tuple[Any, Any]] = []
        after = None
        while True:
            page = listed.page(limit, after=after)
            assert len(page.entries) <= limit
            seen += page.entries
            if page.next_after is None:
                break
            assert page.entries[-1][0] == page.next_after
            after = page.next_after
        assert seen == everything, limit
    full = listed.page(len(everything))
    assert full.next_after is None  # exactly the limit left: no further page


def test_a_page_starts_after_any_key_and_keeps_to_a_prefix(listed: TransactionalMap) -> None:
    assert listed.page(10, prefix="a").entries == [("ab", 0), ("abc", 1)]
    assert listed.page(1, prefix="a") == MapPage([("ab", 0)], "ab")
    assert listed.page(10, prefix="a", after="ab").entries == [("abc", 1)]
    assert listed.page(10, prefix="a", after="aa").entries == [("ab", 0), ("abc", 1)]
    assert listed.page(10, prefix="a", after="az") == MapPage([], None)
    # after a key that is not stored; keys of one type sort together (bytes, int, str, tuple)
    assert listed.page(2, after="abd") == MapPage([("b", 2), (("x", 1), 7)], ("x", 1))
    assert [key for key, _ in listed.page(4).entries] == [b"raw", -1, 3, "ab"]
    assert listed.page(10, prefix=("x",)).entries == [(("x", 1), 7), (("x", 2), 8)]
    assert listed.page(10, prefix=("x",), after=("x", 1)).entries == [(("x", 2), 8)]
    assert listed.page(10, prefix="gone") == MapPage([], None)
    assert listed.page(10, prefix=b"r").entries == [(b"raw", 6)]
    assert TM(listed.env, "empty").page(5) == MapPage([], None)


@pytest.mark.parametrize("limit", [0, -1, True, 2.0, "3"])
def test_a_page_needs_a_positive_int_limit(listed: TransactionalMap, limit: Any) -> None:
    with pytest.raises(InvalidQueryError, match="limit is an int >= 1"):
        listed.page(limit)


# -- the stored forms ------------------------------------------------------------------------


def test_removed_pickles_as_itself_and_removed_keys_round_trip() -> None:
    assert pickle.loads(pickle.dumps(REMOVED)) is REMOVED
    assert repr(TransactionalValue(REMOVED, 3)) == "TransactionalValue(value=REMOVED, txid=3)"
    removed = RemovedKeys(2**40, [b"sab", b"", b"t\x00\x02sx" * 40])
    assert decode_removed(encode_removed(removed)) == removed
    assert decode_removed(encode_removed(RemovedKeys(0, []))) == RemovedKeys(0, [])
    data = encode_removed(removed)
    for bad in [b"", b"k1\x00", data[:-1], data + b"x", b"x1" + data[2:]]:
        with pytest.raises(StateFormatError, match="removed keys record"):
            decode_removed(bad)
