"""The Spark executor: DRPC topologies as coordinated batch jobs on a persistent session.

Contract. ``SparkExecutor(topology, services={"drpc.invocations": ...},
master=None, max_batch_size=256, max_wait=0.01, max_jobs_in_flight=2)``:

- ``start()`` gets the process's SparkSession (``drpc.runtime``), compiles the
  topology (``drpc.executors.plan``), broadcasts it once (cloudpickle, so
  bolts defined in ``__main__`` travel) and starts serving its DRPC function;
  ``stop()`` cancels the jobs in flight and stops serving (the session stays).
- Coalescing: while a job slot is free, every queued request (up to
  ``max_batch_size``) goes into one job; with every slot busy, requests wait
  in their queue and the next free slot takes them all. When a slot frees up
  while other jobs still run, the executor gathers for up to ``max_wait``
  seconds first, so the wave of callers a finished job releases lands in one
  job; an idle executor launches a lone request at once. Each request of a job
  is an id of its own through the coordinated steps, so one failing request
  never fails its batch-mates: per-id failures travel as records in the data
  flow.
- A job: PrepareRequest on the driver, one Spark job through the compiled
  stages (``drpc.executors.batch`` runs each task: the same bolt runners and
  coordination tracker as the local engine), the last stage's output
  collected, JoinResult and ReturnResults on the driver.
- A Spark failure of a job (a task that Spark did not retry, a crashed Python
  worker) fails every request of that job with INTERNAL_ERROR naming the
  cause; nothing hangs and no request is left without an outcome.
- Deadlines: once every request of a running job is past its deadline the
  job is cancelled through its job tag (tags and thread-local properties are
  cleared in ``finally``); its requests get SERVER_TIMEOUT.
- Jobs run in a FAIR scheduler pool per function, so a short function's jobs
  do not queue behind a long one's.
"""

from __future__ import annotations

import itertools
import logging
import pickle
import threading
import time
import uuid
from collections import deque
from collections.abc import Hashable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from drpc import config, runtime
from drpc.builders.drpc_components import INVOCATIONS_SERVICE
from drpc.builders.linear_drpc import PREPARE_ID, SPOUT_ID
from drpc.errors import (
    DRPCExceptionType,
    DRPCExecutionException,
    Failure,
    InvalidTopologyError,
)
from drpc.executors.batch import DATA, FAIL, Record, TaskHints, TaskRun
from drpc.executors.plan import DRIVER, SparkPlan, StagePlan, compile_plan, explain
from drpc.model.streams import DEFAULT_STREAM_ID, GlobalStreamId
from drpc.model.topology import Topology
from drpc.requests import DRPCRequest, Invocations, ReturnInfo
from drpc.semantics.runners import freeze

log = logging.getLogger(__name__)

__all__ = ["SparkExecutor", "explain"]


@dataclass(frozen=True)
class JobSpec:
    """What every task of one job needs besides the topology."""

    ids: tuple[Hashable, ...]
    conf: dict[str, Any]


# -- worker side ------------------------------------------------------------------------------

_topologies: dict[str, Topology] = {}


def _load_topology(token: str, broadcast: Any) -> Topology:
    topology = _topologies.get(token)
    if topology is None:
        topology = pickle.loads(broadcast.value)
        _topologies[token] = topology
    return topology


def _run_stage(
    index: int,
    items: Iterable[tuple[int, bytes]],
    *,
    token: str,
    broadcast: Any,
    stage: StagePlan,
    hints: dict[str, TaskHints],
    job: JobSpec,
) -> Iterator[tuple[str, int, bytes]]:
    """One partition of a stage: every fused component's task ``index`` in turn."""
    topology = _load_topology(token, broadcast)
    records: list[Record] = []
    for _, blob in items:
        records.extend(pickle.loads(blob))
    last = len(stage.components) - 1
    for position, component_id in enumerate(stage.components):
        run = TaskRun(
            topology,
            component_id,
            index,
            job_ids=job.ids,
            conf=job.conf,
            hints=hints[component_id],
        )
        run.run(records)
        if position < last:
            successor = stage.components[position + 1]
            local_task = topology.component_task_ids[successor][index]
            # Fused: task i only ever sends to task i; failures addressed to other
            # partitions are forwarded by this partition's successor instead.
            records = run.records_by_task().get(local_task, [])
            records.extend((FAIL, id, failure, True) for id, failure in run.failures.items())
            continue
        for task, blob in run.blobs():
            component = topology.task_component[task]
            yield component, task - topology.component_task_ids[component][0], blob


def _for_component(component: str, item: tuple[str, int, bytes]) -> bool:
    return item[0] == component


def _drop_component(item: tuple[str, int, bytes]) -> tuple[int, bytes]:
    return item[1], item[2]


def _task_index(key: int) -> int:
    return key


# -- driver side ------------------------------------------------------------------------------


class _RecordingInvocations:
    """The job's view of the invocations handle: remembers which requests got results."""

    def __init__(self, invocations: Invocations) -> None:
        self._invocations = invocations
        self.delivered: set[str] = set()

    def fetch_request(self, function: str) -> DRPCRequest | None:
        return None

    def result(self, return_info: ReturnInfo, result: str) -> None:
        self._invocations.result(return_info, result)
        self.delivered.add(return_info.request_id)

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        self._invocations.fail_request(return_info, error)
        self.delivered.add(return_info.request_id)


@dataclass
class _Job:
    tag: str
    requests: list[DRPCRequest]
    deadline: float
    started: float
    cancelled: bool = False


@dataclass
class SparkExecutorStats:
    jobs: int = 0
    jobs_failed: int = 0
    jobs_cancelled: int = 0
    requests: int = 0
    batch_sizes: deque[int] = field(default_factory=lambda: deque(maxlen=1000))
    job_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=1000))


class SparkExecutor:
    """Serves a DRPC topology by running coalesced batches of requests as Spark jobs."""

    name = "spark"

    def __init__(
        self,
        topology: Topology,
        *,
        services: dict[str, Any] | None = None,
        conf: dict[str, Any] | None = None,
        master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        max_batch_size: int = 256,
        max_wait: float = 0.01,
        max_jobs_in_flight: int = 2,
        poll_interval: float = 0.02,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_jobs_in_flight < 1:
            raise ValueError(f"max_jobs_in_flight must be >= 1, got {max_jobs_in_flight}")
        if max_wait < 0:
            raise ValueError(f"max_wait must be >= 0, got {max_wait}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        if topology.drpc_function is None:
            raise InvalidTopologyError(
                f"topology {topology.name!r} serves no DRPC function; the Spark executor serves "
                "DRPC topologies (transactional topologies run through drpc.transactional)"
            )
        self.topology = topology
        self.function = topology.drpc_function
        self.conf = config.resolve(topology.conf, conf)
        self.services = dict(services or {})
        if INVOCATIONS_SERVICE not in self.services:
            raise ValueError(f"the Spark executor needs services[{INVOCATIONS_SERVICE!r}]")
        self.invocations: Invocations = self.services[INVOCATIONS_SERVICE]
        self.master = master
        self.spark_conf = dict(spark_conf or {})
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait
        self.max_jobs_in_flight = max_jobs_in_flight
        self.poll_interval = poll_interval
        self.message_timeout = float(self.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        self.plan: SparkPlan = compile_plan(topology)
        self.stats = SparkExecutorStats()
        self._token = uuid.uuid4().hex
        self._pool_name = f"drpc-{self.function}"
        self._cond = threading.Condition()
        self._woken = False
        self._running = False
        self._jobs: dict[str, _Job] = {}
        self._job_ids = itertools.count(1)
        self._unsubscribe: Any = None
        self._loop: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._broadcast: Any = None
        self._sc: Any = None
        self._stages: SparkStages | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> SparkExecutor:
        if self._running:
            return self
        try:
            frozen = freeze(self.topology)
        except Exception as error:
            raise InvalidTopologyError(
                f"topology {self.topology.name!r} cannot be pickled for Spark workers: "
                f"{type(error).__name__}: {error}"
            ) from error
        session = runtime.get_session(self.master, self.spark_conf)
        self._sc = session.sparkContext
        self._broadcast = self._sc.broadcast(frozen)
        self._stages = SparkStages(self._sc, self.plan, self._token, self._broadcast)
        self._pool = ThreadPoolExecutor(self.max_jobs_in_flight, thread_name_prefix=self._pool_name)
        self._running = True
        add_listener = getattr(self.invocations, "add_listener", None)
        if add_listener is not None:
            self._unsubscribe = add_listener(self.function, self._wake)
        self._loop = threading.Thread(
            target=self._serve, name=f"{self._pool_name}-loop", daemon=True
        )
        self._loop.start()
        log.info(
            "serving DRPC function %r on Spark (%s): %d stages, %d shuffles, up to %d jobs in "
            "flight of up to %d requests",
            self.function,
            self._sc.master,
            len(self.plan.stages),
            self.plan.shuffles,
            self.max_jobs_in_flight,
            self.max_batch_size,
        )
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if not self._running:
            return
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._unsubscribe is not None:
            self._unsubscribe()
        for job in list(self._jobs.values()):
            job.cancelled = True
            self._sc.cancelJobsWithTag(job.tag)
        if self._loop is not None:
            self._loop.join(timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._broadcast is not None:
            try:
                self._broadcast.unpersist()
            except Exception:
                log.debug("could not unpersist the topology broadcast", exc_info=True)
        log.info("stopped serving DRPC function %r on Spark", self.function)

    def __enter__(self) -> SparkExecutor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def jobs_in_flight(self) -> int:
        return len(self._jobs)

    # -- the coalescing loop ----------------------------------------------------------------

    def _wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def _serve(self) -> None:
        while self._running:
            try:
                self._cancel_expired_jobs()
                if len(self._jobs) < self.max_jobs_in_flight:
                    batch = self._fetch(self.max_batch_size)
                    gather = self.max_wait > 0 and self._jobs and len(batch) < self.max_batch_size
                    if batch and gather:
                        time.sleep(self.max_wait)
                        batch += self._fetch(self.max_batch_size - len(batch))
                    if batch:
                        self._launch(batch)
                        continue
            except Exception:
                log.exception("the serving loop of %r failed; continuing", self.function)
            with self._cond:
                if not self._running:
                    break
                if not self._woken:
                    self._cond.wait(self.poll_interval)
                self._woken = False

    def _fetch(self, limit: int) -> list[DRPCRequest]:
        batch: list[DRPCRequest] = []
        while len(batch) < limit:
            request = self.invocations.fetch_request(self.function)
            if request is None:
                break
            batch.append(request)
        return batch

    def _launch(self, batch: list[DRPCRequest]) -> None:
        now = time.monotonic()
        deadline = max(
            r.deadline if r.deadline is not None else now + self.message_timeout for r in batch
        )
        job = _Job(f"drpc-{self._token[:8]}-{next(self._job_ids)}", batch, deadline, now)
        self._jobs[job.tag] = job
        self.stats.requests += len(batch)
        self.stats.batch_sizes.append(len(batch))
        assert self._pool is not None
        self._pool.submit(self._run_job, job)

    def _cancel_expired_jobs(self) -> None:
        now = time.monotonic()
        for job in list(self._jobs.values()):
            if not job.cancelled and now >= job.deadline:
                job.cancelled = True
                log.warning(
                    "cancelling Spark job %s of %r: all %d of its requests are past their deadline",
                    job.tag,
                    self.function,
                    len(job.requests),
                )
                self._sc.cancelJobsWithTag(job.tag)

    # -- one job -----------------------------------------------------------------------------

    def _run_job(self, job: _Job) -> None:
        sc = self._sc
        try:
            sc.addJobTag(job.tag)
            sc.setInterruptOnCancel(True)
            sc.setLocalProperty("spark.scheduler.pool", self._pool_name)
            sc.setJobDescription(f"drpc {self.function}: {len(job.requests)} requests")
            self._execute(job)
        except Exception as error:
            self._fail_job(job, error)
        finally:
            try:
                sc.removeJobTag(job.tag)
                sc.setLocalProperty("spark.scheduler.pool", None)
                sc.setJobDescription(None)
            except Exception:
                log.debug("could not reset Spark thread properties", exc_info=True)
            elapsed = time.monotonic() - job.started
            self.stats.jobs += 1
            self.stats.job_seconds.append(elapsed)
            with self._cond:
                self._jobs.pop(job.tag, None)
                self._cond.notify()

    def _fail_job(self, job: _Job, error: BaseException) -> None:
        if job.cancelled:
            self.stats.jobs_cancelled += 1
            if self._running:
                failure = Failure.timed_out(
                    "the Spark job was cancelled after every request of it passed its deadline"
                )
            else:
                failure = Failure(DRPCExceptionType.SERVER_SHUTDOWN, "Server Shutting Down")
        else:
            self.stats.jobs_failed += 1
            failure = Failure(
                DRPCExceptionType.INTERNAL_ERROR,
                f"Internal error: the Spark job for {len(job.requests)} requests of "
                f"{self.function!r} failed: {_describe_spark_error(error)}",
            )
            log.error("Spark job %s of %r failed: %s", job.tag, self.function, failure.message)
        exception = failure.to_exception()
        for request in job.requests:
            self.invocations.fail_request(request.return_info, exception)

    def _execute(self, job: _Job) -> None:
        topology = self.topology
        recording = _RecordingInvocations(self.invocations)
        services = {**self.services, INVOCATIONS_SERVICE: recording}
        spout_task = topology.component_task_ids[SPOUT_ID][0]
        prepare = TaskRun(topology, PREPARE_ID, 0, job_ids=(), conf=self.conf, services=services)
        prepare.run(
            (DATA, SPOUT_ID, DEFAULT_STREAM_ID, spout_task, [r.args, r.return_info])
            for r in job.requests
        )
        driver_records: dict[int, list[Record]] = prepare.records_by_task()
        returns: dict[Hashable, ReturnInfo] = {}
        for records in driver_records.values():
            for record in records:
                if record[0] == DATA and record[1] == PREPARE_ID and record[2] == "ret":
                    returns[record[4][0]] = record[4][1]
        spec = JobSpec(tuple(returns), self.conf)
        collected = self._stages.run(spec, driver_records)
        failures: dict[Hashable, Failure] = {}
        for component_id in self.plan.driver_components():
            if not self.plan.after_spark(component_id):
                continue
            for index in range(topology.components[component_id].parallelism):
                task = topology.component_task_ids[component_id][index]
                records = driver_records.pop(task, []) + collected.pop(task, [])
                run = TaskRun(
                    topology,
                    component_id,
                    index,
                    job_ids=spec.ids,
                    conf=self.conf,
                    services=services,
                    hints=self.plan.hints[component_id],
                )
                run.run(records)
                failures.update(run.failures)
                for values, failure in run.uncoordinated_failures:
                    log.error("driver step %r failed: %s", component_id, failure.message)
                    if len(values) == 2 and isinstance(values[1], ReturnInfo):
                        self.invocations.fail_request(values[1], failure.to_exception())
                        recording.delivered.add(values[1].request_id)
                for target, out in run.records_by_task().items():
                    driver_records.setdefault(target, []).extend(out)
        for id, return_info in returns.items():
            if return_info.request_id in recording.delivered:
                continue
            failure = failures.get(id) or Failure(
                DRPCExceptionType.INTERNAL_ERROR,
                "Internal error: the request's job finished without an outcome for it",
            )
            self.invocations.fail_request(return_info, failure.to_exception())


class SparkStages:
    """Runs a plan's Spark stages for one job; returns the records for driver tasks.

    ``driver_records`` holds what driver-side components emitted, by receiving
    task id; records for the stages' heads are taken out of it (shipped, or
    dropped when their stream is counted locally), the rest stays for the
    driver's own components.
    """

    def __init__(self, sc: Any, plan: SparkPlan, token: str, broadcast: Any) -> None:
        self.sc = sc
        self.plan = plan
        self.token = token
        self.broadcast = broadcast

    def run(self, job: JobSpec, driver_records: dict[int, list[Record]]) -> dict[int, list[Record]]:
        sc = self.sc
        plan = self.plan
        topology = plan.topology
        if not plan.stages:
            return {}
        rdds: dict[int, Any] = {}
        persisted: list[Any] = []
        for stage in plan.stages:
            head = stage.head
            head_tasks = topology.component_task_ids[head]
            fed: dict[int, list[Record]] = {}
            for index, task in enumerate(head_tasks):
                records = [
                    r
                    for r in driver_records.pop(task, [])
                    if not (r[0] == DATA and GlobalStreamId(r[1], r[2]) in plan.synthesized_streams)
                ]
                if records:
                    fed[index] = records
            run = partial(
                _run_stage,
                token=self.token,
                broadcast=self.broadcast,
                stage=stage,
                hints={c: plan.hints[c] for c in stage.components},
                job=job,
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
                        (index, pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL))
                        for index, records in fed.items()
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
        collected: dict[int, list[Record]] = {}
        for component, index, blob in result:
            if plan.placement.get(component) != DRIVER:
                continue
            task = topology.component_task_ids[component][index]
            collected.setdefault(task, []).extend(pickle.loads(blob))
        return collected


def _describe_spark_error(error: BaseException) -> str:
    text = str(getattr(error, "java_exception", None) or error)
    for marker in ("Python worker exited unexpectedly", "PythonException", "SparkException"):
        position = text.find(marker)
        if position >= 0:
            text = text[position:]
            break
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return first[:400]
