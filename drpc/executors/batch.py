"""Batch-mode execution of one task: a whole job's input at once.

The Spark executor runs each task of a component over its whole partition
(every tuple sent to that task for the job's ids), and runs the driver-side
DRPC steps the same way. End of input means "every upstream tuple for this
task has arrived", but the count reports still travel with the data and are
checked: the same ``CoordinationTracker`` as the streaming engine decides
when each id finishes, so a lost tuple becomes an INTERNAL_ERROR for that id,
never a wrong answer.

Records (plain tuples, pickled in blobs between tasks):

- ``(DATA, source_component, stream, source_task, values)``
- ``(REPORT, source_component, source_task, {id: count})``: the source
  task's counts for every id it finished, zeros included;
- ``(FAIL, id, Failure[, forward])``: the id failed upstream; every task
  drops it (``abandon``) and the failure travels on to the driver. A failure
  is broadcast by the task where it happened to every task downstream, and
  forwarded further by one designated task per component, so copies do not
  multiply; ``forward`` (set on fused edges, where the designated task may
  never see it) makes the receiving task forward it too.
- ``(TIMING, component, task_index, started, ended, busy)``: a task's wall
  clock span (``time.time()`` of its worker) and, per id, the seconds it
  spent executing that id's tuples and finishing it (``busy``, from a
  ``TaskRun(timed=True)``). The Spark executor ships these to the driver
  with the data when it observes; ``TaskRun.run`` never sees them.

Implied zero reports: a Spark task's output is all or nothing, and a task
that does not finish an id always sends a FAIL record for it, so on Spark a
task sends count reports only where it sent tuples and the receiver counts
every report it did not get as a report of 0 (``TaskHints``). Non-zero counts
still travel with the data and are checked; reduce tasks fetch blocks only
from the map tasks that sent them something.

Order within a task: failures, then data (executed in arrival order), then
id/commit tuples, then count reports, then the implied zero reports. Ids
still unfinished after all of that fail: a rich bolt that left inputs
unacked with FAILED_REQUEST saying so, anything else with INTERNAL_ERROR
describing what was missing.

Asynchronous acks, as on the streaming engine. A rich bolt may ack, fail and
emit from threads of its own after ``execute`` returned: the collector is
thread-safe (it holds the task's lock, which the task holds while it runs),
and before giving up on what is still unfinished the task waits, up to its
``deadline`` (``topology.message.timeout.secs`` after it was made, or the
job's), for every data tuple it executed to be acked or failed. Calls that
come after the task ended are dropped with a warning.

Values cross processes pickled once per (task, receiving task) blob; a value
that cannot be pickled fails only its own id, naming the step and stream. A
bolt whose ``prepare`` raises fails every id the task would have handled.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections import ChainMap, Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drpc import config
from drpc.errors import DRPCExceptionType, Failure, UnserializableValueError
from drpc.logs import current_context, pop_context, push_context
from drpc.model.components import OutputCollector
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields
from drpc.model.hashing import stable_hash
from drpc.model.streams import COORDINATED_STREAM_ID, DEFAULT_STREAM_ID, GlobalStreamId
from drpc.model.topology import Topology
from drpc.model.tuples import Tuple
from drpc.semantics.coordination import (
    Abandoned,
    CoordinationConfig,
    CoordinationTracker,
    Decision,
    Failed,
    FinishBatch,
    SendReport,
    is_ignored,
)
from drpc.semantics.routing import OutputRouter, id_owner_check
from drpc.semantics.runners import RichBoltRunner, instantiate, runner_for

log = logging.getLogger(__name__)

DATA = 0
REPORT = 1
FAIL = 2
TIMING = 3

Record = tuple[Any, ...]

_NO_TIMEOUT = 1e12


@dataclass(frozen=True)
class TaskHints:
    """What the compiler tells a task beyond the topology.

    ``synthesize_ids``: the id stream is not shipped; every job id this task
    owns counts as received. ``implied_sources``: coordinated inputs whose
    zero reports are not shipped, as (source component, count reports each id
    expects from it); ``omit_zero_reports``: this task does not ship its own.
    """

    synthesize_ids: bool = False
    implied_sources: tuple[tuple[str, int], ...] = ()
    omit_zero_reports: bool = False


class _BatchCollector(OutputCollector):
    """A task's collector; every call holds the task's lock (see the module doc)."""

    def __init__(self, run: TaskRun) -> None:
        self._run = run
        self._lock = run.lock

    def emit(
        self, values: Sequence[Any], anchors: Any = None, stream: str = DEFAULT_STREAM_ID
    ) -> list[int]:
        with self._lock:
            run = self._run
            if run.ended:
                run.late("emitted")
                return []
            run.router.check(stream, values, direct=False)
            targets = run.router.targets(stream, values)
            run.send(stream, values, targets)
            return targets

    def emit_direct(
        self, task: int, values: Sequence[Any], anchors: Any = None, stream: str = DEFAULT_STREAM_ID
    ) -> None:
        with self._lock:
            run = self._run
            if run.ended:
                run.late("emitted")
                return
            run.router.check(stream, values, direct=True)
            run.send(stream, values, run.router.direct_target(stream, task))

    def ack(self, tuple: Tuple) -> None:
        with self._lock:
            if tuple._done:
                return
            tuple._done = True
            if self._run.ended:
                self._run.late("acked")
                return
            self._run.on_ack(tuple)

    def fail(self, tuple: Tuple, reason: Failure | BaseException | str | None = None) -> None:
        with self._lock:
            if tuple._done:
                return
            tuple._done = True
            if self._run.ended:
                self._run.late("failed")
                return
            self._run.on_fail(tuple, self._run.runner.failure_from(reason))

    def report_error(self, error: BaseException) -> None:
        log.error("step %r task %d reported: %r", self._run.component_id, self._run.task_id, error)


class _IdLogFields(Mapping[str, Any]):
    """The log fields of the id whose tuple a task handles now: a logging context whose
    look-up happens only when a line is logged, so switching ids costs an attribute store."""

    def __init__(self, fields: Mapping[Hashable, Mapping[str, Any]]) -> None:
        self.fields = fields
        self.id: Hashable = None

    def _now(self) -> Mapping[str, Any]:
        return self.fields.get(self.id) or {}

    def __getitem__(self, key: str) -> Any:
        return self._now()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._now())


class TaskRun:
    """One task of one component over one job's records.

    ``log_fields``, by id: what a log line about that id carries (``request_id``,
    ``function``, ...); it is in the logging context while the task executes the
    id's tuples and finishes it."""

    def __init__(
        self,
        topology: Topology,
        component_id: str,
        index: int,
        *,
        job_ids: Sequence[Hashable],
        conf: dict[str, Any] | None = None,
        services: dict[str, Any] | None = None,
        hints: TaskHints | None = None,
        timed: bool = False,
        log_fields: Mapping[Hashable, Mapping[str, Any]] | None = None,
        deadline: float | None = None,
    ) -> None:
        """
        :param deadline: ``time.time()`` until which the task waits for asynchronous acks
            (default: ``topology.message.timeout.secs`` from now).
        """
        spec = topology.components[component_id]
        self.topology = topology
        self.component_id = component_id
        self.index = index
        self.parallelism = spec.parallelism
        self.task_id = topology.component_task_ids[component_id][index]
        self.job_ids = job_ids
        self.hints = hints or TaskHints()
        self.conf = config.resolve(
            topology.conf, conf, spec.conf, spec.component.get_component_configuration()
        )
        self.router = OutputRouter(topology, component_id, self.task_id)
        self.runner = runner_for(instantiate(spec.user_component, component_id), component_id)
        self.lock = threading.RLock()
        self._settled = threading.Condition(self.lock)
        self.ended = False
        self.timeout = float(self.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        self.deadline = time.time() + self.timeout if deadline is None else deadline
        self.unacked: dict[int, Tuple] = {}  # executed data tuples not yet acked or failed
        self.collector = _BatchCollector(self)
        self.coordination = spec.coordination
        self.tracker: CoordinationTracker | None = None
        if self.coordination is not None:
            self.tracker = CoordinationTracker(
                CoordinationConfig(
                    expected_reports=topology.expected_reports(component_id),
                    downstream_tasks=tuple(
                        topology.downstream_tasks(component_id, COORDINATED_STREAM_ID)
                    ),
                    waits_for_id=self.coordination.id_stream is not None,
                    waits_for_commit=self.coordination.commit_stream is not None,
                    timeout=_NO_TIMEOUT,
                    component=component_id,
                    task=self.task_id,
                ),
                id_owner_check(topology, component_id, index),
            )
        self.outputs: dict[int, list[Record]] = {}
        self.reports_out: dict[int, dict[Hashable, int]] = {}
        self.failures: dict[Hashable, Failure] = {}
        self.uncoordinated_failures: list[tuple[list[Any], Failure]] = []
        self.unrouted: list[tuple[str, list[Any]]] = []  # emits no component subscribes to
        self.executed: Counter[Hashable] = Counter()
        self.busy: dict[Hashable, float] | None = {} if timed else None
        """Seconds spent executing each id's tuples and finishing it (``timed`` only)."""
        self.current: Tuple | None = None
        self._log = _IdLogFields(log_fields) if log_fields else None
        self._fields: dict[tuple[str, str], Fields] = {}
        self._fail_targets = sorted(
            {
                task
                for stream in spec.outputs
                for subscriber, _ in topology.subscribers(component_id, stream)
                for task in topology.component_task_ids[subscriber]
            }
        )
        self.broken: Failure | None = None
        try:
            self.runner.prepare(
                self.conf,
                TopologyContext(
                    topology, component_id, self.task_id, services=services, conf=self.conf
                ),
                self.collector,
            )
        except Exception as error:
            self.broken = self.runner.failure(error, "prepare")

    # -- running ---------------------------------------------------------------------------

    def run(self, records: Iterable[Record]) -> TaskRun:
        token = None
        if self._log is not None:
            around = current_context()
            token = push_context(ChainMap(self._log, around) if around else self._log)
        try:
            with self.lock:
                try:
                    return self._run(records)
                finally:
                    self.ended = True
        finally:
            if token is not None:
                pop_context(token)

    def _await_acks(self) -> None:
        """Wait, up to the deadline, for the executed data tuples still unacked."""
        if self.unacked:
            self._settled.wait_for(
                lambda: not self.unacked, timeout=max(0.0, self.deadline - time.time())
            )

    def late(self, what: str) -> None:
        log.warning(
            "step %r task %d %s a tuple after its batch ended (past its deadline); ignored",
            self.component_id,
            self.task_id,
            what,
        )

    def _run(self, records: Iterable[Record]) -> TaskRun:
        data: list[Record] = []
        reports: list[Record] = []
        for record in records:
            kind = record[0]
            if kind == DATA:
                data.append(record)
            elif kind == REPORT:
                reports.append(record)
            else:
                self.received_failure(record[1], record[2], len(record) > 3 and record[3])
        if self.broken is not None:
            self.fail_everything(data, reports, self.broken)
            return self
        tracker = self.tracker
        if tracker is None:
            for record in data:
                self.execute_data(self.make_tuple(record))
            self._await_acks()
            self.runner.cleanup()
            return self
        coordination = self.coordination
        assert coordination is not None
        id_tuples: list[Tuple] = []
        commit_tuples: list[Tuple] = []
        log_context = self._log
        for record in data:
            received = self.make_tuple(record)
            stream = GlobalStreamId(received.source_component, received.source_stream)
            if stream == coordination.id_stream:
                id_tuples.append(received)
            elif stream == coordination.commit_stream:
                commit_tuples.append(received)
            else:
                id = received.values[0]
                if is_ignored(tracker.tuple_received(id, 0.0)):
                    continue
                if log_context is not None:
                    log_context.id = id
                self.executed[id] += 1
                busy = self.busy
                if busy is None:
                    self.execute_data(received)
                else:
                    started = time.perf_counter()
                    self.execute_data(received)
                    busy[id] = busy.get(id, 0.0) + time.perf_counter() - started
        self._await_acks()
        if self.hints.synthesize_ids:
            owns = id_owner_check(self.topology, self.component_id, self.index)
            for id in self.job_ids:
                if owns is None or owns(id):
                    self.apply(tracker.id_received(id, 0.0), None)
        for received in id_tuples:
            decisions = tracker.id_received(received.values[0], 0.0)
            if is_ignored(decisions):
                continue
            if coordination.deliver_id_tuple:
                if log_context is not None:
                    log_context.id = received.values[0]
                self.execute(received)
            self.apply(decisions, received)
        for received in commit_tuples:
            self.apply(tracker.commit_received(received.values[0], 0.0), received)
        shipped: Counter[tuple[str, Hashable]] = Counter()
        implied = {source for source, _ in self.hints.implied_sources}
        for _, source, _, counts in reports:
            for id, count in counts.items():
                if source in implied:
                    shipped[(source, id)] += 1
                self.apply(tracker.report_received(id, count, 0.0), None)
        for source, expected in self.hints.implied_sources:
            for id in self.job_ids:
                for _ in range(expected - shipped[(source, id)]):
                    self.apply(tracker.report_received(id, 0, 0.0), None)
        for id in list(tracker.tracked_ids()):
            self.apply(tracker.tuple_failed(id, self.diagnose(id), 0.0), None)
        self.runner.cleanup()
        return self

    def fail_everything(self, data: list[Record], reports: list[Record], failure: Failure) -> None:
        ids: dict[Hashable, None] = {}
        if self.tracker is not None:
            for record in data:
                ids[record[4][0]] = None
            for record in reports:
                ids.update(dict.fromkeys(record[3]))
            if self.hints.implied_sources:
                ids.update(dict.fromkeys(self.job_ids))
        for id in ids:
            if id not in self.failures:
                self.fail_id(id, failure)
        if self.tracker is None:
            for record in data:
                self.uncoordinated_failures.append((record[4], failure))

    def make_tuple(self, record: Record) -> Tuple:
        _, source, stream, source_task, values = record
        key = (source, stream)
        fields = self._fields.get(key)
        if fields is None:
            fields = self._fields[key] = self.topology.output_fields(source, stream)
        return Tuple(values, fields, source, stream, source_task)

    def execute(self, received: Tuple) -> None:
        previous, self.current = self.current, received
        try:
            self.runner.execute(received)
        finally:
            self.current = previous

    def execute_data(self, received: Tuple) -> None:
        """Execute a data tuple; one the bolt did not ack or fail yet is awaited."""
        self.execute(received)
        if not received._done:
            self.unacked[id(received)] = received

    def diagnose(self, id: Hashable) -> Failure:
        assert self.tracker is not None
        status = self.tracker.status(id)
        assert status is not None
        executed = self.executed[id]
        if (
            isinstance(self.runner, RichBoltRunner)
            and status.reports == status.expected_reports
            and status.acked < executed
        ):
            return Failure(
                DRPCExceptionType.FAILED_REQUEST,
                f"Request failed: step {self.component_id!r} (task {self.task_id}) left "
                f"{executed - status.acked} of its {executed} input tuples unacked within "
                f"{self.timeout:g} s (topology.message.timeout.secs); a rich bolt must ack or "
                "fail every input",
                self.component_id,
                self.task_id,
            )
        return Failure(
            DRPCExceptionType.INTERNAL_ERROR,
            f"Internal error: step {self.component_id!r} (task {self.task_id}) did not receive "
            f"every tuple of the id ({status.describe()}, {executed} executed)",
            self.component_id,
            self.task_id,
        )

    # -- coordination decisions -------------------------------------------------------------

    def apply(self, decisions: list[Decision], trigger: Tuple | None) -> None:
        tracker = self.tracker
        assert tracker is not None
        for decision in decisions:
            if isinstance(decision, FinishBatch):
                if self._log is not None:
                    self._log.id = decision.id
                previous, self.current = self.current, trigger
                started = time.perf_counter() if self.busy is not None else 0.0
                try:
                    self.runner.finished_id(decision.id)
                except Exception as error:
                    more = tracker.finish_failed(
                        decision.id, self.runner.failure(error, "finish_batch"), 0.0
                    )
                else:
                    more = tracker.finish_done(decision.id)
                finally:
                    self.current = previous
                    if self.busy is not None:
                        spent = time.perf_counter() - started
                        self.busy[decision.id] = self.busy.get(decision.id, 0.0) + spent
                self.apply(more, trigger)
            elif isinstance(decision, SendReport):
                if decision.count or not self.hints.omit_zero_reports:
                    self.reports_out.setdefault(decision.task, {})[decision.id] = decision.count
            elif isinstance(decision, Failed):
                self.runner.failed_id(decision.id)
                self.fail_id(decision.id, decision.failure)
            elif isinstance(decision, Abandoned):
                self.runner.failed_id(decision.id)

    def on_ack(self, acked: Tuple) -> None:
        self._settle(acked)
        if self.tracker is not None and self.is_data(acked):
            self.apply(self.tracker.tuple_acked(acked.values[0], 0.0), acked)

    def on_fail(self, failed: Tuple, failure: Failure) -> None:
        self._settle(failed)
        if self.tracker is not None and self.is_data(failed):
            self.apply(self.tracker.tuple_failed(failed.values[0], failure, 0.0), failed)
        elif self.tracker is None:
            self.uncoordinated_failures.append((failed.values, failure))

    def _settle(self, done: Tuple) -> None:
        if self.unacked.pop(id(done), None) is not None and not self.unacked:
            self._settled.notify_all()

    def is_data(self, received: Tuple) -> bool:
        coordination = self.coordination
        if coordination is None:
            return False
        stream = GlobalStreamId(received.source_component, received.source_stream)
        return stream != coordination.id_stream and stream != coordination.commit_stream

    # -- failures travelling with the data -------------------------------------------------

    def fail_id(self, id: Hashable, failure: Failure) -> None:
        """``id`` failed here: remember it and tell every downstream task."""
        if id in self.failures:
            return
        self.failures[id] = failure
        for task in self._fail_targets:
            self.outputs.setdefault(task, []).append((FAIL, id, failure))

    def received_failure(self, id: Hashable, failure: Failure, forward: bool = False) -> None:
        if id in self.failures:
            return
        self.failures[id] = failure
        if self.tracker is not None:
            self.apply(self.tracker.abandon(id, 0.0), None)
        if forward or stable_hash([id]) % self.parallelism == self.index:
            for task in self._fail_targets:
                self.outputs.setdefault(task, []).append((FAIL, id, failure))

    # -- output ----------------------------------------------------------------------------

    def send(self, stream: str, values: Sequence[Any], targets: list[int]) -> None:
        record = (DATA, self.component_id, stream, self.task_id, list(values))
        if not targets:
            self.unrouted.append((stream, record[4]))
            return
        tracker = self.tracker if stream != COORDINATED_STREAM_ID else None
        for target in targets:
            self.outputs.setdefault(target, []).append(record)
            if tracker is not None:
                tracker.tuple_emitted(record[4][0], target)

    def records_by_task(self) -> dict[int, list[Record]]:
        """Every output record by receiving task id, count reports included."""
        for task, counts in self.reports_out.items():
            self.outputs.setdefault(task, []).append(
                (REPORT, self.component_id, self.task_id, counts)
            )
        self.reports_out = {}
        return self.outputs

    def blobs(self) -> list[tuple[int, bytes]]:
        """Output records pickled once per receiving task; unpicklable values fail their id."""
        by_task = self.records_by_task()
        encoded: list[tuple[int, bytes]] = []
        bad: list[tuple[int, Record, BaseException]] = []
        for task, records in by_task.items():
            try:
                encoded.append((task, pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)))
            except Exception:
                for record in records:
                    try:
                        pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
                    except Exception as error:
                        bad.append((task, record, error))
        if not bad:
            return encoded
        for _, record, error in bad:
            if record[0] != DATA:
                raise error
            message = str(
                UnserializableValueError(
                    f"step {self.component_id!r} emitted a value on stream {record[2]!r} that "
                    f"cannot be pickled, so it cannot travel between tasks: "
                    f"{type(error).__name__}: {error}"
                )
            )
            failure = Failure(
                DRPCExceptionType.FAILED_REQUEST,
                f"Request failed: {message}",
                self.component_id,
                self.task_id,
            )
            self.fail_id(record[4][0], failure)
        dropped = {id(record) for _, record, _ in bad}
        return [
            (task, pickle.dumps([r for r in records if id(r) not in dropped]))
            for task, records in self.outputs.items()
        ]
