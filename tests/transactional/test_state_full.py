"""A state directory that fills up during a commit: typed error, nothing half-committed,
and the commit succeeds once the map may grow (real LMDB, both executors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drpc import Fields
from drpc.errors import StateFullError, TransactionalError
from drpc.observe import Observer
from drpc.state import CoordinatorState, StateEnvironment
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


def payload_topology() -> TransactionalTopologyBuilder:
    spout = MemoryTransactionalSpout(DATA, Fields("word", "size"), take_per_batch=3)
    builder = TransactionalTopologyBuilder("payloads", "spout", spout)
    builder.set_bolt("commit", bolts.CommitCountsAndPayloads(), 2).fields_grouping(
        "spout", Fields("word")
    )
    return builder


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
def test_a_full_map_stops_the_run_typed_and_a_roomier_restart_commits_it(
    tx_executor: str, tmp_path: Path
) -> None:
    events = Events()
    runner = TransactionalRunner(
        payload_topology(),
        state_dir=str(tmp_path),
        executor=tx_executor,
        state_options=SMALL_STATE,
        observer=events,
    )
    with runner, pytest.raises(TransactionalError) as raised:
        runner.run()
    assert isinstance(raised.value.__cause__, StateFullError)
    assert "batch 2 cannot commit" in str(raised.value)
    assert "max_map_size" in str(raised.value)
    assert runner.status()["error"] is not None and not runner.status()["running"]
    assert events.committed == [1]

    # Nothing of batch 2 is visible: neither its counts nor its payload; batch 1 is whole.
    next_txid, counts, payloads = committed_state(runner.env)
    assert next_txid == 2
    assert counts == {"apple": 1, "bean": 1, "corn": 1}
    assert payloads == {}
    assert runner.env.map_size == SMALL_STATE["max_map_size"]  # it did grow, up to the limit
    runner.env.close()

    # The same batch commits once the map may grow further; the run then finishes exactly.
    events = Events()
    with TransactionalRunner(
        payload_topology(),
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
        assert runner.env.map_size > SMALL_STATE["max_map_size"]
        assert runner.env.resizes >= 1
        assert runner.status()["last_txid"] == 4
    runner.env.close()


def test_a_commit_that_overflows_the_initial_map_grows_it_and_commits_whole(
    tmp_path: Path,
) -> None:
    with TransactionalRunner(
        payload_topology(), state_dir=str(tmp_path), state_options=ROOMY_STATE
    ) as runner:
        result = runner.run()
        _, counts, payloads = committed_state(runner.env)
        resizes = runner.env.resizes
        assert result.replays == {}  # growth happens inside the commit, not by replaying it
    runner.env.close()
    assert resizes >= 3  # 256 KiB → 512 KiB → 1 MiB → 2 MiB → 4 MiB for a 2 MiB payload
    assert payloads == {"big": BIG}
    assert sum(counts.values()) == len(DATA[0])
