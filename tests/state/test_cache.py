"""NonTransactionalMap and the commit handles' record cache, on real LMDB directories."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from drpc.errors import StateError
from drpc.state import (
    NonTransactionalMap,
    OpaqueMap,
    PlainValue,
    StateEnvironment,
    StateTxn,
    TransactionalMap,
)
from drpc.state.cache import RecordCache
from drpc.state.codec import encode_key, encode_name
from drpc.state.env import MAPS_DB


def add(n: int) -> Any:
    return lambda value: value + n


def test_a_non_transactional_map_applies_every_update_a_replay_included(
    env: StateEnvironment,
) -> None:
    counts = NonTransactionalMap(env, "counts", default=0)
    for txid in (1, 1, 2):
        env.run_write(lambda txn, txid=txid: counts.handle(txn, txid).update("cat", add(2)))
    assert counts.get("cat") == 6
    assert counts.stored("cat") == PlainValue(6)
    env.run_write(lambda txn: counts.handle(txn, 1).multi_put({"cat": 1, "dog": 5}))
    assert counts.items() == [("cat", 1), ("dog", 5)]
    with pytest.raises(StateError, match="non-transactional"):
        TransactionalMap(env, "counts")


@pytest.mark.parametrize("kind", [TransactionalMap, OpaqueMap, NonTransactionalMap])
def test_a_cached_map_commits_what_an_uncached_one_does(tmp_path: Path, kind: Any) -> None:
    envs = [StateEnvironment.open(tmp_path / name) for name in ("cached", "plain")]
    cached = kind(envs[0], "counts", default=0, cache_size=3)
    plain = kind(envs[1], "counts", default=0)
    batches = [(1, "abcab"), (2, "cdeaa"), (2, "cde"), (3, "e"), (4, "abcdef")]
    for txid, batch in batches:
        for state_map in (cached, plain):

            def body(
                txn: StateTxn, state_map: Any = state_map, txid: int = txid, batch: str = batch
            ) -> None:
                handle = state_map.handle(txn, txid)
                handle.multi_update({key: add(batch.count(key)) for key in sorted(set(batch))})
                assert handle.multi_get(["a", "zz"])[1] == 0

            state_map.env.run_write(body)
        assert cached.items() == plain.items()
        assert [cached.stored(key) for key, _ in plain.items()] == [
            plain.stored(key) for key, _ in plain.items()
        ]
    assert cached.cache is not None and len(cached.cache) <= 3 and cached.cache.hits > 0
    for env in envs:
        env.close()


def test_an_aborted_commit_leaves_the_cache_with_committed_records_only(
    env: StateEnvironment,
) -> None:
    counts = TransactionalMap(env, "counts", default=0, cache_size=10)
    env.run_write(lambda txn: counts.handle(txn, 1).update("cat", add(1)))

    def failing(txn: StateTxn) -> None:
        counts.handle(txn, 2).update("cat", add(100))
        raise RuntimeError("the batch failed after its update")

    with pytest.raises(RuntimeError):
        env.run_write(failing)
    assert env.run_write(lambda txn: counts.handle(txn, 2).update("cat", add(1))) == 2
    assert counts.get("cat") == 2


def test_a_write_by_another_map_object_empties_the_cache(env: StateEnvironment) -> None:
    mine = TransactionalMap(env, "counts", default=0, cache_size=10)
    other = TransactionalMap(env, "counts", default=0)
    env.run_write(lambda txn: mine.handle(txn, 1).update("cat", add(1)))
    env.run_write(lambda txn: other.handle(txn, 2).update("cat", add(10)))
    assert env.run_write(lambda txn: mine.handle(txn, 3).update("cat", add(1))) == 12


def test_two_handles_of_one_map_in_one_commit_share_the_staged_records(
    env: StateEnvironment,
) -> None:
    counts = OpaqueMap(env, "counts", default=0, cache_size=10)

    def body(txn: StateTxn) -> None:
        counts.handle(txn, 1).update("cat", add(1))
        counts.handle(txn, 2).update("dog", add(1))

    env.run_write(body)
    assert env.run_write(lambda txn: counts.handle(txn, 3).multi_get(["cat", "dog"])) == [1, 1]
    assert counts.cache is not None and counts.cache.hits == 2


def test_other_writes_of_this_process_evict_only_their_keys(env: StateEnvironment) -> None:
    mine = TransactionalMap(env, "counts", default=0, cache_size=10)
    other = TransactionalMap(env, "counts", default=0)
    unrelated = OpaqueMap(env, "elsewhere", default=0)
    env.run_write(lambda txn: mine.handle(txn, 1).multi_update({"cat": add(1), "dog": add(1)}))
    env.run_write(lambda txn: unrelated.handle(txn, 1).update("cat", add(5)))
    env.run_write(lambda txn: other.handle(txn, 2).update("dog", add(10)))
    assert mine.cache is not None and len(mine.cache) == 1
    assert env.run_write(
        lambda txn: mine.handle(txn, 3).multi_update({"cat": add(1), "dog": add(1)})
    ) == {"cat": 2, "dog": 12}
    assert mine.cache.hits == 1


def test_another_process_committing_empties_the_cache(env: StateEnvironment) -> None:
    counts = TransactionalMap(env, "counts", default=0, cache_size=10)
    env.run_write(lambda txn: counts.handle(txn, 1).update("cat", add(1)))
    # a commit this process's environment does not see, as another process's would be
    with env._lmdb.begin(write=True, db=env._db(MAPS_DB)) as raw:
        raw.put(encode_name("counts") + encode_key("cat"), pickle.dumps((100, 1)))
    assert env.run_write(lambda txn: counts.handle(txn, 2).update("cat", add(1))) == 101
    assert counts.cache is not None and counts.cache.hits == 0


def test_cache_sizes_are_positive_counts(env: StateEnvironment) -> None:
    for size in (-1, 0, True, 1.5):
        with pytest.raises(ValueError, match="cache size"):
            RecordCache(size, env, "drpc.maps")  # type: ignore[arg-type]


def test_a_map_has_no_cache_unless_asked_for_one(env: StateEnvironment) -> None:
    assert TransactionalMap(env, "plain").cache is None
    cached = TransactionalMap(env, "cached", default=0, cache_size=1)
    assert cached.cache is not None
    env.run_write(lambda txn: cached.handle(txn, 1).update("cat", add(1)))
    assert cached.cache.hits == 0
    env.run_write(lambda txn: cached.handle(txn, 2).update("cat", add(1)))
    assert cached.cache.hits == 1 and cached.get("cat") == 2


def test_an_operation_over_more_keys_than_the_cache_holds_bypasses_it(
    env: StateEnvironment,
) -> None:
    counts = TransactionalMap(env, "counts", default=0, cache_size=2)
    cache = counts.cache
    assert cache is not None
    env.run_write(lambda txn: counts.handle(txn, 1).multi_update({"a": add(1), "b": add(1)}))
    assert len(cache) == 2  # as many keys as the cache holds: cached
    assert env.run_write(
        lambda txn: counts.handle(txn, 2).multi_update({k: add(1) for k in "abc"})
    ) == {"a": 2, "b": 2, "c": 1}
    # one more key than it holds: read in LMDB (no hit), and what it wrote left the cache
    assert (cache.hits, len(cache)) == (0, 0)
    assert env.run_write(lambda txn: counts.handle(txn, 3).multi_get(["a", "b", "c"])) == [2, 2, 1]
    assert env.run_write(lambda txn: counts.handle(txn, 3).multi_get(["a", "c"])) == [2, 1]
    assert (cache.hits, len(cache)) == (0, 2)
    assert env.run_write(lambda txn: counts.handle(txn, 4).update("a", add(1))) == 3
    assert cache.hits == 1


def test_a_large_write_drops_what_the_same_commit_staged(env: StateEnvironment) -> None:
    counts = TransactionalMap(env, "counts", default=0, cache_size=2)

    def body(txn: StateTxn) -> None:
        handle = counts.handle(txn, 1)
        handle.update("a", add(1))
        handle.multi_put({"a": 10, "b": 20, "c": 30})

    env.run_write(body)
    assert counts.cache is not None and len(counts.cache) == 0
    assert env.run_write(lambda txn: counts.handle(txn, 2).update("a", add(1))) == 11
    with pytest.raises(StateError, match="dropped outside the transaction"):
        counts.cache.drop(env.read().__enter__(), [b"a"])


def test_another_process_committing_after_a_commit_that_wrote_nothing_empties_the_cache(
    env: StateEnvironment,
) -> None:
    counts = TransactionalMap(env, "counts", default=0, cache_size=10)
    env.run_write(lambda txn: counts.handle(txn, 1).update("cat", add(1)))
    # a commit that writes nothing leaves LMDB's transaction id where it was
    assert env.run_write(lambda txn: counts.handle(txn, 2).multi_get(["cat"])) == [1]
    with env._lmdb.begin(write=True, db=env._db(MAPS_DB)) as raw:
        raw.put(encode_name("counts") + encode_key("cat"), pickle.dumps((100, 1)))
    assert env.run_write(lambda txn: counts.handle(txn, 2).update("cat", add(1))) == 101
