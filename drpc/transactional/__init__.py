"""Transactional topologies: exactly-once batch processing with ordered commits into LMDB.

``TransactionalTopologyBuilder(id, spout_id, spout)`` declares the topology;
``run(builder, state_dir=...)`` runs it (see ``drpc.transactional.run``);
committers write ``context.state`` maps inside their commit
(``drpc.state.topology``).
"""

from __future__ import annotations

from drpc.model.components import BaseBatchBolt, ICommitter
from drpc.state.topology import StateMap, TopologyState
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.builder import TransactionalTopologyBuilder
from drpc.transactional.run import CommitInfo, RunResult, TransactionalRunner, run
from drpc.transactional.spouts import (
    BaseOpaquePartitionedTransactionalSpout,
    BasePartitionedTransactionalSpout,
    BaseTransactionalSpout,
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
)


class BaseTransactionalBolt(BaseBatchBolt):
    """A batch bolt whose batch id is a ``TransactionAttempt``."""


__all__ = [
    "BaseOpaquePartitionedTransactionalSpout",
    "BasePartitionedTransactionalSpout",
    "BaseTransactionalBolt",
    "BaseTransactionalSpout",
    "CommitInfo",
    "ICommitter",
    "MemoryTransactionalSpout",
    "OpaqueMemoryTransactionalSpout",
    "RunResult",
    "StateMap",
    "TopologyState",
    "TransactionAttempt",
    "TransactionalRunner",
    "TransactionalTopologyBuilder",
    "run",
]
