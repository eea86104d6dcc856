"""File log ranges decided on the driver: stored per txid, replayed exactly, read per task."""

from __future__ import annotations

from pathlib import Path

from drpc import Fields
from drpc.executors.plan import DRIVER, SPARK
from drpc.state import CoordinatorState, StateEnvironment
from drpc.transactional import TransactionalTopologyBuilder
from drpc.transactional.filelog import FileLogMeta, FileLogTransactionalSpout, append_lines
from drpc.transactional.ranges import RangePlanner, owned_by, reads_on_executors
from drpc.transactional.spark_backend import SparkBackend
from drpc.transactional.spouts import TransactionalServices

from .bolts import CommitWordCounts


def test_ranges_are_stored_per_txid_and_a_replay_gets_the_same(tmp_path: Path) -> None:
    log = tmp_path / "log"
    append_lines(log, 0, ["a", "b", "c"])
    append_lines(log, 1, ["d"])
    spout = FileLogTransactionalSpout(log, Fields("word"), 2)
    env = StateEnvironment.open(str(tmp_path / "state"))
    state = CoordinatorState(env, "words")
    planner = RangePlanner(spout, {}, None, state)
    first = planner.metas(1, 2, None)
    assert first == {0: FileLogMeta(0, 8, 2), 1: FileLogMeta(0, 4, 1)}
    append_lines(log, 1, ["e", "f"])
    assert planner.metas(1, 2, None) == first  # stored: lines appended since do not count
    assert planner.metas(2, 2, 1) == {0: FileLogMeta(8, 12, 1), 1: FileLogMeta(4, 12, 2)}
    assert planner.metas(3, 2, 2) == {}  # nothing new: no range to read
    assert state.partition_state(0).list() == [2, 3]  # txids before the last commit go
    planner.close()
    env.close()


def test_partitions_go_to_emitter_tasks_round_robin() -> None:
    assert [p for p in range(7) if owned_by(p, 1, 3)] == [1, 4]
    assert all(owned_by(p, 0, 1) for p in range(5))


def test_a_file_log_emitter_runs_on_spark_other_spouts_on_the_driver(tmp_path: Path) -> None:
    spout = FileLogTransactionalSpout(tmp_path / "log", Fields("word"), 2)
    assert reads_on_executors(spout)
    builder = TransactionalTopologyBuilder("words", "spout", spout, 2)
    builder.set_committer_bolt("count", CommitWordCounts(), 1).fields_grouping(
        "spout", Fields("word")
    )
    topology = builder.create_topology({})
    env = StateEnvironment.open(str(tmp_path / "state"))
    services = TransactionalServices("words", CoordinatorState(env, "words"))
    backend = SparkBackend(topology, topology.transactional, {}, {}, services, max_jobs=1)
    assert backend.plan.placement["spout"] == SPARK
    assert backend.plan.placement["count"] == DRIVER
    assert type(backend.plan.topology.components["spout"].user_component).__name__ == "RangeReader"
    assert type(topology.components["spout"].user_component).__name__ != "RangeReader"
    env.close()
