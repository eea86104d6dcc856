"""One bolt task's rules, shared by every executor; the executor supplies the effects.

Contract. ``TaskCore(topology, component_id, task_id, conf=..., effects=...)``
owns one task of a bolt: its own copy of the bolt behind a ``BoltRunner``
(``drpc.semantics.runners``), its ``OutputRouter``, and for a coordinated bolt
its ``CoordinationTracker`` (``drpc.semantics.coordination``, set up here and
nowhere else). ``collector`` is the ``OutputCollector`` the bolt emits, acks
and fails through. The executor decides what arrives when (a stream of
messages, or a whole partition at once) and calls:

- ``make_tuple`` / ``fields_of``, ``input_kind`` (what an input stream is to
  the coordination rules: ``DATA``, ``ID``, ``COMMIT`` or ``REPORT``, worked
  out once per stream), ``is_data``, ``execute`` / ``execute_data`` (a data
  tuple is remembered until acked or failed when ``track_unacked``);
  ``execute_id_run`` for a batch bolt (``acks_in_bulk``): a run of one id's
  data tuples executed in order and acked with one tracker event;
- the tracker's events (``core.tracker.tuple_received(...)`` ...) and
  ``apply(decisions, trigger)`` for what they decide. ``apply`` is the one
  place the coordination decisions are carried out: ``FinishBatch`` runs the
  bolt's finish with ``trigger`` as the current input (so its emits anchor to
  it) and feeds the outcome back to the tracker; ``SendReports``,
  ``Completed``, ``Failed`` and ``Abandoned`` become ``TaskEffects`` calls
  (the runner's ``failed_id`` first for the last two). It returns the
  failure ``trigger`` must carry, if any.

User code run for a request whose id is a ``PinnedRequest`` (``execute`` of a tuple
whose first value is one, ``execute_id_run`` and the finish of such an id) runs with the
request's pinned versions as its thread's (``drpc.state.versions``), so every state read
it makes sees the versions the request entered with: where the bolt's ``state_reads``
says it reads (``drpc.model.components``; executes only for "anywhere").

Acks and fails come through the collector (``drpc.executors.task_collector``): the core
updates the tracker and
then asks the effects to ``settle`` the tuple (it is done here: acked, or
failed with a failure). Emits are checked and routed here, counted for the
tracker on data streams, and handed to ``effects.deliver``; ``emit_many``
does a batch of emits under one lock, routed and handed on in chunks
(``effects.deliver_many``), with one count per (id, receiving task).

Threading: every collector call holds ``lock`` (re-entrant), which the
executor also holds while it hands the task anything, so a bolt may emit, ack
and fail from threads of its own. An executor that marks its turns
(``begin_turn``/``end_turn``, under the lock) spares the calls made on the
turn's own thread taking the lock again. After ``end()`` (a batch task that
finished) collector calls are dropped with a warning.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Final, cast

from mypy_extensions import mypyc_attr

from drpc import config
from drpc.errors import Failure, InvalidTopologyError, InvalidTupleError
from drpc.executors.task_collector import TaskCollector
from drpc.model.anchors import CURRENT_ANCHOR, _CurrentAnchor
from drpc.model.components import STATE_READS
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields
from drpc.model.streams import (
    COORDINATED_STREAM_FIELDS,
    COORDINATED_STREAM_ID,
    GlobalStreamId,
)
from drpc.model.topology import CoordinatedBolt, Topology
from drpc.model.tuples import EMPTY_MESSAGE_ID, Tuple
from drpc.semantics.coordination import (
    Abandoned,
    Completed,
    CoordinationConfig,
    CoordinationTracker,
    Decision,
    Failed,
    FinishBatch,
    SendReports,
    is_ignored,
)
from drpc.semantics.routing import OutputRouter, id_owner_check
from drpc.semantics.runners import BatchBoltRunner, BoltRunner, instantiate, runner_for
from drpc.state.versions import READS, PinnedRequest

log = logging.getLogger(__name__)

EMIT_CHUNK = 1024
"""Emits ``send_many`` routes and delivers together."""

_first = itemgetter(0)
# Imported values read per tuple, held in C variables when compiled (see ``DATA`` below)
_PINNED_REQUEST: Final = PinnedRequest
_CURRENT_ANCHOR: Final = CURRENT_ANCHOR
_COORDINATED_FIELDS: Final = COORDINATED_STREAM_FIELDS


class InputKind(enum.Enum):
    """What an input stream of a coordinated task is to the coordination rules."""

    DATA = "data"  # counted: a tuple of an id
    ID = "id"  # the id stream's tuple
    COMMIT = "commit"  # the commit stream's tuple
    REPORT = "report"  # a count report on the ``__coord`` stream


# Final, as every module-level value the engine reads per tuple: the compiled build keeps
# it in a C variable instead of looking it up in the module's dict at each use.
DATA: Final = InputKind.DATA
ID: Final = InputKind.ID
COMMIT: Final = InputKind.COMMIT
REPORT: Final = InputKind.REPORT


@mypyc_attr(allow_interpreted_subclasses=True)
class TaskEffects:
    """What an executor does for a task; the rules that decide when are the core's. An
    executor subclasses it (a class, not a protocol: compiled, the core then calls a
    compiled executor's effects directly)."""

    def deliver(
        self, stream: str, values: Sequence[Any], targets: list[int], anchors: tuple[Tuple, ...]
    ) -> None:
        """Send an emitted tuple to ``targets`` (empty: nobody subscribes to ``stream``)."""
        raise NotImplementedError

    def deliver_many(
        self,
        stream: str,
        many: Sequence[Sequence[Any]],
        targets: Sequence[Sequence[int]],
        anchors: tuple[Tuple, ...],
    ) -> None:
        """``deliver`` each of ``many`` to its ``targets`` (same positions), in order (an
        executor may do it in fewer steps)."""
        for values, receivers in zip(many, targets, strict=True):
            self.deliver(stream, values, list(receivers), anchors)

    def report(self, id: Hashable, counts: dict[int, int], trigger: Tuple | None) -> None:
        """Tell each downstream task in ``counts`` how many tuples of ``id`` this task sent
        it (its count), in order."""
        raise NotImplementedError

    def settle(self, done: Tuple, failure: Failure | None) -> None:
        """``done`` is finished here: acked (``failure`` None) or failed."""
        raise NotImplementedError

    def completed(self, id: Hashable) -> None:
        """``id`` finished at this task and its reports went out."""
        raise NotImplementedError

    def failed(self, failed: Failed) -> Failure:
        """``failed.id`` failed here; returns the failure to report (an executor that can
        tell where a timed-out tree is stuck may name that step)."""
        raise NotImplementedError

    def call_in_turn(self, run: Callable[[], None]) -> bool:
        """Have ``run`` called on one of the task's turns, after what it has queued; False
        when the executor runs no turns (the collector then calls it at once)."""
        return False

    def abandoned(self, id: Hashable) -> None:
        """``id`` failed elsewhere and was given up here."""
        raise NotImplementedError


def coordination_config(
    topology: Topology, component_id: str, task_id: int, timeout: float
) -> CoordinationConfig:
    """The coordination rules' configuration of one task of a coordinated component."""
    coordination = topology.components[component_id].coordination
    assert coordination is not None
    return CoordinationConfig(
        expected_reports=topology.expected_reports(component_id),
        downstream_tasks=tuple(topology.downstream_tasks(component_id, COORDINATED_STREAM_ID)),
        waits_for_id=coordination.id_stream is not None,
        waits_for_commit=coordination.commit_stream is not None,
        timeout=timeout,
        component=component_id,
        task=task_id,
    )


def counts_to_completion(topology: Topology, source: str, stream: str, receiver: str) -> bool:
    """Whether coordination alone keeps ``source``'s tuples on ``stream`` to ``receiver``
    in their request's tuple tree, so they need no edge ids of their own.

    It does when ``receiver`` is coordinated without an id stream, waits for ``source``'s
    count reports and ``stream`` is data to it: each of its tasks holds the reports (whose
    edges keep the tree open) until it has received and acked as many tuples of the id as
    they count, and a tuple that fails fails the id, whose held tuples fail the tree. An
    emit whose processing has children with edges of their own acks those (its edge is 0,
    its ack the XOR of theirs). A receiver with an id stream acks reports as they come and
    holds only the id tuple, at the task owning the id, so its tuples keep their edges."""
    coordination = topology.components[receiver].coordination
    return (
        coordination is not None
        and coordination.id_stream is None
        and source in coordination.sources
        and stream != COORDINATED_STREAM_ID
        and GlobalStreamId(source, stream) != coordination.commit_stream
    )


class TaskCore:
    """One task's bolt, routing and coordination (see the module doc)."""

    def __init__(
        self,
        topology: Topology,
        component_id: str,
        task_id: int,
        *,
        conf: Mapping[str, Any],
        effects: TaskEffects,
        clock: Callable[[], float] = time.monotonic,
        coordination_timeout: float | None = None,
        track_unacked: bool = False,
    ) -> None:
        """
        :param conf: the task's resolved configuration (``drpc.config.resolve``).
        :param clock: the time tracker events carry (a batch task passes a constant).
        :param coordination_timeout: seconds an id may stay tracked (default the
            message timeout).
        :param track_unacked: remember executed data tuples until acked or failed
            (``unacked``, ``wait_for_acks``).
        """
        spec = topology.components[component_id]
        self.topology = topology
        self.component_id = component_id
        self.task_id = task_id
        self.conf = conf
        self.effects = effects
        self.clock = clock
        self.router = OutputRouter(topology, component_id, task_id)
        self.index = self.router.index
        self.runner: BoltRunner = runner_for(
            instantiate(spec.user_component, component_id), component_id
        )
        self.lock = threading.RLock()
        self.turn_now = 0.0
        self.collector = TaskCollector(self)
        self.current: Tuple | None = None
        self.ended = False
        self.debug = bool(conf[config.TOPOLOGY_DEBUG])
        self.message_timeout = float(conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        self.coordination: CoordinatedBolt | None = spec.coordination
        self.tracker: CoordinationTracker | None = None
        if self.coordination is not None:
            self.tracker = CoordinationTracker(
                coordination_config(
                    topology,
                    component_id,
                    task_id,
                    self.message_timeout if coordination_timeout is None else coordination_timeout,
                ),
                id_owner_check(topology, component_id, self.index),
            )
        self.acks_in_bulk = type(self.runner) is BatchBoltRunner and self.tracker is not None
        """A batch bolt, which its runner acks after each execute: a run of one id's data
        tuples may go through ``execute_id_run``, acked with one tracker event."""
        reads = getattr(spec.user_component, "state_reads", "anywhere")
        if reads not in STATE_READS:
            raise InvalidTopologyError(
                f"state_reads must be one of {', '.join(STATE_READS)}, got {reads!r}",
                component_id,
            )
        self.pinned_execute = reads == "anywhere"
        """Executes of a pinned request's tuples run with its versions as the thread's."""
        self.pinned_finish = reads != "nowhere"
        """So do finishes of a pinned request."""
        self.unacked: dict[int, Tuple] | None = {} if track_unacked else None
        self._settled = threading.Condition(self.lock)
        # memos by source component, then stream: two look-ups by string cost less than
        # making and hashing a (component, stream) key for each tuple
        self._fields: dict[str, dict[str, Fields]] = {}
        self._kinds: dict[str, dict[str, InputKind]] = {}
        self._counted: dict[str, frozenset[int]] = {}
        # ...and the last answer of the last two, for the same strings: a turn's messages
        # mostly come from one stream, and a step mostly emits on one, whose strings are the
        # topology's own objects
        self._kind_key: tuple[str, str] = ("", "")
        self._kind_last: InputKind | None = None
        self._counted_stream: str | None = None
        self._counted_last: frozenset[int] = frozenset()
        self.on_finish: Callable[[Hashable], Callable[[], None]] | None = None
        """Called as an id's finish begins; returns what to call when it ends (timing)."""

    def prepare(
        self, services: dict[str, Any] | None, wakeup: Callable[[], None] | None = None
    ) -> None:
        """Prepare the bolt; its exceptions propagate (the executor decides what they mean)."""
        context = TopologyContext(
            self.topology,
            self.component_id,
            self.task_id,
            services=services,
            wakeup=wakeup,
            conf=dict(self.conf),
        )
        self.runner.prepare(dict(self.conf), context, self.collector)

    # -- input -------------------------------------------------------------------------------

    def make_tuple(
        self,
        source: str,
        stream: str,
        source_task: int,
        values: Sequence[Any],
        message_id: dict[int, int] = EMPTY_MESSAGE_ID,
    ) -> Tuple:
        return Tuple(
            values, self.fields_of(source, stream), source, stream, source_task, message_id
        )

    def make_report_tuple(
        self, source: str, source_task: int, id: Hashable, count: int, message_id: dict[int, int]
    ) -> Tuple:
        """``make_tuple`` of a count report: every coordinated step declares the
        ``__coord`` stream with the same fields, so none are looked up."""
        return Tuple(
            [id, count],
            _COORDINATED_FIELDS,
            source,
            COORDINATED_STREAM_ID,
            source_task,
            message_id,
        )

    def fields_of(self, source: str, stream: str) -> Fields:
        """The declared fields of ``source``'s ``stream``."""
        of_source = self._fields.get(source)
        if of_source is None:
            of_source = self._fields[source] = {}
        fields = of_source.get(stream)
        if fields is None:
            fields = of_source[stream] = self.topology.output_fields(source, stream)
        return fields

    def input_kind(self, source: str, stream: str) -> InputKind:
        """What ``source``'s ``stream`` is to this coordinated task's rules."""
        last = self._kind_last
        if last is not None:
            key = self._kind_key
            if key[0] is source and key[1] is stream:
                return last
        of_source = self._kinds.get(source)
        if of_source is None:
            of_source = self._kinds[source] = {}
        kind = of_source.get(stream)
        if kind is None:
            coordination = self.coordination
            assert coordination is not None
            stream_id = GlobalStreamId(source, stream)
            if stream == COORDINATED_STREAM_ID:
                kind = REPORT
            elif stream_id == coordination.id_stream:
                kind = ID
            elif stream_id == coordination.commit_stream:
                kind = COMMIT
            else:
                kind = DATA
            of_source[stream] = kind
        self._kind_key = (source, stream)
        self._kind_last = kind
        return kind

    def counted_targets(self, stream: str) -> frozenset[int]:
        """The tasks whose coordination keeps this task's tuples on ``stream`` in their tree
        (``counts_to_completion``): those need no edge ids."""
        if stream is self._counted_stream:
            return self._counted_last
        counted = self._counted.get(stream)
        if counted is None:
            topology = self.topology
            counted = self._counted[stream] = frozenset(
                task
                for receiver, _ in topology.subscribers(self.component_id, stream)
                if counts_to_completion(topology, self.component_id, stream, receiver)
                for task in topology.component_task_ids[receiver]
            )
        self._counted_stream = stream
        self._counted_last = counted
        return counted

    def is_data(self, received: Tuple) -> bool:
        """A coordinated input the tracker counts: not a count report, id or commit tuple."""
        return (
            self.coordination is not None
            and self.input_kind(received.source_component, received.source_stream) is DATA
        )

    def execute(self, received: Tuple) -> None:
        # ``runner.run``, then the ack it asks for straight to ``on_ack`` (what the runner's
        # ``collector.ack`` would come to, without the call through the collector)
        previous, self.current = self.current, received
        values = received.values
        if self.pinned_execute and values and type(values[0]) is _PINNED_REQUEST:
            scope = READS
            restore = scope.reads
            scope.reads = values[0].reads
            try:
                if self.runner.run(received):
                    self.collector._ack(received)
            finally:
                self.current = previous
                scope.reads = restore
            return
        try:
            if self.runner.run(received):
                self.collector._ack(received)
        finally:
            self.current = previous

    def execute_data(self, received: Tuple) -> None:
        """Execute a data tuple; with ``track_unacked`` one not acked or failed yet is kept."""
        self.execute(received)
        if self.unacked is not None and not received._done:
            self.unacked[id(received)] = received

    def execute_id_run(self, id: Hashable, run: list[Tuple]) -> None:
        """Execute a non-empty run of data tuples of one id, in order, on a batch bolt
        (``acks_in_bulk``) and ack them: what ``execute_data`` and one ack per tuple do,
        with one tracker event for the acks. The tracker has counted them received. A tuple
        whose execute raises fails the id (the tuples before it settle as acked), and the
        rest of the run is not executed, as the tracker would ignore them once the id
        failed."""
        runner = self.runner
        tracker = self.tracker
        assert isinstance(runner, BatchBoltRunner) and tracker is not None
        effects = self.effects
        acked = 0
        previous = self.current
        pinned = self.pinned_execute and type(id) is _PINNED_REQUEST
        restore = READS.reads if pinned else None
        if pinned:
            READS.reads = cast(PinnedRequest, id).reads
        try:
            execute = runner.instance(id).execute
            for received in run:
                self.current = received
                execute(received)
                acked += 1
        except Exception as error:
            # The id fails now whatever the tracker made of the acks before: they only settle.
            for done in run[:acked]:
                effects.settle(done, None)
            self.on_fail(run[acked], runner.failure(error, "execute"))
            return
        finally:
            self.current = previous
            if pinned:
                READS.reads = restore
        # The tracker cannot ignore these acks: nothing in a run gives up its id but a raise.
        failure = self.apply(tracker.tuple_acked(id, self.now(), len(run)), run[-1])
        last = len(run) - 1
        for index in range(last):
            effects.settle(run[index], None)
        effects.settle(run[last], failure)

    def wait_for_acks(self, deadline: float) -> None:
        """Wait (holding ``lock`` on entry) until every kept data tuple is acked or failed,
        or ``time.time()`` reaches ``deadline``."""
        if self.unacked:
            self._settled.wait_for(
                lambda: not self.unacked, timeout=max(0.0, deadline - time.time())
            )

    def begin_turn(self, now: float = 0.0) -> None:
        """This thread holds ``lock`` for a turn (call under it); ``now``, when given, is the
        time the tracker events of the turn carry (``now()``) instead of ``clock``'s."""
        self.turn_now = now

    def end_turn(self) -> None:
        """The turn ends (call before releasing ``lock``)."""
        self.turn_now = 0.0

    def now(self) -> float:
        """The time a tracker event carries: the turn's (``begin_turn``), else ``clock``'s."""
        now = self.turn_now
        return now if now else self.clock()

    def end(self) -> None:
        """No more input: collector calls from now on are dropped with a warning."""
        with self.lock:
            self.ended = True

    # -- coordination decisions --------------------------------------------------------------

    def apply(self, decisions: list[Decision], trigger: Tuple | None) -> Failure | None:
        """Carry out tracker decisions; returns a failure if ``trigger`` must fail, not ack."""
        failure: Failure | None = None
        for decision in decisions:
            kind = type(decision)
            if kind is FinishBatch:
                failure = self._finish(decision.id, trigger) or failure
            elif kind is SendReports:
                assert isinstance(decision, SendReports)
                self.effects.report(decision.id, decision.counts, trigger)
            elif kind is Completed:
                self.effects.completed(decision.id)
            elif kind is Failed:
                assert isinstance(decision, Failed)
                self.runner.failed_id(decision.id)
                failure = self.effects.failed(decision)
            elif kind is Abandoned:
                self.runner.failed_id(decision.id)
                self.effects.abandoned(decision.id)
        return failure

    def _finish(self, id: Hashable, trigger: Tuple | None) -> Failure | None:
        tracker = self.tracker
        assert tracker is not None
        done = self.on_finish(id) if self.on_finish is not None else None
        previous, self.current = self.current, trigger
        pinned = self.pinned_finish and type(id) is _PINNED_REQUEST
        restore = READS.reads if pinned else None
        if pinned:
            READS.reads = cast(PinnedRequest, id).reads
        try:
            self.runner.finished_id(id)
        except Exception as error:
            more = tracker.finish_failed(id, self.runner.failure(error, "finish_batch"), self.now())
        else:
            more = tracker.finish_done(id)
        finally:
            self.current = previous
            if pinned:
                READS.reads = restore
            if done is not None:
                done()
        return self.apply(more, trigger)

    # -- acks and fails (through the collector, under ``lock``) --------------------------------

    def on_ack(self, acked: Tuple) -> None:
        self._forget_unacked(acked)
        failure = None
        if self.tracker is not None and self.is_data(acked):
            decisions = self.tracker.tuple_acked(acked.values[0], self.now())
            if is_ignored(decisions):  # its id failed or was given up here
                acked._done = True
                return
            failure = self.apply(decisions, acked)
        self.effects.settle(acked, failure)

    def on_fail(self, failed: Tuple, failure: Failure) -> None:
        self._forget_unacked(failed)
        if self.tracker is not None and self.is_data(failed):
            self.apply(self.tracker.tuple_failed(failed.values[0], failure, self.now()), failed)
        self.effects.settle(failed, failure)

    def _forget_unacked(self, done: Tuple) -> None:
        unacked = self.unacked
        if unacked is not None and unacked.pop(id(done), None) is not None and not unacked:
            self._settled.notify_all()

    # -- output --------------------------------------------------------------------------------

    def send(
        self, stream: str, values: Sequence[Any], targets: list[int], anchors: tuple[Tuple, ...]
    ) -> None:
        self.effects.deliver(stream, values, targets, anchors)
        tracker = self.tracker
        if tracker is not None and stream != COORDINATED_STREAM_ID:
            # compiled, the list branch (most emits) indexes the list directly
            if isinstance(values, list):  # noqa: SIM108
                id = values[0]
            else:
                id = values[0]
            for target in targets:
                tracker.tuple_emitted(id, target)
        if self.debug:
            self._log_emit(stream, values, targets)

    def _log_emit(self, stream: str, values: Sequence[Any], targets: Sequence[int]) -> None:
        log.debug(
            "%s[%d] emitted %r on %s to %s",
            self.component_id,
            self.task_id,
            values,
            stream,
            targets,
        )

    def send_many(
        self, stream: str, many: Iterable[Sequence[Any]], anchors: tuple[Tuple, ...]
    ) -> None:
        """``check``, route and ``send`` each of ``many`` on data stream ``stream`` (the
        coordination stream is direct: the check refuses it), ``EMIT_CHUNK`` emits at a
        time (``targets_many``, ``deliver_many``); the emits are counted for the tracker
        once per (id, receiving task), also when a bad tuple or ``many`` itself raises:
        every emit before that is delivered and counted, none after it."""
        width = len(self.router.check_stream(stream, direct=False).fields)
        counted: Counter[tuple[Hashable, tuple[int, ...]]] = Counter()
        pending: list[Sequence[Any]] = []
        try:
            for values in many:
                pending.append(values)
                if len(pending) == EMIT_CHUNK:
                    chunk, pending = pending, []
                    self._send_chunk(stream, chunk, width, anchors, counted)
        finally:
            try:
                if pending:
                    self._send_chunk(stream, pending, width, anchors, counted)
            finally:
                if self.tracker is not None:
                    self._count_emitted(counted)

    def _send_chunk(
        self,
        stream: str,
        chunk: list[Sequence[Any]],
        width: int,
        anchors: tuple[Tuple, ...],
        counted: Counter[tuple[Hashable, tuple[int, ...]]],
    ) -> None:
        """Route and deliver ``chunk`` up to its first invalid emit, then raise for that."""
        invalid: InvalidTupleError | None = None
        if not all([type(values) is list and len(values) == width for values in chunk]):
            for position, values in enumerate(chunk):
                try:
                    self.router.check(stream, values, direct=False)
                except InvalidTupleError as error:
                    invalid, chunk = error, chunk[:position]
                    break
        targets = self.router.targets_many(stream, chunk)
        self.effects.deliver_many(stream, chunk, targets, anchors)
        if self.tracker is not None and chunk:
            ids = list(map(_first, chunk))
            if ids.count(ids[0]) == len(ids):  # one id (compared by identity first): no hashing
                for receivers, count in Counter(targets).items():
                    counted[(ids[0], receivers)] += count
            else:
                counted.update(zip(ids, targets, strict=True))
        if self.debug:
            for values, receivers in zip(chunk, targets, strict=True):
                self._log_emit(stream, values, list(receivers))
        if invalid is not None:
            raise invalid

    def _count_emitted(self, counted: Counter[tuple[Hashable, tuple[int, ...]]]) -> None:
        """Tell the tracker what ``send_many`` sent, once per (id, receiving task)."""
        tracker = self.tracker
        assert tracker is not None
        per_task: dict[tuple[Hashable, int], int] = {}
        for (id, targets), count in counted.items():
            for target in targets:
                key = (id, target)
                per_task[key] = per_task.get(key, 0) + count
        for (id, target), count in per_task.items():
            tracker.tuple_emitted(id, target, count)

    def anchors(self, anchors: Any) -> tuple[Tuple, ...]:
        """What an emit is anchored to, as a tuple (which the compiled build indexes
        directly), each checked not acked or failed yet."""
        if anchors is None:
            return ()
        if type(anchors) is Tuple:  # a basic bolt's emit: its input
            assert isinstance(anchors, Tuple)  # compiled: its fields read directly
            if anchors._done:
                self._anchored_done()
            return (anchors,)
        if anchors is _CURRENT_ANCHOR or isinstance(anchors, _CurrentAnchor):
            current = self.current
            return () if current is None else (current,)
        anchored = (anchors,) if isinstance(anchors, Tuple) else tuple(anchors)
        for anchor in anchored:
            if anchor._done:
                self._anchored_done()
        return anchored

    def _anchored_done(self) -> None:
        raise InvalidTupleError(
            f"step {self.component_id!r} anchored an emit to a tuple it had already acked or failed"
        )

    def late(self, what: str) -> None:
        log.warning(
            "step %r task %d %s a tuple after its batch ended (past its deadline); ignored",
            self.component_id,
            self.task_id,
            what,
        )
