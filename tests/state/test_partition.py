"""One partition of a partitioned state: each txid applied once and in order, a replay
reverted first for every map kind, reads at any kept txid (real LMDB)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drpc.errors import StateError, StateOrderError, VersionReclaimedError
from drpc.state import NonTransactionalMap, OpaqueMap, StateTxn, TransactionalMap
from drpc.state.partition import (
    PartitionLayout,
    StatePartition,
    partition_path,
    partition_root,
)

LAYOUT = PartitionLayout("counts", "words", 2, 128)


@pytest.fixture
def partition(tmp_path: Path) -> StatePartition:
    opened = StatePartition.open(str(tmp_path / "p0"), LAYOUT, 0)
    yield opened
    opened.env.close()


def add(state_map: Any, txid: int, counts: dict[str, int]) -> Any:
    def apply(txn: StateTxn) -> Any:
        return state_map.handle(txn, txid).multi_update(
            {word: (lambda value, n=n: value + n) for word, n in counts.items()}
        )

    return apply


def committed(partition: StatePartition, state_map: Any, txid: int | None) -> dict[Any, Any]:
    with partition.read(txid) as txn:
        return dict(state_map.items(txn=txn))


def test_a_partition_applies_each_txid_once_in_order(partition: StatePartition) -> None:
    counts = TransactionalMap(partition.env, "counts", default=0)
    assert partition.held() == 0
    assert partition.apply(1, add(counts, 1, {"cat": 1})) == {"cat": 1}
    assert partition.apply(2, add(counts, 2, {"cat": 2, "dog": 1})) == {"cat": 3, "dog": 1}
    assert partition.held() == 2
    with pytest.raises(StateOrderError, match="holds txid 2: it cannot apply txid 4"):
        partition.apply(4, add(counts, 4, {"cat": 1}))
    with pytest.raises(StateOrderError, match="holds txid 2: it cannot apply txid 1"):
        partition.apply(1, add(counts, 1, {"cat": 1}))
    assert committed(partition, counts, None) == {"cat": 3, "dog": 1}


def test_a_failing_apply_leaves_nothing(partition: StatePartition) -> None:
    counts = TransactionalMap(partition.env, "counts", default=0)
    partition.apply(1, add(counts, 1, {"cat": 1}))

    def fails(txn: StateTxn) -> None:
        add(counts, 2, {"cat": 5})(txn)
        raise RuntimeError("the committer failed")

    with pytest.raises(RuntimeError):
        partition.apply(2, fails)
    assert partition.held() == 1
    assert committed(partition, counts, None) == {"cat": 1}


@pytest.mark.parametrize("kind", [TransactionalMap, OpaqueMap, NonTransactionalMap])
def test_a_replay_reverts_the_uncommitted_txid_then_applies_once(
    partition: StatePartition, kind: type[Any]
) -> None:
    """A partition that holds t when t comes again (its global commit never happened):
    whatever the map kind, the replay is applied onto the state before t, and keys the
    first attempt wrote but the replay does not are back to their value before t."""
    counts = kind(partition.env, "counts", default=0)
    partition.apply(1, add(counts, 1, {"cat": 1, "dog": 1}))
    partition.apply(2, add(counts, 2, {"cat": 10, "eel": 1}))  # attempt 1 of txid 2
    partition.apply(2, add(counts, 2, {"cat": 20, "fox": 1}))  # its replay differs (opaque)
    assert partition.held() == 2
    assert committed(partition, counts, None) == {"cat": 21, "dog": 1, "fox": 1}
    assert committed(partition, counts, 1) == {"cat": 1, "dog": 1}
    partition.apply(3, add(counts, 3, {"dog": 1}))
    assert committed(partition, counts, None) == {"cat": 21, "dog": 2, "fox": 1}


def test_reads_at_a_txid_see_the_write_that_applied_it(partition: StatePartition) -> None:
    counts = TransactionalMap(partition.env, "counts", default=0)
    for txid in range(1, 5):
        partition.apply(txid, add(counts, txid, {f"w{txid}": txid}), keep_from=0)
    assert committed(partition, counts, 0) == {}  # as the partition was made
    assert committed(partition, counts, 2) == {"w1": 1, "w2": 2}
    assert committed(partition, counts, 4) == {"w1": 1, "w2": 2, "w3": 3, "w4": 4}
    with pytest.raises(StateError, match="holds txid 4, not yet txid 5"):
        committed(partition, counts, 5)


def test_what_no_live_request_reads_is_reclaimed(partition: StatePartition) -> None:
    counts = TransactionalMap(partition.env, "counts", default=0)
    for txid in range(1, 5):
        partition.apply(txid, add(counts, txid, {"cat": 1}))  # keep_from: the txid before
    assert [entry.txid for entry in partition.applied()] == [3, 4]
    assert committed(partition, counts, 3) == {"cat": 3}  # the txid before stays readable
    with pytest.raises(VersionReclaimedError, match="version 2 was reclaimed"):
        committed(partition, counts, 2)
    assert partition.env.version_status().undo_logs == 1


def test_a_directory_made_for_another_partition_is_refused(tmp_path: Path) -> None:
    made = StatePartition.open(str(tmp_path / "p"), LAYOUT, 1, start_txid=5)
    assert made.held() == 5
    made.env.close()
    with pytest.raises(StateError, match=r"holds partition 1 of .* not partition 0"):
        StatePartition.open(str(tmp_path / "p"), LAYOUT, 0)
    other = PartitionLayout("counts", "words", 3, 128)
    with pytest.raises(StateError, match="holds partition 1"):
        StatePartition.open(str(tmp_path / "p"), other, 1)
    with pytest.raises(StateError, match="has no partition 2 of 2"):
        StatePartition.open(str(tmp_path / "q"), LAYOUT, 2)


def test_status_and_where_partitions_live(partition: StatePartition, tmp_path: Path) -> None:
    counts = TransactionalMap(partition.env, "counts", default=0)
    partition.apply(1, add(counts, 1, {"cat": 1, "dog": 2}))
    status = partition.status()
    assert (status.group, status.index, status.held, status.keys) == ("counts", 0, 1, 2)
    assert status.bytes > 0 and status.path == partition.env.path
    state = str(tmp_path / "state")
    assert partition_root(state) == str(tmp_path / "state" / "partitions")
    assert partition_root(state, {"drpc.state.local.dir": str(tmp_path / "local")}) == str(
        tmp_path / "local"
    )
    assert partition_path("/r", "a/b", 3) == "/r/a%2Fb/p3"
