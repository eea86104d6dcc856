"""The child of the remote partition read test: its own ``local[2]`` session with 2 resident
tasks, a partitioned count, then reads of each partition through another task's call and
through the driver. Run as ``python -m tests.spark.remote_reads WORKDIR``; prints one JSON
line: what each read found, and which process read it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from drpc import Fields, runtime
from drpc.errors import PartitionLostError
from drpc.executors.resident.executor import resident_cluster
from drpc.executors.resident.partition_reads import driver_reader, worker_reader
from drpc.executors.resident.worker import current_worker
from drpc.state import StateEnvironment, TransactionalMap
from drpc.state.partition import PartitionLayout, StatePartition, partition_root
from drpc.state.partitioned import layouts
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    Count,
    LMDBMapState,
    MapGet,
    TridentTopology,
    drpc_topologies,
    run,
)
from tests.trident.ops import Split

WORDS = [f"w{n}" for n in range(30)]


def items(partition: StatePartition, txn: Any) -> tuple[int, list[Any]]:
    """What a partition holds, and the process that read it."""
    return os.getpid(), TransactionalMap(partition.env, "counts").items(txn=txn)


def through_a_peer(root: str, layout: PartitionLayout, index: int) -> dict[str, Any]:
    """Run on a resident task: read partition ``index`` through its owner, a peer."""
    worker = current_worker()
    try:
        pid, found = worker_reader(worker)(root, layout, index, None, items)
    except PartitionLostError as error:
        return {"asked_by": os.getpid(), "error": type(error).__name__, "message": str(error)}
    return {"asked_by": os.getpid(), "read_by": pid, "items": found}


def main(workdir: Path) -> None:
    session = runtime.get_session("local[2]")
    cluster = resident_cluster(session.sparkContext, slots=2).start()
    topology = TridentTopology()
    spout = MemoryTransactionalSpout({0: [[word] for word in WORDS * 2]}, Fields("word"), 30)
    counts = (
        topology.new_stream("remote", spout)
        .group_by(["word"])
        .persistent_aggregate(LMDBMapState.transactional("counts"), Count(), ["count"])
        .parallelism_hint(2)
    )
    topology.new_drpc_stream("count").each(["args"], Split(), ["word"]).group_by(
        ["word"]
    ).state_query(counts, ["word"], MapGet(), ["count"]).project(["word", "count"])
    state_dir = workdir / "state"
    run(topology, state_dir=str(state_dir), executor="spark")
    [layout] = layouts(StateEnvironment.open(state_dir)).values()
    root = partition_root(str(state_dir))
    pids = {node: cluster.call(node, os.getpid).result() for node in cluster.workers}
    report: dict[str, Any] = {"pids": pids}
    # partition 0 lives on task 1, partition 1 on task 2: each task asks the other's
    report["task 2 reads partition 0"] = cluster.call(2, through_a_peer, root, layout, 0).result()
    report["task 1 reads partition 1"] = cluster.call(1, through_a_peer, root, layout, 1).result()
    report["task 1 reads its own"] = cluster.call(1, through_a_peer, root, layout, 0).result()
    pid, found = driver_reader(cluster.call)(root, layout, 1, None, items)
    report["the driver reads partition 1"] = {"read_by": pid, "items": found}
    with LocalDRPC(executor="spark", timeout=60.0) as drpc:  # its tasks where the keys are
        for function in drpc_topologies(topology, str(state_dir)):
            drpc.register(function)
        report["query"] = json.loads(drpc.execute("count", " ".join(WORDS)))
    print(json.dumps(report))
    runtime.stop_session()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
