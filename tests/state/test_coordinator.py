"""CoordinatorState: next txid, the commit record, batch and partition metadata."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from drpc.errors import StateError, StateKeyError, StateOrderError
from drpc.state import CommitRecord, CoordinatorState, StateEnvironment, StateTxn, TransactionalMap


def commit(
    env: StateEnvironment, coordinator: CoordinatorState, txid: int, at: float = 0.0
) -> None:
    env.run_write(lambda txn: coordinator.record_commit(txn, txid, committed_at=at))


def meta(txid: int, prev: object) -> dict[str, int]:
    return {"txid": txid}


def test_before_any_commit_the_next_txid_is_one(env: StateEnvironment) -> None:
    coordinator = CoordinatorState(env, "topo")
    assert coordinator.next_txid() == 1
    assert coordinator.last_commit() is None


def test_record_commit_advances_the_next_txid(env: StateEnvironment) -> None:
    coordinator = CoordinatorState(env, "topo")
    record = env.run_write(lambda txn: coordinator.record_commit(txn, 1, committed_at=1000.5))
    assert record == CommitRecord(1, 1000.5)
    assert coordinator.next_txid() == 2
    commit(env, coordinator, 2, at=1001.0)
    assert coordinator.last_commit() == CommitRecord(2, 1001.0)
    assert coordinator.next_txid() == 3


def test_record_commit_stamps_the_time_when_not_given(env: StateEnvironment) -> None:
    coordinator = CoordinatorState(env, "topo")
    before = time.time()
    env.run_write(lambda txn: coordinator.record_commit(txn, 1))
    record = coordinator.last_commit()
    assert record is not None and before <= record.committed_at <= time.time()


@pytest.mark.parametrize("txid", [0, 1, 3], ids=["zero", "again", "gap"])
def test_a_commit_out_of_order_fails_the_whole_commit(env: StateEnvironment, txid: int) -> None:
    coordinator = CoordinatorState(env, "topo")
    commit(env, coordinator, 1)
    counts = TransactionalMap(env, "counts", default=0)

    def wrong(txn: StateTxn) -> None:
        counts.handle(txn, 2).update("cat", lambda n: n + 1)
        coordinator.record_commit(txn, txid)

    with pytest.raises(StateOrderError, match="the next txid to commit is 2"):
        env.run_write(wrong)
    assert counts.get("cat") == 0
    assert coordinator.next_txid() == 2
    commit(env, coordinator, 2)  # the right txid still commits
    assert coordinator.next_txid() == 3


def test_record_commit_needs_the_commits_write_transaction(env: StateEnvironment) -> None:
    coordinator = CoordinatorState(env, "topo")
    with env.read() as txn, pytest.raises(StateError, match="write transaction"):
        coordinator.record_commit(txn, 1)
    with pytest.raises(StateError, match="write transaction"):
        coordinator.record_commit(None, 1)  # type: ignore[arg-type]
    assert coordinator.next_txid() == 1


def test_record_commit_drops_batch_metadata_before_the_committed_txid(
    env: StateEnvironment,
) -> None:
    coordinator = CoordinatorState(env, "topo")
    for txid in (1, 2, 3, 4):  # four batches emitted (max_spout_pending 4)
        coordinator.batch_meta.get_state(txid, meta)
    commit(env, coordinator, 1)
    assert coordinator.batch_meta.list() == [1, 2, 3, 4]
    commit(env, coordinator, 2)
    assert coordinator.batch_meta.list() == [2, 3, 4]
    commit(env, coordinator, 3)
    assert coordinator.batch_meta.list() == [3, 4]
    assert coordinator.batch_meta.get_state(5, meta) == {"txid": 5}  # strict: 4 is still there


def test_batch_metadata_is_strict_and_replays_the_same_batch_after_a_restart(
    state_dir: Path,
) -> None:
    env = StateEnvironment.open(state_dir)
    coordinator = CoordinatorState(env, "topo")
    assert coordinator.batch_meta.strict
    coordinator.batch_meta.get_state(1, lambda txid, prev: {"offset": 0, "count": 5})
    with pytest.raises(StateOrderError):
        coordinator.batch_meta.get_state(3, meta)
    env.close()
    env = StateEnvironment.open(state_dir)
    try:
        replayed = CoordinatorState(env, "topo").batch_meta.get_state(1, meta)
        assert replayed == {"offset": 0, "count": 5}
    finally:
        env.close()


def test_partition_states_are_non_strict_and_separate(env: StateEnvironment) -> None:
    coordinator = CoordinatorState(env, "topo")
    p0, p1 = coordinator.partition_state(0), coordinator.partition_state(1)
    assert not p0.strict
    assert p0.get_state(7, lambda txid, prev: "p0@7") == "p0@7"
    assert p1.get_state(3, lambda txid, prev: "p1@3") == "p1@3"
    assert (p0.list(), p1.list()) == ([7], [3])
    assert coordinator.batch_meta.list() == []
    assert coordinator.partition_state(2, strict=True).strict


@pytest.mark.parametrize("partition", [-1, "0", 1.0, True])
def test_a_partition_must_be_a_non_negative_int(env: StateEnvironment, partition: object) -> None:
    with pytest.raises(StateKeyError, match="partition"):
        CoordinatorState(env, "topo").partition_state(partition)  # type: ignore[arg-type]


def test_topologies_in_one_directory_are_independent_and_listed(env: StateEnvironment) -> None:
    words, count = CoordinatorState(env, "words"), CoordinatorState(env, "global-count")
    assert CoordinatorState.topologies(env) == {}
    commit(env, words, 1, at=5.0)
    commit(env, words, 2, at=6.0)
    commit(env, count, 1, at=7.0)
    words.batch_meta.override_state(2, "w")
    count.batch_meta.override_state(2, "c")
    assert (words.next_txid(), count.next_txid()) == (3, 2)
    assert CoordinatorState.topologies(env) == {
        "words": CommitRecord(2, 6.0),
        "global-count": CommitRecord(1, 7.0),
    }
    commit(env, count, 2)
    assert words.batch_meta.list() == [2]


def test_the_commit_record_survives_a_restart(state_dir: Path) -> None:
    env = StateEnvironment.open(state_dir)
    commit(env, CoordinatorState(env, "topo"), 1, at=42.0)
    env.close()
    env = StateEnvironment.open(state_dir)
    try:
        coordinator = CoordinatorState(env, "topo")
        assert coordinator.last_commit() == CommitRecord(1, 42.0)
        assert coordinator.next_txid() == 2
    finally:
        env.close()
