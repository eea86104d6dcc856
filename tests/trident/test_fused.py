"""Trident's compiled path (drpc.trident.fused): which topologies take it, and the word count
on it exact under replays in both phases and across runs over a growing log, on every
executor (the local one, the default, included)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from drpc import Fields
from drpc.transactional import MemoryTransactionalSpout
from drpc.transactional.filelog import (
    FileLogTransactionalSpout,
    OpaqueFileLogTransactionalSpout,
    append_lines,
)
from drpc.trident import Count, LMDBMapState, Sum, TridentTopology, runner, transactional_topology
from drpc.trident.fused import (
    FusedBackend,
    LocalFusedBackend,
    ResidentFusedBackend,
    fused_plan,
)

from .ops import Concat, CountFailingCommits, Split, SplitFailingOnce, Triple
from .test_word_count import SENTENCES, committed, word_count

STATE = LMDBMapState.transactional("fused-counts")


def test_the_compiled_path_takes_a_file_log_word_count_and_leaves_the_rest(
    tmp_path: Path,
) -> None:
    log = FileLogTransactionalSpout(tmp_path, Fields("sentence"), 3)

    def plan(spout: object, count: object = None, fused: bool = True) -> tuple[object, object]:
        compiled = transactional_topology(
            word_count(spout, STATE, Split(), count or Count()), str(tmp_path), fused=fused
        )
        info = compiled.transactional
        if info.spark_backend is not None:
            assert (info.spark_backend, info.resident_backend, info.local_backend) == (
                FusedBackend,
                ResidentFusedBackend,
                LocalFusedBackend,
            )
        else:
            assert (info.resident_backend, info.local_backend) == (None, None)
        return fused_plan(compiled), info.spark_backend

    accepted, backend = plan(log)
    assert accepted is not None and backend is FusedBackend
    assert plan(log, fused=False)[1] is None  # asked for the general path
    assert plan(OpaqueFileLogTransactionalSpout(tmp_path, Fields("sentence"), 3)) == (None, None)
    assert plan(MemoryTransactionalSpout({0: []}, Fields("sentence"), 3)) == (None, None)
    assert plan(log, Concat()) == (None, None)  # a reducer needs every tuple at commit


def write_sentences(log_dir: Path, rounds: int, offset: int = 0) -> Counter[str]:
    expected: Counter[str] = Counter()
    for partition in range(3):
        rows = [SENTENCES[(offset + partition + i) % 5] for i in range(rounds)]
        append_lines(log_dir, partition, rows)
        expected.update(word for row in rows for word in row.split())
    return expected


@pytest.mark.parametrize(
    ("executor", "backend"),
    [
        ("spark", ResidentFusedBackend),
        ("spark-batch", FusedBackend),
        ("local", LocalFusedBackend),
    ],
)
def test_the_compiled_word_count_is_exact_under_replays_and_over_a_growing_log(
    request: pytest.FixtureRequest, tmp_path: Path, executor: str, backend: type
) -> None:
    """On the resident tasks (a call per emitter task and batch), as Spark jobs, and in
    this process (the local executor: no tuple through the engine)."""
    if executor != "local":
        request.getfixturevalue("spark_session")
    log_dir, state_dir, markers = tmp_path / "log", tmp_path / "state", tmp_path / "markers"
    markers.mkdir()
    expected = write_sentences(log_dir, 12)
    spout = FileLogTransactionalSpout(log_dir, Fields("sentence"), 2)
    topology = word_count(
        spout, STATE, SplitFailingOnce(str(markers)), CountFailingCommits(str(markers))
    )
    with runner(topology, state_dir=str(state_dir), executor=executor, max_spout_pending=3) as r:
        assert type(r.backend) is backend
        first = r.run()
    assert first.replays["processing"] > 0 and first.replays["commit"] > 0
    assert committed(state_dir, STATE) == dict(expected)
    expected += write_sentences(log_dir, 5, offset=2)  # the next run reads only the new lines
    with runner(topology, state_dir=str(state_dir), executor=executor, max_spout_pending=3) as r:
        second = r.run()
    assert second.commits and second.commits[0].txid > first.commits[-1].txid
    assert committed(state_dir, STATE) == dict(expected)


def holds_topology(token: str) -> bool:
    """Whether this resident task's process has unpickled the topology ``token``."""
    from drpc.executors.spark import stages

    return token in stages._topologies


@pytest.mark.spark
def test_the_resident_tasks_load_the_topology_before_the_first_batch(
    spark_session: object, tmp_path: Path
) -> None:
    """A run's first batch would otherwise pay for unpickling the topology and importing the
    reader on every resident task (about 0.1 s on top of a 10 ms batch)."""
    spout = FileLogTransactionalSpout(tmp_path / "log", Fields("sentence"), 2)
    topology = word_count(spout, STATE, Split(), Count())
    with runner(topology, state_dir=str(tmp_path / "state"), executor="spark") as r:
        backend = r.backend
        assert isinstance(backend, ResidentFusedBackend)
        cluster = backend._cluster
        held = [
            cluster.call(node, holds_topology, backend._token).result(30)
            for node in cluster.workers
        ]
        assert held == [True] * len(cluster.workers)


@pytest.mark.parametrize("executor", ["local", "spark"])
@pytest.mark.parametrize("partitions", [1, 2])
def test_a_group_of_two_fields_sums_a_third_on_the_compiled_path(
    request: pytest.FixtureRequest, tmp_path: Path, executor: str, partitions: int
) -> None:
    """The emitter tasks hand the partial aggregate per group key (here a pair, in the
    order the grouping names it) to the committers without a tuple per group: the sums
    are those of each (b, a) pair."""
    if executor != "local":
        request.getfixturevalue("spark_session")
    rows = [f"{a} {b} {n}" for n in range(1, 40) for a, b in [("x", "y"), ("y", "x"), ("x", "x")]]
    for partition in range(3):
        append_lines(tmp_path / "log", partition, rows[partition::3])
    expected: Counter[tuple[str, str]] = Counter()
    for row in rows:
        a, b, n = row.split()
        expected[(b, a)] += int(n)
    state = LMDBMapState.transactional("sums")
    topology = TridentTopology()
    sums = (
        topology.new_stream("sums", FileLogTransactionalSpout(tmp_path / "log", Fields("row"), 7))
        .each(["row"], Triple(), ["a", "b", "n"])
        .group_by(["b", "a"])
        .persistent_aggregate(state, ["n"], Sum(), ["total"])
    )
    if partitions > 1:
        sums.parallelism_hint(partitions)
    state_dir = tmp_path / "state"
    with runner(topology, state_dir=str(state_dir), executor=executor) as r:
        assert isinstance(r.backend, ResidentFusedBackend | LocalFusedBackend)
        r.run()
    assert committed(state_dir, state) == dict(expected)
