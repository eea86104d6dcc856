"""The Spark batch executor (``executor="spark-batch"``): DRPC topologies as coordinated batch
jobs on a persistent session.

Contract. ``SparkExecutor(topology, services={"drpc.invocations": ...},
master=None, spark_conf=None, start_timeout=120, max_batch_size=256,
max_wait=0.01, max_jobs_in_flight=2)``:

- ``start()`` gets the process's SparkSession (``drpc.runtime``, which resolves
  ``master`` and ``spark_conf`` and fails with ``SparkStartError`` when no
  executor registers within ``start_timeout`` seconds), compiles the
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
- Deadlines: a job still running ``topology.message.timeout.secs`` (default
  30) after its launch has a stuck tuple tree: it is cancelled through its job
  tag and its requests fail with FAILED_REQUEST naming the step of the first
  Spark stage that had not finished, as Storm's DRPC spout fails a tree that
  times out. Once every request of a running job is past its server deadline
  the job is cancelled too (its requests got SERVER_TIMEOUT from the server).
  Tags and thread-local properties are cleared in ``finally``.
- Jobs run in a FAIR scheduler pool per function, so a short function's jobs
  do not queue behind a long one's.

Observation (``drpc.observe``; only when ``services`` holds an observer,
otherwise nothing is measured, shipped or looked up): ``batch_coalesced``
and ``job_started`` at each launch, ``job_finished(function, tag, ok,
seconds)`` when the job ends. Per request, before its outcome reaches the
invocations handle, ``step_finished`` for each of:

- ``coalesce``: fetched until its job launched;
- ``prepare-request``, ``join-result``, ``return-results`` (ending when it
  hands the outcome over): driver steps, ``attrs`` ``job`` (the tag) and
  ``batch_size``;
- every Spark step, from the first of its tasks' start to the last one's
  end; ``attrs``: ``spark_job_id`` (and ``spark_job_ids`` if the tag ran
  several jobs), ``job``, ``batch_size``, ``tasks`` and ``busy_ms`` (the
  seconds its tasks spent on this request, summed);
- ``spark-job``: the job itself, from its submission until the driver
  collected its output (so past the last step: moving results to the driver).

``request_failed_in`` names the failing step (``spark-job`` when the whole
job failed or was cancelled). ``step_started`` is reported live for
``coalesce``, the driver steps and the first Spark step (at submission);
later Spark steps and ``spark-job`` only get ``step_finished``. Spark steps
run in tasks on worker processes: each task measures its span with
``time.time()`` and its per-id seconds, and ships them with the data
(``Timing`` records forwarded stage to stage to the driver, never
accumulators). The driver converts wall time to its ``time.monotonic()``:
worker clocks are assumed in sync with the driver's (one machine, or NTP;
skew shifts those spans by it).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from drpc import config, runtime
from drpc.builders.drpc_components import (
    INVOCATIONS_SERVICE,
    RETURN_STREAM,
    release_request_pins,
    required_invocations,
    served_function,
)
from drpc.builders.linear_drpc import PREPARE_ID, SPOUT_ID
from drpc.errors import (
    DRPCExceptionType,
    Failure,
    InvalidTopologyError,
)
from drpc.executors.batch import TaskRun, gather_shipments
from drpc.executors.plan import SparkPlan, compile_plan
from drpc.executors.records import Shipment, Timing
from drpc.executors.spark.stages import JobSpec, SparkStages, tagged_job
from drpc.executors.spark.trace import (
    COALESCE_STEP,
    SPARK_JOB_STEP,
    JobTrace,
    RecordingInvocations,
)
from drpc.logs import request_extra, worker_settings
from drpc.model.streams import DEFAULT_STREAM_ID
from drpc.model.topology import Topology
from drpc.observe import NULL_OBSERVER, Observer, bus, observer_of
from drpc.requests import DRPCRequest, ReturnInfo
from drpc.semantics.runners import freeze
from drpc.sparkconf import DEFAULT_START_TIMEOUT

log = logging.getLogger(__name__)


TREE_TIMEOUT = "tree timeout"
DEADLINE = "deadline"
SHUTDOWN = "shutdown"


@dataclass
class Job:
    tag: str
    requests: list[DRPCRequest]
    deadline: float  # every request is past its server deadline (inf: some has none)
    tree_deadline: float  # launched + topology.message.timeout.secs
    started: float
    cancelled: str | None = None  # TREE_TIMEOUT, DEADLINE or SHUTDOWN
    stuck_in: tuple[str, ...] = ()  # on a tree timeout: the steps of the unfinished stage
    fetched: dict[ReturnInfo, float] = field(default_factory=dict)  # when (observing only)
    trace: JobTrace | None = None


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

    name = "spark-batch"

    def __init__(
        self,
        topology: Topology,
        *,
        services: dict[str, Any] | None = None,
        conf: dict[str, Any] | None = None,
        master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
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
        self.topology = topology
        self.function = served_function(topology, "Spark batch executor")
        self.conf = config.resolve(topology.conf, conf)
        self.services = dict(services or {})
        self.invocations = required_invocations(self.services, "Spark batch executor")
        self.observer: Observer = bus(observer_of(self.services))
        self._observing = self.observer is not NULL_OBSERVER
        self.master = master
        self.spark_conf = dict(spark_conf or {})
        self.start_timeout = start_timeout
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
        self._jobs: dict[str, Job] = {}
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
        session = runtime.get_session(
            self.master, self.spark_conf, start_timeout=self.start_timeout
        )
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
            job.cancelled = SHUTDOWN
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
        fetched: dict[ReturnInfo, float] = {}
        while self._running:
            try:
                self._cancel_expired_jobs()
                if len(self._jobs) < self.max_jobs_in_flight:
                    batch = self._fetch(self.max_batch_size, fetched)
                    gather = self.max_wait > 0 and self._jobs and len(batch) < self.max_batch_size
                    if batch and gather:
                        time.sleep(self.max_wait)
                        batch += self._fetch(self.max_batch_size - len(batch), fetched)
                    if batch:
                        self._launch(batch, fetched)
                        fetched = {}
                        continue
            except Exception:
                log.exception("the serving loop of %r failed; continuing", self.function)
            with self._cond:
                if not self._running:
                    break
                if not self._woken:
                    self._cond.wait(self.poll_interval)
                self._woken = False

    def _fetch(self, limit: int, fetched: dict[ReturnInfo, float]) -> list[DRPCRequest]:
        batch: list[DRPCRequest] = []
        while len(batch) < limit:
            request = self.invocations.fetch_request(self.function)
            if request is None:
                break
            batch.append(request)
        if batch and self._observing:
            now = time.monotonic()
            for request in batch:
                fetched[request.return_info] = now
        return batch

    def _launch(self, batch: list[DRPCRequest], fetched: dict[ReturnInfo, float]) -> None:
        now = time.monotonic()
        deadline = max(r.deadline if r.deadline is not None else float("inf") for r in batch)
        job = Job(
            f"drpc-{self._token[:8]}-{next(self._job_ids)}",
            batch,
            deadline,
            now + self.message_timeout,
            now,
        )
        self._jobs[job.tag] = job
        self.stats.requests += len(batch)
        self.stats.batch_sizes.append(len(batch))
        if self._observing:
            job.fetched = fetched
            job.trace = JobTrace(self.observer, job)
            self.observer.batch_coalesced(self.function, len(batch))
            self.observer.job_started(self.function, job.tag, len(batch), now)
            for request in batch:
                started = fetched.get(request.return_info, now)
                self.observer.step_started(request.return_info, COALESCE_STEP, started)
        assert self._pool is not None
        self._pool.submit(self._run_job, job)

    def _cancel_expired_jobs(self) -> None:
        now = time.monotonic()
        for job in list(self._jobs.values()):
            if job.cancelled:
                continue
            if now >= job.tree_deadline:
                job.stuck_in = self._unfinished_stage(job.tag)
                job.cancelled = TREE_TIMEOUT
                why = f"its tuple tree did not complete within {self.message_timeout:g} s" + (
                    f" (stuck in {', '.join(map(repr, job.stuck_in))})" if job.stuck_in else ""
                )
            elif now >= job.deadline:
                job.cancelled = DEADLINE
                why = f"all {len(job.requests)} of its requests are past their deadline"
            else:
                continue
            log.warning(
                "cancelling Spark job %s of %r: %s",
                job.tag,
                self.function,
                why,
                extra={
                    "function": self.function,
                    "job": job.tag,
                    "request_ids": [r.return_info.request_id for r in job.requests],
                },
            )
            self._sc.cancelJobsWithTag(job.tag)

    def _unfinished_stage(self, tag: str) -> tuple[str, ...]:
        """The steps of the first Spark stage of the job tagged ``tag`` that has not
        finished all its tasks (empty when Spark cannot tell)."""
        try:
            tracker = self._sc.statusTracker()
            stage_ids = sorted(
                stage
                for job_id in self._spark_job_ids(tag)
                if (info := tracker.getJobInfo(job_id)) is not None
                for stage in info.stageIds
            )
            if len(stage_ids) != len(self.plan.stages):
                return ()
            for plan_stage, stage_id in zip(self.plan.stages, stage_ids, strict=True):
                info = tracker.getStageInfo(stage_id)
                if info is None or info.numCompletedTasks < info.numTasks:
                    return tuple(plan_stage.components)
        except Exception:
            log.debug("could not tell which Spark stage of %s is unfinished", tag, exc_info=True)
        return ()

    # -- one job -----------------------------------------------------------------------------

    def _run_job(self, job: Job) -> None:
        description = f"drpc {self.function}: {len(job.requests)} requests"
        try:
            with tagged_job(self._sc, job.tag, description, pool=self._pool_name):
                self._execute(job)
            ok = True
        except Exception as error:
            ok = False
            self._fail_job(job, error)
        finally:
            for request in job.requests:
                release_request_pins(request.return_info)
            elapsed = time.monotonic() - job.started
            self.stats.jobs += 1
            self.stats.job_seconds.append(elapsed)
            if self._observing:
                self.observer.job_finished(self.function, job.tag, ok, elapsed)
            with self._cond:
                self._jobs.pop(job.tag, None)
                self._cond.notify()

    def _fail_job(self, job: Job, error: BaseException) -> None:
        if job.cancelled:
            self.stats.jobs_cancelled += 1
            if job.cancelled == TREE_TIMEOUT:
                steps = job.stuck_in
                failure = Failure.tree_timed_out(
                    self.message_timeout,
                    steps[0] if steps else None,
                    detail=(
                        f"one Spark stage runs steps {', '.join(map(repr, steps))}"
                        if len(steps) > 1
                        else ""
                    ),
                )
            elif job.cancelled == DEADLINE:
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
                f"{self.function!r} failed: {runtime.describe_spark_error(error)}",
            )
            log.error(
                "Spark job %s of %r failed: %s",
                job.tag,
                self.function,
                failure.message,
                extra={
                    "function": self.function,
                    "job": job.tag,
                    "request_ids": [r.return_info.request_id for r in job.requests],
                },
            )
        for request in job.requests:
            self._fail(job, request.return_info, failure)

    def _fail(self, job: Job, return_info: ReturnInfo, failure: Failure) -> None:
        """Fail one request of ``job``, reporting where and its spans first."""
        trace = job.trace
        if trace is not None:
            trace.failed(return_info, failure)
            trace.settle(return_info)
        self.invocations.fail_request(return_info, failure.to_exception())

    def _spark_job_ids(self, tag: str) -> list[int]:
        """Ids of the Spark jobs that ran with ``tag`` (empty if Spark cannot tell)."""
        try:
            tracker = self._sc._jsc.sc().statusTracker()
            return sorted(int(job_id) for job_id in tracker.getJobIdsForTag(tag))
        except Exception:
            log.debug("could not look up the Spark jobs of tag %s", tag, exc_info=True)
            return []

    def _execute(self, job: Job) -> None:
        topology = self.topology
        trace = job.trace
        recording = RecordingInvocations(self.invocations, trace)
        services = {**self.services, INVOCATIONS_SERVICE: recording}
        spout_task = topology.component_task_ids[SPOUT_ID][0]
        if trace is not None:
            trace.begin(PREPARE_ID)
        prepare = TaskRun(topology, PREPARE_ID, 0, job_ids=(), conf=self.conf, services=services)
        requests = Shipment(
            SPOUT_ID,
            spout_task,
            [(DEFAULT_STREAM_ID, [[r.args, r.return_info] for r in job.requests])],
        )
        driver_shipments = gather_shipments([prepare.run([requests])])
        returns: dict[Hashable, ReturnInfo] = {
            values[0]: values[1]
            for shipments in driver_shipments.values()
            for shipment in shipments
            if shipment.source == PREPARE_ID
            for stream, values in shipment.emitted()
            if stream == RETURN_STREAM
        }
        spec = JobSpec(
            tuple(returns),
            self.conf,
            timed=trace is not None,
            log_fields={
                id: {"request_id": return_info.request_id, "function": self.function}
                for id, return_info in returns.items()
            },
            logging=worker_settings(),
            deadline=time.time() + (job.tree_deadline - time.monotonic()),
        )
        stages = self._stages
        assert stages is not None, "the executor is not started"
        if trace is None:
            collected = stages.run(spec, driver_shipments)
        else:
            trace.finish()
            trace.ids = {return_info: id for id, return_info in returns.items()}
            timings: list[Timing] = []
            submitted = time.monotonic()
            if self.plan.stages:
                trace.started(self.plan.stages[0].head, submitted)
            collected = stages.run(spec, driver_shipments, timings)
            collected_at = time.monotonic()
            job_ids = self._spark_job_ids(job.tag)
            attrs: dict[str, Any] = {"spark_job_id": job_ids[-1]} if job_ids else {}
            if len(job_ids) > 1:
                attrs["spark_job_ids"] = job_ids
            trace.add_spark_steps(timings, attrs)
            trace.spans.append((SPARK_JOB_STEP, submitted, collected_at, {**attrs, **trace.common}))
        failures: dict[Hashable, Failure] = {}
        for component_id in self.plan.driver_components():
            if not self.plan.after_spark(component_id):
                continue
            if trace is not None:
                trace.begin(component_id)
            for index in range(topology.components[component_id].parallelism):
                task = topology.component_task_ids[component_id][index]
                inbox = driver_shipments.pop(task, []) + collected.pop(task, [])
                run = TaskRun(
                    topology,
                    component_id,
                    index,
                    job_ids=spec.ids,
                    conf=self.conf,
                    services=services,
                    hints=self.plan.hints[component_id],
                    log_fields=spec.log_fields,
                )
                run.run(inbox)
                failures.update(run.failures)
                for values, failure in run.uncoordinated_failures:
                    if len(values) == 2 and isinstance(values[1], ReturnInfo):
                        log.error(
                            "driver step %r failed for request %s: %s",
                            component_id,
                            values[1].request_id,
                            failure.message,
                            extra=request_extra(values[1].request_id, self.function),
                        )
                        self._fail(job, values[1], failure)
                        recording.delivered.add(values[1].request_id)
                    else:
                        log.error("driver step %r failed: %s", component_id, failure.message)
                for target, shipment in run.shipments().items():
                    driver_shipments.setdefault(target, []).append(shipment)
            if trace is not None:
                trace.finish()
        for id, return_info in returns.items():
            if return_info.request_id in recording.delivered:
                continue
            failure = failures.get(id) or Failure(
                DRPCExceptionType.INTERNAL_ERROR,
                "Internal error: the request's job finished without an outcome for it",
            )
            self._fail(job, return_info, failure)
