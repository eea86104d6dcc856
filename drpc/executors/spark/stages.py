"""A compiled plan's Spark stages, run as one Spark job per batch of ids.

Contract. ``SparkStages(sc, plan, token, broadcast)`` runs the stages of a
``SparkPlan`` (``drpc.executors.plan``) for one job: ``run(job,
driver_shipments, timings)`` ships what driver-side components sent the
stages' heads, runs every Spark stage (each task is a ``TaskRun`` of each
fused component in turn, ``_run_stage``), collects what the last stages send
driver-side components, and returns it by receiving task. The topology
travels once, in ``broadcast``, and is unpickled once per Python worker
(keyed by ``token``; a worker keeps the ``TOPOLOGIES_KEPT`` most recently used). Used by
the DRPC executor and by transactional runs.

``JobSpec`` is what every task of one job needs besides the topology.
``load_topology`` is how a worker gets a job's topology.
``tagged_job`` runs a block with a Spark job tag (cancellable with
``cancelJobsWithTag``), a description and optionally a FAIR pool, and clears
them again.
"""

from __future__ import annotations

import gc
import logging
import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from drpc.executors.batch import TaskHints, TaskRun
from drpc.executors.plan import DRIVER, SparkPlan, StagePlan
from drpc.executors.records import FailureNotice, Shipment, Timing
from drpc.gcpolicy import collected_less_often
from drpc.logs import configure_worker_logging
from drpc.model.streams import GlobalStreamId
from drpc.model.topology import Topology

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSpec:
    """What every task of one job needs besides the topology."""

    ids: tuple[Hashable, ...]
    conf: dict[str, Any]
    timed: bool = False  # tasks measure themselves and ship Timing records
    log_fields: dict[Hashable, dict[str, Any]] | None = None  # by id: fields of its log lines
    logging: tuple[str, int] | None = None  # the driver's (format, level), for the workers
    deadline: float | None = None  # time.time() until which tasks wait for async acks


@contextmanager
def tagged_job(sc: Any, tag: str, description: str, pool: str | None = None) -> Iterator[None]:
    """Run the block's Spark jobs under ``tag`` (so ``cancelJobsWithTag`` interrupts them),
    ``description`` and, if given, FAIR ``pool``; this thread's properties are reset after."""
    sc.addJobTag(tag)
    sc.setInterruptOnCancel(True)
    if pool is not None:
        sc.setLocalProperty("spark.scheduler.pool", pool)
    sc.setJobDescription(description)
    try:
        yield
    finally:
        try:
            sc.removeJobTag(tag)
            if pool is not None:
                sc.setLocalProperty("spark.scheduler.pool", None)
            sc.setJobDescription(None)
        except Exception:
            log.debug("could not reset Spark thread properties", exc_info=True)


# -- worker side ------------------------------------------------------------------------------

TOPOLOGIES_KEPT = 32
"""Topologies a worker keeps unpickled, the most recently used. A resident task outlives
the runs it serves (each run's topology has a token of its own), so without a bound it
would keep every run's; one dropped is unpickled again should a task need it, since each
task is sent its topology (``broadcast``, ``frozen``)."""

_topologies: OrderedDict[str, Topology] = OrderedDict()
_topologies_lock = threading.Lock()


def _kept(token: str) -> Topology | None:
    """The topology kept for ``token`` (now the most recently used), or None."""
    with _topologies_lock:
        topology = _topologies.get(token)
        if topology is not None:
            _topologies.move_to_end(token)
        return topology


def load_topology(token: str, broadcast: Any) -> Topology:
    """The topology in ``broadcast``, unpickled once per Python worker (keyed by ``token``)."""
    return _kept(token) or loaded_topology(token, broadcast.value)


def loaded_topology(token: str, frozen: bytes) -> Topology:
    """The topology ``frozen`` holds, unpickled once per process (keyed by ``token``): what
    a resident task is sent with each call instead of a broadcast."""
    kept = _kept(token)
    if kept is not None:
        return kept
    topology = pickle.loads(frozen)
    with _topologies_lock:
        topology = _topologies.setdefault(token, topology)
        _topologies.move_to_end(token)
        dropped = 0
        while len(_topologies) > TOPOLOGIES_KEPT:
            _topologies.popitem(last=False)
            dropped += 1
    _freeze_long_lived(unfreeze=dropped > 0)
    return topology


def _freeze_long_lived(unfreeze: bool = False) -> None:
    """Move what the worker holds for good (modules, the topologies) out of the cycle
    collector's reach: a reused worker runs ``gc.collect()`` after every task, and each
    full collection would walk all of it again. Whatever else is alive at that moment (the
    running task's own objects) is frozen too: should it become cyclic garbage, it stays,
    once per worker and topology. With ``unfreeze`` (a topology was dropped) everything
    frozen is collectable again first, so the dropped one's cycles are freed."""
    if unfreeze:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


Blob = tuple[int, bytes]
"""A receiving task's index in its component and a pickled list of shipments (or timings)."""


def _run_stage(
    index: int,
    items: Iterable[Blob],
    *,
    token: str,
    broadcast: Any,
    stage: StagePlan,
    hints: dict[str, TaskHints],
    job: JobSpec,
    timing_sink: str | None = None,
) -> Iterator[tuple[str, int, bytes]]:
    """One partition of a stage: every fused component's task ``index`` in turn.

    When ``job.timed``, the timings that came in and this partition's own go on to
    task 0 of ``timing_sink`` (the stage's first consumer) in a blob of their own."""
    output: list[tuple[str, int, bytes]] = []
    with collected_less_often():  # the tasks' allocations, not the yields
        began = time.time() if job.timed else 0.0
        if job.logging is not None:
            configure_worker_logging(*job.logging)
        topology = load_topology(token, broadcast)
        shipments: list[Shipment] = []
        timings: list[Timing] = []
        for _, blob in items:
            for item in pickle.loads(blob):
                if type(item) is Timing:
                    timings.append(item)
                else:
                    shipments.append(item)
        last = len(stage.components) - 1
        for position, component_id in enumerate(stage.components):
            run = TaskRun(
                topology,
                component_id,
                index,
                job_ids=job.ids,
                conf=job.conf,
                hints=hints[component_id],
                timed=job.timed,
                log_fields=job.log_fields,
                deadline=job.deadline,
            )
            run.run(shipments)
            if position < last:
                successor = stage.components[position + 1]
                local_task = topology.component_task_ids[successor][index]
                # Fused: task i only ever sends to task i; failures addressed to other
                # partitions are forwarded by this partition's successor instead.
                shipment = run.shipments().get(local_task) or Shipment(component_id, run.task_id)
                shipment.failures.extend(
                    FailureNotice(id, failure, True) for id, failure in run.failures.items()
                )
                shipments = [shipment]
                run.release()
                if job.timed:
                    ended = time.time()
                    timings.append(Timing(component_id, index, began, ended, run.busy))
                    began = ended
                continue
            blobs = run.blobs()
            run.release()
            if job.timed and timing_sink is not None:
                timings.append(Timing(component_id, index, began, time.time(), run.busy))
                output.append(
                    (timing_sink, 0, pickle.dumps(timings, protocol=pickle.HIGHEST_PROTOCOL))
                )
            for task, blob in blobs:
                component = topology.task_component[task]
                output.append((component, task - topology.component_task_ids[component][0], blob))
    yield from output


class Frozen:
    """A frozen topology where ``_run_stage`` expects a broadcast: what a resident task is
    sent with each call (unpickled once per process all the same, by token)."""

    def __init__(self, value: bytes) -> None:
        self.value = value


def run_stage_here(*args: Any, **kwargs: Any) -> list[tuple[str, int, bytes]]:
    """``_run_stage`` in this process (a resident task, a ``Frozen`` topology for its
    broadcast): what it yields, as a list."""
    return list(_run_stage(*args, **kwargs))


def _for_component(component: str, item: tuple[str, int, bytes]) -> bool:
    return item[0] == component


def _drop_component(item: tuple[str, int, bytes]) -> Blob:
    return item[1], item[2]


def _task_index(key: int) -> int:
    return key


# -- driver side ------------------------------------------------------------------------------


class SparkStages:
    """Runs a plan's Spark stages for one job (see the module doc)."""

    def __init__(self, sc: Any, plan: SparkPlan, token: str, broadcast: Any) -> None:
        self.sc = sc
        self.plan = plan
        self.token = token
        self.broadcast = broadcast

    def run(
        self,
        job: JobSpec,
        driver_shipments: dict[int, list[Shipment]],
        timings: list[Timing] | None = None,
    ) -> dict[int, list[Shipment]]:
        """Ship what driver components sent the stages' heads (taken out of
        ``driver_shipments``; tuples on streams the compiler synthesizes are dropped),
        run the job, and return what the stages sent driver-side components, by task.
        With ``job.timed`` the tasks' timings are appended to ``timings``."""
        sc = self.sc
        plan = self.plan
        if not plan.stages:
            return {}
        rdds: dict[int, Any] = {}
        persisted: list[Any] = []
        for stage in plan.stages:
            head = stage.head
            fed = head_shipments(plan, stage, driver_shipments)
            run = partial(
                _run_stage,
                token=self.token,
                broadcast=self.broadcast,
                stage=stage,
                hints={c: plan.hints[c] for c in stage.components},
                job=job,
                timing_sink=next(iter(plan.consumers.get(stage.index, ())), None),
            )
            if not stage.spark_inputs:
                slices = [
                    (index, pickle.dumps(fed.get(index, []), protocol=pickle.HIGHEST_PROTOCOL))
                    for index in range(stage.parallelism)
                ]
                rdd = sc.parallelize(slices, stage.parallelism)
            else:
                parts = [
                    rdds[source].filter(partial(_for_component, head)).map(_drop_component)
                    for source in stage.spark_inputs
                ]
                if fed:
                    blobs = [
                        (index, pickle.dumps(shipments, protocol=pickle.HIGHEST_PROTOCOL))
                        for index, shipments in fed.items()
                    ]
                    parts.append(sc.parallelize(blobs, len(blobs)))
                rdd = parts[0] if len(parts) == 1 else sc.union(parts)
                rdd = rdd.partitionBy(stage.parallelism, _task_index)
            rdd = rdd.mapPartitionsWithIndex(run)
            if plan.persisted(stage):
                rdd = rdd.persist()
                persisted.append(rdd)
            rdds[stage.index] = rdd
        driver_stages = [
            index
            for index, consumers in plan.consumers.items()
            if any(plan.placement[c] == DRIVER for c in consumers)
        ]
        try:
            final = [rdds[i] for i in driver_stages]
            result = (final[0] if len(final) == 1 else sc.union(final)).collect() if final else []
        finally:
            for rdd in persisted:
                rdd.unpersist()
        return collect_for_driver(plan, result, timings)


def head_shipments(
    plan: SparkPlan, stage: StagePlan, driver_shipments: dict[int, list[Shipment]]
) -> dict[int, list[Shipment]]:
    """What driver-side components sent ``stage``'s head, by task index (taken out of
    ``driver_shipments``; tuples on streams the compiler synthesizes are dropped)."""
    fed: dict[int, list[Shipment]] = {}
    for index, task in enumerate(plan.topology.component_task_ids[stage.head]):
        kept = [
            shipment
            for shipment in (
                _without_synthesized(s, plan.synthesized_streams)
                for s in driver_shipments.pop(task, [])
            )
            if shipment
        ]
        if kept:
            fed[index] = kept
    return fed


def collect_for_driver(
    plan: SparkPlan, result: Iterable[tuple[str, int, bytes]], timings: list[Timing] | None
) -> dict[int, list[Shipment]]:
    """What the stages' outputs ``result`` hold for driver-side components, by task (and the
    timings among them, appended to ``timings``)."""
    topology = plan.topology
    collected: dict[int, list[Shipment]] = {}
    for component, index, blob in result:
        if plan.placement.get(component) != DRIVER:
            continue
        task = topology.component_task_ids[component][index]
        for item in pickle.loads(blob):
            if type(item) is Timing:
                if timings is not None:
                    timings.append(item)
            else:
                collected.setdefault(task, []).append(item)
    return collected


def _without_synthesized(shipment: Shipment, synthesized: set[GlobalStreamId]) -> Shipment:
    """``shipment`` without its tuples on streams the compiler synthesizes at the receiver."""
    if not synthesized or not any(
        GlobalStreamId(shipment.source, stream) in synthesized for stream, _ in shipment.runs
    ):
        return shipment
    return Shipment(
        shipment.source,
        shipment.source_task,
        [
            (stream, rows)
            for stream, rows in shipment.runs
            if GlobalStreamId(shipment.source, stream) not in synthesized
        ],
        shipment.reports,
        shipment.failures,
    )
