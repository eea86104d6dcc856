"""Batch-mode execution of one task: a whole job's input at once.

The Spark executor runs each task of a component over its whole partition
(every tuple sent to that task for the job's ids), and runs the driver-side
DRPC steps and the transactional commit phase the same way. End of input
means "every upstream tuple for this task has arrived", but the count reports
still travel with the data and are checked: the task core
(``drpc.executors.task``, the same rules as the streaming engine) decides when
each id finishes, so a lost tuple becomes an INTERNAL_ERROR for that id, never
a wrong answer.

Input and output are ``Shipment``s (``drpc.executors.records``): what one
task sends one receiving task, pickled once as a blob. A failure is
broadcast by the task where it happened to every task downstream, and
forwarded further by one designated task per component, so copies do not
multiply; ``FailureNotice.forward`` (set on fused edges, where the designated
task may never see it) makes the receiving task forward it too.

Implied zero reports: a Spark task's output is all or nothing, and a task
that does not finish an id always sends a failure notice for it, so on Spark
a task sends count reports only where it sent tuples and the receiver counts
every report it did not get as a report of 0 (``TaskHints``). Non-zero counts
still travel with the data and are checked; reduce tasks fetch blocks only
from the map tasks that sent them something.

A batch bolt's data tuples go through ``TaskCore.execute_id_run`` in runs of
consecutive tuples of one id: executed in arrival order, acked with one
tracker event per run (Storm acks each; the outcome is the same).

Order within a task: failures, then tuples (executed in arrival order), then
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

With ``timed`` the task measures, per id, the seconds it spent executing
that id's tuples and finishing it (``busy``); the Spark executor ships them
as ``Timing`` records when it observes. Values cross processes pickled once
per shipment; a value that cannot be pickled fails only its own id, naming
the step and stream. A bolt whose ``prepare`` raises fails every id the task
would have handled.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections import ChainMap, Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

from drpc import config
from drpc.errors import DRPCExceptionType, Failure, UnserializableValueError
from drpc.executors.records import FailureNotice, Shipment
from drpc.executors.task import COMMIT, ID, TaskCore, TaskEffects
from drpc.logs import current_context, pop_context, push_context
from drpc.model.hashing import stable_hash
from drpc.model.topology import Topology
from drpc.model.tuples import Tuple
from drpc.semantics.coordination import Failed, is_ignored
from drpc.semantics.routing import id_owner_check
from drpc.semantics.runners import RichBoltRunner

log = logging.getLogger(__name__)

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


class TaskRun(TaskEffects):
    """One task of one component over one job's shipments (see the module doc).

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
        self.core = TaskCore(
            topology,
            component_id,
            self.task_id,
            conf=self.conf,
            effects=self,
            clock=_no_clock,
            coordination_timeout=_NO_TIMEOUT,
            track_unacked=True,
        )
        self.runner = self.core.runner
        self.tracker = self.core.tracker
        self.timeout = self.core.message_timeout
        self.deadline = time.time() + self.timeout if deadline is None else deadline
        self.outputs: dict[int, Shipment] = {}
        self.reports_out: dict[int, dict[Hashable, int]] = {}
        self.failures: dict[Hashable, Failure] = {}
        self.uncoordinated_failures: list[tuple[list[Any], Failure]] = []
        self.unrouted: list[tuple[str, list[Any]]] = []  # emits no component subscribes to
        self.executed: Counter[Hashable] = Counter()
        self.busy: dict[Hashable, float] | None = {} if timed else None
        """Seconds spent executing each id's tuples and finishing it (``timed`` only)."""
        self._log = _IdLogFields(log_fields) if log_fields else None
        if self._log is not None or self.busy is not None:
            self.core.on_finish = self._finishing
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
            self.core.prepare(services)
        except Exception as error:
            self.broken = self.runner.failure(error, "prepare")

    @property
    def ended(self) -> bool:
        return self.core.ended

    # -- running ---------------------------------------------------------------------------

    def run(self, shipments: Iterable[Shipment]) -> TaskRun:
        token = None
        if self._log is not None:
            around = current_context()
            token = push_context(ChainMap(self._log, around) if around else self._log)  # type: ignore[arg-type]
        try:
            with self.core.lock:
                try:
                    return self._run(list(shipments))
                finally:
                    self.core.end()
        finally:
            if token is not None:
                pop_context(token)

    def _run(self, shipments: list[Shipment]) -> TaskRun:
        for shipment in shipments:
            for notice in shipment.failures:
                self.received_failure(notice.id, notice.failure, notice.forward)
        if self.broken is not None:
            self.fail_everything(shipments, self.broken)
            return self
        core = self.core
        tracker = self.tracker
        if tracker is None:
            for shipment in shipments:
                for stream, values in shipment.emitted():
                    core.execute_data(
                        core.make_tuple(shipment.source, stream, shipment.source_task, values)
                    )
            core.wait_for_acks(self.deadline)
            self.runner.cleanup()
            return self
        coordination = core.coordination
        assert coordination is not None
        id_tuples: list[Tuple] = []
        commit_tuples: list[Tuple] = []
        log_context = self._log
        busy = self.busy
        data = self._data_tuples(shipments, id_tuples, commit_tuples)
        if core.acks_in_bulk and busy is None:
            self._execute_runs(data)
        else:
            for received in chain.from_iterable(data):
                id = received.values[0]
                if is_ignored(tracker.tuple_received(id, 0.0)):
                    continue
                if log_context is not None:
                    log_context.id = id
                self.executed[id] += 1
                if busy is None:
                    core.execute_data(received)
                else:
                    started = time.perf_counter()
                    core.execute_data(received)
                    busy[id] = busy.get(id, 0.0) + time.perf_counter() - started
        core.wait_for_acks(self.deadline)
        if self.hints.synthesize_ids:
            owns = id_owner_check(self.topology, self.component_id, self.index)
            for id in self.job_ids:
                if owns is None or owns(id):
                    core.apply(tracker.id_received(id, 0.0), None)
        for received in id_tuples:
            decisions = tracker.id_received(received.values[0], 0.0)
            if is_ignored(decisions):
                continue
            if coordination.deliver_id_tuple:
                if log_context is not None:
                    log_context.id = received.values[0]
                core.execute(received)
            core.apply(decisions, received)
        for received in commit_tuples:
            core.apply(tracker.commit_received(received.values[0], 0.0), received)
        shipped: Counter[tuple[str, Hashable]] = Counter()
        implied = {source for source, _ in self.hints.implied_sources}
        for shipment in shipments:
            for id, count in shipment.reports.items():
                if shipment.source in implied:
                    shipped[(shipment.source, id)] += 1
                core.apply(tracker.report_received(id, count, 0.0), None)
        for source, expected in self.hints.implied_sources:
            for id in self.job_ids:
                missing = expected - shipped[(source, id)]
                if missing > 0:
                    core.apply(tracker.report_received(id, 0, 0.0, missing), None)
        for id in list(tracker.tracked_ids()):
            core.apply(tracker.tuple_failed(id, self.diagnose(id), 0.0), None)
        self.runner.cleanup()
        return self

    def _data_tuples(
        self, shipments: list[Shipment], id_tuples: list[Tuple], commit_tuples: list[Tuple]
    ) -> Iterator[list[Tuple]]:
        """The data tuples of ``shipments`` in arrival order, a list per run of one stream in
        one shipment; id and commit tuples are set aside in ``id_tuples`` and
        ``commit_tuples`` as they pass."""
        core = self.core
        for shipment in shipments:
            source, source_task = shipment.source, shipment.source_task
            for stream_id, rows in shipment.runs:
                fields = core.fields_of(source, stream_id)
                received = [
                    Tuple(values, fields, source, stream_id, source_task) for values in rows
                ]
                kind = core.input_kind(source, stream_id)
                if kind is ID:
                    id_tuples.extend(received)
                elif kind is COMMIT:
                    commit_tuples.extend(received)
                else:
                    yield received

    def _execute_runs(self, data: Iterable[list[Tuple]]) -> None:
        """A batch bolt's data tuples, in arrival order, as runs of one id each, every run
        counted received and acked with one tracker event (``TaskCore.execute_id_run``)."""
        core = self.core
        tracker = self.tracker
        assert tracker is not None
        log_context = self._log
        run: list[Tuple] = []
        run_id: Hashable = None

        def flush() -> None:
            if not run or is_ignored(tracker.tuple_received(run_id, 0.0, len(run))):
                return
            if log_context is not None:
                log_context.id = run_id
            self.executed[run_id] += len(run)
            core.execute_id_run(run_id, run)

        for received in data:
            for id, segment in _by_id(received):
                if run and id is not run_id and id != run_id:
                    flush()
                    run = []
                run_id = id
                if run:
                    run.extend(segment)
                else:
                    run = segment
        flush()

    def fail_everything(self, shipments: list[Shipment], failure: Failure) -> None:
        if self.tracker is None:
            for shipment in shipments:
                for _, values in shipment.emitted():
                    self.uncoordinated_failures.append((values, failure))
            return
        ids = {id: None for shipment in shipments for id in shipment.ids()}
        if self.hints.implied_sources:
            ids.update(dict.fromkeys(self.job_ids))
        for id in ids:
            if id not in self.failures:
                self.fail_id(id, failure)

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

    def _finishing(self, id: Hashable) -> Callable[[], None]:
        if self._log is not None:
            self._log.id = id
        busy = self.busy
        if busy is None:
            return _nothing
        started = time.perf_counter()

        def done() -> None:
            busy[id] = busy.get(id, 0.0) + time.perf_counter() - started

        return done

    # -- the task's effects (TaskEffects) ---------------------------------------------------

    def deliver(
        self, stream: str, values: Sequence[Any], targets: list[int], anchors: tuple[Tuple, ...]
    ) -> None:
        self._sink(stream, targets)(list(values))

    def deliver_many(
        self,
        stream: str,
        many: Sequence[Sequence[Any]],
        targets: Sequence[Sequence[int]],
        anchors: tuple[Tuple, ...],
    ) -> None:
        sinks: dict[Sequence[int], Callable[[list[Any]], None]] = {}
        for values, receivers in zip(many, targets, strict=True):
            sink = sinks.get(receivers)
            if sink is None:
                sink = sinks[receivers] = self._sink(stream, receivers)
            sink(list(values))

    def _sink(self, stream: str, targets: Sequence[int]) -> Callable[[list[Any]], None]:
        """Where an emit on ``stream`` for ``targets`` goes, as one call, while nothing else
        is sent (the receiving shipments' ``appender``; no targets: ``unrouted``)."""
        if len(targets) == 1:
            return self.shipment_to(targets[0]).appender(stream)
        if not targets:
            unrouted = self.unrouted

            def unsubscribed(values: list[Any]) -> None:
                unrouted.append((stream, values))

            return unsubscribed
        appends = [self.shipment_to(target).appender(stream) for target in targets]

        def to_each(values: list[Any]) -> None:
            for append in appends:
                append(values)

        return to_each

    def report(self, id: Hashable, counts: dict[int, int], trigger: Tuple | None) -> None:
        omit_zero = self.hints.omit_zero_reports
        for task, count in counts.items():
            if count or not omit_zero:
                self.reports_out.setdefault(task, {})[id] = count

    def settle(self, done: Tuple, failure: Failure | None) -> None:
        done._done = True
        if failure is not None and self.tracker is None:
            self.uncoordinated_failures.append((done.values, failure))

    def completed(self, id: Hashable) -> None:
        """Nothing held here: the task's shipments carry the outcome."""

    def failed(self, failed: Failed) -> Failure:
        self.fail_id(failed.id, failed.failure)
        return failed.failure

    def abandoned(self, id: Hashable) -> None:
        """Nothing held here; the failure notice that caused it was forwarded already."""

    # -- failures travelling with the data -------------------------------------------------

    def fail_id(self, id: Hashable, failure: Failure) -> None:
        """``id`` failed here: remember it and tell every downstream task."""
        if id in self.failures:
            return
        self.failures[id] = failure
        for task in self._fail_targets:
            self.shipment_to(task).failures.append(FailureNotice(id, failure))

    def received_failure(self, id: Hashable, failure: Failure, forward: bool = False) -> None:
        if id in self.failures:
            return
        self.failures[id] = failure
        if self.tracker is not None:
            self.core.apply(self.tracker.abandon(id, 0.0), None)
        if forward or stable_hash([id]) % self.parallelism == self.index:
            for task in self._fail_targets:
                self.shipment_to(task).failures.append(FailureNotice(id, failure))

    # -- output ----------------------------------------------------------------------------

    def shipment_to(self, task: int) -> Shipment:
        shipment = self.outputs.get(task)
        if shipment is None:
            shipment = self.outputs[task] = Shipment(self.component_id, self.task_id)
        return shipment

    def shipments(self) -> dict[int, Shipment]:
        """Everything this task sends, by receiving task id, count reports included."""
        for task, counts in self.reports_out.items():
            self.shipment_to(task).reports.update(counts)
        self.reports_out = {}
        return self.outputs

    def release(self) -> None:
        """Drop what the run sent, once it has been handed on: the run and its core refer
        to each other, so without this its output would wait for the cycle collector."""
        self.outputs = {}
        self.reports_out = {}
        self.unrouted = []

    def blobs(self) -> list[tuple[int, bytes]]:
        """Each shipment pickled once; an unpicklable value fails only its own id."""
        shipments = self.shipments()
        encoded: list[tuple[int, bytes]] = []
        bad: list[tuple[Shipment, tuple[str, list[Any]], BaseException]] = []
        for task, shipment in shipments.items():
            try:
                encoded.append((task, _pickle([shipment])))
            except Exception as error:
                found = _unpicklable(shipment.emitted())
                if not found:
                    raise error
                bad.extend((shipment, emitted, problem) for emitted, problem in found)
        if not bad:
            return encoded
        for _, (stream, values), problem in bad:
            message = str(
                UnserializableValueError(
                    f"step {self.component_id!r} emitted a value on stream {stream!r} that "
                    f"cannot be pickled, so it cannot travel between tasks: "
                    f"{type(problem).__name__}: {problem}"
                )
            )
            self.fail_id(
                values[0],
                Failure(
                    DRPCExceptionType.FAILED_REQUEST,
                    f"Request failed: {message}",
                    self.component_id,
                    self.task_id,
                ),
            )
        dropped = {id(values) for _, (_, values), _ in bad}
        for shipment in self.outputs.values():
            runs = [
                (stream, [v for v in rows if id(v) not in dropped])
                for stream, rows in shipment.runs
            ]
            shipment.runs = [(stream, rows) for stream, rows in runs if rows]
        return [(task, _pickle([shipment])) for task, shipment in self.outputs.items()]


def _pickle(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _unpicklable(
    tuples: Iterable[tuple[str, list[Any]]],
) -> list[tuple[tuple[str, list[Any]], BaseException]]:
    found: list[tuple[tuple[str, list[Any]], BaseException]] = []
    for emitted in tuples:
        try:
            _pickle(emitted)
        except Exception as error:
            found.append((emitted, error))
    return found


def _by_id(received: list[Tuple]) -> Iterator[tuple[Hashable, list[Tuple]]]:
    """``received`` (not empty) cut into runs of one id (its first value), in order; ids
    are compared by identity first, so a run sharing one id object is never hashed."""
    ids = [each.values[0] for each in received]
    first = ids[0]
    if ids.count(first) == len(ids):
        yield first, received
        return
    start = 0
    for position in range(1, len(ids)):
        id = ids[position]
        if id is not ids[start] and id != ids[start]:
            yield ids[start], received[start:position]
            start = position
    yield ids[start], received[start:]


def _no_clock() -> float:
    return 0.0


def _nothing() -> None:
    pass


def gather_shipments(runs: Iterable[TaskRun]) -> dict[int, list[Shipment]]:
    """The shipments of several task runs, gathered by receiving task."""
    gathered: dict[int, list[Shipment]] = {}
    for run in runs:
        for task, shipment in run.shipments().items():
            gathered.setdefault(task, []).append(shipment)
    return gathered
