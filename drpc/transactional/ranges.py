"""Batches decided on the driver and read where they are processed.

Contract. Some partitioned spouts can decide a batch without reading a tuple:
the file log scans for line ends only, Redis Streams asks the server for a
range's first and last entry id, JetStream reads a stream's last sequence.
Such a spout is a ``RangeSpout`` (the protocol, below). On Spark the driver
decides every partition's meta of a batch (``RangePlanner.metas``) and stores
it per txid exactly where the partitioned emitter would
(``partition_state``), all partitions and the cleanup of committed txids in
one LMDB transaction; a replay, on any path, reads the same tuples. The
tuples are then read where they are processed:

- ``RangeReader`` is the spout's emitter bolt on the executors (the general
  transactional path, ``drpc.transactional.spark_backend``): for the batch
  tuple ``[attempt, metas, last committed]`` it emits the tuples of each meta
  of its partitions (partition p on emitter task p mod parallelism, as
  Storm assigns them), through the emitter's replay method;
- Trident's compiled path (``drpc.trident.fused``) reads them in its own tasks
  (``values_in``).

The protocol. A ``RangeSpout`` is a ``BasePartitionedTransactionalSpout``
whose

- coordinator (``get_coordinator``, a ``RangeCoordinator``) has, besides
  ``is_ready()`` and ``number_of_partitions()``, ``next_range(partition,
  last_meta) -> meta``: the meta of the next batch of ``partition`` after
  ``last_meta`` (None: from the start), decided without emitting; it runs on
  the driver, in txid order, inside the LMDB transaction that stores it;
- emitter (``get_emitter``, a ``RangeEmitter``), made wherever the batch is
  processed (a Spark executor too: the spout must pickle), replays exactly
  the range a meta describes: ``emit_partition_batch(attempt, collector,
  partition, meta)`` emits it with the attempt as field 0, ``values_in(
  partition, meta)`` gives its values without it; a range it can no longer
  read whole fails the batch (``FailedException``), never emits another;
  ``close()`` releases what it holds;
- metas (a ``RangeMeta``) pickle and say how many tuples they hold
  (``tuples``; 0: an empty range, which is not read).

``reads_on_executors(spout)`` says whether a spout takes this path: a
``RangeSpout`` (opaque spouts keep their driver emitter: their metas are
decided as they emit).
"""

from __future__ import annotations

import copy as _copy
import dataclasses
from collections.abc import Iterable
from typing import Any, Protocol, TypeGuard

from drpc.model.components import BaseRichBolt, BatchOutputCollector, IComponent, OutputCollector
from drpc.model.context import TopologyContext
from drpc.model.streams import OutputFieldsDeclarer
from drpc.model.topology import CoordinatedBolt, Topology
from drpc.model.tuples import Tuple
from drpc.state import CoordinatorState, StateTxn
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.spouts import BasePartitionedTransactionalSpout


class RangeMeta(Protocol):
    """A batch of one partition, decided before it is read (see the module doc)."""

    @property
    def tuples(self) -> int:
        """How many tuples the range holds; 0: empty, not read."""
        ...


class RangeCoordinator(Protocol):
    def is_ready(self) -> bool: ...

    def number_of_partitions(self) -> int: ...

    def next_range(self, partition: int, last_meta: Any) -> RangeMeta: ...

    def close(self) -> None: ...


class RangeEmitter(Protocol):
    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        meta: Any,
    ) -> None: ...

    def values_in(self, partition: int, meta: Any) -> Iterable[list[Any]]: ...

    def close(self) -> None: ...


class RangeSpout(BasePartitionedTransactionalSpout):
    """A partitioned spout whose batches are decided on the driver and read anywhere: its
    ``get_coordinator`` returns a ``RangeCoordinator``, its ``get_emitter`` a
    ``RangeEmitter`` (see the module doc)."""


def reads_on_executors(spout: IComponent) -> TypeGuard[RangeSpout]:
    return isinstance(spout, RangeSpout)


def owned_by(partition: int, task_index: int, tasks: int) -> bool:
    """Whether emitter task ``task_index`` of ``tasks`` reads ``partition``."""
    return partition % tasks == task_index


class RangePlanner:
    """Decides and stores each partition's meta of a batch, on the driver (see the module doc)."""

    def __init__(
        self,
        spout: RangeSpout,
        conf: dict[str, Any],
        context: TopologyContext,
        coordinator_state: CoordinatorState,
    ) -> None:
        self._reader: Any = spout.get_coordinator(conf, context)
        self._state = coordinator_state

    def metas(self, txid: int, partitions: int, last_committed: int | None) -> dict[int, Any]:
        """Each partition's meta of ``txid`` with tuples in it: decided now, or as stored."""

        def decide(txn: StateTxn) -> dict[int, Any]:
            metas = {}
            for partition in range(partitions):
                state = self._state.partition_state(partition)
                if last_committed is not None:
                    state.cleanup_before(last_committed, txn=txn)
                decided: list[RangeMeta] = []

                def new_range(
                    txid: int, last_meta: Any, partition: int = partition, decided: Any = decided
                ) -> RangeMeta:
                    meta: RangeMeta = self._reader.next_range(partition, last_meta)
                    decided.append(meta)
                    return meta

                stored = state.get_state_or_create(txid, new_range, txn=txn)
                # None and nothing decided: a later batch already consumed this partition's range.
                meta: Any = stored if stored is not None else (decided[0] if decided else None)
                if meta is not None and meta.tuples > 0:
                    metas[partition] = meta
            return metas

        what = (
            f"txid {txid} of {partitions} partition states, {self._state.partition_state(0)!r}..."
        )
        return self._state.env.run_write(decide, what=what)

    def close(self) -> None:
        self._reader.close()


class RangeReader(BaseRichBolt):
    """A ``RangeSpout``'s emitter bolt on the executors (see the module doc)."""

    def __init__(self, spout: RangeSpout) -> None:
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
