"""drpc's state layer: transactional state in LMDB, one environment per directory.

- ``StateEnvironment`` (``env``): open once per process, durable commits, a full
  map grows and the write's bytes are applied again, never used across fork;
  its transactions (``txn``) buffer writes until they end; one writer process
  per directory (``writer``).
- ``CoordinatorState`` and ``RotatingTransactionalState`` (``coordinator``,
  ``rotating``): the coordinator's next txid, commit record, per-txid batch and
  per-partition metadata; drpc's own records among them are explicit bytes
  (``records``), read without running code; user values are pickled (``codec``).
- ``TransactionalMap``, ``OpaqueMap`` and ``NonTransactionalMap`` (``maps``):
  user state with Storm's ``{value, txid}``, ``{value, prev, txid}`` and bare
  value rules, written through a committer's handle in the commit's write
  transaction (removals included), listed a page at a time, with an optional
  cache of committed records for the writer (``cache``).
- Partitioned states: ``key_group`` / ``partition_of`` (``keygroups``: which partition
  holds a key), ``StatePartition`` (``partition``: one partition's directory, applying
  each txid once) and ``PartitionedMap`` (``partitioned``: a map read across its
  partitions at one global commit).

One commit is one write transaction::

    def commit(txn):
        counts.handle(txn, txid).multi_update({w: add(n) for w, n in partial.items()})
        coordinator.record_commit(txn, txid)

    env.run_write(commit)
"""

from __future__ import annotations

from drpc.state.codec import StateKey
from drpc.state.coordinator import CommitRecord, CoordinatorState
from drpc.state.env import (
    DEFAULT_MAP_SIZE,
    DEFAULT_MAX_MAP_SIZE,
    DEFAULT_MAX_READERS,
    DEFAULT_RESIZE_TIMEOUT,
    MIN_MAP_SIZE,
    StateEnvironment,
    StateOptions,
    StateTxn,
)
from drpc.state.keygroups import DEFAULT_KEY_GROUPS, key_group, partition_of
from drpc.state.maps import (
    REMOVED,
    MapHandle,
    MapPage,
    NonTransactionalMap,
    OpaqueMap,
    OpaqueValue,
    PlainValue,
    TransactionalMap,
    TransactionalValue,
)
from drpc.state.partition import PartitionLayout, StatePartition
from drpc.state.partitioned import PartitionedMap
from drpc.state.rotating import INIT_TXID, RotatingTransactionalState, StateInitializer

__all__ = [
    "DEFAULT_KEY_GROUPS",
    "DEFAULT_MAP_SIZE",
    "DEFAULT_MAX_MAP_SIZE",
    "DEFAULT_MAX_READERS",
    "DEFAULT_RESIZE_TIMEOUT",
    "INIT_TXID",
    "MIN_MAP_SIZE",
    "REMOVED",
    "CommitRecord",
    "CoordinatorState",
    "MapHandle",
    "MapPage",
    "NonTransactionalMap",
    "OpaqueMap",
    "OpaqueValue",
    "PartitionLayout",
    "PartitionedMap",
    "PlainValue",
    "RotatingTransactionalState",
    "StateEnvironment",
    "StateInitializer",
    "StateKey",
    "StateOptions",
    "StatePartition",
    "StateTxn",
    "TransactionalMap",
    "TransactionalValue",
    "key_group",
    "partition_of",
]
