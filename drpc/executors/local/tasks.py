"""The in-process engine's bolt tasks, on the shared task core.

Contract.

- ``BoltTask`` is an actor around a ``TaskCore`` (``drpc.executors.task``):
  it turns mailbox messages into tuples and coordination events, and
  supplies the streaming effects: an emitted tuple goes to each target as a
  ``Tuple`` of its own, its values a copy for that target (``pickled_values``:
  copied when immutable, else pickled once and unpickled per target), with its
  acking ``message_id`` (the anchors' roots, a fresh
  edge id per target XORed into each anchor; edge 0 for a target whose
  coordination keeps the tuple in its tree, ``TaskCore.counted_targets``,
  whose ack of 0 is not sent); a count report
  is a real tuple on the direct ``__coord`` stream anchored to its trigger;
  id, commit and (without an id stream) report tuples are held, keeping the
  request's tree open until the id completes (acked) or fails (failed with
  its failure), exactly as Storm's CoordinatedBolt; settling a tuple acks or
  fails its roots at the ackers. The roots of every tracked id are kept so a
  failed root (``Abandon``) drops its ids at once, and a timed-out tree can
  be located (``LocalExecutor.where_stuck``).
- A batch bolt task takes each run of data tuples of one id in a turn at once
  (``TaskCore.execute_id_run``).
- ``task_conf`` is a task's configuration, for every kind of task.

Spout tasks are ``drpc.executors.local.spouts``, acker tasks
``drpc.executors.local.ackers``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Container, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Final

from drpc import config
from drpc.builders.linear_drpc import RETURN_ID
from drpc.errors import Failure
from drpc.executors.local.actors import Actor
from drpc.executors.local.gathering import IdleFinish
from drpc.executors.local.messages import (
    Abandon,
    Ack,
    AckFail,
    Call,
    Message,
    Outbox,
    ReportMessage,
    Tick,
    TickTuple,
    TupleMessage,
    fold_reports,
)
from drpc.executors.local.spans import HANDLING, StepRecorder
from drpc.executors.task import DATA, ID, TaskCore, TaskEffects
from drpc.logs import pop_context, push_context
from drpc.model.components import BaseBasicBolt, BaseRichBolt
from drpc.model.streams import SYSTEM_COMPONENT_ID, SYSTEM_TICK_STREAM_ID, TICK_FIELDS
from drpc.model.topology import ComponentSpec
from drpc.model.tuples import Tuple
from drpc.semantics.acker import new_edge_id
from drpc.semantics.coordination import Failed, is_ignored
from drpc.semantics.routing import receiver_tuple

if TYPE_CHECKING:
    from drpc.executors.local.executor import LocalExecutor

log = logging.getLogger(__name__)
_get_ident: Final = threading.get_ident
_monotonic: Final = time.monotonic


def task_conf(engine: LocalExecutor, spec: ComponentSpec) -> dict[str, Any]:
    return config.resolve(
        engine.topology.conf, engine.conf, spec.conf, spec.component.get_component_configuration()
    )


class BoltTask(Actor):
    """One task of a bolt on the in-process engine (see the module doc)."""

    def __init__(self, engine: LocalExecutor, spec: ComponentSpec, task_id: int) -> None:
        super().__init__()
        self.engine = engine
        self.component_id = spec.id
        self.task_id = task_id
        self.name = f"{spec.id}[{task_id}]"
        conf = task_conf(engine, spec)
        self.core = TaskCore(
            engine.topology,
            spec.id,
            task_id,
            conf=conf,
            effects=BoltEffects(self),
        )
        # Storm's tick tuples, for the bolts that live across tuples (not batch bolts)
        tick = conf[config.TOPOLOGY_TICK_TUPLE_FREQ_SECS]
        self.tick_every: float | None = (
            tick if isinstance(spec.user_component, (BaseBasicBolt, BaseRichBolt)) else None
        )
        self.lock = self.core.lock
        # bound once: compiled, ``lock.acquire()`` would look the method up at every turn
        self._lock_acquire: Callable[[], object] = self.lock.acquire
        self._lock_release: Callable[[], None] = self.lock.release
        self.runner = self.core.runner
        self.tracker = self.core.tracker
        self.coordination = self.core.coordination
        self.held: dict[Hashable, list[Tuple]] = {}
        # the held count reports no tuple was made for, per id: root -> their edges XORed
        self.held_edges: dict[Hashable, dict[int, int]] = {}
        # The roots of each tracked id: the keys of the first message id noted for it (most
        # ids have one root), and any other roots in ``more_roots_of_id``.
        self.roots_of_id: dict[Hashable, dict[int, int]] = {}
        self.more_roots_of_id: dict[Hashable, set[int]] = {}
        # The last id and message id ``note_roots`` noted: a run of tuples sharing one
        # message id (``edgeless``) notes it once. Reset when the id is forgotten.
        self.noted_id: Hashable = None
        self.noted_message_id: dict[int, int] = {}
        # The message id of the last anchor ``edgeless`` made edgeless, and what it made:
        # the emits anchored to one input share one message id.
        self.edgeless_source: dict[int, int] = {}
        self.edgeless_made: dict[int, int] = {}
        self.dead_roots: OrderedDict[int, float] = OrderedDict()
        self.done_with_id = False  # set when an id completes, fails or is given up here
        self.last_sent: float | None = None  # when spans are kept: the handling's last send
        # ...and its first count report: a handling that emits nothing ends there, since
        # the task it reports to may finish (and end its own span) at once.
        self.first_report: float | None = None
        self.failed_here = False  # the handling failed an id
        # Storm's per-component figures (drpc.executors.stats): emits, tuples acked, failed
        self.emitted = 0
        self.acked = 0
        self.failures = 0
        self.hands_over = spec.id == RETURN_ID  # hands results to the invocations handle
        self.timeout = self.core.message_timeout
        self.reports_received = 0  # count reports, a folded one counting what it stands for
        # its count reports go through the engine's gatherer (drpc.executors.local.gathering)
        self.gathered = engine.gatherer.gathers(spec.id)
        # The running turn's outbox, set under the task's lock for the turn: what the task
        # sends goes there without a look-up of the thread's outbox per message.
        self.turn_outbox: Outbox | None = None
        # When the running turn began: the time tracker events of its messages carry (their
        # deadlines are seconds long; one clock read a turn instead of one a message).
        self.turn_began = 0.0

    def prepare(self) -> None:
        self.core.prepare(self.engine.services)

    # -- receiving -----------------------------------------------------------------------

    def handle_batch(self, batch: list[Message], turn: object = None) -> None:
        if self.tracker is not None and len(batch) > 1:
            batch = fold_reports(batch)
        # The task's lock once per turn, not per message: a thread of the bolt's own that
        # emits waits for the turn to end.
        self._lock_acquire()
        try:
            outbox = turn if isinstance(turn, Outbox) else self.engine.turn_outbox()
            self.turn_outbox = outbox
            self.turn_began = _monotonic()
            if outbox is not None:
                outbox.began = self.turn_began
            self.core.begin_turn(self.turn_began)
            try:
                if self.core.acks_in_bulk and len(batch) > 1 and self.engine.recorder is None:
                    self.handle_runs(batch)
                else:
                    super().handle_batch(batch, turn)
            finally:
                self.core.end_turn()
                self.turn_outbox = None
        finally:
            self._lock_release()

    def handle_runs(self, batch: list[Message]) -> None:
        """``Actor.handle_batch`` for a batch bolt (``TaskCore.acks_in_bulk``): each run of
        consecutive data tuples of one id from one source stream is received, executed and
        acked as one (``receive_run``); every other message one by one."""
        self.turns_taken += 1
        count = len(batch)
        index = 0
        while index < count:
            message = batch[index]
            kind = type(message)
            end = index + 1
            if kind is Tuple:
                assert type(message) is Tuple
                end = _run_end(batch, index, message)
            self.count_handled(kind, end - index)
            try:
                if end - index > 1:
                    self.receive_run(batch, index, end)
                else:
                    self.handle(message)
            except Exception:
                log.exception("%s failed to handle a %s message", self.name, kind.__name__)
            index = end

    def receive_run(self, batch: list[Message], start: int, end: int) -> None:
        """``batch[start:end]``, tuples of one source stream whose first values are one id:
        when the stream is data, each is received (the tracker counts them with one event)
        and the run goes through ``TaskCore.execute_id_run``; else one by one."""
        core = self.core
        tracker = self.tracker
        assert tracker is not None
        first = batch[start]
        assert type(first) is Tuple
        if core.input_kind(first.source_component, first.source_stream) is not DATA:
            for index in range(start, end):
                message = batch[index]
                assert type(message) is Tuple
                self.receive(message)
            return
        dead = self.dead_roots
        run: list[Tuple] = []
        for index in range(start, end):
            message = batch[index]
            assert type(message) is Tuple
            roots = message.message_id
            if dead and roots and all(root in dead for root in roots):
                continue
            run.append(message)
        if not run:
            return
        id = run[0].values[0]
        if is_ignored(tracker.tuple_received(id, self.turn_began, len(run))):
            return
        for received in run:
            self.note_roots(id, received.message_id)
        core.execute_id_run(id, run)

    def handle(self, message: Message) -> None:
        """One message, under the task's lock (``handle_batch`` holds it)."""
        # type checks, not ``match``: compiled, a class pattern is a generic isinstance call
        kind = type(message)
        if kind is Tuple or kind is ReportMessage:
            assert isinstance(message, (Tuple, ReportMessage))
            recorder = self.engine.recorder
            if recorder is not None and _any_watched(recorder.watched, message.message_id):
                self._handle_traced(message)
                return
            self.receive(message)
        elif isinstance(message, TupleMessage):  # from another process, not made a Tuple yet
            self.handle(self.engine.tuple_of(message))
        elif isinstance(message, Abandon):
            self.abandon_root(message.root)
        elif isinstance(message, Tick):
            self.tick(message.now)
        elif isinstance(message, TickTuple):
            self.tick_tuple()
        elif isinstance(message, Call):
            message.run()

    def tick_tuple(self) -> None:
        """Execute a tick tuple: untracked, outside any DRPC step's coordination."""
        tick = Tuple(
            [self.tick_every], TICK_FIELDS, SYSTEM_COMPONENT_ID, SYSTEM_TICK_STREAM_ID, -1, {}
        )
        self.core.execute(tick)

    def _handle_traced(self, message: Tuple | ReportMessage) -> None:
        spans = self.engine.recorder
        assert spans is not None
        with spans.holding():
            self._traced(spans, message)

    def _traced(self, spans: StepRecorder, message: Tuple | ReportMessage) -> None:
        roots = message.message_id
        started = time.monotonic()
        self._begin_handling()
        if self.hands_over:
            HANDLING.current = (self.component_id, self.task_id, started)
        report = type(message) is ReportMessage
        context = None if report else spans.begin(self.component_id, self.task_id, roots, started)
        token = push_context(context) if context is not None else None
        try:
            self.receive(message)
        finally:
            if token is not None:
                pop_context(token)
            if self.hands_over:
                HANDLING.current = None
            # A count report matters to the span only when it finished an id here.
            if not report:
                ended = self._handling_ended()
                spans.saw(self.component_id, self.task_id, roots, started, ended)
            elif self.done_with_id:
                ended = self._handling_ended()
                moves_end = self.last_sent is not None or self.failed_here
                spans.saw(self.component_id, self.task_id, roots, started, ended, moves_end)

    def _begin_handling(self) -> None:
        # A method of its own: set inline, the None would narrow these attributes' types for
        # the rest of _traced, and the compiled build would check that narrowed type.
        self.done_with_id = False
        self.last_sent = None
        self.first_report = None
        self.failed_here = False

    def _handling_ended(self) -> float:
        """When the handling ended for its span: its last send, else its first report, else now."""
        if self.last_sent is not None:
            return self.last_sent
        if self.first_report is not None:
            return self.first_report
        return time.monotonic()

    def receive(self, message: Tuple | ReportMessage) -> None:
        core = self.core
        if type(message) is Tuple:
            received = message
        elif type(message) is ReportMessage:
            if self.tracker is not None:
                self.receive_report(message)
                return
            received = core.make_report_tuple(
                message.source,
                message.source_task,
                message.id,
                message.tuples,
                message.message_id,
            )
        else:
            raise TypeError(f"not a tuple or count report: {type(message).__name__}")
        if self.tracker is None:
            core.execute(received)
        else:
            self.receive_coordinated(received)

    def receive_coordinated(self, received: Tuple) -> None:
        core, decl, tracker = self.core, self.coordination, self.tracker
        assert decl is not None and tracker is not None
        dead = self.dead_roots
        if dead and received.message_id and all(root in dead for root in received.message_id):
            return
        now = self.turn_began
        id = received.values[0]
        kind = core.input_kind(received.source_component, received.source_stream)
        if kind is DATA:
            if is_ignored(tracker.tuple_received(id, now)):
                return
            self.note_roots(id, received.message_id)
            core.execute(received)
        else:
            if kind is ID:
                decisions = tracker.id_received(id, now)
            else:
                decisions = tracker.commit_received(id, now)
            if is_ignored(decisions):
                return
            self.note_roots(id, received.message_id)
            self.held.setdefault(id, []).append(received)
            if kind is ID and decl.deliver_id_tuple:
                core.execute(received)
            core.apply(decisions, received)

    def receive_report(self, message: ReportMessage) -> None:
        """A count report to this coordinated task. One that decides nothing (most of
        them) takes no tuple: its edges are folded into the id's ``held_edges``, or acked
        at once when the id has an id stream. One that decides something becomes the
        tuple the decisions are triggered by (a finish's emits anchor to it)."""
        self.reports_received += message.reports
        roots = message.message_id
        dead = self.dead_roots
        if dead and roots and all(root in dead for root in roots):
            return
        tracker, decl = self.tracker, self.coordination
        assert tracker is not None and decl is not None
        id = message.id
        decisions = tracker.report_received(id, message.tuples, self.turn_began, message.reports)
        if is_ignored(decisions):
            return
        self.note_roots(id, roots)
        hold = decl.id_stream is None
        if not decisions:
            if hold:
                edges = self.held_edges.get(id)
                if edges is None:
                    self.held_edges[id] = dict(roots)
                else:
                    for root, edge in roots.items():
                        held = edges.get(root)
                        edges[root] = edge if held is None else held ^ edge
            else:
                for root, edge in roots.items():
                    self.ack_to_acker(root, edge)
            return
        received = self.core.make_report_tuple(
            message.source, message.source_task, id, message.tuples, roots
        )
        if hold:
            self.held.setdefault(id, []).append(received)
        failure = self.core.apply(decisions, received)
        if not hold:
            self.settle(received, failure)

    def note_roots(self, id: Hashable, message_id: dict[int, int]) -> None:
        if not message_id or (message_id is self.noted_message_id and id is self.noted_id):
            return
        self.noted_id = id
        self.noted_message_id = message_id
        first = self.roots_of_id.get(id)
        if first is None:
            self.roots_of_id[id] = message_id  # kept, not copied: never changed once made
            return
        if first is message_id:
            return
        for root in message_id:
            if root not in first:
                more = self.more_roots_of_id.get(id)
                if more is None:
                    self.more_roots_of_id[id] = {root}
                else:
                    more.add(root)

    def forget_roots(self, id: Hashable) -> None:
        self.done_with_id = True
        roots_of_id = self.roots_of_id
        if id in roots_of_id:  # not ``pop(id, None)``: compiled, that is a Python call
            del roots_of_id[id]
            more = self.more_roots_of_id
            if more and id in more:
                del more[id]
        if id is self.noted_id or id == self.noted_id:
            self.noted_id = None
            self.noted_message_id = {}

    def ids_of_root(self, root: int) -> list[Hashable]:
        """The tracked ids whose tuples came from ``root``'s tree (a scan: only a failed
        or timed-out tree asks, far more rarely than tuples come). Safe from another thread:
        the items are copied in one step before they are looked at."""
        more = self.more_roots_of_id
        return [
            id
            for id, first in list(self.roots_of_id.items())
            if root in first or root in more.get(id, ())
        ]

    def abandon_root(self, root: int) -> None:
        now = time.monotonic()
        self.dead_roots[root] = now + self.timeout
        if self.tracker is None:
            return
        for id in self.ids_of_root(root):
            self.core.apply(self.tracker.abandon(id, now), None)

    def tick(self, now: float) -> None:
        while self.dead_roots:
            deadline = next(iter(self.dead_roots.values()))
            if deadline > now:
                break
            self.dead_roots.popitem(last=False)
        if self.tracker is not None:
            self.core.apply(self.tracker.expire(now), None)

    # -- the task's effects (TaskEffects, through BoltEffects) ----------------------------

    def deliver(
        self, stream: str, values: Sequence[Any], targets: list[int], anchors: tuple[Tuple, ...]
    ) -> None:
        self.emitted += 1
        if not targets:
            return
        core = self.core
        router = core.router
        pickled = router.pickled(stream, values)
        fields = router.fields(stream)
        if self.engine.recorder is not None:
            self.last_sent = time.monotonic()  # before a receiver can act on it
        counted = core.counted_targets(stream)
        roots: dict[int, int] | None = None
        for target in targets:
            if target in counted:  # coordination keeps it in its tree: no edge
                if roots is None:
                    roots = self.edgeless(anchors)
                message_id = roots
            else:
                message_id = anchored_to(anchors)
            self.to_task(
                target,
                receiver_tuple(
                    values, pickled, fields, self.component_id, stream, self.task_id, message_id
                ),
            )

    def edgeless(self, anchors: tuple[Tuple, ...]) -> dict[int, int]:
        """``roots_of(anchors)``, the same dict for each emit anchored to one input."""
        if len(anchors) != 1:
            return roots_of(anchors)
        source = anchors[0].message_id
        if source is not self.edgeless_source:
            self.edgeless_made = roots_of(anchors)
            self.edgeless_source = source
        return self.edgeless_made

    def report(self, id: Hashable, counts: dict[int, int], trigger: Tuple | None) -> None:
        if self.engine.recorder is not None and self.first_report is None:
            self.first_report = time.monotonic()  # before the receiver can act on it
        anchors = (trigger,) if trigger is not None else ()
        if self.core.debug:
            for task, count in counts.items():
                log.debug("%s reported %d tuple(s) of %r to task %d", self.name, count, id, task)
        if self.gathered:
            self.gather(self.component_id, self.task_id, id, counts, anchors)
            return
        idle = self.engine.idle_finishes
        traced = self.engine.recorder is not None
        # the idle tasks finished here, gathered at once per component: (last task, how many)
        idled: dict[str, tuple[IdleFinish, int, int]] = {}
        for task, count in counts.items():
            if count == 0 and idle:
                finish = idle.get(task)
                if finish is not None:  # the report would leave it nothing else to do
                    if traced:
                        self.finish_idle_traced(task, finish, id, anchors)
                    else:
                        before = idled.get(finish.component)
                        idled[finish.component] = (
                            finish,
                            task,
                            1 if before is None else before[2] + 1,
                        )
                    continue
            self.to_task(
                task,
                ReportMessage(self.component_id, self.task_id, id, count, anchored_to(anchors)),
            )
        for component, (finish, task, senders) in idled.items():
            self.gather(component, task, id, finish.counts, anchors, senders)

    def finish_idle_traced(
        self, task: int, finish: IdleFinish, id: Hashable, anchors: tuple[Tuple, ...]
    ) -> None:
        """Finish ``id`` for idle ``task`` and record its span, as the task's own handling
        of the report would have (so a step no tuple of the request reached still shows)."""
        recorder = self.engine.recorder
        assert recorder is not None
        started = time.monotonic()
        self.gather(finish.component, task, id, finish.counts, anchors)
        roots = anchors[0].message_id if anchors else {}
        recorder.saw(finish.component, task, roots, started, time.monotonic(), False)

    def gather(
        self,
        component: str,
        reporter: int,
        id: Hashable,
        counts: dict[int, int],
        anchors: tuple[Tuple, ...],
        senders: int = 1,
    ) -> None:
        """Give task ``reporter``'s counts of ``id`` to the engine's gatherer, anchored with
        one edge per root, and send on what it gives back; with ``senders``, the reports
        of that many tasks (idle ones, finished here), all with ``counts``."""
        edges = anchored_to(anchors)
        gathered = self.engine.gather_reports(
            component, reporter, id, counts, edges, self.turn_began, senders
        )
        for task, report in gathered:
            self.to_task(task, report)

    def settle(self, done: Tuple, failure: Failure | None) -> None:
        if failure is None:
            self.ack_roots(done)
        else:
            self.fail_roots(done, failure)

    def completed(self, id: Hashable) -> None:
        held = self.held.get(id)  # get and del, not ``pop``: compiled, that is a Python call
        if held is not None:
            del self.held[id]
            self.ack_all(held)
        edges = self.held_edges.get(id)
        if edges is not None:
            del self.held_edges[id]
            for root, edge in edges.items():
                self.ack_to_acker(root, edge)
        self.forget_roots(id)

    def failed(self, failed: Failed) -> Failure:
        self.failed_here = True
        id, failure = failed.id, failed.failure
        if failed.timed_out:
            for root in self.roots_of_id.get(id, ()):
                failure = self.engine.where_stuck(
                    root, failure, expired_at=self, expired_status=failed.status
                )
                break
        for held in self.held.pop(id, ()):
            self.fail_roots(held, failure)
        for root in self.held_edges.pop(id, ()):
            self.to_acker(root, AckFail(root, failure))
        self.forget_roots(id)
        return failure

    def abandoned(self, id: Hashable) -> None:
        for held in self.held.pop(id, ()):
            held._done = True
        self.held_edges.pop(id, None)
        self.forget_roots(id)

    def ack_roots(self, done: Tuple) -> None:
        if done._done:
            return
        done._done = True
        self.acked += 1
        ack_val = done._ack_val  # 0 when it had no children: XORing copies a large id
        for root, edge in done.message_id.items():
            self.ack_to_acker(root, edge ^ ack_val if ack_val else edge)

    def ack_all(self, done: list[Tuple]) -> None:
        """Ack several tuples: one message per root, their values XORed together (the
        acker's ledger is order-independent, so this is the same as acking each)."""
        values: dict[int, int] = {}
        for tuple in done:
            if tuple._done:
                continue
            tuple._done = True
            self.acked += 1
            ack_val = tuple._ack_val
            for root, edge in tuple.message_id.items():
                value = edge ^ ack_val if ack_val else edge
                before = values.get(root)
                values[root] = value if before is None else before ^ value
        for root, value in values.items():
            self.ack_to_acker(root, value)

    def fail_roots(self, done: Tuple, failure: Failure) -> None:
        if done._done:
            return
        done._done = True
        self.failures += 1
        for root in done.message_id:
            self.to_acker(root, AckFail(root, failure))

    def to_task(self, task_id: int, message: Tuple | ReportMessage) -> None:
        """Send ``message`` to task ``task_id``: into the turn's outbox during a turn."""
        outbox = self.turn_outbox
        if outbox is not None:
            outbox.add(task_id, message)
        else:
            self.engine.deliver(task_id, message)

    def to_acker(self, root: int, message: AckFail) -> None:
        outbox = self.turn_outbox
        if outbox is not None:
            outbox.add_acker(root, message)
        else:
            self.engine.to_acker(root, message)

    def ack_to_acker(self, root: int, ack_val: int) -> None:
        """Ack ``ack_val`` into ``root``'s tree (its acks in a turn fold into one); 0, the
        ack of an edgeless tuple without children (``roots_of``), changes nothing."""
        if not ack_val:
            return
        outbox = self.turn_outbox
        if outbox is not None:
            outbox.add_ack(root, ack_val)
        else:
            self.engine.to_acker(root, Ack(root, ack_val))

    def cleanup(self) -> None:
        self.runner.cleanup()


class BoltEffects(TaskEffects):
    """A bolt task's effects, as its core calls them: each goes to the task's method of the
    same name (compiled, a direct call either way); ``deliver_many`` is the base's, a
    ``deliver`` per row."""

    def __init__(self, task: BoltTask) -> None:
        self.task = task

    def deliver(
        self, stream: str, values: Sequence[Any], targets: list[int], anchors: tuple[Tuple, ...]
    ) -> None:
        self.task.deliver(stream, values, targets, anchors)

    def report(self, id: Hashable, counts: dict[int, int], trigger: Tuple | None) -> None:
        self.task.report(id, counts, trigger)

    def settle(self, done: Tuple, failure: Failure | None) -> None:
        self.task.settle(done, failure)

    def completed(self, id: Hashable) -> None:
        self.task.completed(id)

    def failed(self, failed: Failed) -> Failure:
        return self.task.failed(failed)

    def abandoned(self, id: Hashable) -> None:
        self.task.abandoned(id)

    def call_in_turn(self, run: Callable[[], None]) -> bool:
        self.task.engine.post(self.task, Call(run))
        return True


def _any_watched(watched: Container[int] | None, roots: dict[int, int]) -> bool:
    """Whether a message of these roots is one a step recorder times (``watched`` None:
    every one with a root)."""
    if watched is None:
        return bool(roots)
    return any(root in watched for root in roots)


def _run_end(batch: list[Message], start: int, first: Tuple) -> int:
    """Where the run of tuples from ``first``'s source stream with ``first``'s id (its
    first value) that begins at ``start`` ends."""
    values = first.values
    end = start + 1
    if not values:
        return end
    id = values[0]
    source, stream = first.source_component, first.source_stream
    count = len(batch)
    while end < count:
        message = batch[end]
        if type(message) is not Tuple:
            break
        other = message.values
        if (
            not other
            or message.source_stream != stream
            or message.source_component != source
            or (other[0] is not id and other[0] != id)
        ):
            break
        end += 1
    return end


def anchored_to(anchors: tuple[Tuple, ...]) -> dict[int, int]:
    """The acking ``message_id`` of a tuple emitted anchored to ``anchors``: a fresh edge
    id, XORed into each anchor's value and into the tuple's id for each of their roots.

    A value still 0 takes the edge as it is: the ids are too large for the compiled
    build's unboxed ints, so XORing one with 0 would copy it."""
    message_id: dict[int, int] = {}
    if len(anchors) == 1:  # most emits: each root gets the edge as it is, XORed with nothing
        anchor = anchors[0]
        edge = new_edge_id()
        ack_val = anchor._ack_val
        anchor._ack_val = ack_val ^ edge if ack_val else edge
        for root in anchor.message_id:
            message_id[root] = edge
        return message_id
    for anchor in anchors:
        edge = new_edge_id()
        ack_val = anchor._ack_val
        anchor._ack_val = ack_val ^ edge if ack_val else edge
        for root in anchor.message_id:
            before = message_id.get(root)
            message_id[root] = edge if before is None else before ^ edge
    return message_id


def roots_of(anchors: tuple[Tuple, ...]) -> dict[int, int]:
    """The ``message_id`` of a tuple emitted anchored to ``anchors`` whose tree its
    receiver's coordination keeps (``TaskCore.counted_targets``): their roots, each with
    edge 0, so the anchors' values and the ackers never hear of it. An anchor that is such a
    tuple itself lends its own (message ids are never changed once made)."""
    if len(anchors) == 1:
        message_id = anchors[0].message_id
        for edge in message_id.values():
            if edge:
                return dict.fromkeys(message_id, 0)
        return message_id
    roots: dict[int, int] = {}
    for anchor in anchors:
        for root in anchor.message_id:
            roots[root] = 0
    return roots
