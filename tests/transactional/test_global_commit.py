"""The commit of a txid across partitions as a state machine: exact decision traces."""

from __future__ import annotations

import pytest

from drpc.transactional.global_commit import (
    Apply,
    Create,
    GlobalCommit,
    Lost,
    PartitionRef,
    RecordGlobal,
    Replay,
    Restore,
    every_partition,
)

A0, A1, B0 = PartitionRef("a", 0), PartitionRef("a", 1), PartitionRef("b", 0)


def machine(global_txid: int = 0) -> GlobalCommit:
    commits = GlobalCommit(every_partition([("b", 1), ("a", 2)]))
    assert commits.recover(global_txid, dict.fromkeys(commits.partitions, global_txid)) == []
    return commits


def test_every_partition_applies_then_the_global_record_is_written_once() -> None:
    commits = machine()
    assert commits.partitions == (A0, A1, B0)  # ordered, whatever the order given
    assert commits.begin(1) == [Apply(1, A0), Apply(1, A1), Apply(1, B0)]
    assert commits.open_txid == 1
    assert commits.applied(A1, 1) == []
    assert commits.applied(A1, 1) == []  # a duplicate report counts once
    assert commits.applied(B0, 1) == []
    assert commits.applied(A0, 1) == [RecordGlobal(1)]
    assert commits.open_txid is None
    with pytest.raises(ValueError, match="recording txid 1"):
        commits.begin(2)  # not before the record of 1 is durable
    assert commits.committed(1) == []
    assert commits.global_txid == 1
    assert commits.begin(2) == [Apply(2, A0), Apply(2, A1), Apply(2, B0)]


def test_a_failed_partition_replays_the_txid_and_late_reports_are_ignored() -> None:
    commits = machine(4)
    commits.begin(5)
    assert commits.applied(A0, 5) == []
    assert commits.failed(A1, 5, "the committer raised") == [
        Replay(5, "partition 1 of 'a': the committer raised")
    ]
    assert commits.open_txid is None
    assert commits.failed(B0, 5, "again") == []  # one replay per commit
    assert commits.applied(B0, 5) == []  # too late: that commit is over
    assert commits.global_txid == 4
    assert commits.begin(5) == [Apply(5, A0), Apply(5, A1), Apply(5, B0)]
    assert commits.applied(A0, 4) == []  # another txid's report: A0 still owes txid 5
    assert commits.applied(PartitionRef("c", 0), 5) == []  # no such partition
    assert commits.applied(A1, 5) == []
    assert commits.applied(B0, 5) == []  # not yet: A0 has not reported txid 5
    assert commits.applied(A0, 5) == [RecordGlobal(5)]


def test_a_global_record_that_fails_is_replayed_and_nothing_is_claimed() -> None:
    commits = machine(1)
    commits.begin(2)
    for ref in (A0, A1):
        commits.applied(ref, 2)
    assert commits.applied(B0, 2) == [RecordGlobal(2)]
    assert commits.abandon(2, "the write failed") == [Replay(2, "the write failed")]
    assert commits.committed(2) == []  # abandoned: it is not recorded after all
    assert commits.global_txid == 1
    assert commits.abandon(2, "twice") == []
    assert commits.begin(2)[0] == Apply(2, A0)


def test_a_lost_partition_stops_the_commit() -> None:
    commits = machine(3)
    commits.begin(4)
    assert commits.lost(A1, "worker-2", "its task's disk is gone") == [
        Lost(A1, "worker-2", "its task's disk is gone")
    ]
    assert commits.applied(A0, 4) == []
    assert commits.lost(PartitionRef("z", 0), None, "not ours") == []


def test_recovery_keeps_partitions_at_or_one_past_the_global_record() -> None:
    commits = GlobalCommit(every_partition([("a", 2), ("b", 1)]))
    assert commits.recover(7, {A0: 7, A1: 8, B0: 7}) == []  # A1 applied 8; 8 was never recorded
    assert commits.global_txid == 7
    assert commits.begin(8) == [Apply(8, A0), Apply(8, A1), Apply(8, B0)]


def test_recovery_makes_new_partitions_only_before_any_commit() -> None:
    commits = GlobalCommit(every_partition([("a", 2), ("b", 1)]))
    assert commits.recover(0, {A0: 0, A1: None, B0: None}) == [Create(A1, 0), Create(B0, 0)]
    hosts = {A1: "worker-1", B0: "worker-2"}
    assert commits.recover(3, {A0: 3, A1: None, B0: 1}, hosts) == [
        Lost(A1, "worker-1", "no process holds it, and the global record is at txid 3"),
        Lost(
            B0,
            "worker-2",
            "it holds txid 1, behind the global record's txid 3 (an old copy)",
        ),
    ]
    assert commits.recover(3, {A0: 3, A1: 3, B0: 5}, hosts) == [
        Lost(
            B0,
            "worker-2",
            "it holds txid 5, more than one txid ahead of the global record's txid 3 (it "
            "belongs to another run)",
        )
    ]
    assert commits.recover(3, {A0: None, A1: 3, B0: 3})[0].host is None  # no host known


def test_no_partitions_records_at_once_and_begin_checks_the_txid() -> None:
    commits = GlobalCommit(())
    assert commits.recover(0, {}) == []
    assert commits.begin(1) == [RecordGlobal(1)]
    commits.committed(1)
    with pytest.raises(ValueError, match=r"the global record is at txid 1$"):
        commits.begin(3)


def test_durable_partitions_found_nowhere_or_behind_are_restored_at_the_global_commit() -> None:
    commits = GlobalCommit(every_partition([("a", 2), ("b", 1)]), durable=True)
    hosts = {A1: "worker-1", B0: "worker-2"}
    assert commits.recover(3, {A0: 3, A1: None, B0: 1}, hosts) == [Restore(A1, 3), Restore(B0, 3)]
    assert commits.recover(0, {A0: 0, A1: None, B0: None}) == [Create(A1, 0), Create(B0, 0)]
    assert commits.recover(3, {A0: 3, A1: 4, B0: 5}, hosts) == [  # another run's: no restore
        Lost(
            B0,
            "worker-2",
            "it holds txid 5, more than one txid ahead of the global record's txid 3 (it "
            "belongs to another run)",
        )
    ]


def test_a_durable_partition_lost_in_a_commit_is_restored_then_the_txid_replayed() -> None:
    commits = GlobalCommit(every_partition([("a", 2), ("b", 1)]), durable=True)
    assert commits.recover(3, dict.fromkeys(commits.partitions, 3)) == []
    commits.begin(4)
    assert commits.applied(A0, 4) == []
    assert commits.lost(A1, "worker-2", "its task's disk is gone") == [
        Restore(A1, 3),
        Replay(
            4,
            "partition 1 of 'a' (last on host worker-2) is lost (its task's disk is gone); "
            "restored from the checkpoint store at txid 3",
        ),
    ]
    # a second loss reported in the same commit is restored too, with no second replay
    assert commits.lost(B0, None, "gone as well") == [Restore(B0, 3)]
    assert commits.applied(A0, 4) == []  # the commit ended: late reports are ignored
    assert commits.global_txid == 3
    assert commits.begin(4) == [Apply(4, A0), Apply(4, A1), Apply(4, B0)]
    assert commits.lost(PartitionRef("z", 0), None, "not ours") == []
