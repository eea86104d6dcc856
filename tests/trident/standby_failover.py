"""A run with standby replicas whose resident task owning partition 1 dies with its disk in
the middle of a commit, on transactional then opaque maps; run in a process of its own
(two resident tasks need a session of their own: ``python -m tests.trident.
standby_failover WORK_DIR``). It prints one JSON line, by map kind: the pids of the
resident tasks before and after, the run's commits and replays, its standby status (and
what /metrics and the dashboard make of it), and every word's count against the input.

The survivor keeps serving: its process is the same before and after, its standby copy
of the lost partition takes over with nothing downloaded, and the lost task alone starts
again. Meanwhile DRPC calls ask the counts of words the second half of the input never
has, so the right answer is known whatever commits land; every answer is recorded."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from drpc.server.dashboard import Dashboard
from drpc.server.metrics import ServerMetrics

from drpc import Fields, runtime
from drpc.errors import DRPCExecutionException
from drpc.executors.resident.cluster import ResidentCluster
from drpc.executors.resident.executor import resident_cluster
from drpc.state import StateEnvironment
from drpc.testing import LocalDRPC
from drpc.transactional import TransactionalRunner
from drpc.transactional.filelog import (
    FileLogTransactionalSpout,
    OpaqueFileLogTransactionalSpout,
    append_lines,
)
from drpc.trident import (
    LMDBMapState,
    MapStateFactory,
    TridentTopology,
    drpc_topologies,
    transactional_topology,
)

from .ops import KillsBetweenPartitions, add_count_query

PARTITIONS = 3
KILLED_TXID = 4
TAKE = 50
STABLE = [f"stable{n}" for n in range(12)]  # counted in the first batch only


KINDS = ("transactional", "opaque")


def counts_state(opaque: bool) -> MapStateFactory:
    return LMDBMapState.opaque("counts") if opaque else LMDBMapState.transactional("counts")


def topology(log_dir: str, markers: str, opaque: bool = False) -> TridentTopology:
    spout = OpaqueFileLogTransactionalSpout if opaque else FileLogTransactionalSpout
    topology = TridentTopology()
    counts = (
        topology.new_stream("standby-words", spout(log_dir, Fields("word"), TAKE))
        .group_by(["word"])
        .persistent_aggregate(
            counts_state(opaque),
            KillsBetweenPartitions(markers, "counts", KILLED_TXID, lose_disk=True),
            ["count"],
        )
        .parallelism_hint(PARTITIONS)
    )
    add_count_query(topology, counts)
    return topology


def write_input(log_dir: Path) -> Counter[str]:
    """The stable words once each at the start, then 600 others."""
    words = list(STABLE) + [f"word{n % 97}" for n in range(600)]
    append_lines(log_dir, 0, words)
    return Counter(words)


def main(work: Path) -> None:
    session = runtime.get_session("local[2]", {"spark.default.parallelism": "4"})
    cluster = resident_cluster(session.sparkContext)
    cluster.start()
    outcome = {}
    for kind in KINDS:
        assert cluster.wait_ready(120), "the two resident tasks are not both running"
        (work / kind).mkdir()
        outcome[kind] = failover(work / kind, cluster, kind == "opaque")
    print(json.dumps(outcome))


def failover(work: Path, cluster: ResidentCluster, opaque: bool) -> dict[str, object]:
    pids_before = {node: cluster.call(node, os.getpid).result(30) for node in cluster.workers}
    markers = work / "markers"
    markers.mkdir()
    expected = write_input(work / "log")
    trident = topology(str(work / "log"), str(markers), opaque)
    state_dir = work / "state"
    answers: list[tuple[float, bool]] = []
    refusals: Counter[str] = Counter()
    stop = threading.Event()
    with LocalDRPC(executor="spark", timeout=60.0) as drpc:
        for function in drpc_topologies(trident, str(state_dir)):
            drpc.register(function)
        want = sorted([word, 1] for word in STABLE)

        def probe() -> None:
            while not stop.is_set():
                try:
                    answer = sorted(json.loads(drpc.execute("count", " ".join(STABLE))))
                except DRPCExecutionException as error:
                    refusals[error.type.name] += 1
                    time.sleep(0.01)
                    continue
                # Before the first commit no stable word is counted yet: an empty answer.
                answers.append((time.time(), answer in (want, [])))

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        with TransactionalRunner(
            transactional_topology(trident, str(state_dir)),
            state_dir=str(state_dir),
            executor="spark",
            max_spout_pending=2,
            checkpoint_dir=f"file://{work / 'store'}",
            standby_replicas=1,
        ) as runner:
            result = runner.run()
            assert cluster.wait_ready(120), "the lost resident task did not come back"
            # back, it keeps standby copies again: of every partition, caught up
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                status = runner.status()
                copies = status["checkpoint"]["standbys"]["copies"]
                if len(copies) == PARTITIONS and all(c["lag"] == 0 for c in copies):
                    break
                time.sleep(0.05)
            metrics = ServerMetrics()
            metrics.watch_transactional(lambda: {"standby-words": status})
            dashboard = Dashboard()
            dashboard.watch_transactional(lambda: {"standby-words": status})
            shown = dashboard.status()["transactional"][0]["checkpoint"]
        stop.set()
        prober.join(60)
    killed_at = os.stat(markers / "killed").st_mtime
    _, killed_pid = (markers / "killed").read_text().split()
    pids_after = {node: cluster.call(node, os.getpid).result(30) for node in cluster.workers}
    counts = dict(counts_state(opaque).query(_env(state_dir)).items())
    return {
        "pids_before": pids_before,
        "pids_after": pids_after,
        "killed_pid": int(killed_pid),
        "replays": dict(result.replays),
        "commits": [commit.txid for commit in result.commits],
        "standbys": status["checkpoint"]["standbys"],
        "metrics": [
            line
            for line in metrics.exposition().decode().splitlines()
            if line.startswith("drpc_standby_")
        ],
        "dashboard": shown,
        "right_counts": counts == dict(expected),
        "wrong_answers": sum(1 for _, right in answers if not right),
        "answers_after_kill": sum(1 for at, right in answers if right and at > killed_at),
        "refusals": dict(refusals),
    }


def _env(state_dir: Path) -> StateEnvironment:
    return StateEnvironment.open(str(state_dir))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
