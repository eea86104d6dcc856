"""The in-process executor: a real streaming engine inside one Python process.

Contract. ``LocalExecutor(topology, services=..., threads=4).start()`` runs
every task of the topology until ``stop()``:

- one task per unit of parallelism, each with its own copy of its component
  (made by pickling, so a component that could not reach a Spark worker fails
  here at start too) and its own mailbox; a task handles one message at a time,
  tasks run concurrently on a small pool of worker threads;
- every tuple crossing tasks is pickled once by the emitter and unpickled by
  each receiver, so a value that cannot travel fails here as it would on Spark
  (the emitting input fails with ``UnserializableValueError``);
- groupings route as specified in ``drpc.model.grouping``;
- acker tasks run ``drpc.semantics.acker.Acker``: spouts' roots complete or
  fail (explicit fail, count mismatch, or ``topology.message.timeout.secs``,
  FAILED_REQUEST naming the first step still holding the tree), the spout is
  told, and a failed root is broadcast to every coordinated task so they drop
  its ids at once;
- coordinated bolts run ``drpc.semantics.coordination.CoordinationTracker``:
  count reports travel as real tuples on the direct ``__coord`` stream, held
  coordination tuples keep the request's tree open until each task finishes,
  exactly as Storm's CoordinatedBolt;
- spouts are polled with a short idle back-off; a spout whose source can
  notify calls ``context.request_wakeup()`` to be polled at once;
- a bolt's collector is thread-safe: a rich bolt may emit, ack and fail from
  threads of its own (acking asynchronously, as Storm allows); such calls
  wait while the task handles a message.

Engine bugs and exceptions from spout callbacks are logged, never allowed to
kill a worker thread.

Observation (``drpc.observe``; only when ``services`` holds an observer and
the topology serves a DRPC function, otherwise nothing is measured). Every
tuple of a request's tree carries its spout root, so a step's span for a
request runs from the first message of that tree a task of the step began
handling to the end of the last one it handled (count reports only where
they finished the request at a task: the rest are not timed, so a task's
wait for reports is not busy time). A message whose handling sent tuples on
ends, for its span, when the last of them left: the next step may finish with
the request before this thread looks at the clock again, and a step never
ends after the step it feeds; a count report that only closed the books on
a request the task had already passed on (nothing sent, nothing failed) adds
busy time without moving the end. ``step_started`` comes live, as a task
of the step starts on the request's first tuple; when the request settles (the
runtime hands its result or failure to the invocations handle)
``step_finished`` comes for every step it went through, before the outcome,
so an issuer sees all spans by the time it sees the outcome. Steps are the
topology's components: ``prepare-request``, the user's steps,
``join-result`` and ``return-results`` (whose span ends when it hands the
result over). ``attrs`` hold ``busy_ms`` (time this step's tasks spent
handling the request's messages) and ``tasks`` (how many of its tasks did).
While a step handles a request's tuple, log lines carry its ``request_id``
and ``function`` (``drpc.logs`` context). A failed tree reports
``request_failed_in`` with the failure's step (for a timeout, the step that
began last) and ``"TYPE: message"``; its spans then include ``drpc-spout``,
from the moment the spout heard of the failure until it failed the request.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import pickle
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from drpc import config
from drpc.builders.drpc_components import INVOCATIONS_SERVICE
from drpc.builders.linear_drpc import RETURN_ID
from drpc.errors import (
    Failure,
    InvalidTopologyError,
    InvalidTupleError,
)
from drpc.logs import pop_context, push_context
from drpc.model.components import (
    BaseRichSpout,
    FailureAwareSpout,
    OutputCollector,
    SpoutOutputCollector,
    _CurrentAnchor,
)
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields
from drpc.model.streams import COORDINATED_STREAM_ID, DEFAULT_STREAM_ID, GlobalStreamId
from drpc.model.topology import ComponentSpec, CoordinatedBolt, Topology
from drpc.model.tuples import Tuple
from drpc.observe import NULL_OBSERVER, Observer, notify, observer_of
from drpc.requests import ReturnInfo
from drpc.semantics.acker import Acker, RootCompleted, new_edge_id
from drpc.semantics.coordination import (
    Abandoned,
    Completed,
    CoordinationConfig,
    CoordinationTracker,
    Decision,
    Failed,
    FinishBatch,
    SendReport,
    is_ignored,
)
from drpc.semantics.routing import OutputRouter, id_owner_check
from drpc.semantics.runners import BoltRunner, instantiate, runner_for

log = logging.getLogger(__name__)

# Message kinds (first element of every mailbox message).
_TUPLE = 0
_ACK_INIT = 1
_ACK = 2
_ACK_FAIL = 3
_TICK = 4
_ROOT_DONE = 5
_ABANDON = 6
_NEXT = 7

_BATCH = 64
_MAX_IDLE_WAIT = 0.02


class _Actor:
    """Something with a mailbox that handles one message at a time."""

    name = "actor"

    def __init__(self) -> None:
        self._mailbox: deque[tuple[Any, ...]] = deque()
        self._scheduled = False
        self._lock = threading.Lock()

    def handle(self, message: tuple[Any, ...]) -> None:
        raise NotImplementedError


class _Scheduler:
    """Runs actors with pending messages on a pool of worker threads."""

    def __init__(self, threads: int, name: str) -> None:
        self._ready: queue.SimpleQueue[_Actor | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
            for i in range(threads)
        ]
        self._stopped = False

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def post(self, actor: _Actor, message: tuple[Any, ...]) -> None:
        with actor._lock:
            actor._mailbox.append(message)
            if actor._scheduled:
                return
            actor._scheduled = True
        self._ready.put(actor)

    def _work(self) -> None:
        while True:
            actor = self._ready.get()
            if actor is None or self._stopped:
                return
            for _ in range(_BATCH):
                with actor._lock:
                    if not actor._mailbox:
                        actor._scheduled = False
                        break
                    message = actor._mailbox.popleft()
                try:
                    actor.handle(message)
                except Exception:
                    log.exception(
                        "%s failed to handle a message of kind %s", actor.name, message[0]
                    )
            else:
                self._ready.put(actor)

    def stop(self, timeout: float) -> None:
        self._stopped = True
        for _ in self._threads:
            self._ready.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class _Timer:
    """Calls functions after a delay, on one thread."""

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"{name}-timer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), callback))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._stopped:
                    return
                _, _, callback = heapq.heappop(self._heap)
            try:
                callback()
            except Exception:
                log.exception("timer callback failed")

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)


class _Task(_Actor):
    """What spout and bolt tasks share: identity, configuration and output routing."""

    def __init__(self, engine: LocalExecutor, spec: ComponentSpec, task_id: int) -> None:
        super().__init__()
        self.engine = engine
        self.spec = spec
        self.component_id = spec.id
        self.task_id = task_id
        self.name = f"{spec.id}[{task_id}]"
        topology = engine.topology
        self.router = OutputRouter(topology, spec.id, task_id)
        self.index = self.router.index
        self.conf = config.resolve(
            topology.conf, engine.conf, spec.conf, spec.component.get_component_configuration()
        )
        self.debug = bool(self.conf[config.TOPOLOGY_DEBUG])


class _BoltCollector(OutputCollector):
    """The output collector of one bolt task, with acking and coordination bookkeeping.

    Every call holds the task's lock, which the task also holds while it handles
    a message, so calls from a bolt's own threads are serialized with it.
    """

    def __init__(self, task: _BoltTask) -> None:
        self._task = task
        self._lock = task.lock

    def _anchors(self, anchors: Any) -> Sequence[Tuple]:
        if anchors is None:
            return ()
        if isinstance(anchors, _CurrentAnchor):
            current = self._task.current
            return () if current is None else (current,)
        if isinstance(anchors, Tuple):
            anchors = (anchors,)
        for anchor in anchors:
            if anchor._done:
                raise InvalidTupleError(
                    f"step {self._task.component_id!r} anchored an emit to a tuple it had "
                    "already acked or failed"
                )
        return anchors

    def emit(
        self, values: Sequence[Any], anchors: Any = None, stream: str = DEFAULT_STREAM_ID
    ) -> list[int]:
        with self._lock:
            router = self._task.router
            router.check(stream, values, direct=False)
            targets = router.targets(stream, values)
            self._task.send(stream, values, targets, self._anchors(anchors))
            return targets

    def emit_direct(
        self,
        task_id: int,
        values: Sequence[Any],
        anchors: Any = None,
        stream: str = DEFAULT_STREAM_ID,
    ) -> None:
        with self._lock:
            router = self._task.router
            router.check(stream, values, direct=True)
            self._task.send(
                stream, values, router.direct_target(stream, task_id), self._anchors(anchors)
            )

    def ack(self, tuple: Tuple) -> None:
        with self._lock:
            if tuple._done:
                log.warning(
                    "step %r acked a tuple twice; ignoring the second ack", self._task.component_id
                )
                return
            self._task.on_ack(tuple)

    def fail(self, tuple: Tuple, reason: Failure | BaseException | str | None = None) -> None:
        with self._lock:
            if tuple._done:
                return
            self._task.on_fail(tuple, self._task.runner.failure_from(reason))

    def report_error(self, error: BaseException) -> None:
        log.error(
            "step %r task %d reported: %r", self._task.component_id, self._task.task_id, error
        )


class _BoltTask(_Task):
    def __init__(self, engine: LocalExecutor, spec: ComponentSpec, task_id: int) -> None:
        super().__init__(engine, spec, task_id)
        self.lock = threading.RLock()
        topology = engine.topology
        self.runner: BoltRunner = runner_for(instantiate(spec.user_component, spec.id), spec.id)
        self.collector = _BoltCollector(self)
        self.current: Tuple | None = None
        self.fields: dict[tuple[str, str], Fields] = {}
        self.coordination: CoordinatedBolt | None = spec.coordination
        self.tracker: CoordinationTracker | None = None
        self.held: dict[Hashable, list[Tuple]] = {}
        self.roots_of_id: dict[Hashable, set[int]] = {}
        self.ids_of_root: dict[int, set[Hashable]] = {}
        self.dead_roots: OrderedDict[int, float] = OrderedDict()
        self.done_with_id = False  # set when an id completes, fails or is given up here
        self.last_sent: float | None = None  # when spans are kept: the handling's last send
        self.failed_here = False  # the handling failed an id
        self.hands_over = spec.id == RETURN_ID  # hands results to the invocations handle
        self.timeout = float(self.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        decl = self.coordination
        if decl is not None:
            coordination_config = CoordinationConfig(
                expected_reports=topology.expected_reports(spec.id),
                downstream_tasks=tuple(topology.downstream_tasks(spec.id, COORDINATED_STREAM_ID)),
                waits_for_id=decl.id_stream is not None,
                waits_for_commit=decl.commit_stream is not None,
                timeout=self.timeout,
                component=spec.id,
                task=task_id,
            )
            self.tracker = CoordinationTracker(
                coordination_config, id_owner_check(topology, spec.id, self.index)
            )

    def prepare(self) -> None:
        context = TopologyContext(
            self.engine.topology,
            self.component_id,
            self.task_id,
            services=self.engine.services,
            conf=self.conf,
        )
        self.runner.prepare(self.conf, context, self.collector)

    # -- receiving -----------------------------------------------------------------------

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        spans = self.engine.spans
        if spans is not None and kind == _TUPLE and message[5]:
            roots = message[5]
            started = time.monotonic()
            self.done_with_id = False
            self.last_sent = None
            self.failed_here = False
            if self.hands_over:
                _HANDLING.current = (self.component_id, self.task_id, started)
            context = None
            if message[2] != COORDINATED_STREAM_ID:
                context = spans.begin(self.component_id, self.task_id, roots, started)
            token = push_context(context) if context is not None else None
            try:
                with self.lock:
                    self.receive(message[1], message[2], message[3], message[4], roots)
            finally:
                if token is not None:
                    pop_context(token)
                if self.hands_over:
                    _HANDLING.current = None
                # A count report matters to the span only when it finished an id here.
                if message[2] != COORDINATED_STREAM_ID:
                    ended = self.last_sent or time.monotonic()
                    spans.saw(self.component_id, self.task_id, roots, started, ended)
                elif self.done_with_id:
                    ended = self.last_sent or time.monotonic()
                    moves_end = self.last_sent is not None or self.failed_here
                    spans.saw(self.component_id, self.task_id, roots, started, ended, moves_end)
            return
        with self.lock:
            if kind == _TUPLE:
                self.receive(message[1], message[2], message[3], message[4], message[5])
            elif kind == _ABANDON:
                self.abandon_root(message[1])
            elif kind == _TICK:
                self.tick(message[1])

    def receive(
        self, source: str, stream: str, source_task: int, payload: bytes, message_id: dict[int, int]
    ) -> None:
        key = (source, stream)
        fields = self.fields.get(key)
        if fields is None:
            fields = self.fields[key] = self.engine.topology.output_fields(source, stream)
        received = Tuple(pickle.loads(payload), fields, source, stream, source_task, message_id)
        if self.tracker is None:
            self.execute(received)
        else:
            self.receive_coordinated(received)

    def execute(self, received: Tuple) -> None:
        previous, self.current = self.current, received
        try:
            self.runner.execute(received)
        finally:
            self.current = previous

    def is_data(self, received: Tuple) -> bool:
        decl = self.coordination
        if decl is None or received.source_stream == COORDINATED_STREAM_ID:
            return decl is None
        stream = GlobalStreamId(received.source_component, received.source_stream)
        return stream != decl.id_stream and stream != decl.commit_stream

    def receive_coordinated(self, received: Tuple) -> None:
        decl = self.coordination
        tracker = self.tracker
        assert decl is not None and tracker is not None
        if received.message_id and all(root in self.dead_roots for root in received.message_id):
            return
        now = time.monotonic()
        id = received.values[0]
        if received.source_stream == COORDINATED_STREAM_ID:
            decisions = tracker.report_received(id, received.values[1], now)
            if is_ignored(decisions):
                return
            self.note_roots(id, received)
            hold = decl.id_stream is None
            if hold:
                self.held.setdefault(id, []).append(received)
            failure = self.apply(decisions, received)
            if not hold:
                self.settle(received, failure)
            return
        stream = GlobalStreamId(received.source_component, received.source_stream)
        if stream == decl.id_stream or stream == decl.commit_stream:
            if stream == decl.id_stream:
                decisions = tracker.id_received(id, now)
            else:
                decisions = tracker.commit_received(id, now)
            if is_ignored(decisions):
                return
            self.note_roots(id, received)
            self.held.setdefault(id, []).append(received)
            if stream == decl.id_stream and decl.deliver_id_tuple:
                self.execute(received)
            self.apply(decisions, received)
            return
        if is_ignored(tracker.tuple_received(id, now)):
            return
        self.note_roots(id, received)
        self.execute(received)

    # -- coordination decisions -------------------------------------------------------------

    def apply(self, decisions: list[Decision], trigger: Tuple | None) -> Failure | None:
        """Carry out tracker decisions; returns a failure if ``trigger`` must fail, not ack."""
        failure: Failure | None = None
        tracker = self.tracker
        assert tracker is not None
        for decision in decisions:
            if isinstance(decision, FinishBatch):
                previous, self.current = self.current, trigger
                try:
                    self.runner.finished_id(decision.id)
                except Exception as error:
                    more = tracker.finish_failed(
                        decision.id, self.runner.failure(error, "finish_batch"), time.monotonic()
                    )
                else:
                    more = tracker.finish_done(decision.id)
                finally:
                    self.current = previous
                failure = self.apply(more, trigger) or failure
            elif isinstance(decision, SendReport):
                anchors = () if trigger is None else (trigger,)
                self.send(
                    COORDINATED_STREAM_ID, [decision.id, decision.count], [decision.task], anchors
                )
            elif isinstance(decision, Completed):
                for held in self.held.pop(decision.id, ()):
                    self.ack_roots(held)
                self.forget_roots(decision.id)
            elif isinstance(decision, Failed):
                self.failed_here = True
                failure = decision.failure
                if decision.timed_out:
                    for root in self.roots_of_id.get(decision.id, ()):
                        failure = self.engine.where_stuck(root, failure)
                        break
                self.runner.failed_id(decision.id)
                for held in self.held.pop(decision.id, ()):
                    self.fail_roots(held, failure)
                self.forget_roots(decision.id)
            elif isinstance(decision, Abandoned):
                self.runner.failed_id(decision.id)
                for held in self.held.pop(decision.id, ()):
                    held._done = True
                self.forget_roots(decision.id)
        return failure

    def note_roots(self, id: Hashable, received: Tuple) -> None:
        if not received.message_id:
            return
        roots = self.roots_of_id.get(id)
        if roots is None:
            roots = self.roots_of_id[id] = set()
        for root in received.message_id:
            if root not in roots:
                roots.add(root)
                self.ids_of_root.setdefault(root, set()).add(id)

    def forget_roots(self, id: Hashable) -> None:
        self.done_with_id = True
        for root in self.roots_of_id.pop(id, ()):
            ids = self.ids_of_root.get(root)
            if ids is not None:
                ids.discard(id)
                if not ids:
                    del self.ids_of_root[root]

    def abandon_root(self, root: int) -> None:
        now = time.monotonic()
        self.dead_roots[root] = now + self.timeout
        if self.tracker is None:
            return
        for id in list(self.ids_of_root.get(root, ())):
            self.apply(self.tracker.abandon(id, now), None)

    def tick(self, now: float) -> None:
        while self.dead_roots:
            deadline = next(iter(self.dead_roots.values()))
            if deadline > now:
                break
            self.dead_roots.popitem(last=False)
        if self.tracker is not None:
            self.apply(self.tracker.expire(now), None)

    # -- acking ---------------------------------------------------------------------------

    def on_ack(self, acked: Tuple) -> None:
        failure = None
        if self.tracker is not None and self.is_data(acked):
            decisions = self.tracker.tuple_acked(acked.values[0], time.monotonic())
            if is_ignored(decisions):
                acked._done = True
                return
            failure = self.apply(decisions, acked)
        self.settle(acked, failure)

    def on_fail(self, failed: Tuple, failure: Failure) -> None:
        if self.tracker is not None and self.is_data(failed):
            self.apply(
                self.tracker.tuple_failed(failed.values[0], failure, time.monotonic()), failed
            )
        self.fail_roots(failed, failure)

    def settle(self, done: Tuple, failure: Failure | None) -> None:
        if failure is None:
            self.ack_roots(done)
        else:
            self.fail_roots(done, failure)

    def ack_roots(self, done: Tuple) -> None:
        if done._done:
            return
        done._done = True
        for root, edge in done.message_id.items():
            self.engine.to_acker(root, (_ACK, root, edge ^ done._ack_val))

    def fail_roots(self, done: Tuple, failure: Failure) -> None:
        if done._done:
            return
        done._done = True
        for root in done.message_id:
            self.engine.to_acker(root, (_ACK_FAIL, root, failure))

    # -- sending --------------------------------------------------------------------------

    def send(
        self, stream: str, values: Sequence[Any], targets: list[int], anchors: Sequence[Tuple]
    ) -> None:
        payload = self.router.serialize(stream, values)
        tracker = self.tracker if stream != COORDINATED_STREAM_ID else None
        if targets and self.engine.spans is not None:
            self.last_sent = time.monotonic()  # before a receiver can act on it
        for target in targets:
            message_id: dict[int, int] = {}
            for anchor in anchors:
                edge = new_edge_id()
                anchor._ack_val ^= edge
                for root in anchor.message_id:
                    message_id[root] = message_id.get(root, 0) ^ edge
            self.engine.deliver(
                target, (_TUPLE, self.component_id, stream, self.task_id, payload, message_id)
            )
            if tracker is not None:
                tracker.tuple_emitted(values[0], target)
        if self.debug:
            log.debug("%s emitted %r on %s to %s", self.name, values, stream, targets)

    def cleanup(self) -> None:
        self.runner.cleanup()


class _SpoutCollector(SpoutOutputCollector):
    def __init__(self, task: _SpoutTask) -> None:
        self._task = task

    def emit(
        self, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM_ID
    ) -> list[int]:
        router = self._task.router
        router.check(stream, values, direct=False)
        targets = router.targets(stream, values)
        self._task.send(stream, values, targets, msg_id)
        return targets

    def emit_direct(
        self,
        task_id: int,
        values: Sequence[Any],
        msg_id: Any = None,
        stream: str = DEFAULT_STREAM_ID,
    ) -> None:
        router = self._task.router
        router.check(stream, values, direct=True)
        self._task.send(stream, values, router.direct_target(stream, task_id), msg_id)

    def report_error(self, error: BaseException) -> None:
        log.error(
            "spout %r task %d reported: %r", self._task.component_id, self._task.task_id, error
        )


class _SpoutTask(_Task):
    def __init__(self, engine: LocalExecutor, spec: ComponentSpec, task_id: int) -> None:
        super().__init__(engine, spec, task_id)
        spout = instantiate(spec.component, spec.id)
        assert isinstance(spout, BaseRichSpout)
        self.spout = spout
        self.collector = _SpoutCollector(self)
        self.pending: dict[int, Any] = {}
        self.max_pending: int | None = self.conf[config.TOPOLOGY_MAX_SPOUT_PENDING]
        self.active = False
        self.emitted = 0
        self.idle_wait = 0.0
        self.next_posted = False
        self.timer_armed = False

    def open(self) -> None:
        context = TopologyContext(
            self.engine.topology,
            self.component_id,
            self.task_id,
            services=self.engine.services,
            wakeup=self.wake,
            conf=self.conf,
        )
        self.spout.open(self.conf, context, self.collector)
        self.spout.activate()
        self.active = True

    def wake(self) -> None:
        """Have ``next_tuple`` run soon. Safe from any thread."""
        if self.next_posted or not self.active:
            return
        self.next_posted = True
        self.idle_wait = 0.0
        self.engine.post(self, (_NEXT,))

    def _timer_fired(self) -> None:
        self.timer_armed = False
        self.wake()

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == _NEXT:
            self.next_posted = False
            self.next_tuple()
        elif kind == _ROOT_DONE:
            self.root_done(message[1], message[2])

    def next_tuple(self) -> None:
        if not self.active:
            return
        if self.max_pending is not None and len(self.pending) >= self.max_pending:
            return
        before = self.emitted
        try:
            self.spout.next_tuple()
        except Exception:
            log.exception("spout %r next_tuple raised", self.component_id)
        if self.emitted > before:
            self.wake()
            return
        self.idle_wait = min(max(self.idle_wait * 2, 0.001), _MAX_IDLE_WAIT)
        if not self.timer_armed:
            self.timer_armed = True
            self.engine.timer.schedule(self.idle_wait, self._timer_fired)

    def root_done(self, root: int, failure: Failure | None) -> None:
        msg_id = self.pending.pop(root, _MISSING)
        if msg_id is _MISSING:
            return
        spans = self.engine.spans
        if spans is not None and failure is not None:
            spans.failed(root, failure)
            # the spout's own span: from hearing of the failure to failing the request
            _HANDLING.current = (self.component_id, self.task_id, time.monotonic())
        try:
            if failure is None:
                self.spout.ack(msg_id)
            elif isinstance(self.spout, FailureAwareSpout):
                self.spout.fail_with(msg_id, failure)
            else:
                self.spout.fail(msg_id)
        except Exception:
            log.exception(
                "spout %r %s raised", self.component_id, "ack" if failure is None else "fail"
            )
        if spans is not None:
            _HANDLING.current = None
            spans.forget(root)
        if self.max_pending is not None:
            self.wake()

    def send(self, stream: str, values: Sequence[Any], targets: list[int], msg_id: Any) -> None:
        payload = self.router.serialize(stream, values)
        self.emitted += 1
        if msg_id is None:
            for target in targets:
                self.engine.deliver(
                    target, (_TUPLE, self.component_id, stream, self.task_id, payload, {})
                )
            return
        root = new_edge_id()
        self.pending[root] = msg_id
        spans = self.engine.spans
        if spans is not None and isinstance(msg_id, ReturnInfo):
            spans.opened(root, msg_id)
        if not targets:
            self.engine.post(self, (_ROOT_DONE, root, None))
            return
        ack_val = 0
        messages = []
        for target in targets:
            edge = new_edge_id()
            ack_val ^= edge
            messages.append(
                (target, (_TUPLE, self.component_id, stream, self.task_id, payload, {root: edge}))
            )
        self.engine.to_acker(root, (_ACK_INIT, root, ack_val, self.task_id))
        for target, message in messages:
            self.engine.deliver(target, message)

    def close(self) -> None:
        self.active = False
        try:
            self.spout.deactivate()
        finally:
            self.spout.close()


_MISSING = object()


class _AckerTask(_Actor):
    def __init__(self, engine: LocalExecutor, index: int, timeout: float) -> None:
        super().__init__()
        self.engine = engine
        self.name = f"__acker[{index}]"
        self.acker = Acker(timeout)

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        now = time.monotonic()
        if kind == _ACK:
            decisions = self.acker.ack(message[1], message[2], now)
        elif kind == _ACK_INIT:
            decisions = self.acker.init(message[1], message[2], message[3], now)
        elif kind == _ACK_FAIL:
            decisions = self.acker.fail(message[1], message[2], now)
        elif kind == _TICK:
            decisions = self.acker.expire(message[1])
        else:
            return
        for decision in decisions:
            if isinstance(decision, RootCompleted):
                self.engine.deliver(decision.owner, (_ROOT_DONE, decision.root, None))
            else:
                failure = decision.failure
                if decision.timed_out:
                    failure = self.engine.where_stuck(decision.root, failure)
                self.engine.deliver(decision.owner, (_ROOT_DONE, decision.root, failure))
                self.engine.broadcast_abandon(decision.root)


class _StepSpan:
    """One step's work on one request so far."""

    __slots__ = ("busy", "end", "start", "tasks")

    def __init__(self, start: float, end: float, task: int) -> None:
        self.start = start
        self.end = end
        self.busy = end - start
        self.tasks = {task}


class _Tree:
    __slots__ = ("log_fields", "return_info", "steps")

    def __init__(self, return_info: ReturnInfo, function: str | None) -> None:
        self.return_info = return_info
        self.steps: dict[str, _StepSpan] = {}
        self.log_fields = {"request_id": return_info.request_id, "function": function}


class _Handling(threading.local):
    """The message this worker thread is handling now, when spans are kept:
    (step, task, started)."""

    current: tuple[str, int, float] | None = None


_HANDLING = _Handling()


class _RequestSpans:
    """The steps each request's tuple tree went through, by spout root; reports them
    to the observer when the request settles (see the module docstring).

    A data tuple costs a call before it is handled (``begin``: the step starts for its
    request, live) and one after (``saw``), a count report only ``saw`` and only when
    it finished an id; the message
    a thread is handling when the request settles (``return-results`` handing the
    outcome over, or the spout failing the request) is found in ``_HANDLING``.
    No lock: every dict and set operation here is atomic under the GIL, and two
    tasks of one step updating a span at the same instant can at worst lose a
    microsecond-sized update of its end or busy time (a lock here cost the
    engine a tenth of its throughput under load)."""

    def __init__(self, observer: Observer, function: str | None = None) -> None:
        self.observer = observer
        self.function = function
        self._trees: dict[int, _Tree] = {}
        self._roots: dict[ReturnInfo, int] = {}

    def __len__(self) -> int:
        return len(self._trees)

    def opened(self, root: int, return_info: ReturnInfo) -> None:
        self._roots[return_info] = root
        self._trees[root] = _Tree(return_info, self.function)

    def begin(
        self, step: str, task: int, roots: dict[int, int], started: float
    ) -> dict[str, Any] | None:
        """A task of ``step`` starts on a data tuple of these trees: a request this step
        had not reached starts it now (``step_started``, live). Returns the log fields of
        the tuple's request."""
        fields = None
        for root in roots:
            tree = self._trees.get(root)
            if tree is None:
                continue
            if fields is None:
                fields = tree.log_fields
            if step not in tree.steps:
                new = _StepSpan(started, started, task)
                if tree.steps.setdefault(step, new) is new:
                    notify(self.observer, "step_started", tree.return_info, step, started)
        return fields

    def saw(
        self,
        step: str,
        task: int,
        roots: dict[int, int],
        started: float,
        now: float,
        moves_end: bool = True,
    ) -> None:
        """Task ``task`` of ``step`` handled a message of these trees from ``started`` to
        ``now``; with ``moves_end`` false, only its busy time counts."""
        for root in roots:
            tree = self._trees.get(root)
            if tree is None:
                continue
            steps = tree.steps
            span = steps.get(step)
            if span is None:
                new = _StepSpan(started, now, task)
                span = steps.setdefault(step, new)
                if span is new:
                    notify(self.observer, "step_started", tree.return_info, step, started)
                    continue
                if started < span.start:  # another task of the step got there first
                    span.start = started
            span.busy += now - started
            if moves_end and now > span.end:
                span.end = now
            span.tasks.add(task)

    def failed(self, root: int, failure: Failure) -> None:
        tree = self._trees.get(root)
        if tree is None:
            return
        step = failure.component
        if step is None:
            steps = list(tree.steps.items())
            latest = max(steps, key=lambda item: item[1].start, default=None)
            step = latest[0] if latest is not None else "unknown"
        return_info = tree.return_info
        notify(
            self.observer,
            "request_failed_in",
            return_info,
            step,
            f"{failure.type.name}: {failure.message}",
        )

    def settle(self, return_info: ReturnInfo) -> None:
        """Report every span of the request; call just before its outcome is handed over.

        The step handing the outcome over (this thread's message) ends after the others
        were reported, so the request's remaining time is the hand-over alone."""
        root = self._roots.pop(return_info, None)
        tree = self._trees.pop(root, None) if root is not None else None
        if tree is None:
            return
        current = _HANDLING.current
        steps = sorted(list(tree.steps.items()), key=lambda item: item[1].end)
        for step, span in steps:
            if current is not None and step == current[0]:
                continue
            attrs = {"busy_ms": round(span.busy * 1000.0, 3), "tasks": len(span.tasks)}
            notify(self.observer, "step_finished", return_info, step, span.start, span.end, attrs)
        if current is not None:
            step, task, started = current
            span = tree.steps.get(step)
            if span is None:
                notify(self.observer, "step_started", return_info, step, started)
            end = time.monotonic()
            start = started if span is None else span.start
            busy = end - started + (0.0 if span is None else span.busy)
            tasks = 1 if span is None else len(span.tasks | {task})
            attrs = {"busy_ms": round(busy * 1000.0, 3), "tasks": tasks}
            notify(self.observer, "step_finished", return_info, step, start, end, attrs)

    def forget(self, root: int) -> None:
        tree = self._trees.pop(root, None)
        if tree is not None:
            self._roots.pop(tree.return_info, None)


class _ObservedInvocations:
    """The invocations handle the topology sees: reports a request's spans before its
    outcome goes to the real handle."""

    def __init__(self, invocations: Any, spans: _RequestSpans) -> None:
        self._invocations = invocations
        self._spans = spans

    def fetch_request(self, function: str) -> Any:
        return self._invocations.fetch_request(function)

    def result(self, return_info: ReturnInfo, result: str) -> None:
        self._spans.settle(return_info)
        self._invocations.result(return_info, result)

    def fail_request(self, return_info: ReturnInfo, error: Any) -> None:
        self._spans.settle(return_info)
        self._invocations.fail_request(return_info, error)

    def __getattr__(self, name: str) -> Any:  # add_listener, when the real handle has it
        return getattr(self._invocations, name)


class LocalExecutor:
    """Runs a topology's tasks in this process until ``stop()``."""

    name = "local"

    def __init__(
        self,
        topology: Topology,
        *,
        conf: dict[str, Any] | None = None,
        services: dict[str, Any] | None = None,
        threads: int = 4,
        tick_interval: float = 0.1,
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if tick_interval <= 0:
            raise ValueError(f"tick_interval must be positive, got {tick_interval}")
        self.topology = topology
        self.conf = config.resolve(topology.conf, conf)
        self.services = dict(services or {})
        self.observer: Observer = observer_of(self.services)
        self.spans: _RequestSpans | None = None
        invocations = self.services.get(INVOCATIONS_SERVICE)
        if (
            self.observer is not NULL_OBSERVER
            and topology.drpc_function is not None
            and invocations is not None
        ):
            self.spans = _RequestSpans(self.observer, topology.drpc_function)
            self.services[INVOCATIONS_SERVICE] = _ObservedInvocations(invocations, self.spans)
        self.tick_interval = tick_interval
        label = topology.name
        self.scheduler = _Scheduler(threads, label)
        self.timer = _Timer(label)
        self.tasks: dict[int, _Task] = {}
        self.bolt_tasks: list[_BoltTask] = []
        self.coordinated_tasks: list[_BoltTask] = []
        self.spout_tasks: list[_SpoutTask] = []
        self.message_timeout = float(self.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        self.ackers = [
            _AckerTask(self, i, self.message_timeout)
            for i in range(int(self.conf[config.TOPOLOGY_ACKER_EXECUTORS]))
        ]
        self.running = False
        for component_id, task_ids in topology.component_task_ids.items():
            spec = topology.components[component_id]
            for task_id in task_ids:
                if spec.kind == "spout":
                    spout_task = _SpoutTask(self, spec, task_id)
                    self.spout_tasks.append(spout_task)
                    self.tasks[task_id] = spout_task
                else:
                    bolt_task = _BoltTask(self, spec, task_id)
                    self.bolt_tasks.append(bolt_task)
                    if bolt_task.tracker is not None:
                        self.coordinated_tasks.append(bolt_task)
                    self.tasks[task_id] = bolt_task

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> LocalExecutor:
        if self.running:
            return self
        for bolt in self.bolt_tasks:
            try:
                bolt.prepare()
            except Exception as error:
                raise InvalidTopologyError(
                    f"prepare raised {type(error).__name__}: {error}", bolt.component_id
                ) from error
        self.scheduler.start()
        self.timer.start()
        self.running = True
        self.timer.schedule(self.tick_interval, self._tick)
        for spout in self.spout_tasks:
            try:
                spout.open()
            except Exception as error:
                self.stop()
                raise InvalidTopologyError(
                    f"open raised {type(error).__name__}: {error}", spout.component_id
                ) from error
            spout.wake()
        log.info(
            "started topology %r on the local executor: %d tasks, %d ackers",
            self.topology.name,
            len(self.tasks),
            len(self.ackers),
        )
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if not self.running:
            return
        self.running = False
        for spout in self.spout_tasks:
            spout.active = False
        self.timer.stop()
        self.scheduler.stop(timeout)
        for spout in self.spout_tasks:
            try:
                spout.close()
            except Exception:
                log.exception("spout %r close raised", spout.component_id)
        for bolt in self.bolt_tasks:
            try:
                bolt.cleanup()
            except Exception:
                log.exception("bolt %r cleanup raised", bolt.component_id)
        log.info("stopped topology %r", self.topology.name)

    def __enter__(self) -> LocalExecutor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- messaging ------------------------------------------------------------------------

    def post(self, actor: _Actor, message: tuple[Any, ...]) -> None:
        if self.running:
            self.scheduler.post(actor, message)

    def deliver(self, task_id: int, message: tuple[Any, ...]) -> None:
        self.post(self.tasks[task_id], message)

    def to_acker(self, root: int, message: tuple[Any, ...]) -> None:
        self.post(self.ackers[root % len(self.ackers)], message)

    def broadcast_abandon(self, root: int) -> None:
        for task in self.coordinated_tasks:
            self.post(task, (_ABANDON, root))

    def where_stuck(self, root: int, failure: Failure) -> Failure:
        """A timed-out tree's failure naming the step where it is stuck: the first step
        (in topology order) still tracking it, or the step before that one when it only
        waits for that step's count reports (its tuples are queued there). Read without
        the tasks' locks: the look-ups are atomic, and a step that just moved on only
        makes the name one step early."""
        for task in self.coordinated_tasks:
            ids = task.ids_of_root.get(root)
            if not ids or task.tracker is None or task.coordination is None:
                continue
            status = task.tracker.status(next(iter(ids)))
            sources = sorted(task.coordination.sources)
            if status is not None and status.waits_upstream and sources:
                return Failure.tree_timed_out(self.message_timeout, sources[0])
            return Failure.tree_timed_out(self.message_timeout, task.component_id, task.task_id)
        return failure

    def _tick(self) -> None:
        if not self.running:
            return
        now = time.monotonic()
        for acker in self.ackers:
            self.post(acker, (_TICK, now))
        for task in self.coordinated_tasks:
            self.post(task, (_TICK, now))
        self.timer.schedule(self.tick_interval, self._tick)

    # -- introspection (tests, metrics) ---------------------------------------------------

    def tracked_ids(self) -> int:
        """Coordination entries held across all tasks (0 when idle: nothing leaks)."""
        return sum(len(task.tracker) for task in self.coordinated_tasks if task.tracker)

    def pending_roots(self) -> int:
        return sum(len(acker.acker) for acker in self.ackers)

    def held_tuples(self) -> int:
        return sum(len(held) for task in self.coordinated_tasks for held in task.held.values())

    def open_batches(self) -> int:
        return sum(getattr(task.runner, "open_batches", 0) for task in self.bolt_tasks)
