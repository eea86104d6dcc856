"""Running a transactional topology: coordinator loop, processing backends, ordered commits.

Contract. ``run(topology, state_dir=..., executor="local"|"spark"|"spark-batch",
max_spout_pending=None, until_idle=True, master=None, spark_conf=None)`` (the
last two for the Spark session, ``drpc.runtime``) drives one transactional topology
until its source runs dry (a committed batch emitted nothing) or
``max_batches`` have committed, and returns what was committed:

- the coordinator (``drpc.transactional.coordinator``) decides which batches
  to process and which to commit; batch metadata is cached durably in the
  state directory before a batch is emitted, so a replay (after a failure or
  a restart) gets the same metadata;
- the **processing phase** of an attempt (the emitter and every bolt that is
  not a committer nor after one) runs on a backend
  (``drpc.transactional.processing``): on ``"local"`` through the in-process
  streaming engine (a batch is processed when its tuple tree completes), on
  ``"spark"`` as calls on the resident Spark tasks (``ResidentBackend``, or the
  topology's ``resident_backend``: Trident's compiled path), on
  ``"spark-batch"`` as one Spark job per attempt, the emitters on the driver;
  up to ``max_spout_pending`` attempts at once (None: the topology's
  ``topology.max.spout.pending``, else 1, as Storm's coordinator reads it).
  What the processing phase sends to commit-phase bolts is captured;
- the **commit phase** (``drpc.transactional.commit``) runs on this thread,
  strictly in txid order: the committers (``finish_batch`` only now) and the
  bolts after them run over the captured tuples inside ONE LMDB write
  transaction that also holds every state map write, the opaque spout's
  partition metadata and the commit record; a crash keeps all of a commit
  or none of it. A committer with several tasks writes a partitioned state
  (``drpc.transactional.partitions``): each partition first applies the batch in
  its own write transaction where it lives (this process, or the resident task
  owning it on ``spark``), then the commit record is written once every partition
  holds the txid; a partition holding a txid that is replayed reverts it first;
- a failure in either phase (``FailedException``, a timeout, a Spark failure,
  a full map past its limit) fails that transaction and every later active
  one; they are re-emitted with new attempts and the same metadata; a txid
  that fails ``max_attempts`` times (default 100) stops the run with
  ``TransactionalError`` naming it and its last failure (a batch that can never
  pass would otherwise replay forever, as in Storm); a txid whose tuple tree
  outlives ``topology.message.timeout.secs`` (default 30 s; set it in the
  topology's or the run's ``conf``) ``max_timeouts`` times (default 3; the
  local executor: a batch's Spark job is not cut by that timeout) stops it
  sooner, with an error saying to raise that timeout or shrink the
  batches: a batch too large for the timeout times out on every replay, and
  each timeout is logged as a warning naming the setting;
- a commit that does not fit in the state directory even after the map grew
  to ``max_map_size`` (``state_options``) stops the run at once with
  ``TransactionalError`` caused by ``StateFullError``: nothing of that batch
  is committed, earlier commits stay, and a restart with a larger
  ``max_map_size`` commits it (a replay would write the same data again);
- a checkpoint store that does not answer within ``drpc.checkpoint.retry.timeout``
  (or refuses) stops the run the same way, with ``TransactionalError`` caused by
  ``CheckpointStoreError``;
- restarting with the same state directory resumes after the last commit;
- on ``spark``, a resident job that breaks while the run starts (placing, making or
  restoring its partitions, warming the tasks) is waited for: the start is done again
  on the new job, until ``start_timeout`` has passed;
- events go to the ``drpc.observe`` observer given as ``observer``
  (``tx_started``, ``tx_committed``, ``tx_replayed`` with cause
  "processing" or "commit", and ``tx_phases`` with each committed batch's
  ``BatchPhases``); ``status()`` is a snapshot for dashboards (with the last
  batch's phases and the slowest of the last ``SLOWEST_OF`` with its phases, so a
  slow batch names where its time went),
  safe from any thread (``waiting`` in it: what the spout's coordinator
  waits for, e.g. ``"waiting for redis at HOST:PORT"``).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drpc import config
from drpc.errors import (
    CheckpointStoreError,
    InvalidTopologyError,
    PartitionLostError,
    ResidentTasksBrokenError,
    StateFullError,
    TransactionalError,
)
from drpc.executors import EXECUTORS
from drpc.gcpolicy import collected_less_often
from drpc.model.context import TopologyContext
from drpc.model.topology import Topology
from drpc.observe import OBSERVER_SERVICE, Observer, bus
from drpc.sparkconf import DEFAULT_START_TIMEOUT
from drpc.state import CoordinatorState, StateEnvironment
from drpc.state.checkpoint_store import settings_from_conf
from drpc.state.topology import STATE_DIR_CONF, STATE_SERVICE, TopologyState
from drpc.transactional.assembly import partitioned_commit, processing_backend, restored_driver
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.builder import TransactionalInfo, TransactionalTopologyBuilder
from drpc.transactional.commit import CommitFailed, CommitPhase
from drpc.transactional.coordinator import (
    Decision,
    EmitBatch,
    EmitCommit,
    TransactionalCoordinator,
)
from drpc.transactional.partitions import (
    DEFAULT_WRITERS,
    PartitionedCommit,
    partition_layouts,
)
from drpc.transactional.processing import (
    Event,
    Processed,
    ProcessingBackend,
    batch_log_fields,
)
from drpc.transactional.results import BatchPhases, CommitInfo, RunResult
from drpc.transactional.spouts import (
    TRANSACTIONAL_SERVICE,
    TransactionalServices,
    drpc_owns_batch_meta,
    spout_coordinator,
    waiting_of,
    watch_of,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_TIMEOUTS = 3
"""Tuple-tree timeouts of one txid that stop a run (``max_timeouts``)."""


@dataclass(slots=True)
class _Clock:
    """When a batch attempt started, was handed over and came back processed."""

    started: float
    submitted: float = 0.0
    processed: float = 0.0


SLOWEST_OF = 100
"""Committed batches ``status()`` looks back over for the slowest."""


MIN_IDLE_WAIT = 0.001
"""The first wait of an idle source its coordinator does not watch; each empty batch after
doubles it, up to ``idle_interval``."""
RESIDENT_RESTART_POLL = 0.5
"""Seconds a run's start waits before it tries again on a restarting resident job."""


class _Woken:
    """The event of a wakeup from the spout's coordinator."""


WOKEN = _Woken()


class _Metadata:
    """The coordinator's ``MetadataSource``: durable per-txid metadata from the spout, and
    when the source is idle (see ``TransactionalRunner.run``)."""

    def __init__(self, state: CoordinatorState, coordinator: Any) -> None:
        self.state = state
        self.coordinator = coordinator
        self.stopped = False
        self.resume_at = 0.0  # no new transaction before this time.monotonic() (idle source)
        self.watching = False  # the coordinator wakes the run when input may have arrived
        self.wakes = 0  # wakeups so far
        self.backoff = MIN_IDLE_WAIT

    def woken(self) -> None:
        self.wakes += 1
        self.resume_at = 0.0

    def went_idle(self, woken_since: bool, idle_interval: float) -> None:
        """A batch came back empty: wait for a wakeup (at most ``idle_interval``), or poll
        after a backoff; not at all when a wakeup came after the batch was emitted."""
        if woken_since:
            return
        if self.watching:
            self.resume_at = time.monotonic() + idle_interval
        else:
            self.resume_at = time.monotonic() + self.backoff
            self.backoff = min(self.backoff * 2, idle_interval)

    def got_input(self) -> None:
        self.backoff = MIN_IDLE_WAIT

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
        start_timeout: float = DEFAULT_START_TIMEOUT,
        threads: int = 4,
        max_attempts: int | None = 100,
        max_timeouts: int | None = DEFAULT_MAX_TIMEOUTS,
        state_options: dict[str, Any] | None = None,
        observer: Observer | None = None,
        spark_backend: Callable[..., ProcessingBackend] | None = None,
        partition_writers: int = DEFAULT_WRITERS,
        checkpoint_dir: str | None = None,
        standby_replicas: int = 0,
    ) -> None:
        """
        :param max_spout_pending: batches processed at once; None (default) takes the
            topology's ``topology.max.spout.pending`` (``conf`` overrides it), else 1.
        :param master: the master of ``executor="spark"``'s Spark session
            (``drpc.runtime.get_session``; default: Spark's resolution of the master).
        :param spark_conf: that session's settings (default: none of your own).
        :param start_timeout: seconds for an executor to register (default 120).
        :param state_options: options of ``StateEnvironment.open`` for ``state_dir``
            (e.g. ``map_size``, ``max_map_size``, ``sync``); defaults otherwise.
        :param observer: receives ``tx_*`` events (``drpc.observe``).
        :param partition_writers: partitions of a partitioned state this process applies at
            once, when they live here (default 4; ``drpc.transactional.partitions``).
        :param checkpoint_dir: the checkpoint store of the run's partitioned states, a
            ``file://`` or ``s3://`` URI (default: the conf's ``drpc.checkpoint.dir``, else
            none): each partition puts its changes there before its txid's global commit
            and snapshots in the background, and a lost partition is restored from it
            instead of stopping the run (``drpc.state.checkpoint``; S3 settings in the conf,
            ``drpc.state.checkpoint_store``).
        :param standby_replicas: warm copies of each partition that other resident tasks
            keep from the checkpoint store's deltas (default 0; ``executor="spark"`` with a
            ``checkpoint_dir``): when a task is lost, the others serve on, and its
            partitions' standbys take over with nothing downloaded
            (``drpc.transactional.resident_partitions``).
        :param spark_backend: the processing backend of ``executor="spark-batch"`` (called
            with ``SparkBackend``'s arguments); None: the topology's own
            (``TransactionalInfo.spark_backend``, Trident's compiled path sets it), else
            ``SparkBackend``. ``executor="spark"`` takes the topology's
            ``resident_backend``, else ``ResidentBackend``; ``executor="local"`` its
            ``local_backend``, else ``LocalBackend``.
        """
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"max_attempts must be None or >= 1, got {max_attempts}")
        if max_timeouts is not None and max_timeouts < 1:
            raise ValueError(f"max_timeouts must be None or >= 1, got {max_timeouts}")
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
        if isinstance(standby_replicas, bool) or standby_replicas < 0:
            raise ValueError(f"standby_replicas must be >= 0, got {standby_replicas!r}")
        if standby_replicas and executor != "spark":
            raise ValueError(
                "standby replicas live on other resident tasks: they need executor='spark', "
                f"not {executor!r}"
            )
        self.topology = topology
        self.info = info
        self.start_timeout = start_timeout
        self.executor = executor
        self.conf = config.resolve(topology.conf, conf, {STATE_DIR_CONF: str(state_dir)})
        if max_spout_pending is None:
            max_spout_pending = self.conf[config.TOPOLOGY_MAX_SPOUT_PENDING] or 1
        elif isinstance(max_spout_pending, bool) or max_spout_pending < 1:
            raise ValueError(f"max_spout_pending must be None or >= 1, got {max_spout_pending!r}")
        self.env = StateEnvironment.open(str(state_dir), **(state_options or {}))
        self.env.recover_crashed_writer()  # before reading where to resume
        self.checkpoint = settings_from_conf(checkpoint_dir, self.conf)
        if standby_replicas and self.checkpoint is None:
            raise ValueError(
                "standby replicas apply the deltas of the checkpoint store: set checkpoint_dir"
            )
        self.layouts = partition_layouts(topology)
        self.driver_checkpoint = restored_driver(self.checkpoint, self.layouts, info, self.env)
        self.observer = bus(observer)
        self.coordinator_state = CoordinatorState(
            self.env, info.id, plain_batch_meta=drpc_owns_batch_meta(info.spout)
        )
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
        self.commit_phase = CommitPhase(
            topology, info, self.conf, self.services, self.transactional, self.coordinator_state
        )
        self.backend = processing_backend(
            executor,
            topology,
            info,
            self.conf,
            self.services,
            self.transactional,
            threads=threads,
            max_spout_pending=max_spout_pending,
            master=master,
            spark_conf=spark_conf,
            start_timeout=start_timeout,
            spark_backend=spark_backend,
        )
        self.partitioned: PartitionedCommit | None = None
        if self.layouts:
            self.partitioned = partitioned_commit(
                executor,
                topology,
                info,
                self.layouts,
                self.conf,
                self.services,
                self.commit_phase,
                self.coordinator_state,
                state_dir=str(state_dir),
                master=master,
                spark_conf=spark_conf,
                start_timeout=start_timeout,
                state_options=state_options,
                checkpoint=self.checkpoint,
                driver_checkpoint=self.driver_checkpoint,
                partition_writers=partition_writers,
                standby_replicas=standby_replicas,
            )
        self.max_attempts = max_attempts
        self.max_timeouts = max_timeouts
        self._failures: collections.Counter[int] = collections.Counter()
        self._timeouts: collections.Counter[int] = collections.Counter()
        self._events: queue.SimpleQueue[Event | _Woken] = queue.SimpleQueue()
        self._unwatch: Callable[[], None] | None = None
        self._wakes_at_emit: dict[int, int] = {}
        self._clocks: dict[int, _Clock] = {}
        self._recent: collections.deque[tuple[float, int, BatchPhases]] = collections.deque(
            maxlen=SLOWEST_OF
        )
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
            "last_phases": None,
            "slowest": None,
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
            partitioned = self.partitioned
            if partitioned is not None:
                self._through_resident_restarts("placing its partitions", partitioned.start)
            self._through_resident_restarts(
                "starting its batches", lambda: self.backend.start(self._events.put)
            )
            self._started = True
            self._unwatch = watch_of(self.spout_coordinator, self._wake)
            self.metadata.watching = self._unwatch is not None

    def _through_resident_restarts(self, what: str, step: Callable[[], None]) -> None:
        """``step()``, done again while the resident job it calls restarts (each try's
        calls wait for the new job's tasks), until ``start_timeout`` has passed."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                step()
                return
            except ResidentTasksBrokenError as error:
                if time.monotonic() >= deadline:
                    raise
                log.warning(
                    "transactional topology %r: the resident Spark tasks broke while %s (%s); "
                    "doing it again on the restarted tasks",
                    self.info.id,
                    what,
                    error,
                    extra={"topology": self.info.id},
                )
                time.sleep(RESIDENT_RESTART_POLL)

    def _wake(self) -> None:
        """The spout's coordinator says input may have arrived (from its watcher's thread)."""
        self._events.put(WOKEN)

    def close(self) -> None:
        """Stop the backend, close the spout's emitters and coordinator, and release the
        state directory for other writers."""
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self._started:
            self._started = False
            self.backend.stop()
        if self.partitioned is not None:
            self.partitioned.stop()
        self._writer.release()
        for emitter in self.transactional.emitters():
            close = getattr(emitter, "close", None)
            if close is not None:
                close()
        close = getattr(self.spout_coordinator, "close", None)
        if close is not None:
            close()

    def status(self) -> dict[str, Any]:
        """Last committed txid, batches in flight, commits, tuples and replays of this run,
        what it waits for (``waiting``: ``"waiting for redis at HOST:PORT"`` while a broker
        is away, ``"waiting for the checkpoint store ..."`` while a commit waits for the
        store, else None), its partitions (``partitions``: each one's state, index, owner
        host and task, txid held, keys and bytes; with a store, its last snapshot and bytes
        there) and its checkpoint store (``checkpoint``: None without one, else
        ``PartitionedCommit.checkpoint_status``, whose ``standbys`` holds, with standby
        replicas, each copy's task, txid and lag in global commits and the last
        takeover)."""
        waiting = waiting_of(self.spout_coordinator)
        partitions = [] if self.partitioned is None else self.partitioned.status()
        checkpoint = None if self.partitioned is None else self.partitioned.checkpoint_status()
        if waiting is None and checkpoint is not None and checkpoint["waiting_since"]:
            waiting = f"waiting for the checkpoint store {checkpoint['store']}"
        with self._status_lock:
            return {
                **self._status,
                "replays": dict(self._status["replays"]),
                "waiting": waiting,
                "partitions": partitions,
                "checkpoint": checkpoint,
            }

    def _update_status(self, **changes: Any) -> None:
        with self._status_lock:
            self._status.update(changes)
            self._status["in_flight"] = len(self.coordinator.active)

    def _replayed(self, result: RunResult, txid: int, cause: str) -> None:
        result.replays[cause] += 1
        self._update_status(replays=dict(result.replays))
        self.observer.tx_replayed(self.info.id, txid, cause)

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

        Without ``until_idle`` the run goes on forever, and batches follow each other as
        fast as they commit while the source has input (each takes what has arrived, up
        to the spout's batch size: small batches while input trickles, full ones under a
        flood). After a committed batch that was empty the source is idle: a spout whose
        coordinator watches its source (``watch``, the file log does) opens the next
        transaction when it wakes the run, so new input starts a batch within
        milliseconds, and at the latest after ``idle_interval`` seconds (default 0.5);
        any other is polled again after 1 ms, then twice as long after each empty batch,
        up to ``idle_interval``: an idle source costs a commit every that often, not a
        busy loop of empty commits. ``poll_interval`` (0.05 s) bounds how long a stop
        waits for the loop to notice it.
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
                    self._wakes_at_emit[attempt.txid] = self.metadata.wakes
                    self._update_status()
                    clock = self._clocks[attempt.txid] = _Clock(time.monotonic())
                    self.observer.tx_started(
                        self.info.id, attempt.txid, attempt.attempt_id, clock.started
                    )
                    self.backend.submit(attempt, decision.metadata, decision.last_committed)
                    clock.submitted = time.monotonic()
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
            wait = poll_interval
            idle_for = self.metadata.resume_at - time.monotonic()
            if 0 < idle_for < wait:  # an idle source looks again sooner than the poll
                wait = idle_for
            try:
                event = self._events.get(timeout=wait)
            except queue.Empty:
                pending.extend(self.coordinator.next_tuple(self.metadata))
                continue
            if event is WOKEN:
                self.metadata.woken()
                pending.extend(self.coordinator.next_tuple(self.metadata))
                continue
            assert not isinstance(event, _Woken)
            pending.extend(self._on_event(event, result))

    def _on_event(self, event: Event, result: RunResult) -> list[Decision]:
        attempt = event.attempt
        current = self.coordinator.attempt_of(attempt.txid) == attempt
        if isinstance(event, Processed):
            if current:
                self._captured[attempt] = event
                clock = self._clocks.get(attempt.txid)
                if clock is not None:
                    clock.processed = time.monotonic()
            return self.coordinator.ack(attempt, self.metadata)
        if current:
            self._replayed(result, attempt.txid, "processing")
            log.warning(
                "batch %s failed in processing, replaying: %s",
                attempt,
                event.failure.message,
                extra=self._log_fields(attempt, "processing"),
            )
            if event.failure.tree_timeout:
                self._count_timeout(attempt)
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

    def _count_timeout(self, attempt: TransactionAttempt) -> None:
        txid = attempt.txid
        self._timeouts[txid] += 1
        timeout = float(self.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        advice = (
            f"batch {txid}'s tuple tree did not complete within {timeout:g} s "
            f"({config.TOPOLOGY_MESSAGE_TIMEOUT_SECS}), {self._timeouts[txid]} time(s) "
            f"(max_timeouts={self.max_timeouts}); raise {config.TOPOLOGY_MESSAGE_TIMEOUT_SECS} "
            "in the topology's conf or make the batches smaller"
        )
        log.warning(
            "transactional topology %r: %s",
            self.info.id,
            advice,
            extra=self._log_fields(attempt, "processing"),
        )
        if self.max_timeouts is not None and self._timeouts[txid] >= self.max_timeouts:
            raise TransactionalError(f"transactional topology {self.info.id!r}: {advice}")

    def _commit_write(self, attempt: TransactionAttempt, processed: Processed) -> Any:
        """The commit of ``attempt``: one write of the state directory, after the partitions
        of its partitioned states applied it when it has some."""
        log_fields = self._log_fields(attempt, "commit")
        what = f"the commit of txid {attempt.txid} of topology {self.info.id!r}"
        captured = processed.captured
        partitioned = self.partitioned
        if partitioned is None:
            return self.env.run_write(
                lambda txn: self.commit_phase.run(txn, attempt, captured, log_fields), what=what
            )
        return partitioned.commit(attempt, captured, log_fields, what)

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
            with collected_less_often():
                outputs = self._commit_write(attempt, processed)
        except PartitionLostError as error:
            raise TransactionalError(
                f"transactional topology {self.info.id!r}: batch {attempt.txid} cannot commit: "
                f"{error}; the run stops (nothing of batch {attempt.txid} was committed)"
            ) from error
        except StateFullError as error:
            raise TransactionalError(
                f"transactional topology {self.info.id!r}: batch {attempt.txid} cannot commit: "
                f"{error}; nothing of batch {attempt.txid} was committed, the run stops (a "
                "replay would write the same data); restart it with a larger max_map_size"
            ) from error
        except CheckpointStoreError as error:
            raise TransactionalError(
                f"transactional topology {self.info.id!r}: batch {attempt.txid} cannot commit: "
                f"{error}; the run stops (a replay would wait for the same store). Restart it "
                "once the store answers: it resumes from the last commit the store holds"
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
        ended = time.monotonic()
        clock = self._clocks.pop(attempt.txid, None) or _Clock(started, started, started)
        phases = BatchPhases(
            emit=clock.submitted - clock.started,
            process=clock.processed - clock.submitted,
            wait=started - clock.processed,
            commit=ended - started,
        )
        info = CommitInfo(attempt.txid, attempt, processed.tuples, outputs, ended - started, phases)
        result.commits.append(info)
        self._recent.append((phases.total, info.txid, phases))
        log.debug(
            "committed batch %s: %d tuple(s) in %.1f ms",
            attempt,
            info.tuples,
            info.seconds * 1000,
            extra=self._log_fields(attempt, "commit"),
        )
        slowest_total, slowest_txid, slowest_phases = max(self._recent, key=lambda r: r[0])
        self._update_status(
            last_txid=info.txid,
            batches=len(result.commits),
            tuples=self._status["tuples"] + info.tuples,
            last_commit_seconds=info.seconds,
            last_phases=phases.as_dict(),
            slowest={"txid": slowest_txid, "seconds": slowest_total, **slowest_phases.as_dict()},
        )
        self.observer.tx_committed(self.info.id, info.txid, info.seconds, info.tuples)
        self.observer.tx_phases(self.info.id, info.txid, phases.as_dict())
        if on_commit is not None:
            on_commit(info)
        woken_since = self.metadata.wakes != self._wakes_at_emit.pop(attempt.txid, -1)
        if (until_idle and info.tuples == 0) or (
            max_batches is not None and len(result.commits) >= max_batches
        ):
            self.metadata.stopped = True  # before the coordinator opens the next transaction
        elif info.tuples == 0:
            self.metadata.went_idle(woken_since, idle_interval)
        else:
            self.metadata.got_input()
        return self.coordinator.ack(attempt, self.metadata)


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
    spark_conf: dict[str, Any] | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    on_commit: Callable[[CommitInfo], None] | None = None,
    stop: threading.Event | None = None,
    max_attempts: int | None = 100,
    max_timeouts: int | None = DEFAULT_MAX_TIMEOUTS,
    state_options: dict[str, Any] | None = None,
    observer: Observer | None = None,
    spark_backend: Callable[..., ProcessingBackend] | None = None,
    partition_writers: int = DEFAULT_WRITERS,
    checkpoint_dir: str | None = None,
    standby_replicas: int = 0,
) -> RunResult:
    """Run a transactional topology until it is idle (or ``max_batches`` commit)."""
    with TransactionalRunner(
        topology,
        state_dir=state_dir,
        executor=executor,
        max_spout_pending=max_spout_pending,
        conf=conf,
        master=master,
        spark_conf=spark_conf,
        start_timeout=start_timeout,
        max_attempts=max_attempts,
        max_timeouts=max_timeouts,
        state_options=state_options,
        observer=observer,
        spark_backend=spark_backend,
        partition_writers=partition_writers,
        checkpoint_dir=checkpoint_dir,
        standby_replicas=standby_replicas,
    ) as runner:
        return runner.run(
            until_idle=until_idle, max_batches=max_batches, stop=stop, on_commit=on_commit
        )
