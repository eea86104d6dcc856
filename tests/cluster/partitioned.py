"""The partitioned word count of the two-host test: a file log (``DRPC_TEST_LOG_DIR``, a path
both hosts see) counted into a state of 2 partitions, and its ``count`` query, for
``drpc-server --transactional tests.cluster.partitioned:topology --topology
tests.cluster.partitioned:query`` with ``--state-dir`` ``DRPC_STATE_DIR``."""

from __future__ import annotations

import os

from drpc import Fields, Topology
from drpc.transactional.filelog import FileLogTransactionalSpout
from drpc.trident import (
    Count,
    LMDBMapState,
    TridentTopology,
    drpc_topology,
    transactional_topology,
)
from tests.trident.ops import add_count_query

TXID = "two-host-words"


def word_count(log_dir: str) -> TridentTopology:
    topology = TridentTopology()
    counts = (
        topology.new_stream(TXID, FileLogTransactionalSpout(log_dir, Fields("word"), 500))
        .group_by(["word"])
        .persistent_aggregate(LMDBMapState.transactional("counts"), Count(), ["count"])
        .parallelism_hint(2)
    )
    add_count_query(topology, counts)
    return topology


def topology() -> Topology:
    return transactional_topology(
        word_count(os.environ["DRPC_TEST_LOG_DIR"]), os.environ["DRPC_STATE_DIR"]
    )


def query() -> Topology:
    return drpc_topology(
        word_count(os.environ["DRPC_TEST_LOG_DIR"]), "count", os.environ["DRPC_STATE_DIR"]
    )
