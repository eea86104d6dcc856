"""A state directory that fills up during a commit: typed error, nothing half-committed,
and the commit succeeds once the map may grow (real LMDB, both executors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drpc import Fields
from drpc.errors import StateFullError, TransactionalError
from drpc.observe import Observer
from drpc.state import CoordinatorState, StateEnvironment
from drpc.state.keygroups import partition_of
from drpc.state.partition import partition_path, partition_root
from drpc.state.topology import TopologyState
from drpc.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder
from drpc.transactional.run import TransactionalRunner

from . import bolts

KIB = 1024
MIB = 1024 * KIB
BIG = 2 * MIB

# One partition, three tuples per batch: batch 2 carries a 2 MiB payload.
DATA = {
    0: [
        ["apple", 0], ["bean", 0], ["corn", 0],
        ["date", 0], ["big", BIG], ["apple", 0],
        ["bean", 0], ["fig", 0],
    ]
}  # fmt: skip
SMALL_STATE = {"map_size": 256 * KIB, "max_map_size": 1 * MIB}
ROOMY_STATE = {"map_size": 256 * KIB, "max_map_size": 16 * MIB}


def payload_topology(committers: int = 1) -> TransactionalTopologyBuilder:
    spout = MemoryTransactionalSpout(DATA, Fields("word", "size"), take_per_batch=3)
    builder = TransactionalTopologyBuilder("payloads", "spout", spout)
    builder.set_bolt("commit", bolts.CommitCountsAndPayloads(), committers).fields_grouping(
        "spout", Fields("word")
    )
    return builder


def close_state(directory: Path) -> None:
    """Close every environment this process has open under ``directory``."""
    for env in StateEnvironment.open_environments():
        if Path(env.path).is_relative_to(directory):
            env.close()


def written_env(runner: TransactionalRunner, options: dict[str, int]) -> StateEnvironment:
    """Where the payloads are written: the state directory, or with several committer tasks
    the partition of the key "big" (a partitioned state, ``drpc.transactional.partitions``:
    a stopped run closed it)."""
    layout = runner.layouts.get("commit")
    if layout is None:
        return runner.env
    index = partition_of("big", layout.partitions, layout.key_groups)
    path = partition_path(partition_root(runner.env.path), "commit", index)
    return StateEnvironment.opened(path) or StateEnvironment.open(path, **options)


class Events(Observer):
    def __init__(self) -> None:
        self.committed: list[int] = []
        self.started: list[int] = []

    def tx_started(self, topology: str, txid: int, attempt_id: int, now: float) -> None:
        self.started.append(txid)

    def tx_committed(self, topology: str, txid: int, commit_seconds: float, tuples: int) -> None:
        self.committed.append(txid)


def committed_state(env: StateEnvironment) -> tuple[int, dict[str, int], dict[str, int]]:
    state = TopologyState(env)
    counts = dict(state.transactional_map("counts").items())
    payloads = {word: len(value) for word, value in state.transactional_map("payloads").items()}
    return CoordinatorState(env, "payloads").next_txid(), counts, payloads


@pytest.mark.timeout(180)
@pytest.mark.parametrize("committers", [1, 2], ids=["one directory", "partitioned"])
def test_a_full_map_stops_the_run_typed_and_a_roomier_restart_commits_it(
    tx_executor: str, tmp_path: Path, committers: int
) -> None:
    events = Events()
    runner = TransactionalRunner(
        payload_topology(committers),
        state_dir=str(tmp_path),
        executor=tx_executor,
        state_options=SMALL_STATE,
        observer=events,
    )
    with runner:
        with pytest.raises(TransactionalError) as raised:
            runner.run()
        written_size = written_env(runner, SMALL_STATE).map_size
    assert isinstance(raised.value.__cause__, StateFullError)
    assert "batch 2 cannot commit" in str(raised.value)
    assert "max_map_size" in str(raised.value)
    assert runner.status()["error"] is not None and not runner.status()["running"]
    assert events.committed == [1]

    # it did grow, up to the limit (as the error says; where the run wrote in this process,
    # its map shows it too: resident partitions live in the Spark tasks' processes)
    limit = SMALL_STATE["max_map_size"]
    assert f"did not fit in {limit} bytes and max_map_size is {limit}" in str(raised.value)
    if committers == 1 or tx_executor != "spark":
        assert written_size == limit
    # Nothing of batch 2 is visible: neither its counts nor its payload; batch 1 is whole.
    next_txid, counts, payloads = committed_state(runner.env)
    assert next_txid == 2
    assert counts == {"apple": 1, "bean": 1, "corn": 1}
    assert payloads == {}
    close_state(tmp_path)  # the run's, and the partitions the reads opened

    # The same batch commits once the map may grow further; the run then finishes exactly.
    events = Events()
    with TransactionalRunner(
        payload_topology(committers),
        state_dir=str(tmp_path),
        executor=tx_executor,
        state_options=ROOMY_STATE,
        observer=events,
    ) as runner:
        result = runner.run()
        assert [commit.txid for commit in result.commits] == [2, 3, 4]
        assert events.committed == [2, 3, 4]
        next_txid, counts, payloads = committed_state(runner.env)
        assert counts == {"apple": 2, "bean": 2, "corn": 1, "date": 1, "big": 1, "fig": 1}
        assert payloads == {"big": BIG}
        if committers == 1 or tx_executor != "spark":
            written = written_env(runner, ROOMY_STATE)
            assert written.map_size > SMALL_STATE["max_map_size"]
            assert written.resizes >= 1
        assert runner.status()["last_txid"] == 4
    close_state(tmp_path)


@pytest.mark.parametrize("committers", [1, 2], ids=["one directory", "partitioned"])
def test_a_commit_that_overflows_the_initial_map_grows_it_and_commits_whole(
    tmp_path: Path, committers: int
) -> None:
    with TransactionalRunner(
        payload_topology(committers), state_dir=str(tmp_path), state_options=ROOMY_STATE
    ) as runner:
        result = runner.run()
        _, counts, payloads = committed_state(runner.env)
        written = written_env(runner, ROOMY_STATE)
        resizes = written.resizes
        assert result.replays == {}  # growth happens inside the commit, not by replaying it
    close_state(tmp_path)
    assert resizes >= 3  # 256 KiB → 512 KiB → 1 MiB → 2 MiB → 4 MiB for a 2 MiB payload
    assert payloads == {"big": BIG}
    assert sum(counts.values()) == len(DATA[0])
