"""The transactional coordinator as exact traces, Storm's own test first."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.coordinator import (
    Committed,
    Decision,
    EmitBatch,
    EmitCommit,
    Status,
    TransactionalCoordinator,
    random_attempt_ids,
)


class Source:
    """Metadata as Storm's test gives it: a value when ready, cached per txid once given."""

    def __init__(self) -> None:
        self.value: Any = None
        self.cache: dict[int, Any] = {}

    def has_cache(self, txid: int) -> bool:
        return txid in self.cache

    def is_ready(self) -> bool:
        return self.value is not None

    def get_state(self, txid: int) -> Any:
        if txid not in self.cache:
            self.cache[txid] = self.value
        return self.cache[txid]


def batches(decisions: list[Decision]) -> list[tuple[int, Any]]:
    return [(d.attempt.txid, d.metadata) for d in decisions if isinstance(d, EmitBatch)]


def commits(decisions: list[Decision]) -> list[int]:
    return [d.attempt.txid for d in decisions if isinstance(d, EmitCommit)]


def attempts(decisions: list[Decision]) -> list[TransactionAttempt]:
    return [d.attempt for d in decisions if isinstance(d, (EmitBatch, EmitCommit))]


def test_storms_coordinator_trace() -> None:
    source = Source()
    coordinator = TransactionalCoordinator(
        max_spout_pending=4, attempt_ids=itertools.count(100).__next__
    )
    source.value = 10
    out = coordinator.next_tuple(source)
    assert batches(out) == [(1, 10), (2, 10), (3, 10), (4, 10)]
    first_attempts = attempts(out)
    assert coordinator.next_tuple(source) == []

    # fail tx2 with four pending -> re-emit 2, 3, 4, with a new attempt for 2
    out = coordinator.fail(first_attempts[1], source)
    assert batches(out) == [(2, 10), (3, 10), (4, 10)] and commits(out) == []
    replayed = attempts(out)
    assert replayed[0].txid == 2 and replayed[0] != first_attempts[1]
    assert coordinator.fail(first_attempts[1], source) == []  # a stale attempt is ignored
    assert coordinator.ack(replayed[0], source) == []  # 2 processed, 1 not committed yet

    # ack tx1 -> commit 1
    out = coordinator.ack(first_attempts[0], source)
    assert commits(out) == [1] and batches(out) == []
    commit_1 = attempts(out)[0]

    source.value = 12
    out = coordinator.ack(commit_1, source)
    assert out[0] == Committed(1)
    assert commits(out) == [2] and batches(out) == [(5, 12)]
    commit_2 = attempts(out)[0]

    source.value = None  # the spout is not ready: no new transactions
    assert coordinator.ack(commit_2, source) == [Committed(2)]

    # fail tx3: 3, 4, 5 re-emitted with their cached metadata although the spout is not ready
    out = coordinator.fail(replayed[1], source)
    assert batches(out) == [(3, 10), (4, 10), (5, 12)]
    live = attempts(out)

    source.value = 12
    assert batches(coordinator.next_tuple(source)) == [(6, 12)]
    out = coordinator.ack(live[0], source)
    assert commits(out) == [3]
    commit_3 = attempts(out)[0]
    assert coordinator.ack(live[1], source) == []

    # fail commit 3 -> re-emit 3, 4, 5, 6
    out = coordinator.fail(commit_3, source)
    assert batches(out) == [(3, 10), (4, 10), (5, 12), (6, 12)]
    live = attempts(out)
    out = coordinator.ack(live[0], source)
    assert commits(out) == [3]
    commit_3 = attempts(out)[0]
    assert coordinator.ack(live[1], source) == []
    assert coordinator.next_tuple(source) == []

    out = coordinator.ack(commit_3, source)
    assert out[0] == Committed(3)
    assert commits(out) == [4] and batches(out) == [(7, 12)]


def test_default_of_one_pending_batch_processes_and_commits_strictly_in_order() -> None:
    source = Source()
    source.value = "meta"
    coordinator = TransactionalCoordinator(attempt_ids=itertools.count(1).__next__)
    trace: list[str] = []
    pending = coordinator.next_tuple(source)
    for _ in range(3):
        [batch] = pending
        assert isinstance(batch, EmitBatch)
        trace.append(f"process {batch.attempt.txid}")
        [commit] = coordinator.ack(batch.attempt, source)
        assert isinstance(commit, EmitCommit)
        trace.append(f"commit {commit.attempt.txid}")
        done, *pending = coordinator.ack(commit.attempt, source)
        assert done == Committed(commit.attempt.txid)
    assert trace == ["process 1", "commit 1", "process 2", "commit 2", "process 3", "commit 3"]


def test_a_later_batch_processed_first_waits_for_the_earlier_commit() -> None:
    source = Source()
    source.value = 0
    coordinator = TransactionalCoordinator(
        max_spout_pending=3, attempt_ids=itertools.count(1).__next__
    )
    one, two, three = attempts(coordinator.next_tuple(source))
    assert coordinator.ack(three, source) == [] and coordinator.ack(two, source) == []
    assert coordinator.active == {1: Status.PROCESSING, 2: Status.PROCESSED, 3: Status.PROCESSED}
    [commit_one] = coordinator.ack(one, source)
    assert commit_one == EmitCommit(one)
    out = coordinator.ack(one, source)  # the commit of 1 succeeded
    assert out[:2] == [Committed(1), EmitCommit(two)]
    assert batches(out) == [(4, 0)]


def test_the_window_starts_at_the_first_uncommitted_txid_after_a_restart() -> None:
    source = Source()
    source.cache = {8: "cached"}
    source.value = "new"
    coordinator = TransactionalCoordinator(
        max_spout_pending=2, current_txid=8, attempt_ids=itertools.count(1).__next__
    )
    out = coordinator.next_tuple(source)
    assert batches(out) == [(8, "cached"), (9, "new")]
    assert [d.last_committed for d in out if isinstance(d, EmitBatch)] == [7, 7]


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"max_spout_pending": 0}, "max_spout_pending must be >= 1, got 0"),
        ({"current_txid": 0}, "txids start at 1, got 0"),
    ],
)
def test_invalid_settings_are_refused(options: dict[str, int], reason: str) -> None:
    with pytest.raises(ValueError, match=f"^{reason}$"):
        TransactionalCoordinator(**options)


def test_default_attempt_ids_are_random_non_negative_63_bit_integers() -> None:
    ids = random_attempt_ids()
    drawn = [ids() for _ in range(1000)]
    assert all(isinstance(i, int) and 0 <= i < 2**63 for i in drawn)
    assert len(set(drawn)) == 1000
    assert max(drawn) >= 2**62  # the whole 63 bits are used
    assert random_attempt_ids()() != random_attempt_ids()()  # each coordinator its own stream


def test_a_txid_neither_cached_nor_ready_is_skipped_not_the_ones_after_it() -> None:
    # Storm's sync: each txid of the window is emitted if its metadata is cached or the
    # spout is ready; one that must wait does not hold back a cached one after it.
    source = Source()
    source.cache = {9: "cached"}
    coordinator = TransactionalCoordinator(
        max_spout_pending=3, current_txid=8, attempt_ids=itertools.count(1).__next__
    )
    assert coordinator.next_tuple(source) == [EmitBatch(TransactionAttempt(9, 1), "cached", 7)]
    source.value = "new"
    assert batches(coordinator.next_tuple(source)) == [(8, "new"), (10, "new")]


class TurningReady(Source):
    """A spout that turns ready after its first answer (a broker back in between)."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[bool] = []

    def is_ready(self) -> bool:
        self.answers.append(bool(self.answers))
        return self.answers[-1]

    def get_state(self, txid: int) -> Any:
        assert txid == 1 or txid - 1 in self.cache, f"txid {txid} before txid {txid - 1}"
        return super().get_state(txid)


def test_a_spout_turning_ready_within_a_sync_starts_no_txid_before_the_one_it_skipped() -> None:
    source = TurningReady()
    source.value = "m"
    coordinator = TransactionalCoordinator(
        max_spout_pending=2, attempt_ids=itertools.count(1).__next__
    )
    assert coordinator.next_tuple(source) == []  # not ready: neither 1 nor 2 starts
    assert source.answers == [False]  # asked once for the whole window
    assert batches(coordinator.next_tuple(source)) == [(1, "m"), (2, "m")]
    assert source.answers == [False, True]


def test_attempts_order_hash_and_name_the_txid() -> None:
    from drpc import stable_hash

    attempt = TransactionAttempt(3, 77)
    assert attempt.transaction_id == 3 and str(attempt) == "3:77"
    assert stable_hash([attempt]) == stable_hash([TransactionAttempt(3, 77)])
    assert sorted([TransactionAttempt(2, 9), TransactionAttempt(1, 10)])[0].txid == 1
    with pytest.raises(ValueError):
        TransactionAttempt(0, 1)


def test_stale_acks_are_ignored_and_leave_every_status_as_it_was() -> None:
    source = Source()
    source.value = "m"
    coordinator = TransactionalCoordinator(
        max_spout_pending=2, attempt_ids=itertools.count(1).__next__
    )
    out = coordinator.next_tuple(source)
    assert [(d.attempt, d.last_committed) for d in out if isinstance(d, EmitBatch)] == [
        (TransactionAttempt(1, 1), None),
        (TransactionAttempt(2, 2), None),
    ]
    old_1, old_2 = attempts(out)
    new_1, new_2 = attempts(coordinator.fail(old_1, source))
    assert (new_1, new_2) == (TransactionAttempt(1, 3), TransactionAttempt(2, 4))
    assert coordinator.ack(old_1, source) == []  # the attempt that failed
    assert coordinator.ack(old_2, source) == []  # dropped with it
    assert coordinator.ack(TransactionAttempt(9, 1), source) == []  # a txid not active
    assert coordinator.active == {1: Status.PROCESSING, 2: Status.PROCESSING}
    assert coordinator.ack(new_1, source) == [EmitCommit(new_1)]
    assert coordinator.ack(old_1, source) == []  # no commit from a stale attempt
    assert coordinator.fail(old_1, source) == []
    assert coordinator.active == {1: Status.COMMITTING, 2: Status.PROCESSING}
    assert coordinator.attempt_of(1) == new_1 and coordinator.attempt_of(3) is None
    assert coordinator.ack(new_1, source) == [
        Committed(1),
        EmitBatch(TransactionAttempt(3, 5), "m", 1),
    ]
    assert coordinator.current_txid == 2
    assert coordinator.active == {2: Status.PROCESSING, 3: Status.PROCESSING}
