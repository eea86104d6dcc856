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
(``TIMING`` records forwarded stage to stage to the driver, never
accumulators). The driver converts wall time to its ``time.monotonic()``:
worker clocks are assumed in sync with the driver's (one machine, or NTP;
skew shifts those spans by it).
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
from drpc.executors.batch import DATA, FAIL, TIMING, Record, TaskHints, TaskRun
from drpc.executors.plan import DRIVER, SparkPlan, StagePlan, compile_plan, explain
from drpc.logs import configure_worker_logging, request_extra, worker_settings
from drpc.model.streams import DEFAULT_STREAM_ID, GlobalStreamId
from drpc.model.topology import Topology
from drpc.observe import NULL_OBSERVER, Observer, notify, observer_of
from drpc.requests import DRPCRequest, Invocations, ReturnInfo
from drpc.semantics.runners import freeze

log = logging.getLogger(__name__)

__all__ = ["SparkExecutor", "explain"]


@dataclass(frozen=True)
class JobSpec:
    """What every task of one job needs besides the topology."""

    ids: tuple[Hashable, ...]
    conf: dict[str, Any]
    timed: bool = False  # tasks measure themselves and ship TIMING records
    log_fields: dict[Hashable, dict[str, Any]] | None = None  # by id: fields of its log lines
    logging: tuple[str, int] | None = None  # the driver's (format, level), for the workers
    deadline: float | None = None  # time.time() until which tasks wait for async acks


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
    timing_sink: str | None = None,
) -> Iterator[tuple[str, int, bytes]]:
    """One partition of a stage: every fused component's task ``index`` in turn.

    When ``job.timed``, the TIMING records that came in and this partition's own go
    on to task 0 of ``timing_sink`` (the stage's first consumer) in a blob of their own."""
    began = time.time() if job.timed else 0.0
    if job.logging is not None:
        configure_worker_logging(*job.logging)
    topology = _load_topology(token, broadcast)
    records: list[Record] = []
    for _, blob in items:
        records.extend(pickle.loads(blob))
    timings: list[Record] = []
    if job.timed:
        timings = [r for r in records if r[0] == TIMING]
        if timings:
            records = [r for r in records if r[0] != TIMING]
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
        run.run(records)
        if position < last:
            successor = stage.components[position + 1]
            local_task = topology.component_task_ids[successor][index]
            # Fused: task i only ever sends to task i; failures addressed to other
            # partitions are forwarded by this partition's successor instead.
            records = run.records_by_task().get(local_task, [])
            records.extend((FAIL, id, failure, True) for id, failure in run.failures.items())
            if job.timed:
                ended = time.time()
                timings.append((TIMING, component_id, index, began, ended, run.busy))
                began = ended
            continue
        blobs = run.blobs()
        if job.timed and timing_sink is not None:
            timings.append((TIMING, component_id, index, began, time.time(), run.busy))
            yield timing_sink, 0, pickle.dumps(timings, protocol=pickle.HIGHEST_PROTOCOL)
        for task, blob in blobs:
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
    """The job's view of the invocations handle: remembers which requests got results,
    and reports a request's spans (``trace``) before its outcome goes out."""

    def __init__(self, invocations: Invocations, trace: _JobTrace | None = None) -> None:
        self._invocations = invocations
        self._trace = trace
        self.delivered: set[str] = set()

    def fetch_request(self, function: str) -> DRPCRequest | None:
        return None

    def result(self, return_info: ReturnInfo, result: str) -> None:
        if self._trace is not None:
            self._trace.settle(return_info)
        self._invocations.result(return_info, result)
        self.delivered.add(return_info.request_id)

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        if self._trace is not None:
            self._trace.settle(return_info)
        self._invocations.fail_request(return_info, error)
        self.delivered.add(return_info.request_id)


SPARK_JOB_STEP = "spark-job"
"""The Spark job's own span (submitted until its output was collected), and the step a
request failed in when its whole job failed or was cancelled."""
COALESCE_STEP = "coalesce"


class _JobTrace:
    """The spans of one job's requests, reported per request when it settles.

    Used by the job's thread only. Spans shared by every request of the job are
    kept once; ``busy`` holds per-id seconds of Spark steps."""

    def __init__(self, observer: Observer, job: _Job) -> None:
        self.observer = observer
        self.job = job
        self.common = {"job": job.tag, "batch_size": len(job.requests)}
        self.spans: list[tuple[str, float, float, dict[str, Any]]] = []
        self.busy: dict[str, dict[Hashable, float]] = {}
        self.ids: dict[ReturnInfo, Hashable] = {}
        self.current: tuple[str, float] | None = None
        self.reported: set[ReturnInfo] = set()

    def started(self, step: str, now: float) -> None:
        """A step began for every request of the job (reported live)."""
        for request in self.job.requests:
            notify(self.observer, "step_started", request.return_info, step, now)

    def begin(self, step: str) -> float:
        now = time.monotonic()
        self.current = (step, now)
        self.started(step, now)
        return now

    def finish(self) -> None:
        assert self.current is not None
        step, start = self.current
        self.spans.append((step, start, time.monotonic(), self.common))
        self.current = None

    def add_spark_steps(self, timings: list[Record], attrs: dict[str, Any]) -> None:
        """Spark steps from their tasks' TIMING records (worker wall clock to monotonic)."""
        offset = time.time() - time.monotonic()
        steps: dict[str, list[Any]] = {}
        for _, component, _, began, ended, busy in timings:
            step = steps.get(component)
            if step is None:
                steps[component] = [began, ended, 1]
            else:
                step[0], step[1], step[2] = min(step[0], began), max(step[1], ended), step[2] + 1
            if busy:
                per_id = self.busy.setdefault(component, {})
                for id, seconds in busy.items():
                    per_id[id] = per_id.get(id, 0.0) + seconds
        for component, (began, ended, tasks) in sorted(steps.items(), key=lambda i: i[1][1]):
            self.spans.append(
                (
                    component,
                    began - offset,
                    ended - offset,
                    {**attrs, **self.common, "tasks": tasks},
                )
            )

    def failed(self, return_info: ReturnInfo, failure: Failure) -> None:
        step = failure.component
        if step is None:
            step = self.current[0] if self.current is not None else SPARK_JOB_STEP
        reason = f"{failure.type.name}: {failure.message}"
        notify(self.observer, "request_failed_in", return_info, step, reason)

    def settle(self, return_info: ReturnInfo) -> None:
        """Report the request's spans so far (the running step ends now)."""
        if return_info in self.reported:
            return
        self.reported.add(return_info)
        job, observer = self.job, self.observer
        fetched = job.fetched.get(return_info, job.started)
        notify(
            observer,
            "step_finished",
            return_info,
            COALESCE_STEP,
            fetched,
            job.started,
            self.common,
        )
        id = self.ids.get(return_info)
        for step, start, end, attrs in self.spans:
            busy = self.busy.get(step)
            if busy is not None:
                attrs = {**attrs, "busy_ms": round(busy.get(id, 0.0) * 1000.0, 3)}
            notify(observer, "step_finished", return_info, step, start, end, attrs)
        if self.current is not None:
            step, start = self.current
            end = time.monotonic()
            notify(observer, "step_finished", return_info, step, start, end, self.common)


TREE_TIMEOUT = "tree timeout"
DEADLINE = "deadline"
SHUTDOWN = "shutdown"


@dataclass
class _Job:
    tag: str
    requests: list[DRPCRequest]
    deadline: float  # every request is past its server deadline (inf: some has none)
    tree_deadline: float  # launched + topology.message.timeout.secs
    started: float
    cancelled: str | None = None  # TREE_TIMEOUT, DEADLINE or SHUTDOWN
    stuck_in: tuple[str, ...] = ()  # on a tree timeout: the steps of the unfinished stage
    fetched: dict[ReturnInfo, float] = field(default_factory=dict)  # when (observing only)
    trace: _JobTrace | None = None


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
        self.observer: Observer = observer_of(self.services)
        self._observing = self.observer is not NULL_OBSERVER
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
        job = _Job(
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
            job.trace = _JobTrace(self.observer, job)
            notify(self.observer, "batch_coalesced", self.function, len(batch))
            notify(self.observer, "job_started", self.function, job.tag, len(batch), now)
            for request in batch:
                started = fetched.get(request.return_info, now)
                notify(self.observer, "step_started", request.return_info, COALESCE_STEP, started)
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

    def _run_job(self, job: _Job) -> None:
        sc = self._sc
        try:
            sc.addJobTag(job.tag)
            sc.setInterruptOnCancel(True)
            sc.setLocalProperty("spark.scheduler.pool", self._pool_name)
            sc.setJobDescription(f"drpc {self.function}: {len(job.requests)} requests")
            self._execute(job)
            ok = True
        except Exception as error:
            ok = False
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
            if self._observing:
                notify(self.observer, "job_finished", self.function, job.tag, ok, elapsed)
            with self._cond:
                self._jobs.pop(job.tag, None)
                self._cond.notify()

    def _fail_job(self, job: _Job, error: BaseException) -> None:
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
                f"{self.function!r} failed: {_describe_spark_error(error)}",
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

    def _fail(self, job: _Job, return_info: ReturnInfo, failure: Failure) -> None:
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

    def _execute(self, job: _Job) -> None:
        topology = self.topology
        trace = job.trace
        recording = _RecordingInvocations(self.invocations, trace)
        services = {**self.services, INVOCATIONS_SERVICE: recording}
        spout_task = topology.component_task_ids[SPOUT_ID][0]
        if trace is not None:
            trace.begin(PREPARE_ID)
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
        if trace is None:
            collected = self._stages.run(spec, driver_records)
        else:
            trace.finish()
            trace.ids = {return_info: id for id, return_info in returns.items()}
            timings: list[Record] = []
            submitted = time.monotonic()
            if self.plan.stages:
                trace.started(self.plan.stages[0].head, submitted)
            collected = self._stages.run(spec, driver_records, timings)
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
                records = driver_records.pop(task, []) + collected.pop(task, [])
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
                run.run(records)
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
                for target, out in run.records_by_task().items():
                    driver_records.setdefault(target, []).extend(out)
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


class SparkStages:
    """Runs a plan's Spark stages for one job; returns the records for driver tasks.

    ``driver_records`` holds what driver-side components emitted, by receiving
    task id; records for the stages' heads are taken out of it (shipped, or
    dropped when their stream is counted locally), the rest stays for the
    driver's own components. With ``job.timed`` the tasks' TIMING records are
    appended to ``timings`` (never to the returned records).
    """

    def __init__(self, sc: Any, plan: SparkPlan, token: str, broadcast: Any) -> None:
        self.sc = sc
        self.plan = plan
        self.token = token
        self.broadcast = broadcast

    def run(
        self,
        job: JobSpec,
        driver_records: dict[int, list[Record]],
        timings: list[Record] | None = None,
    ) -> dict[int, list[Record]]:
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
            records = pickle.loads(blob)
            if job.timed and records and records[0][0] == TIMING:
                if timings is not None:
                    timings.extend(records)
                continue
            task = topology.component_task_ids[component][index]
            collected.setdefault(task, []).extend(records)
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
