"""RotatingTransactionalState: Storm's strict and non-strict traces, persistence, joining txns."""

from __future__ import annotations

from pathlib import Path

import pytest

from drpc.errors import StateOrderError
from drpc.state import RotatingTransactionalState, StateEnvironment, StateTxn


class Initializer:
    """Returns ``value`` for every txid, counting calls (Storm's test initializer)."""

    def __init__(self, value: object) -> None:
        self.value = value
        self.calls: list[tuple[int, object]] = []

    def __call__(self, txid: int, prev: object) -> object:
        self.calls.append((txid, prev))
        return self.value


def test_strict_trace_matches_storms(env: StateEnvironment) -> None:
    state = RotatingTransactionalState(env, "topo", "meta", strict=True)
    init = Initializer(10)
    assert state.get_state(1, init) == 10
    assert state.get_state(2, init) == 10
    init.value = 20
    assert state.get_state(3, init) == 20
    assert state.get_state(1, init) == 10
    with pytest.raises(StateOrderError):
        state.get_state(5, init)
    assert state.get_state(4, init) == 20
    assert len(state.list()) == 4
    state.cleanup_before(3)
    assert len(state.list()) == 2
    assert state.get_state_or_create(5, init) is None
    assert state.get_state_or_create(5, init) == 20
    assert state.get_state_or_create(6, init) is None
    state.cleanup_before(6)
    assert len(state.list()) == 1


def test_non_strict_trace_matches_storms(env: StateEnvironment) -> None:
    state = RotatingTransactionalState(env, "topo", "meta", strict=False)
    init = Initializer(20)
    assert state.get_state(10, init) == 20
    assert state.get_state(20, init) == 20
    assert state.get_state(12, init) is None
    assert state.get_state(19, init) is None
    assert state.get_state(12, init) is None
    assert state.get_state(21, init) == 20
    assert state.list() == [10, 12, 19, 20, 21]


def test_the_initializer_gets_the_previous_txids_data(env: StateEnvironment) -> None:
    state = RotatingTransactionalState(env, "topo", "meta")
    offsets = lambda txid, prev: {"start": 0 if prev is None else prev["end"], "end": txid * 10}  # noqa: E731
    assert state.get_state(1, offsets) == {"start": 0, "end": 10}
    assert state.get_state(2, offsets) == {"start": 10, "end": 20}
    assert state.get_state(3, offsets) == {"start": 20, "end": 30}


def test_non_strict_initializes_from_the_greatest_earlier_txid(env: StateEnvironment) -> None:
    state = RotatingTransactionalState(env, "topo", "p", strict=False)
    init = Initializer("x")
    state.get_state(4, init)
    state.get_state(9, init)
    assert init.calls == [(4, None), (9, "x")]


@pytest.mark.parametrize(
    ("cached", "txid", "why"),
    [
        ([], 2, "there should be a previous state"),
        ([1, 2], 4, "previous cached txid is 2, expected 3"),
        ([3], 1, "txid 3 after it already has state"),
    ],
)
def test_strict_mode_refuses_out_of_order_txids_and_caches_nothing(
    env: StateEnvironment, cached: list[int], txid: int, why: str
) -> None:
    state = RotatingTransactionalState(env, "topo", "meta", strict=True)
    for earlier in cached:
        state.override_state(earlier, "seed")
    init = Initializer("new")
    with pytest.raises(StateOrderError, match=why):
        state.get_state(txid, init)
    assert init.calls == []
    assert state.list() == cached


@pytest.mark.parametrize(("cached", "txid"), [([], 1), ([1, 2], 3), ([5], 6)])
def test_strict_mode_accepts_the_first_txid_and_each_successor(
    env: StateEnvironment, cached: list[int], txid: int
) -> None:
    state = RotatingTransactionalState(env, "topo", "meta", strict=True)
    for earlier in cached:
        state.override_state(earlier, "seed")
    assert state.get_state(txid, Initializer("new")) == "new"
    assert state.list() == [*cached, txid]


def test_a_cached_none_is_cached(env: StateEnvironment) -> None:
    state = RotatingTransactionalState(env, "topo", "meta", strict=False)
    init = Initializer(None)
    assert not state.has_cache(1)
    assert state.get_state(1, init) is None
    assert state.has_cache(1)
    assert state.get_state(1, init) is None
    assert state.get_state_or_create(1, init) is None
    assert init.calls == [(1, None)]


def test_last_state_override_and_remove(env: StateEnvironment) -> None:
    state = RotatingTransactionalState(env, "topo", "meta", strict=False)
    assert state.get_last_state() is None
    state.override_state(3, "three")
    state.override_state(7, "seven")
    state.override_state(5, "five")
    assert state.get_last_state() == "seven"
    state.override_state(7, "SEVEN")
    assert state.get_last_state() == "SEVEN"
    state.remove_state(7)
    assert state.get_last_state() == "five"
    assert state.list() == [3, 5]
    state.remove_state(42)  # removing what is not there is harmless
    assert state.list() == [3, 5]


def test_state_persists_across_close_and_reopen(state_dir: Path) -> None:
    env = StateEnvironment.open(state_dir)
    RotatingTransactionalState(env, "topo", "meta").get_state(1, Initializer({"batch": 1}))
    env.close()
    env = StateEnvironment.open(state_dir)
    try:
        state = RotatingTransactionalState(env, "topo", "meta")
        init = Initializer({"batch": 2})
        assert state.get_state(1, init) == {"batch": 1}  # a replay after restart: same batch
        assert state.get_state(2, init) == {"batch": 2}  # strict order continues after restart
        assert init.calls == [(2, {"batch": 1})]
    finally:
        env.close()


def test_calls_with_txn_join_the_callers_write(env: StateEnvironment) -> None:
    state = RotatingTransactionalState(env, "topo", "meta", strict=True)
    state.get_state(1, Initializer("one"))

    def commit(txn: StateTxn) -> None:
        assert state.get_state(2, Initializer("two"), txn=txn) == "two"
        state.override_state(1, "ONE", txn=txn)
        state.cleanup_before(2, txn=txn)
        assert state.list(txn=txn) == [2]
        assert state.list() == [1]  # outside the transaction: committed data only
        raise RuntimeError("commit failed")

    with pytest.raises(RuntimeError):
        env.run_write(commit)
    assert state.list() == [1]
    assert state.get_state(1, Initializer("unused")) == "one"

    def commit_ok(txn: StateTxn) -> None:
        state.get_state(2, Initializer("two"), txn=txn)
        state.cleanup_before(2, txn=txn)

    env.run_write(commit_ok)
    assert state.list() == [2]
    assert state.get_last_state() == "two"


def test_topologies_and_namespaces_do_not_meet(env: StateEnvironment) -> None:
    states = {
        (topology, namespace): RotatingTransactionalState(env, topology, namespace, strict=False)
        for topology in ("a", "ab")
        for namespace in ("b", "meta")
    }
    for (topology, namespace), state in states.items():
        for txid in (1, 2, 3):
            state.override_state(txid, f"{topology}/{namespace}/{txid}")
    states[("a", "b")].cleanup_before(3)
    assert states[("a", "b")].list() == [3]
    for key in [("a", "meta"), ("ab", "b"), ("ab", "meta")]:
        assert states[key].list() == [1, 2, 3]
        assert states[key].get_last_state() == f"{key[0]}/{key[1]}/3"


def test_txids_order_numerically_not_textually(env: StateEnvironment) -> None:
    state = RotatingTransactionalState(env, "topo", "p", strict=False)
    for txid in (256, 9, 10, 1, 65_536, 255):
        state.override_state(txid, txid)
    assert state.list() == [1, 9, 10, 255, 256, 65_536]
    assert state.get_last_state() == 65_536
    state.cleanup_before(256)
    assert state.list() == [256, 65_536]
