"""The processing phase streamed through the resident Spark tasks: no Spark job per batch.

Contract. ``ResidentBackend`` (a ``ProcessingBackend``, ``drpc.transactional.
processing``; ``executor="spark"``) deploys the processing topology
(``local_backend.processing_topology``) on this process's resident Spark job
(``drpc.executors.resident``) the way a DRPC function is deployed: the
coordinator spout, the spout's emitter bolts and the capture bolts standing in
for the commit phase stay on the driver (they use the driver's state and
capture store), every other bolt runs on the resident tasks, and batches stream
through them as messages, up to ``max_spout_pending`` at once, with the local
engine's rules (acking, coordination, timeouts). A spout whose batches are
decided on the driver (``drpc.transactional.ranges.reads_on_executors``: a
``RangeSpout``: the file log, Redis Streams, JetStream) has its ranges
decided here, in txid order, and read by a ``RangeReader`` on the resident
tasks, so no tuple passes through the driver.

A resident task that dies fails the attempts in flight (``ProcessingFailed``,
INTERNAL_ERROR naming the cause); the job restarts and they are replayed with
the same metadata. Trident's compiled topologies take
``drpc.trident.fused.ResidentFusedBackend`` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drpc.errors import DRPCExceptionType, Failure
from drpc.executors.resident.cluster import Deployment, ResidentCluster
from drpc.executors.resident.executor import resident_cluster_of
from drpc.model.context import TopologyContext
from drpc.model.topology import Topology
from drpc.sparkconf import DEFAULT_START_TIMEOUT
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.builder import TransactionalInfo
from drpc.transactional.local_backend import StreamedBatches, processing_topology
from drpc.transactional.processing import Event, ProcessingFailed
from drpc.transactional.ranges import RangePlanner, reads_on_executors, with_range_reader
from drpc.transactional.spouts import TransactionalServices


class ResidentBackend(StreamedBatches):
    """Streams attempts through the resident Spark tasks (see the module doc)."""

    def __init__(
        self,
        topology: Topology,
        info: TransactionalInfo,
        conf: dict[str, Any],
        services: dict[str, Any],
        transactional: TransactionalServices,
        max_jobs: int,
        master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        slots: int | None = None,
    ) -> None:
        processing = processing_topology(topology, info)
        self._planner: RangePlanner | None = None
        on_driver = {*info.commit_components}
        if reads_on_executors(info.spout):
            spout_task = topology.component_task_ids[info.spout_id][0]
            context = TopologyContext(
                topology, info.spout_id, spout_task, services=services, conf=conf
            )
            self._planner = RangePlanner(info.spout, conf, context, transactional.coordinator_state)
            processing = with_range_reader(processing, info)
        else:
            on_driver.add(info.spout_id)
        super().__init__(topology, info, conf, services, transactional, processing)
        self.on_driver = frozenset(on_driver)
        self.master = master
        self.spark_conf = spark_conf
        self.start_timeout = start_timeout
        self.slots = slots
        self._lines: dict[TransactionAttempt, int] = {}
        self._cluster: ResidentCluster | None = None
        self._deployment: Deployment | None = None

    def start(self, report: Callable[[Event], None]) -> None:
        super().start(report)
        self._cluster = resident_cluster_of(
            self.master, self.spark_conf, self.start_timeout, self.slots
        )
        self._deployment = self._cluster.deploy(
            self.processing, self.engine_conf, self.engine_services, on_driver=self.on_driver
        )

    def stop(self) -> None:
        deployment, self._deployment = self._deployment, None
        if deployment is not None and self._cluster is not None:
            self._cluster.undeploy(deployment)
        if self._planner is not None:
            self._planner.close()

    def submit(
        self, attempt: TransactionAttempt, metadata: Any, last_committed: int | None
    ) -> None:
        if self._planner is None:
            super().submit(attempt, metadata, last_committed)
            return
        try:
            metas = self._planner.metas(attempt.txid, int(metadata), last_committed)
        except Exception as error:
            assert self._report is not None
            message = f"deciding the ranges of batch {attempt} failed: {error}"
            self._report(
                ProcessingFailed(attempt, Failure(DRPCExceptionType.FAILED_REQUEST, message))
            )
            return
        self._lines[attempt] = sum(meta.tuples for meta in metas.values())
        super().submit(attempt, metas, last_committed)

    def tuples_of(self, attempt: TransactionAttempt) -> int:
        if self._planner is None:
            return super().tuples_of(attempt)
        return self._lines.pop(attempt, 0)
