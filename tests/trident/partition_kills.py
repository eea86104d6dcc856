"""The word count of the partition kill tests: a file log counted into a state of 3 partitions
whose partition 1 kills its own process in the first commit of txid ``KILLED_TXID``, once
partition 0 holds it (``ops.KillsBetweenPartitions``). Configured by environment for a
subprocess run: ``DRPC_TEST_LOG_DIR``, ``DRPC_TEST_MARKERS``, ``DRPC_TEST_OPAQUE`` ("1":
the opaque spout and map), ``DRPC_STATE_DIR``."""

from __future__ import annotations

import os

from drpc import Fields, Topology
from drpc.transactional.filelog import FileLogTransactionalSpout, OpaqueFileLogTransactionalSpout
from drpc.trident import LMDBMapState, MapStateFactory, TridentTopology
from drpc.trident import transactional_topology as compile_spout_streams

from .ops import KillsBetweenPartitions

TXID = "partition-kill-words"
KILLED_TXID = 3
PARTITIONS = 3
TAKE = 50  # lines per log partition per batch


def counts(opaque: bool) -> MapStateFactory:
    return LMDBMapState.opaque("counts") if opaque else LMDBMapState.transactional("counts")


def word_count(
    log_dir: str, markers: str, opaque: bool, lose_disk: bool = False
) -> TridentTopology:
    kind = OpaqueFileLogTransactionalSpout if opaque else FileLogTransactionalSpout
    topology = TridentTopology()
    (
        topology.new_stream(TXID, kind(log_dir, Fields("word"), TAKE), parallelism=2)
        .group_by(["word"])
        .persistent_aggregate(
            counts(opaque),
            KillsBetweenPartitions(markers, "counts", KILLED_TXID, lose_disk=lose_disk),
            ["count"],
        )
        .parallelism_hint(PARTITIONS)
    )
    return topology


def topology() -> Topology:
    return compile_spout_streams(
        word_count(
            os.environ["DRPC_TEST_LOG_DIR"],
            os.environ["DRPC_TEST_MARKERS"],
            os.environ.get("DRPC_TEST_OPAQUE") == "1",
        ),
        os.environ["DRPC_STATE_DIR"],
    )
