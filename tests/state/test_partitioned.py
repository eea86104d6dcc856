"""Reading a partitioned state: every partition at one global commit, pinned by the request,
whether this host holds the global record (the driver's) or only partitions (a worker's)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from drpc import Fields
from drpc.errors import StateError, VersionReclaimedError
from drpc.state import StateEnvironment, TransactionalMap
from drpc.state.keygroups import partition_of
from drpc.state.partition import LOCAL_DIR_CONF, partition_root
from drpc.state.partitioned import (
    UNPINNED_READ_ATTEMPTS,
    PartitionedMap,
    commit_read_key,
    layouts,
    local_partitioned_map,
    pinned_commit,
    pinned_commits,
)
from drpc.state.versions import enter_reads, leave_reads
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import Count, LMDBMapState, TridentTopology, run

WORDS = [f"w{n}" for n in range(40)]
TXID = "partitioned-reads"


def counts_run(state_dir: Path, batches: int, max_batches: int | None = None) -> None:
    """Each batch counts every word once more, into 4 partitions: after txid n each is n
    (``max_batches``: stop after that many commits)."""
    data = {0: [[word] for _ in range(batches) for word in WORDS]}
    topology = TridentTopology()
    topology.new_stream(TXID, MemoryTransactionalSpout(data, Fields("word"), len(WORDS))).group_by(
        ["word"]
    ).persistent_aggregate(
        LMDBMapState.transactional("counts"), Count(), ["count"]
    ).parallelism_hint(4)
    run(topology, state_dir=str(state_dir), max_batches=max_batches)


def worker_host(tmp_path: Path, state_dir: Path) -> tuple[Path, dict[str, str]]:
    """A worker's host for ``state_dir``'s partitions: the state directory's path with no
    global record there (no data.mdb), and the conf that finds a copy of the partitions
    under ``drpc.state.local.dir``. The driver's environments are closed first."""
    moved = tmp_path / "worker-disk"
    for env in StateEnvironment.open_environments():
        if env.path.startswith(str(state_dir)):
            env.close()
    shutil.copytree(partition_root(str(state_dir)), moved)
    return tmp_path / "worker-view", {LOCAL_DIR_CONF: str(moved)}


def test_a_pin_carries_the_global_commit_and_reads_go_there(tmp_path: Path) -> None:
    """A pin taken at global txid 2 keeps txid 2 readable in every partition while later
    txids commit: the driver hands the partitions the oldest pinned txid."""
    state_dir = tmp_path / "state"
    counts_run(state_dir, 4, max_batches=2)
    env = StateEnvironment.open(state_dir)
    [layout] = layouts(env).values()
    pin = env.pin()
    commits = pinned_commits(env, pin)
    assert commits == ((commit_read_key(env.path, TXID), 2),)
    counts_run(state_dir, 4)  # txids 3, 4, and an empty 5
    query = LMDBMapState.transactional("counts").query(env)
    assert query.multi_get(WORDS) == [4] * len(WORDS)
    previous = enter_reads(((env.path, pin.version), *commits))
    try:
        assert pinned_commit(env.path, TXID) == 2
        assert query.multi_get(["w0", "w39", "nope"]) == [2, 2, None]  # the pinned txid's
        page = query.page(5, prefix="w1")
        assert page.entries == [(f"w1{n}", 2) for n in ("", 0, 1, 2, 3)]
        assert page.next_after == "w13"
    finally:
        leave_reads(previous)
        env.release(pin)
    assert query.items() == sorted((word, 4) for word in WORDS)
    assert {partition_of(word, layout.partitions) for word in WORDS} == set(range(4))


def test_an_unpinned_read_whose_commit_was_reclaimed_reads_again_at_the_latest(
    tmp_path: Path,
) -> None:
    """Found in the fault suite: a read outside any request took the latest global commit,
    then commits went on until that commit's versions were reclaimed in the partitions
    before it read them (VersionReclaimedError from another process's reads). Nothing
    pinned it, so it reads again at the new latest: still one commit. A read pinned there
    raises, as does one whose every attempt finds its commit reclaimed."""
    state_dir = tmp_path / "state"
    counts_run(state_dir, 4)
    env = StateEnvironment.open(state_dir)
    query = LMDBMapState.transactional("counts").query(env)
    latest = query.read_txid()
    assert latest is not None and latest >= 4
    seen: list[int] = []

    def reclaimed_then_latest() -> int:
        seen.append(1 if not seen else latest)  # the first look is from before txid 2 on
        return seen[-1]

    racing = PartitionedMap(
        query.source,
        query.layout,
        TransactionalMap,
        "counts",
        state_dir=env.path,
        latest_txid=reclaimed_then_latest,
    )
    assert racing.multi_get(["w0", "w39"]) == [4, 4]
    assert seen == [1, latest]
    seen.clear()
    assert racing.items() == sorted((word, 4) for word in WORDS)
    seen.clear()
    assert racing.page(2, prefix="w1").entries == [("w1", 4), ("w10", 4)]
    seen.clear()
    assert racing.stored("w7") is not None
    always_old = PartitionedMap(
        query.source,
        query.layout,
        TransactionalMap,
        "counts",
        state_dir=env.path,
        latest_txid=lambda: seen.append(1) or 1,
    )
    seen.clear()
    with pytest.raises(VersionReclaimedError):
        always_old.multi_get(["w0"])
    assert len(seen) == UNPINNED_READ_ATTEMPTS
    previous = enter_reads(((commit_read_key(env.path, TXID), 1),))
    try:
        seen.clear()
        with pytest.raises(VersionReclaimedError):
            racing.multi_get(["w0"])
        assert seen == []  # a pinned read never asks for the latest
    finally:
        leave_reads(previous)


def test_a_pin_from_before_the_first_commit_reads_nothing_after_it(tmp_path: Path) -> None:
    """A request that pinned the directory before the state's first global commit carries
    no commit of it; read after that commit, on a worker's host (partitions, no global
    record), it read each partition's latest: data its pin never saw, beside tasks that
    read the state as it was pinned (the chaos run's answers named two commits). It reads
    txid 0, empty, wherever it runs."""
    state_dir = tmp_path / "state"
    driver = StateEnvironment.open(state_dir)
    pin = driver.pin()
    commits = pinned_commits(driver, pin)
    assert commits == ()  # no partitioned state yet: the pin carries no commit
    counts_run(state_dir, 2)
    query = LMDBMapState.transactional("counts").query(driver)
    previous = enter_reads(((driver.path, pin.version),))
    try:
        assert query.read_txid() == 0
        assert query.multi_get(["w0", "w39"]) == [None, None]
    finally:
        leave_reads(previous)
        driver.release(pin)
    worker_state, conf = worker_host(tmp_path, state_dir)
    found = local_partitioned_map(str(worker_state), conf, "counts", TransactionalMap)
    assert found is not None
    assert found.multi_get(["w0"]) == [2]  # unpinned: each partition's latest
    previous = enter_reads(((str(worker_state.resolve()), pin.version),))
    try:
        assert found.read_txid() == 0
        assert found.multi_get(["w0", "w39"]) == [None, None]
    finally:
        leave_reads(previous)


def test_a_host_with_partitions_but_no_global_record_reads_them(tmp_path: Path) -> None:
    """A worker's host: the state directory's path holds no global record there, only
    (under ``drpc.state.local.dir``) partitions; a request still reads at its pinned txid."""
    state_dir = tmp_path / "state"
    counts_run(state_dir, 3)
    driver = StateEnvironment.open(state_dir)
    pinned = (commit_read_key(driver.path, TXID), 3)
    worker_state, conf = worker_host(tmp_path, state_dir)
    assert local_partitioned_map(str(worker_state), conf, "nope", TransactionalMap) is None
    found = local_partitioned_map(str(worker_state), conf, "counts", TransactionalMap)
    assert found is not None and found.layout.partitions == 4
    assert not (worker_state / "data.mdb").exists()  # nothing made where the record would be
    assert found.multi_get(["w5"]) == [3]  # unpinned: each partition's latest
    previous = enter_reads(((commit_read_key(str(worker_state.resolve()), TXID), pinned[1]),))
    try:
        assert found.multi_get(["w5", "w30"]) == [3, 3]  # txid 3, as pinned (4 was empty)
    finally:
        leave_reads(previous)


def test_a_partition_missing_from_this_host_is_named(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    counts_run(state_dir, 2)
    env = StateEnvironment.open(state_dir)
    query = LMDBMapState.transactional("counts").query(env)
    lost = partition_of("w7", 4)
    for opened in StateEnvironment.open_environments():
        if opened.path.startswith(str(state_dir / "partitions")):
            opened.close()
    shutil.rmtree(Path(partition_root(str(state_dir))) / "counts" / f"p{lost}")
    with pytest.raises(StateError, match=f"partition {lost} of state 'counts'.* is lost"):
        query.multi_get(["w7"])
