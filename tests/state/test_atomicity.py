"""One commit = one write transaction: all of it or none of it, even under SIGKILL."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from drpc.state import (
    CoordinatorState,
    OpaqueMap,
    StateEnvironment,
    StateTxn,
    TransactionalMap,
)
from tests.state.child import MAP, TOPOLOGY
from tests.state.processes import expect_line, kill, spawn


def test_an_exception_before_the_end_of_a_commit_leaves_none_of_it(env: StateEnvironment) -> None:
    counts = TransactionalMap(env, "counts", default=0)
    totals = OpaqueMap(env, "totals", default=0)
    coordinator = CoordinatorState(env, "topo")
    partition = coordinator.partition_state(0)
    coordinator.batch_meta.get_state(1, lambda txid, prev: {"offset": 0})

    def commit(fail: bool) -> None:
        def body(txn: StateTxn) -> None:
            counts.handle(txn, 1).multi_update({"cat": lambda n: n + 8, "dog": lambda n: n + 7})
            totals.handle(txn, 1).update("all", lambda n: n + 15)
            partition.override_state(1, {"offset": 15}, txn=txn)
            coordinator.record_commit(txn, 1)
            if fail:
                raise RuntimeError("crash before the end of the commit")

        env.run_write(body)

    with pytest.raises(RuntimeError, match="crash before the end"):
        commit(fail=True)
    assert counts.items() == []
    assert totals.items() == []
    assert partition.list() == []
    assert coordinator.next_txid() == 1
    assert coordinator.batch_meta.list() == [1]

    commit(fail=False)
    assert counts.items() == [("cat", 8), ("dog", 7)]
    assert totals.get("all") == 15
    assert partition.get_last_state() == {"offset": 15}
    assert coordinator.next_txid() == 2


def committed_state(state_dir: Path) -> tuple[int, dict[object, object]]:
    """(next txid, counts) as a fresh open of the directory sees them."""
    env = StateEnvironment.open(state_dir)
    try:
        next_txid = CoordinatorState(env, TOPOLOGY).next_txid()
        return next_txid, dict(TransactionalMap(env, MAP).items())
    finally:
        env.close()


@pytest.mark.slow
def test_sigkill_in_the_middle_of_a_big_commit_leaves_none_of_it(state_dir: Path) -> None:
    child = spawn("big-commit", state_dir, "50000")
    try:
        expect_line(child, "committed 1")
        expect_line(child, "writing")  # 25 000 of 50 000 updates are in the open transaction
    finally:
        kill(child)
    next_txid, counts = committed_state(state_dir)
    assert next_txid == 2
    assert counts == dict.fromkeys(range(100), 1)


@pytest.mark.slow
def test_sigkill_at_random_points_leaves_only_whole_commits(state_dir: Path) -> None:
    keys = 2000
    rng = random.Random(20240605)
    history = []
    for _ in range(8):
        child = spawn("commit-forever", state_dir, str(keys))
        try:
            expect_line(child, "started")
            time.sleep(rng.uniform(0.02, 0.4))
        finally:
            kill(child)
        next_txid, counts = committed_state(state_dir)
        committed = next_txid - 1
        # Every commit adds 1 to every key and records itself: any partial commit shows.
        expected = dict.fromkeys(range(keys), committed) if committed else {}
        assert counts == expected, f"after {history} commits, then a kill"
        history.append(committed)
    assert history == sorted(history)
    assert history[-1] > 0  # the kills did land among commits
