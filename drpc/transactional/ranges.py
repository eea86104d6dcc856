"""Batches of a file log decided on the driver and read where they are processed.

Contract. The file log's batches can be decided without reading a tuple: its
coordinator's ``next_range(partition, last_meta)`` scans for line ends only.
So on Spark the driver decides every partition's meta of a batch
(``RangePlanner.metas``) and stores it per txid exactly where the
partitioned emitter would (``partition_state``), all partitions and the
cleanup of committed txids in one LMDB transaction; a replay, on any path,
reads the same lines. The lines are then read where they are processed:

- ``RangeReader`` is the spout's emitter bolt on the executors (the general
  transactional path, ``drpc.transactional.spark_backend``): for the batch
  tuple ``[attempt, metas, last committed]`` it emits the lines of each meta
  of its partitions (partition p on emitter task p mod parallelism, as
  Storm assigns them), through the emitter's replay method;
- Trident's compiled path (``drpc.trident.fused``) reads them in its own tasks.

``reads_on_executors(spout)`` says whether a spout takes this path: a
``FileLogTransactionalSpout`` (the opaque file log keeps its driver emitter:
its metas are decided as it emits).
"""

from __future__ import annotations

import copy as _copy
import dataclasses
from typing import Any, TypeGuard

from drpc.model.components import BaseRichBolt, BatchOutputCollector, IComponent, OutputCollector
from drpc.model.context import TopologyContext
from drpc.model.streams import OutputFieldsDeclarer
from drpc.model.topology import CoordinatedBolt, Topology
from drpc.model.tuples import Tuple
from drpc.state import CoordinatorState, StateTxn
from drpc.transactional.filelog import FileLogMeta, FileLogTransactionalSpout


def reads_on_executors(spout: IComponent) -> TypeGuard[FileLogTransactionalSpout]:
    return type(spout) is FileLogTransactionalSpout


def owned_by(partition: int, task_index: int, tasks: int) -> bool:
    """Whether emitter task ``task_index`` of ``tasks`` reads ``partition``."""
    return partition % tasks == task_index


class RangePlanner:
    """Decides and stores each partition's meta of a batch, on the driver (see the module doc)."""

    def __init__(
        self,
        spout: FileLogTransactionalSpout,
        conf: dict[str, Any],
        context: TopologyContext,
        coordinator_state: CoordinatorState,
    ) -> None:
        self._reader: Any = spout.get_coordinator(conf, context)
        self._state = coordinator_state

    def metas(
        self, txid: int, partitions: int, last_committed: int | None
    ) -> dict[int, FileLogMeta]:
        """Each partition's meta of ``txid`` with lines in it: decided now, or as stored."""

        def decide(txn: StateTxn) -> dict[int, FileLogMeta]:
            metas = {}
            for partition in range(partitions):
                state = self._state.partition_state(partition)
                if last_committed is not None:
                    state.cleanup_before(last_committed, txn=txn)
                decided: list[FileLogMeta] = []

                def new_range(
                    txid: int, last_meta: Any, partition: int = partition, decided: Any = decided
                ) -> FileLogMeta:
                    meta: FileLogMeta = self._reader.next_range(partition, last_meta)
                    decided.append(meta)
                    return meta

                stored = state.get_state_or_create(txid, new_range, txn=txn)
                # None and nothing decided: a later batch already consumed this partition's range.
                meta = stored if stored is not None else (decided[0] if decided else None)
                if isinstance(meta, FileLogMeta) and meta.end > meta.start:
                    metas[partition] = meta
            return metas

        what = (
            f"txid {txid} of {partitions} partition states, {self._state.partition_state(0)!r}..."
        )
        return self._state.env.run_write(decide, what=what)

    def close(self) -> None:
        self._reader.close()


class RangeReader(BaseRichBolt):
    """The file log's emitter bolt on the executors (see the module doc)."""

    def __init__(self, spout: FileLogTransactionalSpout) -> None:
        self.spout = spout
        self._reader: Any = None
        self._collector: OutputCollector | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.spout.declare_output_fields(declarer)

    def prepare(self, conf: Any, context: TopologyContext, collector: OutputCollector) -> None:
        self._reader = self.spout.get_emitter(conf, context)
        self._collector = collector
        self._index, self._tasks = context.this_task_index, len(context.this_component_tasks)

    def execute(self, tuple: Tuple) -> None:
        assert self._collector is not None
        attempt, metas = tuple[0], tuple[1]
        batch = BatchOutputCollector(self._collector)
        for partition, meta in metas.items():
            if owned_by(partition, self._index, self._tasks):
                self._reader.emit_partition_batch(attempt, batch, partition, meta)
        self._collector.ack(tuple)

    def cleanup(self) -> None:
        if self._reader is not None:
            self._reader.close()


def with_range_reader(topology: Topology, info: Any) -> Topology:
    """``topology`` with a ``RangeReader`` as the emitter bolt of ``info``'s spout."""
    spec = topology.components[info.spout_id]
    copy = _copy.copy(topology)
    copy.components = {
        **topology.components,
        info.spout_id: dataclasses.replace(
            spec, component=CoordinatedBolt(RangeReader(info.spout), {})
        ),
    }
    return copy
