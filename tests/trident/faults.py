"""The Trident word count of the exactly-once tests; configured by environment for subprocess
runs (``DRPC_TEST_LOG_DIR``: the file log, ``DRPC_TEST_OPAQUE``: "1" for the opaque spout and
map, ``DRPC_TEST_TAKE``: lines per partition per batch, ``DRPC_STATE_DIR``: the state
directory, ``DRPC_TEST_FLAKY``: "1" to fail the first attempt of every Spark task, so Spark
retries it, ``DRPC_TEST_PARTITIONS``: partitions of the counts' state, default 1)."""

from __future__ import annotations

import os

from drpc import Fields, Topology
from drpc.transactional.filelog import FileLogTransactionalSpout, OpaqueFileLogTransactionalSpout
from drpc.trident import Count, LMDBMapState, MapStateFactory, TridentTopology
from drpc.trident import transactional_topology as compile_spout_streams

from .ops import FailsFirstTaskAttempt

TXID = "trident-fault-words"


def counts_state(opaque: bool) -> MapStateFactory:
    return LMDBMapState.opaque("counts") if opaque else LMDBMapState.transactional("counts")


def word_count(
    log_dir: str, opaque: bool, take: int, flaky: bool = False, partitions: int = 1
) -> TridentTopology:
    kind = OpaqueFileLogTransactionalSpout if opaque else FileLogTransactionalSpout
    topology = TridentTopology()
    stream = topology.new_stream(TXID, kind(log_dir, Fields("word"), take), parallelism=2)
    if flaky:
        stream = stream.filter(["word"], FailsFirstTaskAttempt())
    counts = stream.group_by(["word"]).persistent_aggregate(
        counts_state(opaque), Count(), ["count"]
    )
    if partitions > 1:
        counts.parallelism_hint(partitions)
    return topology


def topology() -> Topology:
    return compile_spout_streams(
        word_count(
            os.environ["DRPC_TEST_LOG_DIR"],
            os.environ.get("DRPC_TEST_OPAQUE") == "1",
            int(os.environ["DRPC_TEST_TAKE"]),
            os.environ.get("DRPC_TEST_FLAKY") == "1",
            int(os.environ.get("DRPC_TEST_PARTITIONS", "1")),
        ),
        os.environ["DRPC_STATE_DIR"],
    )
