"""The acker state machine: exact traces and properties over random tuple trees."""

from __future__ import annotations

import json
import os
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drpc.errors import DRPCExceptionType, Failure
from drpc.semantics import acker
from drpc.semantics.acker import ID_BATCH, Acker, RootCompleted, RootFailed, new_edge_id

FAILURE = Failure(DRPCExceptionType.FAILED_REQUEST, "boom", "bolt1", 3)


def test_trace_from_the_seed_example() -> None:
    # Spout emits root tuple with edge 0b1010; bolt1 emits 0b1100 anchored to it and acks;
    # bolt2 acks 0b1100: the value returns to zero and the root completes.
    acker = Acker(timeout=30)
    assert acker.init(7, 0b1010, "spout-task-1", now=0) == []
    assert acker.value(7) == 0b1010
    assert acker.ack(7, 0b1010 ^ 0b1100, now=1) == []
    assert acker.value(7) == 0b1100
    assert acker.ack(7, 0b1100, now=2) == [RootCompleted(7, "spout-task-1")]
    assert 7 not in acker
    assert len(acker) == 0


def test_ack_before_init_still_completes() -> None:
    acker = Acker(timeout=30)
    assert acker.ack(9, 0b0110, now=0) == []
    assert acker.init(9, 0b0110, "owner", now=1) == [RootCompleted(9, "owner")]


def test_zero_value_before_init_does_not_complete() -> None:
    acker = Acker(timeout=30)
    assert acker.ack(9, 0b0110, now=0) == []
    assert acker.ack(9, 0b0110, now=0) == []  # value is zero, but no init yet
    assert 9 in acker


def test_fail_fails_the_root_once_and_forgets_it() -> None:
    acker = Acker(timeout=30)
    acker.init(1, 0b1, "owner", now=0)
    assert acker.fail(1, FAILURE, now=1) == [RootFailed(1, "owner", FAILURE)]
    assert acker.fail(1, FAILURE, now=2) == []
    assert len(acker) == 0


def test_expire_times_out_only_initialised_roots_past_their_deadline() -> None:
    acker = Acker(timeout=10)
    acker.init(1, 0b1, "a", now=0)
    acker.ack(2, 0b1, now=1)  # stray ack, never initialised
    acker.init(3, 0b1, "c", now=5)
    assert acker.expire(now=9.9) == []
    decisions = acker.expire(now=11)
    assert len(decisions) == 1
    [timed_out] = decisions
    assert isinstance(timed_out, RootFailed)
    assert (timed_out.root, timed_out.owner) == (1, "a")
    assert timed_out.timed_out
    assert timed_out.failure.type is DRPCExceptionType.FAILED_REQUEST  # as Storm's DRPC spout
    assert timed_out.failure.message == (
        "Request failed: the tuple tree did not complete within 10 s "
        "(topology.message.timeout.secs)"
    )
    assert 2 not in acker  # the stray was forgotten silently
    assert [d.root for d in acker.expire(now=15)] == [3]
    assert len(acker) == 0


def test_acks_in_flight_for_a_failed_root_are_ignored_until_its_deadline() -> None:
    acker = Acker(timeout=10)
    acker.init(1, 0b11, "owner", now=0)
    assert acker.fail(1, FAILURE, now=1) == [RootFailed(1, "owner", FAILURE)]
    assert acker.ack(1, 0b01, now=2) == []
    assert len(acker) == 0 and acker.failed_roots == 1
    assert acker.expire(now=11) == []
    assert acker.failed_roots == 0


def test_a_fail_that_overtakes_the_init_fails_the_root_at_its_init() -> None:
    acker = Acker(timeout=10)
    assert acker.ack(1, 0b01, now=0) == []
    assert acker.fail(1, FAILURE, now=0) == []
    assert acker.init(1, 0b01, "owner", now=1) == [RootFailed(1, "owner", FAILURE)]
    assert acker.init(1, 0b01, "owner", now=1) == []
    assert len(acker) == 0


def test_late_acks_after_a_timeout_do_not_resurrect_the_root() -> None:
    acker = Acker(timeout=10)
    acker.init(1, 0b11, "owner", now=0)
    assert len(acker.expire(now=10)) == 1
    assert acker.ack(1, 0b11, now=11) == []
    assert len(acker) == 0


def test_the_value_of_a_root_not_pending_is_none() -> None:
    acker = Acker(timeout=10)
    assert acker.value(1) is None
    acker.ack(1, 0b101, now=0)
    assert acker.value(1) == 0b101


def test_entry_size_counts_the_entry_and_a_non_zero_value() -> None:
    acker = Acker(timeout=10)
    acker.ack(1, 0b101, now=0)
    acker.ack(2, 0b1, now=0)
    acker.ack(2, 0b1, now=0)  # back to zero, not initialised: still pending
    size, value = acker.entry_size(1)
    assert size >= 4 * 8 and value == sys.getsizeof(0b101)  # four slots; the int
    assert acker.entry_size(2) == (size, 0)


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^acker timeout must be positive, got 0$"):
        Acker(timeout=0)
    assert Acker(timeout=0.5).timeout == 0.5  # under a second is fine


def test_new_edge_ids_are_non_zero_64_bit() -> None:
    ids = {new_edge_id() for _ in range(10_000)}  # several batches drawn
    assert len(ids) == 10_000
    assert all(0 < i < 2**64 for i in ids)
    assert max(ids) >= 2**63  # all 64 bits drawn


def test_edge_ids_are_drawn_a_batch_of_id_batch_at_a_time() -> None:
    """What a refill holds bounds the ids kept drawn in advance (a zero id, which would be
    skipped, comes once in 2**64 draws)."""
    acker._drawn.clear()
    new_edge_id()
    assert len(acker._drawn) == ID_BATCH - 1  # one refill, one id of it taken


def test_a_forked_child_draws_other_edge_ids_than_its_parent() -> None:
    new_edge_id()  # a batch drawn before the fork
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.write(write, json.dumps([new_edge_id() for _ in range(100)]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        drawn_by_child = json.loads(pipe.read())
    os.waitpid(child, 0)
    drawn_here = [new_edge_id() for _ in range(100)]
    assert len(drawn_by_child) == 100
    assert not set(drawn_by_child) & set(drawn_here)


# -- properties over random tuple trees -------------------------------------------------------

trees = st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=40)


def _tree(parent_choices: list[int]) -> list[int]:
    """parents[i] for nodes 1..n (node 0 is the spout); each node's parent precedes it."""
    return [0] + [choice % i for i, choice in enumerate(parent_choices, start=1)]


def _messages(parent_choices: list[int], seed: int) -> list[tuple[str, int]]:
    """The init and ack messages of a fully processed tree, each with its XOR value."""
    rng = random.Random(seed)
    parents = _tree(parent_choices)
    n = len(parents)
    ids = [rng.getrandbits(64) or 1 for _ in range(n)]
    children: list[list[int]] = [[] for _ in range(n)]
    for node in range(1, n):
        children[parents[node]].append(node)
    init = 0
    for child in children[0]:
        init ^= ids[child]
    messages = [("init", init)]
    for node in range(1, n):
        value = ids[node]
        for child in children[node]:
            value ^= ids[child]
        messages.append(("ack", value))
    return messages


def _replay(acker: Acker, messages: list[tuple[str, int]], root: int = 42) -> list[list[object]]:
    outcomes = []
    for kind, value in messages:
        if kind == "init":
            outcomes.append(acker.init(root, value, "spout", now=0))
        else:
            outcomes.append(acker.ack(root, value, now=0))
    return outcomes


@settings(max_examples=200, deadline=None)
@given(trees, st.integers(), st.randoms(use_true_random=False))
def test_completes_exactly_when_every_tuple_is_acked(
    parent_choices: list[int], seed: int, shuffler: random.Random
) -> None:
    messages = _messages(parent_choices, seed)
    shuffler.shuffle(messages)
    outcomes = _replay(Acker(timeout=30), messages)
    assert all(outcome == [] for outcome in outcomes[:-1]), "completed before the last ack"
    assert outcomes[-1] == [RootCompleted(42, "spout")]


@settings(max_examples=200, deadline=None)
@given(trees, st.integers(), st.randoms(use_true_random=False), st.data())
def test_a_lost_ack_never_completes_and_times_out(
    parent_choices: list[int], seed: int, shuffler: random.Random, data: st.DataObject
) -> None:
    messages = _messages(parent_choices, seed)
    acks = [i for i, (kind, _) in enumerate(messages) if kind == "ack"]
    lost = data.draw(st.sampled_from(acks))
    del messages[lost]
    shuffler.shuffle(messages)
    acker = Acker(timeout=30)
    assert all(outcome == [] for outcome in _replay(acker, messages))
    [timed_out] = acker.expire(now=30)
    assert isinstance(timed_out, RootFailed) and timed_out.timed_out
    assert timed_out.failure.type is DRPCExceptionType.FAILED_REQUEST
    assert len(acker) == 0


@settings(max_examples=300, deadline=None)
@given(trees, st.integers(), st.randoms(use_true_random=False), st.data())
def test_a_duplicated_ack_never_completes_early(
    parent_choices: list[int], seed: int, shuffler: random.Random, data: st.DataObject
) -> None:
    """A duplicate arriving before the tree is done poisons it (timeout); after, it is ignored."""
    messages = list(enumerate(_messages(parent_choices, seed)))
    acks = [m for m in messages if m[1][0] == "ack"]
    messages.append(data.draw(st.sampled_from(acks)))
    shuffler.shuffle(messages)
    seen: set[int] = set()
    copies_by_then = 0
    all_seen_at = -1
    duplicate = next(i for i, _ in messages if sum(1 for j, _ in messages if j == i) == 2)
    for position, (identity, _) in enumerate(messages):
        seen.add(identity)
        if identity == duplicate:
            copies_by_then += 1
        if len(seen) == len(messages) - 1:
            all_seen_at = position
            break
    acker = Acker(timeout=30)
    outcomes = _replay(acker, [message for _, message in messages])
    if copies_by_then == 2:
        assert all(outcome == [] for outcome in outcomes)
        [timed_out] = acker.expire(now=31)
        assert isinstance(timed_out, RootFailed) and timed_out.timed_out
        assert timed_out.failure.type is DRPCExceptionType.FAILED_REQUEST
    else:
        completions = [i for i, outcome in enumerate(outcomes) if outcome]
        assert completions == [all_seen_at]
        assert outcomes[all_seen_at] == [RootCompleted(42, "spout")]


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=2000), st.integers())
def test_memory_per_root_is_constant(size: int, seed: int) -> None:
    rng = random.Random(seed)
    acker = Acker(timeout=30)
    acker.init(1, rng.getrandbits(64) or 1, "spout", now=0)
    baseline = acker.entry_size(1)
    for _ in range(size):
        acker.ack(1, rng.getrandbits(64) or 1, now=0)
        if 1 in acker:
            assert acker.entry_size(1)[0] == baseline[0]
            assert acker.entry_size(1)[1] <= 36  # a 64-bit int, however many XORs
    assert len(acker) <= 1


OTHER = Failure(DRPCExceptionType.FAILED_REQUEST, "other", "bolt2", 1)


def test_failed_records_ignore_late_events_until_their_own_deadline_and_expire_in_order() -> None:
    acker = Acker(timeout=10)
    assert acker.init(1, 0b1, "a", now=0) == []
    assert acker.init(2, 0b1, "b", now=3) == []
    assert acker.fail(1, FAILURE, now=1) == [RootFailed(1, "a", FAILURE)]  # record until 11
    assert acker.fail(2, OTHER, now=4) == [RootFailed(2, "b", OTHER)]  # record until 14
    assert acker.fail(1, OTHER, now=5) == []  # a second fail for a failed root
    assert acker.init(1, 0b1, "a", now=5) == []  # a late init for it
    assert acker.expire(now=10.9) == []
    assert acker.failed_roots == 2
    assert acker.ack(1, 0b1, now=10.9) == [] and 1 not in acker
    assert acker.expire(now=11) == []
    assert acker.failed_roots == 1
    assert acker.ack(2, 0b1, now=11) == [] and 2 not in acker
    assert acker.ack(1, 0b1, now=11) == [] and acker.value(1) == 0b1  # forgotten: a stray
    assert acker.expire(now=14) == []
    assert acker.failed_roots == 0 and len(acker) == 1


def test_two_fails_before_the_init_fail_the_root_once_with_the_first_failure() -> None:
    acker = Acker(timeout=10)
    assert acker.fail(5, FAILURE, now=0) == []
    assert acker.fail(5, OTHER, now=1) == []
    assert acker.init(5, 0b1, "owner", now=2) == [RootFailed(5, "owner", FAILURE)]
    assert acker.ack(5, 0b1, now=3) == []
    assert len(acker) == 0 and acker.failed_roots == 1
    assert acker.expire(now=9.9) == [] and acker.failed_roots == 1
    assert acker.expire(now=10) == [] and acker.failed_roots == 0  # 10 s from the first fail


def test_a_timed_out_root_is_remembered_for_a_timeout_after_it_expired() -> None:
    acker = Acker(timeout=10)
    acker.init(1, 0b11, "owner", now=0)
    acker.init(2, 0b11, "other", now=4)
    [timed_out] = acker.expire(now=12)
    assert (timed_out.root, timed_out.owner, timed_out.timed_out) == (1, "owner", True)
    assert acker.failed_roots == 1 and len(acker) == 1
    assert [d.root for d in acker.expire(now=21.9)] == [2]
    assert acker.failed_roots == 2  # root 1's record lasts until 22, root 2's until 31.9
    assert acker.ack(1, 0b11, now=21.9) == [] and 1 not in acker
    assert acker.expire(now=22) == [] and acker.failed_roots == 1
    assert acker.expire(now=31.9) == [] and acker.failed_roots == 0
