"""Trident map states over real LMDB: the three kinds under replays, per-batch multi ops, cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drpc.errors import StateError
from drpc.state import StateEnvironment, StateTxn
from drpc.trident import LMDBMapState, MapStateFactory
from drpc.trident.state import CommitMapState, QueryMapState


@pytest.fixture
def env(tmp_path: Path) -> Iterator[StateEnvironment]:
    environment = StateEnvironment.open(tmp_path / "state")
    yield environment
    environment.close()


def commit_counts(
    env: StateEnvironment, factory: MapStateFactory, txid: int, batch: dict[str, int]
) -> dict[Any, Any]:
    """One commit of a batch's per-word counts, as persistent_aggregate(Count) writes it."""

    def body(txn: StateTxn) -> dict[Any, Any]:
        state = CommitMapState(factory.open(env), txn, txid)
        return state.multi_update(
            {
                word: (lambda stored, n=n: n if stored is None else stored + n)
                for word, n in batch.items()
            }
        )

    return env.run_write(body)


def committed(env: StateEnvironment, factory: MapStateFactory, *keys: str) -> list[Any]:
    return QueryMapState(factory.open(env)).multi_get(keys)


def test_a_transactional_map_applies_a_replayed_txid_once(env: StateEnvironment) -> None:
    counts = LMDBMapState.transactional("counts")
    commit_counts(env, counts, 1, {"cat": 2, "dog": 1})
    assert commit_counts(env, counts, 2, {"cat": 1}) == {"cat": 3}
    assert commit_counts(env, counts, 2, {"cat": 1}) == {"cat": 3}  # the same batch again
    assert committed(env, counts, "cat", "dog", "eel") == [3, 1, None]


def test_an_opaque_map_recomputes_a_replayed_txid_from_prev(env: StateEnvironment) -> None:
    counts = LMDBMapState.opaque("counts")
    commit_counts(env, counts, 1, {"cat": 2, "dog": 1})
    commit_counts(env, counts, 2, {"cat": 1, "dog": 4})
    # txid 2 again with other content (an opaque spout's replay): computed from before txid 2
    assert commit_counts(env, counts, 2, {"cat": 5, "eel": 1}) == {"cat": 7, "eel": 1}
    assert committed(env, counts, "cat", "dog", "eel") == [7, 5, 1]
    commit_counts(env, counts, 3, {"dog": 1})
    assert committed(env, counts, "dog") == [6]


def test_a_non_transactional_map_counts_a_replay_again(env: StateEnvironment) -> None:
    counts = LMDBMapState.non_transactional("counts")
    commit_counts(env, counts, 1, {"cat": 2})
    commit_counts(env, counts, 1, {"cat": 2})
    assert committed(env, counts, "cat") == [4]


def test_commit_reads_are_as_of_the_txid_and_puts_keep_the_kind_rules(
    env: StateEnvironment,
) -> None:
    counts = LMDBMapState.opaque("counts")
    commit_counts(env, counts, 1, {"cat": 2})
    commit_counts(env, counts, 2, {"cat": 3})

    def replay(txn: StateTxn) -> list[Any]:
        state = CommitMapState(counts.open(env), txn, 2)
        before = state.multi_get(["cat", "dog"])
        state.multi_put({"cat": 10, "dog": 1})
        return before + state.multi_get(["cat"])

    assert env.run_write(replay) == [2, None, 10]
    assert committed(env, counts, "cat", "dog") == [10, 1]


def test_one_map_object_per_directory_kind_and_name_keeps_its_cache(
    env: StateEnvironment,
) -> None:
    counts = LMDBMapState.transactional("counts", cache_size=4)
    assert counts.open(env) is LMDBMapState.transactional("counts", cache_size=4).open(env)
    for txid in range(1, 4):
        commit_counts(env, counts, txid, {"cat": 1, "dog": 1})
    cache = counts.open(env).cache
    assert cache is not None and cache.hits >= 4 and len(cache) == 2
    assert committed(env, counts, "cat", "dog") == [3, 3]


def test_a_name_keeps_its_kind_and_factories_check_their_arguments(
    env: StateEnvironment,
) -> None:
    commit_counts(env, LMDBMapState.transactional("counts"), 1, {"cat": 1})
    with pytest.raises(StateError, match="transactional"):
        LMDBMapState.opaque("counts").open(env)
    with pytest.raises(ValueError, match="kind"):
        MapStateFactory("eventual", "counts")
    with pytest.raises(ValueError, match="name"):
        LMDBMapState.opaque("")
