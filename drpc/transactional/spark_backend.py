"""The processing phase as one Spark job per batch attempt.

Contract. ``SparkBackend`` (a ``ProcessingBackend``, ``drpc.transactional.
processing``; ``executor="spark-batch"``) compiles the topology with the spout's
emitter and every commit-phase bolt on the driver and the rest as Spark stages
(``drpc.executors.plan``). ``ResidentBackend`` (``executor="spark"``) is the same
but runs each batch's stages as calls on the resident Spark tasks
(``drpc.executors.resident.stages``): no Spark job, no job tag, the same work.
``submit`` runs the emitters on the calling thread (the run loop's), so batches
are emitted in txid order, then the attempt's Spark job (or calls) on a pool of
``max_jobs`` threads (a job is tagged, so ``stop`` cancels it). A
``RangeSpout``'s emitter (the file log, Redis Streams, JetStream) is the
exception: the driver only decides and stores the batch's ranges and the
emitter bolt reads them in the job (``drpc.transactional.ranges``), so no
tuple passes through the driver.
What the job and the emitters sent commit-phase bolts is reported as
``Processed.captured``; a failure notice among it, an emitter failure, a
failure to decide the ranges or a Spark failure reports
``ProcessingFailed``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

from drpc import config, runtime
from drpc.errors import DRPCExceptionType, Failure
from drpc.executors.batch import TaskRun, gather_shipments
from drpc.executors.plan import DRIVER, SPARK, compile_plan
from drpc.executors.records import Shipment, first_failure
from drpc.executors.resident.executor import resident_cluster_of
from drpc.executors.resident.stages import ResidentStages
from drpc.executors.spark.stages import JobSpec, SparkStages, tagged_job
from drpc.gcpolicy import collected_less_often
from drpc.logs import worker_settings
from drpc.model.context import TopologyContext
from drpc.model.topology import Topology
from drpc.semantics.runners import freeze
from drpc.sparkconf import DEFAULT_START_TIMEOUT
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.builder import TransactionalInfo
from drpc.transactional.processing import (
    Event,
    Processed,
    ProcessingFailed,
    batch_log_fields,
)
from drpc.transactional.ranges import RangePlanner, reads_on_executors, with_range_reader
from drpc.transactional.spouts import BATCH_STREAM, TransactionalServices


class SparkBackend:
    """Processes each attempt as one Spark job; emitters and commit-phase bolts on the driver."""

    resident = False
    """Run the stages as calls on the resident Spark tasks instead (``ResidentBackend``)."""

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
    ) -> None:
        self.topology = topology
        self.info = info
        self.conf = conf
        self.services = services
        self.transactional = transactional
        self.master = master
        self.spark_conf = spark_conf
        self.start_timeout = start_timeout
        self._planner: RangePlanner | None = None
        run_topology = topology
        if reads_on_executors(info.spout):
            spout_task = topology.component_task_ids[info.spout_id][0]
            context = TopologyContext(
                topology, info.spout_id, spout_task, services=services, conf=conf
            )
            self._planner = RangePlanner(info.spout, conf, context, transactional.coordinator_state)
            run_topology = with_range_reader(topology, info)
        on_driver = {info.spout_id} if self._planner is None else set()
        placement = {
            component_id: DRIVER
            if spec.kind == "spout"
            or component_id in on_driver
            or component_id in info.commit_components
            else SPARK
            for component_id, spec in topology.components.items()
        }
        self.plan = compile_plan(run_topology, placement)
        self._pool = ThreadPoolExecutor(max_jobs, thread_name_prefix=f"drpc-tx-{info.id}")
        self._report: Callable[[Event], None] | None = None
        self._stages: SparkStages | ResidentStages | None = None
        self._sc: Any = None
        self._broadcast: Any = None
        self._tags: set[str] = set()
        self._token = uuid.uuid4().hex

    def start(self, report: Callable[[Event], None]) -> None:
        self._report = report
        if self.resident:
            cluster = resident_cluster_of(self.master, self.spark_conf, self.start_timeout)
            frozen = freeze(self.plan.topology)
            self._stages = ResidentStages(cluster, self.plan, self._token, frozen)
            return
        session = runtime.get_session(
            self.master, self.spark_conf, start_timeout=self.start_timeout
        )
        self._sc = session.sparkContext
        self._broadcast = self._sc.broadcast(freeze(self.plan.topology))
        self._stages = SparkStages(self._sc, self.plan, self._token, self._broadcast)

    def stop(self) -> None:
        if self._sc is not None:
            for tag in list(self._tags):
                self._sc.cancelJobsWithTag(tag)
        self._pool.shutdown(wait=True)
        if self._planner is not None:
            self._planner.close()
        if self._broadcast is not None:
            self._broadcast.unpersist()

    def submit(
        self, attempt: TransactionAttempt, metadata: Any, last_committed: int | None
    ) -> None:
        # Emitters run here, on the coordinator's thread, so batches are emitted in txid order.
        topology, info = self.topology, self.info
        coordinator_task = topology.component_task_ids[info.coordinator_id][0]
        assert self._report is not None
        if self._planner is not None:
            self._submit_ranges(attempt, int(metadata), last_committed, coordinator_task)
            return
        batch = Shipment(
            info.coordinator_id,
            coordinator_task,
            [(BATCH_STREAM, [[attempt, metadata, last_committed]])],
        )
        emitters = [
            TaskRun(
                topology,
                info.spout_id,
                index,
                job_ids=(attempt,),
                conf=self.conf,
                services=self.services,
                hints=self.plan.hints[info.spout_id],
            ).run([batch])
            for index in range(topology.components[info.spout_id].parallelism)
        ]
        failure = next((f for run in emitters for f in run.failures.values()), None)
        tuples = self.transactional.take_emitted(attempt)
        if failure is not None:
            self._report(ProcessingFailed(attempt, failure))
            return
        self._pool.submit(self._process, attempt, gather_shipments(emitters), tuples)

    def _submit_ranges(
        self,
        attempt: TransactionAttempt,
        partitions: int,
        last_committed: int | None,
        coordinator_task: int,
    ) -> None:
        """Decide the batch's ranges here; its Spark job reads them (``ranges``)."""
        assert self._report is not None and self._planner is not None
        try:
            metas = self._planner.metas(attempt.txid, partitions, last_committed)
        except Exception as error:
            message = f"deciding the ranges of batch {attempt} failed: {error}"
            self._report(
                ProcessingFailed(attempt, Failure(DRPCExceptionType.FAILED_REQUEST, message))
            )
            return
        batch = [(BATCH_STREAM, [[attempt, metas, last_committed]])]
        shipments = {
            task: [Shipment(self.info.coordinator_id, coordinator_task, list(batch))]
            for task in self.topology.component_task_ids[self.info.spout_id]
        }
        tuples = sum(meta.tuples for meta in metas.values())
        self._pool.submit(self._process, attempt, shipments, tuples)

    def _process(
        self, attempt: TransactionAttempt, driver_shipments: dict[int, list[Shipment]], tuples: int
    ) -> None:
        assert self._report is not None and self._stages is not None
        tag = f"drpc-tx-{self._token[:8]}-{attempt.txid}-{attempt.attempt_id}"
        self._tags.add(tag)
        description = f"drpc transactional {self.info.id}: batch {attempt}"
        try:
            with nullcontext() if self.resident else tagged_job(self._sc, tag, description):
                spec = JobSpec(
                    (attempt,),
                    self.conf,
                    log_fields={attempt: batch_log_fields(self.info.id, attempt, "processing")},
                    logging=worker_settings(),
                    deadline=time.time() + float(self.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS]),
                )
                with collected_less_often():
                    collected = self._stages.run(spec, driver_shipments)
        except Exception as error:
            self._report(
                ProcessingFailed(
                    attempt,
                    Failure(
                        DRPCExceptionType.INTERNAL_ERROR,
                        f"processing batch {attempt} on "
                        f"{'the resident Spark tasks' if self.resident else 'Spark'} failed: "
                        f"{runtime.describe_spark_error(error)}",
                    ),
                )
            )
            return
        finally:
            self._tags.discard(tag)
        commit = set(self.info.commit_components)
        captured = {
            task: shipments
            for task, shipments in driver_shipments.items()
            if self.topology.task_component[task] in commit
        }
        for task, shipments in collected.items():
            captured.setdefault(task, []).extend(shipments)
        failure = first_failure(s for shipments in captured.values() for s in shipments)
        if failure is not None:
            self._report(ProcessingFailed(attempt, failure))
        else:
            self._report(Processed(attempt, captured, tuples))


class ResidentBackend(SparkBackend):
    """``SparkBackend``'s batches with its stages run as calls on the resident Spark tasks
    (``drpc.executors.resident.stages``): no Spark job per batch (``executor="spark"``)."""

    resident = True
