"""Running a transactional topology: coordinator loop, processing backends, ordered commits.

Contract. ``run(topology, state_dir=..., executor="local"|"spark",
max_spout_pending=None, until_idle=True)`` drives one transactional topology
until its source runs dry (a committed batch emitted nothing) or
``max_batches`` have committed, and returns what was committed:

- the coordinator (``drpc.transactional.coordinator``) decides which batches
  to process and which to commit; batch metadata is cached durably in the
  state directory before a batch is emitted, so a replay (after a failure or
  a restart) gets the same metadata;
- the **processing phase** of an attempt (the emitter and every bolt that is
  not a committer nor after one) runs on the executor: on ``"local"`` through
  the in-process streaming engine (a batch is processed when its tuple tree
  completes), on ``"spark"`` as one Spark job per attempt with the emitters on
  the driver; up to ``max_spout_pending`` attempts at once (None: the
  topology's ``topology.max.spout.pending``, else 1, as Storm's coordinator
  reads it). What the
  processing phase sends to commit-phase bolts is captured;
- the **commit phase** runs on this thread, strictly in txid order: the
  committers (``finish_batch`` only now) and the bolts after them run over
  the captured tuples inside ONE LMDB write transaction that also holds every
  state map write, the opaque spout's partition metadata and the commit
  record; a crash keeps all of a commit or none of it;
- a failure in either phase (``FailedException``, a timeout, a Spark failure,
  a full map past its limit) fails that transaction and every later active
  one; they are re-emitted with new attempts and the same metadata; a txid
  that fails ``max_attempts`` times (default 100) stops the run with
  ``TransactionalError`` naming it and its last failure (a batch that can never
  pass would otherwise replay forever, as in Storm);
- a commit that does not fit in the state directory even after the map grew
  to ``max_map_size`` (``state_options``) stops the run at once with
  ``TransactionalError`` caused by ``StateFullError``: nothing of that batch
  is committed, earlier commits stay, and a restart with a larger
  ``max_map_size`` commits it (a replay would write the same data again);
- restarting with the same state directory resumes after the last commit;
- events go to the ``drpc.observe`` observer given as ``observer``
  (``tx_started``, ``tx_committed``, ``tx_replayed`` with cause
  "processing" or "commit"); ``status()`` is a snapshot for dashboards,
  safe from any thread.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from drpc import config
from drpc.builders.transactional import TransactionalInfo, TransactionalTopologyBuilder
from drpc.errors import (
    DRPCExceptionType,
    Failure,
    InvalidTopologyError,
    StateFullError,
    TransactionalError,
)
from drpc.executors.batch import DATA, FAIL, REPORT, Record, TaskHints, TaskRun
from drpc.logs import worker_settings
from drpc.model.components import BaseRichBolt, Conf, OutputCollector
from drpc.model.context import TopologyContext
from drpc.model.streams import COORDINATED_STREAM_ID
from drpc.model.topology import Topology, TopologyBuilder
from drpc.model.tuples import Tuple
from drpc.observe import NULL_OBSERVER, OBSERVER_SERVICE, Observer, notify
from drpc.state import CoordinatorState, StateEnvironment
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.coordinator import (
    Decision,
    EmitBatch,
    EmitCommit,
    TransactionalCoordinator,
)
from drpc.transactional.spouts import (
    BATCH_STREAM,
    COMMIT_STREAM,
    TRANSACTIONAL_SERVICE,
    TransactionalServices,
    commit_opaque_metas,
    spout_coordinator,
)
from drpc.transactional.state import STATE_DIR_CONF, STATE_SERVICE, TopologyState, commit_scope

log = logging.getLogger(__name__)

CAPTURE_SERVICE = "drpc.transactional.capture"
EXECUTORS = ("local", "spark")


@dataclass
class CommitInfo:
    txid: int
    attempt: TransactionAttempt
    tuples: int  # emitted by the spout for this batch
    outputs: dict[str, list[list[Any]]]  # what commit-phase bolts emitted to no one
    seconds: float  # commit phase duration


@dataclass
class RunResult:
    topology_id: str
    commits: list[CommitInfo] = field(default_factory=list)
    replays: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: float = 0.0

    @property
    def tuples(self) -> int:
        return sum(commit.tuples for commit in self.commits)

    @property
    def last_txid(self) -> int | None:
        return self.commits[-1].txid if self.commits else None

    def outputs(self, component: str) -> list[list[Any]]:
        """Everything ``component`` emitted to no one, commit after commit."""
        return [values for commit in self.commits for values in commit.outputs.get(component, [])]


@dataclass(frozen=True)
class Processed:
    attempt: TransactionAttempt
    captured: dict[int, list[Record]]
    tuples: int


@dataclass(frozen=True)
class ProcessingFailed:
    attempt: TransactionAttempt
    failure: Failure


Event = Processed | ProcessingFailed


def _failure_text(failure: Failure | None) -> str:
    return failure.message if failure is not None else "failed"


class _Metadata:
    """The coordinator's ``MetadataSource``: durable per-txid metadata from the spout."""

    def __init__(self, state: CoordinatorState, coordinator: Any) -> None:
        self.state = state
        self.coordinator = coordinator
        self.stopped = False
        self.resume_at = 0.0  # no new transaction before this time.monotonic() (idle source)

    def has_cache(self, txid: int) -> bool:
        return self.state.batch_meta.has_cache(txid)

    def is_ready(self) -> bool:
        return (
            not self.stopped
            and time.monotonic() >= self.resume_at
            and bool(self.coordinator.is_ready())
        )

    def get_state(self, txid: int) -> Any:
        return self.state.batch_meta.get_state(txid, self.coordinator.initialize_transaction)


def _captured_failure(captured: dict[int, list[Record]]) -> Failure | None:
    for records in captured.values():
        for record in records:
            if record[0] == FAIL:
                return record[2]
    return None


# -- the local backend: the in-process streaming engine ---------------------------------------


class CaptureBolt(BaseRichBolt):
    """Stands in for a commit-phase bolt during processing: keeps what it receives."""

    def __init__(self, component_id: str) -> None:
        self.component_id = component_id
        self._store: _Captures | None = None
        self._collector: OutputCollector | None = None
        self._index = 0

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        self._store = context.services[CAPTURE_SERVICE]
        self._collector = collector
        self._index = context.this_task_index

    def execute(self, tuple: Tuple) -> None:
        assert self._store is not None and self._collector is not None
        self._store.add(self.component_id, self._index, tuple)
        self._collector.ack(tuple)


class _Captures:
    """What capture bolts received, per attempt, as batch records of the full topology."""

    def __init__(self, processing: Topology, full: Topology) -> None:
        self._lock = threading.Lock()
        self._records: dict[TransactionAttempt, dict[int, list[Record]]] = {}
        self._processing = processing
        self._full = full

    def _full_task(self, task: int) -> int:
        component = self._processing.task_component[task]
        index = self._processing.component_task_ids[component].index(task)
        return self._full.component_task_ids[component][index]

    def add(self, component: str, index: int, received: Tuple) -> None:
        source_task = self._full_task(received.source_task)
        if received.source_stream == COORDINATED_STREAM_ID:
            record: Record = (
                REPORT,
                received.source_component,
                source_task,
                {received[0]: received[1]},
            )
        else:
            record = (
                DATA,
                received.source_component,
                received.source_stream,
                source_task,
                received.values,
            )
        target = self._full.component_task_ids[component][index]
        with self._lock:
            self._records.setdefault(received[0], {}).setdefault(target, []).append(record)

    def take(self, attempt: TransactionAttempt) -> dict[int, list[Record]]:
        with self._lock:
            return self._records.pop(attempt, {})


def batch_log_fields(topology_id: str, attempt: TransactionAttempt, phase: str) -> dict[str, Any]:
    """``extra=`` fields of a log line about one batch attempt (also the logging context
    while a task handles the batch)."""
    return {
        "topology": topology_id,
        "txid": attempt.txid,
        "attempt_id": attempt.attempt_id,
        "phase": phase,
    }


class LocalBackend:
    """Processes attempts on the in-process engine; commit-phase bolts are captured."""

    def __init__(
        self,
        topology: Topology,
        info: TransactionalInfo,
        conf: dict[str, Any],
        services: dict[str, Any],
        transactional: TransactionalServices,
        threads: int = 4,
    ) -> None:
        from drpc.executors.local import LocalExecutor

        self.info = info
        self.transactional = transactional
        self.processing = _processing_topology(topology, info)
        self.captures = _Captures(self.processing, topology)
        self._queue: collections.deque[tuple[TransactionAttempt, Any, int | None]] = (
            collections.deque()
        )
        self._wakeup: Callable[[], None] | None = None
        self._report: Callable[[Event], None] | None = None
        transactional.batches = self
        self.executor = LocalExecutor(
            self.processing,
            conf={**conf, config.TOPOLOGY_MAX_SPOUT_PENDING: None},
            services={**services, CAPTURE_SERVICE: self.captures},
            threads=threads,
        )

    def start(self, report: Callable[[Event], None]) -> None:
        self._report = report
        self.executor.start()

    def stop(self) -> None:
        self.executor.stop()

    def submit(
        self, attempt: TransactionAttempt, metadata: Any, last_committed: int | None
    ) -> None:
        self._queue.append((attempt, metadata, last_committed))
        if self._wakeup is not None:
            self._wakeup()

    # the coordinator spout's side
    def attach(self, wakeup: Callable[[], None]) -> None:
        self._wakeup = wakeup

    def next_batch(self) -> tuple[TransactionAttempt, Any, int | None] | None:
        try:
            return self._queue.popleft()
        except IndexError:
            return None

    def processed(self, attempt: TransactionAttempt) -> None:
        assert self._report is not None
        captured = self.captures.take(attempt)
        tuples = self.transactional.take_emitted(attempt)
        self._report(Processed(attempt, captured, tuples))

    def failed(self, attempt: TransactionAttempt, failure: Failure | None) -> None:
        assert self._report is not None
        self.captures.take(attempt)
        self.transactional.take_emitted(attempt)
        self._report(
            ProcessingFailed(
                attempt,
                failure or Failure(DRPCExceptionType.FAILED_REQUEST, f"batch {attempt} failed"),
            )
        )


def _processing_topology(topology: Topology, info: TransactionalInfo) -> Topology:
    """The topology without its commit phase: commit-phase bolts become capture bolts."""
    commit = set(info.commit_components)
    builder = TopologyBuilder()
    for component_id, spec in topology.components.items():
        if spec.kind == "spout":
            builder.set_spout(component_id, spec.component, spec.parallelism)
            continue
        inputs = dict(spec.inputs)
        component = spec.component
        if component_id in commit:
            inputs = {
                stream: grouping
                for stream, grouping in inputs.items()
                if stream.component_id not in commit and stream.component_id != info.coordinator_id
            }
            if not inputs:
                continue
            component = CaptureBolt(component_id)
        declarer = builder.set_bolt(component_id, component, spec.parallelism)
        declarer.add_configurations(spec.conf)
        for stream, grouping in inputs.items():
            declarer.grouping(stream.component_id, grouping, stream.stream_id)
    return builder.create_topology(topology.name + "/processing", topology.conf)


# -- the Spark backend -------------------------------------------------------------------------


class SparkBackend:
    """Processes each attempt as one Spark job; emitters and commit-phase bolts on the driver."""

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
    ) -> None:
        from drpc.executors.plan import DRIVER, SPARK, compile_plan

        self.topology = topology
        self.info = info
        self.conf = conf
        self.services = services
        self.transactional = transactional
        self.master = master
        self.spark_conf = spark_conf
        placement = {
            component_id: DRIVER
            if spec.kind == "spout"
            or component_id == info.spout_id
            or component_id in info.commit_components
            else SPARK
            for component_id, spec in topology.components.items()
        }
        self.plan = compile_plan(topology, placement)
        self._pool = ThreadPoolExecutor(max_jobs, thread_name_prefix=f"drpc-tx-{info.id}")
        self._report: Callable[[Event], None] | None = None
        self._stages: Any = None
        self._sc: Any = None
        self._broadcast: Any = None
        self._tags: set[str] = set()
        self._token = uuid.uuid4().hex

    def start(self, report: Callable[[Event], None]) -> None:
        from drpc import runtime
        from drpc.executors.spark import SparkStages
        from drpc.semantics.runners import freeze

        self._report = report
        self._sc = runtime.get_session(self.master, self.spark_conf).sparkContext
        self._broadcast = self._sc.broadcast(freeze(self.topology))
        self._stages = SparkStages(self._sc, self.plan, self._token, self._broadcast)

    def stop(self) -> None:
        for tag in list(self._tags):
            self._sc.cancelJobsWithTag(tag)
        self._pool.shutdown(wait=True)
        if self._broadcast is not None:
            self._broadcast.unpersist()

    def submit(
        self, attempt: TransactionAttempt, metadata: Any, last_committed: int | None
    ) -> None:
        # Emitters run here, on the coordinator's thread, so batches are emitted in txid order.
        topology, info = self.topology, self.info
        coordinator_task = topology.component_task_ids[info.coordinator_id][0]
        batch = (
            DATA,
            info.coordinator_id,
            BATCH_STREAM,
            coordinator_task,
            [attempt, metadata, last_committed],
        )
        driver_records: dict[int, list[Record]] = {}
        failure: Failure | None = None
        for index in range(topology.components[info.spout_id].parallelism):
            run = TaskRun(
                topology,
                info.spout_id,
                index,
                job_ids=(attempt,),
                conf=self.conf,
                services=self.services,
                hints=self.plan.hints[info.spout_id],
            ).run([batch])
            failure = failure or next(iter(run.failures.values()), None)
            for target, records in run.records_by_task().items():
                driver_records.setdefault(target, []).extend(records)
        tuples = self.transactional.take_emitted(attempt)
        assert self._report is not None
        if failure is not None:
            self._report(ProcessingFailed(attempt, failure))
            return
        self._pool.submit(self._process, attempt, driver_records, tuples)

    def _process(
        self, attempt: TransactionAttempt, driver_records: dict[int, list[Record]], tuples: int
    ) -> None:
        from drpc.executors.spark import JobSpec, _describe_spark_error

        assert self._report is not None
        tag = f"drpc-tx-{self._token[:8]}-{attempt.txid}-{attempt.attempt_id}"
        sc = self._sc
        self._tags.add(tag)
        try:
            sc.addJobTag(tag)
            sc.setInterruptOnCancel(True)
            sc.setJobDescription(f"drpc transactional {self.info.id}: batch {attempt}")
            spec = JobSpec(
                (attempt,),
                self.conf,
                log_fields={attempt: batch_log_fields(self.info.id, attempt, "processing")},
                logging=worker_settings(),
                deadline=time.time() + float(self.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS]),
            )
            collected = self._stages.run(spec, driver_records)
        except Exception as error:
            self._report(
                ProcessingFailed(
                    attempt,
                    Failure(
                        DRPCExceptionType.INTERNAL_ERROR,
                        f"the Spark job of batch {attempt} failed: {_describe_spark_error(error)}",
                    ),
                )
            )
            return
        finally:
            self._tags.discard(tag)
            sc.removeJobTag(tag)
            sc.setJobDescription(None)
        commit = set(self.info.commit_components)
        captured = {
            task: records
            for task, records in driver_records.items()
            if self.topology.task_component[task] in commit
        }
        for task, records in collected.items():
            captured.setdefault(task, []).extend(records)
        failure = _captured_failure(captured)
        if failure is not None:
            self._report(ProcessingFailed(attempt, failure))
        else:
            self._report(Processed(attempt, captured, tuples))


# -- the run -------------------------------------------------------------------------------------


class CommitFailed(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class TransactionalRunner:
    """One run of a transactional topology over one state directory."""

    def __init__(
        self,
        topology: Topology | TransactionalTopologyBuilder,
        *,
        state_dir: str,
        executor: str = "local",
        max_spout_pending: int | None = None,
        conf: dict[str, Any] | None = None,
        master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        threads: int = 4,
        max_attempts: int | None = 100,
        state_options: dict[str, Any] | None = None,
        observer: Observer | None = None,
    ) -> None:
        """
        :param max_spout_pending: batches processed at once; None (default) takes the
            topology's ``topology.max.spout.pending`` (``conf`` overrides it), else 1.
        :param state_options: options of ``StateEnvironment.open`` for ``state_dir``
            (e.g. ``map_size``, ``max_map_size``, ``sync``); defaults otherwise.
        :param observer: receives ``tx_*`` events (``drpc.observe``).
        """
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"max_attempts must be None or >= 1, got {max_attempts}")
        if isinstance(topology, TransactionalTopologyBuilder):
            topology = topology.create_topology()
        info: TransactionalInfo | None = topology.transactional
        if info is None:
            raise InvalidTopologyError(
                f"topology {topology.name!r} is not transactional; build it with "
                "TransactionalTopologyBuilder"
            )
        if executor not in EXECUTORS:
            raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
        self.topology = topology
        self.info = info
        self.executor = executor
        self.conf = config.resolve(topology.conf, conf, {STATE_DIR_CONF: str(state_dir)})
        if max_spout_pending is None:
            max_spout_pending = self.conf[config.TOPOLOGY_MAX_SPOUT_PENDING] or 1
        elif isinstance(max_spout_pending, bool) or max_spout_pending < 1:
            raise ValueError(f"max_spout_pending must be None or >= 1, got {max_spout_pending!r}")
        self.env = StateEnvironment.open(str(state_dir), **(state_options or {}))
        self.observer = observer or NULL_OBSERVER
        self.coordinator_state = CoordinatorState(self.env, info.id)
        self.transactional = TransactionalServices(info.id, self.coordinator_state)
        self.services: dict[str, Any] = {
            TRANSACTIONAL_SERVICE: self.transactional,
            STATE_SERVICE: TopologyState(self.env),
            OBSERVER_SERVICE: self.observer,
        }
        coordinator_task = topology.component_task_ids[info.coordinator_id][0]
        context = TopologyContext(
            topology, info.coordinator_id, coordinator_task, services=self.services, conf=self.conf
        )
        self.spout_coordinator = spout_coordinator(info.spout, self.conf, context)
        self.metadata = _Metadata(self.coordinator_state, self.spout_coordinator)
        self.coordinator = TransactionalCoordinator(
            max_spout_pending, current_txid=self.coordinator_state.next_txid()
        )
        self.commit_hints = {
            component: TaskHints(
                implied_sources=tuple(
                    (source, 1 if args.single else topology.components[source].parallelism)
                    for source, args in sorted(coordination.sources.items())
                ),
                omit_zero_reports=True,
            )
            for component in info.commit_components
            if (coordination := topology.components[component].coordination) is not None
        }
        if executor == "local":
            self.backend: LocalBackend | SparkBackend = LocalBackend(
                topology, info, self.conf, self.services, self.transactional, threads
            )
        else:
            self.backend = SparkBackend(
                topology,
                info,
                self.conf,
                self.services,
                self.transactional,
                max_spout_pending,
                master,
                spark_conf,
            )
        self.max_attempts = max_attempts
        self._failures: collections.Counter[int] = collections.Counter()
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._captured: dict[TransactionAttempt, Processed] = {}
        self._started = False
        self._status_lock = threading.Lock()
        self._status: dict[str, Any] = {
            "topology": info.id,
            "executor": executor,
            "running": False,
            "last_txid": last.txid if (last := self.coordinator_state.last_commit()) else None,
            "in_flight": 0,
            "batches": 0,
            "tuples": 0,
            "replays": {},
            "last_commit_seconds": None,
            "error": None,
        }
        # Last: nothing after it may fail, and close() releases it.
        self._writer = self.env.claim_writer(info.id)

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> TransactionalRunner:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        if not self._started:
            self.backend.start(self._events.put)
            self._started = True

    def close(self) -> None:
        """Stop the backend, close the spout's emitters and coordinator, and release the
        state directory for other writers."""
        if self._started:
            self._started = False
            self.backend.stop()
        self._writer.release()
        for emitter in self.transactional.emitters():
            close = getattr(emitter, "close", None)
            if close is not None:
                close()
        close = getattr(self.spout_coordinator, "close", None)
        if close is not None:
            close()

    def status(self) -> dict[str, Any]:
        """Last committed txid, batches in flight, commits, tuples and replays of this run."""
        with self._status_lock:
            return {**self._status, "replays": dict(self._status["replays"])}

    def _update_status(self, **changes: Any) -> None:
        with self._status_lock:
            self._status.update(changes)
            self._status["in_flight"] = len(self.coordinator.active)

    def _replayed(self, result: RunResult, txid: int, cause: str) -> None:
        result.replays[cause] += 1
        self._update_status(replays=dict(result.replays))
        notify(self.observer, "tx_replayed", self.info.id, txid, cause)

    # -- the loop --------------------------------------------------------------------------

    def run(
        self,
        *,
        until_idle: bool = True,
        max_batches: int | None = None,
        stop: threading.Event | None = None,
        on_commit: Callable[[CommitInfo], None] | None = None,
        poll_interval: float = 0.05,
        idle_interval: float = 0.5,
    ) -> RunResult:
        """Process and commit batches until idle (``until_idle``), ``max_batches``
        commits, or ``stop`` is set (then the batches in flight finish first).

        Without ``until_idle`` the source is polled forever; after a committed batch
        that was empty, the next transaction opens ``idle_interval`` seconds later
        (default 0.5), so an idle source costs a commit every that often, not a
        busy loop of empty commits. ``poll_interval`` (0.05 s) bounds how long a
        stop or a new transaction waits for the loop to notice it.
        """
        self.start()
        result = RunResult(self.info.id)
        started = time.monotonic()
        self._update_status(running=True, error=None)
        try:
            self._loop(
                result, until_idle, max_batches, stop, on_commit, poll_interval, idle_interval
            )
        except BaseException as error:
            self._update_status(running=False, error=f"{type(error).__name__}: {error}")
            raise
        self._update_status(running=False)
        result.seconds = time.monotonic() - started
        log.info(
            "transactional topology %r: %d batch(es) committed (%d tuples) in %.1f s, replays %s",
            self.info.id,
            len(result.commits),
            result.tuples,
            result.seconds,
            dict(result.replays) or "none",
            extra={"topology": self.info.id},
        )
        return result

    def _loop(
        self,
        result: RunResult,
        until_idle: bool,
        max_batches: int | None,
        stop: threading.Event | None,
        on_commit: Callable[[CommitInfo], None] | None,
        poll_interval: float,
        idle_interval: float,
    ) -> None:
        log.info(
            "running transactional topology %r on the %s executor from txid %d, up to %d "
            "batch(es) in flight",
            self.info.id,
            self.executor,
            self.coordinator.current_txid,
            self.coordinator.max_spout_pending,
            extra={"topology": self.info.id, "txid": self.coordinator.current_txid},
        )
        pending: collections.deque[Decision] = collections.deque(
            self.coordinator.next_tuple(self.metadata)
        )
        while True:
            while pending:
                decision = pending.popleft()
                if isinstance(decision, EmitBatch):
                    attempt = decision.attempt
                    self._update_status()
                    notify(
                        self.observer,
                        "tx_started",
                        self.info.id,
                        attempt.txid,
                        attempt.attempt_id,
                        time.monotonic(),
                    )
                    self.backend.submit(attempt, decision.metadata, decision.last_committed)
                elif isinstance(decision, EmitCommit):
                    pending.extend(
                        self._commit(
                            decision.attempt,
                            result,
                            on_commit,
                            until_idle,
                            max_batches,
                            idle_interval,
                        )
                    )
            if stop is not None and stop.is_set():
                self.metadata.stopped = True
            if self.metadata.stopped and not self.coordinator.active:
                break
            try:
                event = self._events.get(timeout=poll_interval)
            except queue.Empty:
                pending.extend(self.coordinator.next_tuple(self.metadata))
                continue
            pending.extend(self._on_event(event, result))

    def _on_event(self, event: Event, result: RunResult) -> list[Decision]:
        attempt = event.attempt
        current = self.coordinator.attempt_of(attempt.txid) == attempt
        if isinstance(event, Processed):
            if current:
                self._captured[attempt] = event
            return self.coordinator.ack(attempt, self.metadata)
        if current:
            self._replayed(result, attempt.txid, "processing")
            log.warning(
                "batch %s failed in processing, replaying: %s",
                attempt,
                event.failure.message,
                extra=self._log_fields(attempt, "processing"),
            )
            self._count_failure(attempt.txid, event.failure.message)
        decisions = self.coordinator.fail(attempt, self.metadata)
        self._forget_inactive()
        return decisions

    def _log_fields(self, attempt: TransactionAttempt, phase: str) -> dict[str, Any]:
        return batch_log_fields(self.info.id, attempt, phase)

    def _count_failure(self, txid: int, reason: str) -> None:
        self._failures[txid] += 1
        if self.max_attempts is not None and self._failures[txid] >= self.max_attempts:
            raise TransactionalError(
                f"transactional topology {self.info.id!r}: batch {txid} failed "
                f"{self._failures[txid]} times (max_attempts={self.max_attempts}); last failure: "
                f"{reason}"
            )

    def _forget_inactive(self) -> None:
        for attempt in list(self._captured):
            if self.coordinator.attempt_of(attempt.txid) != attempt:
                del self._captured[attempt]

    def _commit(
        self,
        attempt: TransactionAttempt,
        result: RunResult,
        on_commit: Callable[[CommitInfo], None] | None,
        until_idle: bool,
        max_batches: int | None,
        idle_interval: float,
    ) -> list[Decision]:
        processed = self._captured.pop(attempt)
        started = time.monotonic()
        try:
            outputs = self.env.run_write(
                lambda txn: self._commit_in(txn, attempt, processed.captured),
                what=f"the commit of txid {attempt.txid} of topology {self.info.id!r}",
            )
        except StateFullError as error:
            raise TransactionalError(
                f"transactional topology {self.info.id!r}: batch {attempt.txid} cannot commit: "
                f"{error}; nothing of batch {attempt.txid} was committed, the run stops (a "
                "replay would write the same data); restart it with a larger max_map_size"
            ) from error
        except Exception as error:
            failure = error.failure if isinstance(error, CommitFailed) else None
            self._replayed(result, attempt.txid, "commit")
            reason = failure.message if failure else f"{type(error).__name__}: {error}"
            log.warning(
                "commit of batch %s failed, replaying from txid %d: %s",
                attempt,
                attempt.txid,
                reason,
                extra=self._log_fields(attempt, "commit"),
            )
            self._count_failure(attempt.txid, reason)
            decisions = self.coordinator.fail(attempt, self.metadata)
            self._forget_inactive()
            return decisions
        info = CommitInfo(
            attempt.txid, attempt, processed.tuples, outputs, time.monotonic() - started
        )
        result.commits.append(info)
        log.debug(
            "committed batch %s: %d tuple(s) in %.1f ms",
            attempt,
            info.tuples,
            info.seconds * 1000,
            extra=self._log_fields(attempt, "commit"),
        )
        self._update_status(
            last_txid=info.txid,
            batches=len(result.commits),
            tuples=self._status["tuples"] + info.tuples,
            last_commit_seconds=info.seconds,
        )
        notify(self.observer, "tx_committed", self.info.id, info.txid, info.seconds, info.tuples)
        if on_commit is not None:
            on_commit(info)
        if (until_idle and info.tuples == 0) or (
            max_batches is not None and len(result.commits) >= max_batches
        ):
            self.metadata.stopped = True  # before the coordinator opens the next transaction
        elif info.tuples == 0:
            self.metadata.resume_at = time.monotonic() + idle_interval
        return self.coordinator.ack(attempt, self.metadata)

    def _commit_in(
        self, txn: Any, attempt: TransactionAttempt, captured: dict[int, list[Record]]
    ) -> dict[str, list[list[Any]]]:
        topology, info = self.topology, self.info
        records = {task: list(received) for task, received in captured.items()}
        coordinator_task = topology.component_task_ids[info.coordinator_id][0]
        commit_tuple = (DATA, info.coordinator_id, COMMIT_STREAM, coordinator_task, [attempt])
        for committer in info.committers:
            for task in topology.component_task_ids[committer]:
                records.setdefault(task, []).append(commit_tuple)
        outputs: dict[str, list[list[Any]]] = {}
        with commit_scope(txn, attempt.txid):
            for component in info.commit_components:
                for index, task in enumerate(topology.component_task_ids[component]):
                    run = TaskRun(
                        topology,
                        component,
                        index,
                        job_ids=(attempt,),
                        conf=self.conf,
                        services=self.services,
                        hints=self.commit_hints.get(component),
                        log_fields={attempt: self._log_fields(attempt, "commit")},
                    ).run(records.pop(task, []))
                    if run.failures:
                        raise CommitFailed(next(iter(run.failures.values())))
                    for target, out in run.records_by_task().items():
                        records.setdefault(target, []).extend(out)
                    for _, values in run.unrouted:
                        outputs.setdefault(component, []).append(values)
            commit_opaque_metas(self.transactional, attempt.txid, txn)
            self.coordinator_state.record_commit(txn, attempt.txid)
        return outputs


def run(
    topology: Topology | TransactionalTopologyBuilder,
    *,
    state_dir: str,
    executor: str = "local",
    max_spout_pending: int | None = None,
    until_idle: bool = True,
    max_batches: int | None = None,
    conf: dict[str, Any] | None = None,
    master: str | None = None,
    on_commit: Callable[[CommitInfo], None] | None = None,
    stop: threading.Event | None = None,
    max_attempts: int | None = 100,
    state_options: dict[str, Any] | None = None,
    observer: Observer | None = None,
) -> RunResult:
    """Run a transactional topology until it is idle (or ``max_batches`` commit)."""
    with TransactionalRunner(
        topology,
        state_dir=state_dir,
        executor=executor,
        max_spout_pending=max_spout_pending,
        conf=conf,
        master=master,
        max_attempts=max_attempts,
        state_options=state_options,
        observer=observer,
    ) as runner:
        return runner.run(
            until_idle=until_idle, max_batches=max_batches, stop=stop, on_commit=on_commit
        )
