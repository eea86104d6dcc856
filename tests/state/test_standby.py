"""Standby copies on real LMDB files over a real ``file://`` store: one kept warm from the
deltas an owner puts, and promoted to the owner's path with nothing downloaded."""

from __future__ import annotations

import os
from pathlib import Path

from drpc.state import TransactionalMap
from drpc.state.checkpoint_store import CheckpointSettings
from drpc.state.partition import partition_path, standby_path
from drpc.state.partitioned import LocalPartitions
from drpc.state.standby import StandbyCopies

from .test_checkpoint import BATCHES, LAYOUT, add, counted


def hosts(tmp_path: Path) -> tuple[LocalPartitions, LocalPartitions]:
    """An owner's host and another host, sharing one store, snapshots every 2 deltas."""
    settings = CheckpointSettings(f"file://{tmp_path / 'store'}", snapshot_every=2)
    return (
        LocalPartitions(str(tmp_path / "owner"), checkpoint=settings),
        LocalPartitions(str(tmp_path / "other"), checkpoint=settings),
    )


def commit(
    owner: LocalPartitions, batches: list[dict[str, int]], deltas_from: int | None = None
) -> dict[str, int]:
    """Apply each batch as the next txid; ``deltas_from``: the oldest txid a standby copy
    holds, whose later deltas the store keeps (the run passes it so)."""
    partition = owner.partition(LAYOUT, 1, create_at=0)
    counts = TransactionalMap(partition.env, "counts", default=0)
    for batch in batches:
        txid = partition.held() + 1
        partition.apply(txid, add(counts, txid, batch), deltas_from=deltas_from)
        assert partition.journal is not None
        partition.journal.wait()
    return counted(partition, "counts")


def test_a_standby_copy_follows_the_owner_reading_only_the_deltas_after_its_first_build(
    tmp_path: Path,
) -> None:
    owner, other = hosts(tmp_path)
    standbys = StandbyCopies(other)
    first = commit(owner, BATCHES[:3])
    built = standbys.keep(LAYOUT, 1, 3, None)
    assert (built.txid, built.caught_up) == (3, False)  # from the snapshot at txid 2
    expected = commit(owner, BATCHES[3:], deltas_from=3)
    caught_up = standbys.keep(LAYOUT, 1, 5, None)
    assert (caught_up.txid, caught_up.caught_up, caught_up.deltas) == (5, True, 2)
    assert standbys.held([LAYOUT]) == {("counts", 1): 5}
    assert first != expected
    assert not other.exists(LAYOUT, 1)  # a copy is not a partition of this host
    owner.close()


def test_a_promoted_copy_is_the_partition_with_nothing_downloaded(tmp_path: Path) -> None:
    owner, other = hosts(tmp_path)
    standbys = StandbyCopies(other)
    expected = commit(owner, BATCHES)
    standbys.keep(LAYOUT, 1, 5, None)
    owner.close()
    for name in os.listdir(tmp_path / "store" / "partitions" / "counts" / "p1"):
        os.remove(tmp_path / "store" / "partitions" / "counts" / "p1" / name)
    assert standbys.promote(LAYOUT, 1) == 5
    assert not os.path.exists(standby_path(other.root, "counts", 1))
    assert counted(other.partition(LAYOUT, 1), "counts") == expected
    assert standbys.held([LAYOUT]) == {}
    assert standbys.promote(LAYOUT, 1) is None  # no copy left to promote
    other.close()


def test_a_promotion_replaces_leftovers_and_a_reader_here_sees_the_new_files(
    tmp_path: Path,
) -> None:
    """A reader of this process had the lost owner's files open (a shared disk): after
    the takeover it reads the promoted copy, not the deleted files it had open."""
    owner, other = hosts(tmp_path)
    standbys = StandbyCopies(other)
    expected = commit(owner, BATCHES)
    standbys.keep(LAYOUT, 1, 5, None)
    owner.close()
    stale = LocalPartitions(str(tmp_path / "other"))
    os.makedirs(os.path.dirname(partition_path(stale.root, "counts", 1)))
    os.rename(partition_path(owner.root, "counts", 1), partition_path(stale.root, "counts", 1))
    leftover = stale.partition(LAYOUT, 1)
    held_before = leftover.held()
    assert held_before == 5
    standbys.promote(LAYOUT, 1)
    reopened = stale.partition(LAYOUT, 1)
    assert reopened is not leftover and leftover.env.closed
    assert counted(reopened, "counts") == expected
    other.close()
    stale.close()


def test_a_dropped_copy_is_gone_from_the_disk(tmp_path: Path) -> None:
    owner, other = hosts(tmp_path)
    standbys = StandbyCopies(other)
    commit(owner, BATCHES[:2])
    standbys.keep(LAYOUT, 1, 2, None)
    standbys.drop(LAYOUT, 1)
    assert standbys.held([LAYOUT]) == {}
    assert not os.path.exists(standby_path(other.root, "counts", 1))
    owner.close()


def test_two_tasks_of_one_host_keep_their_copies_apart(tmp_path: Path) -> None:
    """On a shared disk each task's copy has a path of its own: one task dropping or
    promoting its copy leaves the other's alone."""
    owner, other = hosts(tmp_path)
    first, second = StandbyCopies(other, task=1), StandbyCopies(other, task=2)
    expected = commit(owner, BATCHES[:3])
    first.keep(LAYOUT, 1, 3, None)
    second.keep(LAYOUT, 1, 3, None)
    assert standby_path(other.root, "counts", 1, 1) != standby_path(other.root, "counts", 1, 2)
    first.drop(LAYOUT, 1)
    assert (first.held([LAYOUT]), second.held([LAYOUT])) == ({}, {("counts", 1): 3})
    assert second.promote(LAYOUT, 1) == 3
    assert counted(other.partition(LAYOUT, 1), "counts") == expected
    owner.close()
    other.close()
