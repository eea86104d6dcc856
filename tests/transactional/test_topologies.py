"""Transactional topologies end to end, on both executors, with real LMDB state."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from drpc import Fields, InvalidTopologyError
from drpc.errors import TransactionalError
from drpc.examples.transactional_global_count import DATA, build_global_count
from drpc.examples.transactional_words import BUCKETS_MAP, WORDS_MAP, build_words
from drpc.observe import Observer
from drpc.state import CoordinatorState
from drpc.state.topology import TopologyState
from drpc.transactional import (
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    TransactionalTopologyBuilder,
    run,
)
from drpc.transactional.run import TransactionalRunner
from tests.topologies.bolts import AckFromAThread

from . import bolts

WORDS = Counter(values[0] for partition in DATA.values() for values in partition)


def words_topology(spout: Any, **committer: Any) -> TransactionalTopologyBuilder:
    builder = TransactionalTopologyBuilder("word-count", "spout", spout, 2)
    marker_dir = committer.pop("marker_dir", None)
    log_dir = committer.pop("log_dir", None)
    builder.set_bolt(
        "partial", bolts.PartialWordCount(marker_dir, log_dir=log_dir), 3
    ).fields_grouping("spout", Fields("word"))
    builder.set_bolt(
        "commit", bolts.CommitWordCounts(marker_dir=marker_dir, log_dir=log_dir, **committer), 2
    ).fields_grouping("partial", Fields("word"))
    return builder


@pytest.mark.parametrize("pending", [1, 3])
def test_global_count_commits_9_16_19(every_tx_executor: str, pending: int, tmp_path: Path) -> None:
    result = run(
        build_global_count(),
        state_dir=str(tmp_path),
        executor=every_tx_executor,
        max_spout_pending=pending,
    )
    totals = [values[1] for values in result.outputs("sum")]
    assert totals[:3] == [9, 16, 19] and set(totals[3:]) == {19}
    assert [commit.tuples for commit in result.commits][:4] == [9, 7, 3, 0]
    assert [commit.txid for commit in result.commits] == list(range(1, len(result.commits) + 1))
    assert TopologyState.at(str(tmp_path)).transactional_map("global-count").get("count") == 19


@pytest.mark.parametrize("pending", [1, 3])
def test_transactional_words(tx_executor: str, pending: int, tmp_path: Path) -> None:
    run(build_words(), state_dir=str(tmp_path), executor=tx_executor, max_spout_pending=pending)
    state = TopologyState.at(str(tmp_path))
    assert dict(state.opaque_map(WORDS_MAP).items()) == {
        "cat": 8,
        "dog": 7,
        "apple": 2,
        "chicken": 1,
        "banana": 1,
    }
    assert dict(state.transactional_map(BUCKETS_MAP).items()) == {0: 5}


def test_a_restart_resumes_after_the_last_commit(tx_executor: str, tmp_path: Path) -> None:
    first = run(build_global_count(), state_dir=str(tmp_path), executor=tx_executor, max_batches=2)
    assert [values[1] for values in first.outputs("sum")] == [9, 16]
    second = run(build_global_count(), state_dir=str(tmp_path), executor=tx_executor)
    assert second.commits[0].txid == 3
    assert [values[1] for values in second.outputs("sum")][:2] == [19, 19]
    assert CoordinatorState(TopologyState.at(str(tmp_path)).env, "global-count").next_txid() == 5


@pytest.mark.parametrize("opaque", [False, True])
def test_failures_in_both_phases_replay_to_exact_counts(
    tx_executor: str, opaque: bool, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    data = {p: [[f"w{(p * 7 + i) % 13}"] for i in range(40)] for p in range(3)}
    spout_type = OpaqueMemoryTransactionalSpout if opaque else MemoryTransactionalSpout
    topology = words_topology(
        spout_type(data, Fields("word"), 4), opaque=opaque, marker_dir=str(markers)
    )
    result = run(
        topology, state_dir=str(tmp_path / "state"), executor=tx_executor, max_spout_pending=3
    )
    expected = Counter(values[0] for partition in data.values() for values in partition)
    kind = "opaque_map" if opaque else "transactional_map"
    assert (
        dict(getattr(TopologyState.at(str(tmp_path / "state")), kind)("counts").items()) == expected
    )
    assert result.replays["processing"] > 0 and result.replays["commit"] > 0
    assert result.tuples == sum(expected.values())


def test_rich_bolts_acking_from_their_own_threads_in_both_phases(
    tx_executor: str, tmp_path: Path
) -> None:
    """The same topology commits the same counts on every executor, whether the late
    acks come in the processing phase or in the commit phase (after the committer)."""
    builder = TransactionalTopologyBuilder(
        "async-acks", "spout", MemoryTransactionalSpout(DATA, Fields("word"), 3), 2
    )
    builder.set_bolt("late", AckFromAThread(("id", "word")), 2).shuffle_grouping("spout")
    builder.set_bolt("partial", bolts.PartialWordCount(), 2).fields_grouping("late", Fields("word"))
    builder.set_committer_bolt("commit", bolts.CommitWordCounts(), 2).fields_grouping(
        "partial", Fields("word")
    )
    builder.set_bolt("after", AckFromAThread(("id", "words")), 2).shuffle_grouping("commit")
    builder.set_bolt("total", bolts.SumOfSecondField()).global_grouping("after")
    result = run(builder, state_dir=str(tmp_path), executor=tx_executor)
    assert dict(TopologyState.at(str(tmp_path)).transactional_map("counts").items()) == WORDS
    assert [total for _, total in result.outputs("total")] == [
        commit.tuples for commit in result.commits
    ]
    assert result.replays == {}


def test_committers_finish_only_in_commit_phase_and_in_txid_order(tmp_path: Path) -> None:
    data = {p: [[f"w{i % 5}"] for i in range(12)] for p in range(2)}
    builder = TransactionalTopologyBuilder(
        "ordered", "spout", MemoryTransactionalSpout(data, Fields("word"), 2), 2
    )
    builder.set_bolt("late", bolts.AckFirstBatchLate(0.5), 2).shuffle_grouping("spout")
    builder.set_bolt("partial", bolts.PartialWordCount(log_dir=str(tmp_path)), 2).fields_grouping(
        "late", Fields("word")
    )
    builder.set_committer_bolt(
        "commit", bolts.CommitWordCounts(log_dir=str(tmp_path)), 2
    ).fields_grouping("partial", Fields("word"))
    run(builder, state_dir=str(tmp_path / "state"), max_spout_pending=3)
    events = [line.split()[1:] for line in (tmp_path / "events.log").read_text().splitlines()]
    commits = [int(txid) for kind, txid in events if kind == "commit"]
    assert commits == sorted(commits)  # strictly in txid order (two tasks per txid)
    processed_2 = min(
        i for i, (kind, txid) in enumerate(events) if (kind, txid) == ("processed", "2")
    )
    processed_1 = min(
        i for i, (kind, txid) in enumerate(events) if (kind, txid) == ("processed", "1")
    )
    first_commit = min(i for i, (kind, _) in enumerate(events) if kind == "commit")
    assert processed_2 < processed_1  # batch 2 was processed while batch 1 was held up...
    assert first_commit > processed_1  # ...but nothing committed before batch 1 was processed


def test_a_batch_that_never_passes_stops_the_run_with_a_typed_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class AlwaysFails(bolts.CommitWordCounts):
        def finish_batch(self) -> None:
            from drpc import FailedException

            raise FailedException("the database is gone")

    builder = TransactionalTopologyBuilder(
        "doomed", "spout", MemoryTransactionalSpout(DATA, Fields("word"), 3)
    )
    builder.set_bolt("partial", bolts.PartialWordCount(), 1).shuffle_grouping("spout")
    builder.set_committer_bolt("commit", AlwaysFails(), 1).global_grouping("partial")
    caplog.set_level("WARNING", logger="drpc.transactional.run")
    with pytest.raises(TransactionalError, match=r"batch 1 failed 3 times.*the database is gone"):
        run(builder, state_dir=str(tmp_path), max_attempts=3)
    assert CoordinatorState(TopologyState.at(str(tmp_path)).env, "doomed").next_txid() == 1
    replays = [r for r in caplog.records if r.getMessage().startswith("commit of batch")]
    # Every replay says which topology, transaction, attempt and phase, as fields a JSON
    # log line carries; the attempts of batch 1 are distinct.
    assert [(r.topology, r.txid, r.phase) for r in replays] == [("doomed", 1, "commit")] * 3
    assert len({r.attempt_id for r in replays}) == 3


def test_builder_errors_name_the_component(tmp_path: Path) -> None:
    spout = MemoryTransactionalSpout(DATA, Fields("word"), 3)
    builder = TransactionalTopologyBuilder("bad", "spout", spout)
    with pytest.raises(InvalidTopologyError, match="committer must be a batch bolt") as caught:
        builder.set_committer_bolt("c", bolts.SlowFirstBatch(0))
    assert caught.value.component == "c"
    builder.set_bolt("p", bolts.PartialWordCount()).shuffle_grouping("spout/coordinator", "batch")
    with pytest.raises(InvalidTopologyError, match="the coordinator") as caught:
        builder.create_topology()
    assert caught.value.component == "p"
    with pytest.raises(InvalidTopologyError, match="BaseTransactionalSpout"):
        TransactionalTopologyBuilder("x", "spout", object())  # type: ignore[arg-type]
    builder = TransactionalTopologyBuilder("x", "spout", spout)
    builder.set_bolt("p", bolts.PartialWordCount()).fields_grouping("spout", Fields("url"))
    with pytest.raises(InvalidTopologyError, match="undeclared field 'url'"):
        builder.create_topology()


def test_state_is_written_only_inside_a_commit(tmp_path: Path) -> None:
    from drpc.errors import StateError

    counts = TopologyState.at(str(tmp_path)).transactional_map("counts", default=0)
    assert counts.get("cat") == 0
    with pytest.raises(StateError, match="outside a commit"):
        counts.update("cat", lambda v: v + 1)


class TxOrder(Observer):
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def tx_started(self, topology: str, txid: int, attempt_id: int, now: float) -> None:
        self.events.append(("started", txid))

    def tx_committed(self, topology: str, txid: int, commit_seconds: float, tuples: int) -> None:
        self.events.append(("committed", txid))


def started_before_first_commit(events: list[tuple[str, int]]) -> int:
    return events.index(("committed", 1))


@pytest.mark.parametrize(
    ("conf", "argument", "in_flight"),
    [
        ({}, None, 1),
        ({"topology.max.spout.pending": 3}, None, 3),
        ({"topology.max.spout.pending": 3}, 1, 1),
    ],
    ids=["default-1", "from-topology-conf", "argument-overrides"],
)
def test_max_spout_pending_comes_from_the_topology_conf_unless_given(
    conf: dict[str, Any], argument: int | None, in_flight: int, tmp_path: Path
) -> None:
    """The runner reads it, whatever the executor (this runs on the local one)."""
    order = TxOrder()
    runner = TransactionalRunner(
        build_global_count().create_topology(conf),
        state_dir=str(tmp_path),
        max_spout_pending=argument,
        observer=order,
    )
    with runner:
        runner.run()
    assert runner.coordinator.max_spout_pending == in_flight
    # Before batch 1 commits, exactly the batches the limit allows were started.
    assert order.events[: started_before_first_commit(order.events)] == [
        ("started", txid) for txid in range(1, in_flight + 1)
    ]
    assert TopologyState.at(str(tmp_path)).transactional_map("global-count").get("count") == 19
