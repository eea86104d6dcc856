"""The in-process executor: a real streaming engine inside one Python process.

Contract. ``LocalExecutor(topology, services=..., threads=4).start()`` runs
every task of the topology until ``stop()``:

- one task per unit of parallelism, each with its own copy of its component
  (made by pickling, so a component that could not reach a Spark worker fails
  here at start too) and its own mailbox; a task handles one message at a time,
  tasks run on a small pool of worker threads (one awake at a time while
  turns are plain Python; another is woken when a turn blocks, as a bolt
  waiting on I/O does, past the scheduler's 2 ms handoff; a caller waiting in
  ``call_inline`` with no worker awake runs the turns itself); what a task sends
  during a turn (``drpc.executors.local.actors``) leaves as the turn ends, one
  post per destination, each root's acks folded into one (``Outbox``) and
  applied to this engine's ackers' ledgers as the turn ends, not posted;
- every tuple crossing tasks is pickled once by the emitter and unpickled by
  each receiver, so a value that cannot travel fails here as it would on Spark
  (the emitting input fails with ``UnserializableValueError``);
- groupings route as specified in ``drpc.model.grouping``;
- acker tasks run ``drpc.semantics.acker.Acker``: spouts' roots complete or
  fail (explicit fail, count mismatch, or ``topology.message.timeout.secs``,
  FAILED_REQUEST naming the first step still holding the tree), the spout is
  told, and a failed root is broadcast to every coordinated task so they drop
  its ids at once;
- bolt tasks run the shared task core (``drpc.executors.task``): the bolt
  runners and the coordination rules of every executor; count reports travel
  as real tuples on the direct ``__coord`` stream, held coordination tuples
  keep the request's tree open until each task finishes, exactly as Storm's
  CoordinatedBolt; where every task of a step reports to every task of the
  next, the engine gathers its tasks' reports of an id and sends each
  receiver one report standing for them all (``gathering``);
- spouts are polled with a short idle back-off (Storm's: 1 ms, doubling up
  to ``max_idle_wait``); a spout whose source can notify calls
  ``context.request_wakeup()`` to be polled at once, and one that declared
  its wakeups (``context.declare_wakeups()``) is polled while idle only
  every ``max_idle_wait``; ``hold_spouts`` stops the polls and deactivates each
  spout, waiting for a turn in progress to end, and ``release_spouts`` activates
  them again (Storm's ``deactivate`` and ``activate``);
- a bolt's collector is thread-safe: a rich bolt may emit, ack and fail from
  threads of its own (acking asynchronously, as Storm allows); such calls
  wait while the task handles a message.

Engine bugs and exceptions from spout callbacks are logged, never allowed to
kill a worker thread. From ``start`` to ``stop`` the process's young generation
is ``drpc.gcpolicy``'s longer one: tuples in flight are objects kept alive, and
at Python's default every 700 allocations a collection walks them (a sixth of
the CPU of a call that fans out to 20 000 tuples).

One share of a topology. With ``hosted`` (task ids) and ``remote`` the engine
runs only those tasks (and its ackers only with ``ackers=True``); a message
for any other task, an acker elsewhere or a failed root's broadcast goes to
``remote`` (a ``Remote``: the resident Spark executor's transport, which
hands what arrives for this share to ``deliver``, ``to_acker`` and
``abandon_local``). Every other rule is the same in one process or many.

Per-request spans for the observer: ``drpc.executors.local.spans``. The
actors, messages and tasks: ``actors``, ``messages``, ``tasks``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, cast

from drpc import config
from drpc.builders.drpc_components import INVOCATIONS_SERVICE
from drpc.errors import Failure, InvalidTopologyError
from drpc.executors.local.ackers import AckerTask
from drpc.executors.local.actors import HANDOFF, Actor, Scheduler, Timer, Turns
from drpc.executors.local.calls import Call
from drpc.executors.local.gathering import (
    IdleFinish,
    IdleGiveUp,
    ReportGatherer,
    gathered_senders,
    idle_finishes,
    idle_giveups,
)
from drpc.executors.local.messages import (
    TICK_TUPLE,
    Abandon,
    Activation,
    Message,
    Outbox,
    ReportMessage,
    RootDone,
    Tick,
    TupleMessage,
)
from drpc.executors.local.mutex import Mutex
from drpc.executors.local.spans import ObservedInvocations, RequestSpans, StepRecorder
from drpc.executors.local.spouts import MAX_IDLE_WAIT, SpoutTask
from drpc.executors.local.tasks import BoltTask
from drpc.gcpolicy import enter_less_often, leave_less_often
from drpc.model.topology import Topology
from drpc.model.tuples import Tuple
from drpc.observe import NULL_OBSERVER, Observer, bus, observer_of
from drpc.semantics.acker import AckerDecision, RootFailed
from drpc.semantics.coordination import TrackStatus
from drpc.semantics.routing import id_owner_check, thaw_values

log = logging.getLogger(__name__)

HOLD_TIMEOUT = 10.0
"""Seconds ``hold_spouts`` waits at most for a spout's turn in progress to end."""


class Remote(Protocol):
    """Where the tasks and ackers an engine does not host are (see the module doc)."""

    def deliver(self, task_id: int, message: Message) -> None: ...

    def to_acker(self, root: int, message: Message) -> None: ...

    def broadcast_abandon(self, root: int) -> None: ...


class LocalExecutor(Turns):
    """Runs a topology's tasks (or its share of them) in this process until ``stop()``."""

    name = "local"

    def __init__(
        self,
        topology: Topology,
        *,
        conf: dict[str, Any] | None = None,
        services: dict[str, Any] | None = None,
        threads: int = 4,
        tick_interval: float = 0.1,
        max_idle_wait: float = MAX_IDLE_WAIT,
        hosted: Collection[int] | None = None,
        remote: Remote | None = None,
        ackers: bool = True,
        recorder: StepRecorder | None = None,
        handoff: float = HANDOFF,
        acker_roots: tuple[int, int] | None = None,
    ) -> None:
        """
        :param threads: worker threads running the tasks (default 4): how many turns may
            block at once (waiting on I/O, sleeping) before the others wait for them.
        :param tick_interval: seconds between timeout checks (default 0.1).
        :param max_idle_wait: longest pause, in seconds, between polls of a spout that has
            nothing to emit (default ``MAX_IDLE_WAIT``, 0.02); a spout that asks to be woken
            (``context.request_wakeup()``) is polled at once whatever this is, and one that
            declared its wakeups (``context.declare_wakeups()``) is polled while idle only
            this often.
        :param hosted: the task ids this engine runs (default every task); the others
            are reached through ``remote``.
        :param ackers: run the topology's acker tasks here (default True).
        :param acker_roots: ``(modulus, residue)``: the ackers here track only the roots
            congruent to ``residue`` (the ones this share's spouts make); any other root's
            acker is reached through ``remote`` (default None: every root's is here).
        :param recorder: where bolt tasks report step spans when the requests' spans are
            kept in another process (``ShippedSpans``); by default they are kept here when
            an observer is given.
        :param handoff: seconds ready tasks may wait with no thread taking any (a turn
            blocked) before a sleeping worker is woken for them (default ``HANDOFF``,
            2 ms; ``drpc.executors.local.actors``).
        """
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if tick_interval <= 0:
            raise ValueError(f"tick_interval must be positive, got {tick_interval}")
        if max_idle_wait <= 0:
            raise ValueError(f"max_idle_wait must be positive, got {max_idle_wait}")
        self.max_idle_wait = max_idle_wait
        self.topology = topology
        self.conf = config.resolve(topology.conf, conf)
        self.services = dict(services or {})
        self.observer: Observer = bus(observer_of(self.services))
        self.spans: RequestSpans | None = None
        self.recorder: StepRecorder | None = recorder
        invocations = self.services.get(INVOCATIONS_SERVICE)
        if (
            self.observer is not NULL_OBSERVER
            and topology.drpc_function is not None
            and invocations is not None
        ):
            self.spans = RequestSpans(self.observer, topology.drpc_function)
            self.services[INVOCATIONS_SERVICE] = ObservedInvocations(invocations, self.spans)
            self.recorder = self.spans
        self.tick_interval = tick_interval
        label = topology.name
        self.scheduler = Scheduler(threads, label, turns=self, handoff=handoff)
        self.timer = Timer(label)
        self.tasks: dict[int, BoltTask | SpoutTask] = {}
        # the same, indexed by task id (None: a task of another engine): ``_send`` looks one
        # up per message
        self._task_slots: list[BoltTask | SpoutTask | None] = []
        self.bolt_tasks: list[BoltTask] = []
        self.coordinated_tasks: list[BoltTask] = []
        self.spout_tasks: list[SpoutTask] = []
        self.message_timeout = float(self.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        if (hosted is not None or not ackers) and remote is None:
            raise ValueError("an engine hosting a share of a topology needs a remote")
        self.remote = remote
        self.acker_count = int(self.conf[config.TOPOLOGY_ACKER_EXECUTORS])
        if acker_roots is not None and (not ackers or remote is None):
            raise ValueError("acker_roots needs ackers here and a remote for the others")
        self.root_modulus, self.root_residue = acker_roots or (0, 0)
        self._acker_lock = self.scheduler.lock  # see ``under_lock``
        self.ackers = (
            [
                AckerTask(self, i, self.message_timeout, self._acker_lock)
                for i in range(self.acker_count)
            ]
            if ackers
            else []
        )
        self.running = False
        self._outbox = threading.local()
        self.gatherer = ReportGatherer(gathered_senders(topology, hosted), self.message_timeout)
        self._gather_lock = Mutex()
        for component_id, task_ids in topology.component_task_ids.items():
            spec = topology.components[component_id]
            for task_id in task_ids:
                if hosted is not None and task_id not in hosted:
                    continue
                if spec.kind == "spout":
                    spout_task = SpoutTask(self, spec, task_id)
                    self.spout_tasks.append(spout_task)
                    self.tasks[task_id] = spout_task
                else:
                    bolt_task = BoltTask(self, spec, task_id)
                    self.bolt_tasks.append(bolt_task)
                    if bolt_task.tracker is not None:
                        self.coordinated_tasks.append(bolt_task)
                    self.tasks[task_id] = bolt_task
        self._task_slots = [
            self.tasks.get(task_id) for task_id in range(max(self.tasks, default=-1) + 1)
        ]
        # what a task reporting 0 to one of these does in its stead (``gathering``)
        # the tasks a gathered report of 0 need not reach when they do not own its id
        self.idle_giveups: dict[int, IdleGiveUp] = idle_giveups(
            self.gatherer,
            (
                (
                    task.task_id,
                    task.tracker.config,
                    id_owner_check(topology, task.component_id, task.core.index),
                    not task.runner.has_failed_id,
                )
                for task in self.coordinated_tasks
                if task.tracker is not None
            ),
        )
        self.idle_finishes: dict[int, IdleFinish] = idle_finishes(
            self.gatherer,
            (
                (task.task_id, task.component_id, task.tracker.config, task.runner.has_finish)
                for task in self.coordinated_tasks
                if task.tracker is not None
            ),
        )

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
        enter_less_often()  # left in stop(); see drpc.gcpolicy
        self.running = True
        self.timer.schedule(self.tick_interval, self._tick)
        for bolt in self.bolt_tasks:
            if bolt.tick_every is not None:
                self._schedule_tick_tuple(bolt, bolt.tick_every)
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
        leave_less_often()
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

    def call_inline(self, submit: Callable[[], Call]) -> Call:
        """``submit()`` a call and wait until it is done; returns its outcome. When no
        worker thread is awake, this thread runs the engine's turns meanwhile, as a worker
        (``Scheduler.help_until``): a sequential caller's call runs with no hand-off to a
        worker and back."""
        scheduler = self.scheduler
        sleep = scheduler.begin_help()
        try:
            call = submit()
        except BaseException:
            if sleep is None:
                scheduler.end_call()
            else:
                scheduler.end_help(sleep)
            raise
        if sleep is not None:
            scheduler.help_until(sleep, call)
        else:
            try:
                call.wait()
            finally:
                scheduler.end_call()
        return call

    def post(self, actor: Actor, message: Message) -> None:
        if self.running:
            self.scheduler.post(actor, message)

    def begin_turn(self, actor: Actor) -> Outbox:
        """A turn's outbox: the actor's own, emptied after each of its turns (its turns run
        one at a time). The actor running the turn sends into it (bolt and spout tasks
        keep it for the turn: no look-up of a thread-local outbox per message); ``deliver``
        and ``to_acker`` from the turn's thread post at once, outside a ``holding`` block."""
        outbox = actor.turn_box
        if outbox is None:
            outbox = actor.turn_box = Outbox()
        assert isinstance(outbox, Outbox)
        return outbox

    def end_turn(self, turn: object) -> None:
        assert isinstance(turn, Outbox)
        try:
            self._send(turn)
        finally:
            turn.empty()

    def turn_outbox(self) -> Outbox | None:
        """The outbox of the ``holding`` block this thread runs, if any."""
        # Typed, so the compiled build reaches the outbox's fields directly.
        outbox: Outbox | None = getattr(self._outbox, "current", None)
        return outbox

    @contextmanager
    def holding(self, before: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold what this thread delivers until the block ends, then call ``before`` and
        send it (into the enclosing block's outbox when there is one), in order."""
        local = self._outbox
        enclosing = getattr(local, "current", None)
        outbox = local.current = Outbox()
        try:
            yield
        finally:
            local.current = enclosing
            if before is not None:
                before()
            if enclosing is not None:
                enclosing.take(outbox)
            else:
                self._send(outbox)

    def _send(self, outbox: Outbox) -> None:
        """Send what an outbox collected: its task messages in order, and its acks applied,
        all under one scheduler lock (a task in another engine gets its messages first,
        through the remote)."""
        messages = outbox.messages
        actors: list[Actor] = []
        slots = self._task_slots
        local: list[Message] | None = None  # the messages kept, once one went elsewhere
        targets = outbox.targets
        for index in range(len(targets)):
            task_id = targets[index]
            task = slots[task_id] if 0 <= task_id < len(slots) else None
            if task is None:
                assert self.remote is not None, f"task {task_id} is in no engine"
                self.remote.deliver(task_id, messages[index])
                if local is None:
                    local = messages[:index]
            else:
                actors.append(task)
                if local is not None:
                    local.append(messages[index])
        if local is not None:
            messages = local
        acking = bool(outbox.ack_root or outbox.acker)
        if acking and self.root_modulus:
            assert self.remote is not None
            for root, message in outbox.split_foreign(self.root_modulus, self.root_residue):
                self.remote.to_acker(root, message)
            acking = bool(outbox.ack_root or outbox.acker)
        if acking and not self.ackers:
            assert self.remote is not None
            for root, message in outbox.acker_messages():
                self.remote.to_acker(root, message)
            acking = False
        if not self.running:
            if acking:  # the ledgers still take them (the ackers' lock is the scheduler's)
                lock = self._acker_lock
                lock.acquire()
                try:
                    self._ack_here(outbox, [], [])
                finally:
                    lock.release()
            return
        if not actors and not acking:
            return
        # The ledgers are applied to under the scheduler's lock as the posts go (``under_lock``)
        after = self.scheduler.post_each(actors, messages, outbox if acking else None)
        if after is not None:
            assert isinstance(after, list)
            for decision in after:
                self._decided_after(decision)

    def under_lock(self, turn: object, actors: list[Actor], messages: list[Message]) -> object:
        """The scheduler's hook, its lock held: apply ``turn``'s acks (``_ack_here``)."""
        assert isinstance(turn, Outbox)
        return self._ack_here(turn, actors, messages) or None

    def _decided_after(self, decision: AckerDecision) -> None:
        """A root's outcome ``_ack_here`` left for after the posts: its failure, or its
        completion for a spout in another engine."""
        if isinstance(decision, RootFailed):
            self.root_failed(decision)
            return
        assert self.remote is not None
        self.remote.deliver(cast(int, decision.owner), RootDone(decision.root, None))

    def _ack_here(
        self, outbox: Outbox, actors: list[Actor], messages: list[Message]
    ) -> list[AckerDecision]:
        """Apply ``outbox``'s acker messages to this engine's ackers' ledgers at once (the
        others first, then one ``Ack`` per root, as ``Outbox.acker_messages`` orders them),
        instead of posting them, with the ackers' lock (the scheduler's) held: each completed
        root's ``RootDone`` for a spout here is added to the posts (``actors`` and
        ``messages``); returns the outcomes to see to once the lock is released: failed
        roots (``root_failed``) and completions for spouts elsewhere."""
        now = outbox.began or time.monotonic()  # deadlines are seconds long
        ackers = self.ackers
        count = self.acker_count
        decisions: list[AckerDecision] = []
        for root, message in outbox.acker:
            acker = ackers[0] if count == 1 else ackers[root % count]
            decisions.extend(acker.decide(message, now))
        root = outbox.ack_root
        if root:
            acker = ackers[0] if count == 1 else ackers[root % count]
            decided = acker.acker.ack(root, outbox.ack_value, now)
            if decided:
                decisions.extend(decided)
        for root, value in outbox.acks.items():
            acker = ackers[0] if count == 1 else ackers[root % count]
            decided = acker.acker.ack(root, value, now)
            if decided:
                decisions.extend(decided)
        after: list[AckerDecision] = []
        for decision in decisions:
            if isinstance(decision, RootFailed):
                after.append(decision)
                continue
            owner = cast(int, decision.owner)  # the task id of the spout that made the root
            task = self.tasks.get(owner)
            if task is not None:
                actors.append(task)
                messages.append(RootDone(decision.root, None))
            else:
                after.append(decision)
        return after

    def root_failed(self, decision: RootFailed) -> None:
        """A root failed at an acker here: its spout hears of it, and every coordinated
        task drops its ids."""
        failure = decision.failure
        if decision.timed_out:
            failure = self.where_stuck(decision.root, failure)
        owner = cast(int, decision.owner)
        done = RootDone(decision.root, failure)
        task = self.tasks.get(owner)  # posted, not ``deliver``ed: the turn's outbox is sent
        if task is not None:
            self.post(task, done)
        else:
            assert self.remote is not None, f"task {owner} is in no engine"
            self.remote.deliver(owner, done)
        self.broadcast_abandon(decision.root)

    def tuple_of(self, message: TupleMessage) -> Tuple:
        """The ``Tuple`` a message from another process stands for, with values of its own."""
        return Tuple(
            thaw_values(message.payload),
            self.topology.output_fields(message.source, message.stream),
            message.source,
            message.stream,
            message.source_task,
            message.message_id,
        )

    def deliver(self, task_id: int, message: Message) -> None:
        outbox = self.turn_outbox()
        if outbox is not None:
            outbox.add(task_id, message)
            return
        task = self.tasks.get(task_id)
        if task is not None:
            self.post(task, message)
        else:
            assert self.remote is not None, f"task {task_id} is in no engine"
            self.remote.deliver(task_id, message)

    def to_acker(self, root: int, message: Message) -> None:
        outbox = self.turn_outbox()
        if outbox is not None:
            outbox.add_acker(root, message)
            return
        modulus = self.root_modulus
        if self.ackers and (not modulus or root % modulus == self.root_residue):
            self.post(self.ackers[root % self.acker_count], message)
        else:
            assert self.remote is not None
            self.remote.to_acker(root, message)

    def gather_reports(
        self,
        component: str,
        source_task: int,
        id: Any,
        counts: dict[int, int],
        edges: dict[int, int],
        now: float,
        senders: int = 1,
    ) -> list[tuple[int, ReportMessage]]:
        """``ReportGatherer.add``, under the gatherer's lock: the reports to send, if any."""
        lock = self._gather_lock
        lock.acquire()
        try:
            giveups = self.idle_giveups if self.recorder is None else None
            return self.gatherer.add(
                component, source_task, id, counts, edges, now, giveups, senders
            )
        finally:
            lock.release()

    def broadcast_abandon(self, root: int) -> None:
        """A root failed: every coordinated task, here and elsewhere, drops its ids."""
        self.abandon_local(root)
        if self.remote is not None:
            self.remote.broadcast_abandon(root)

    def abandon_local(self, root: int) -> None:
        with self._gather_lock:
            self.gatherer.drop_root(root, time.monotonic())
        for task in self.coordinated_tasks:
            self.post(task, Abandon(root))

    def where_stuck(
        self,
        root: int,
        failure: Failure,
        *,
        expired_at: BoltTask | None = None,
        expired_status: TrackStatus | None = None,
    ) -> Failure:
        """A timed-out tree's failure naming the step where it is stuck: the first step
        (in topology order) still tracking it, or the step before that one when it only
        waits for that step's count reports (its tuples are queued there). ``expired_at``:
        the task whose own deadline failed the id, and ``expired_status`` where the id stood
        there (its tracker has dropped it). Read without the tasks' locks: the look-ups are
        atomic, and a step that just moved on only makes the name one step early."""
        for task in self.coordinated_tasks:
            ids = task.ids_of_root(root)
            if not ids or task.tracker is None or task.coordination is None:
                continue
            status = expired_status if task is expired_at else task.tracker.status(ids[0])
            sources = sorted(task.coordination.sources)
            if status is not None and status.waits_upstream and sources:
                return Failure.tree_timed_out(self.message_timeout, sources[0])
            return Failure.tree_timed_out(self.message_timeout, task.component_id, task.task_id)
        return failure

    def _tick(self) -> None:
        if not self.running:
            return
        now = time.monotonic()
        self.expire_gathered(now)
        for acker in self.ackers:
            self.post(acker, Tick(now))
        for task in self.coordinated_tasks:
            self.post(task, Tick(now))
        self.timer.schedule(self.tick_interval, self._tick)

    def expire_gathered(self, now: float) -> int:
        """Drop the gathered count reports past their deadline at ``now``; returns how many."""
        with self._gather_lock:
            return self.gatherer.expire(now)

    def fail_pending(self, failure: Failure) -> int:
        """Fail every request this engine's spouts still wait for (after ``stop``, when
        the tasks that held them are gone); returns how many."""
        failed = 0
        for spout in self.spout_tasks:
            for root in list(spout.pending):
                spout.root_done(root, failure)
                failed += 1
        return failed

    def _schedule_tick_tuple(self, bolt: BoltTask, every: float) -> None:
        def due() -> None:
            if self.running:
                self.post(bolt, TICK_TUPLE)
                self._schedule_tick_tuple(bolt, every)

        self.timer.schedule(every, due)

    def fail_in_flight(self, failure: Failure) -> int:
        """Fail every tree this engine's spouts wait for, on the spouts' own turns, while
        the engine runs on (their ``fail`` may replay); returns how many."""
        failed = 0
        for spout in self.spout_tasks:
            for root in list(spout.pending):
                self.post(spout, RootDone(root, failure))
                failed += 1
        return failed

    def hold_spouts(self, timeout: float = HOLD_TIMEOUT) -> bool:
        """Poll no spout until ``release_spouts`` (their acks and fails still arrive) and
        deactivate each (Storm's ``deactivate``, on its own turn). Waits up to ``timeout``
        seconds for a turn in progress to end, so nothing is emitted once it returns True;
        False (logged) when a spout was still busy then (``timeout`` 0: no wait)."""
        for spout in self.spout_tasks:
            spout.active = False
        if not self.running:
            return True
        posted = []
        for spout in self.spout_tasks:
            done = threading.Event()
            self.post(spout, Activation(False, done))
            posted.append((spout, done))
        if not timeout:
            return False
        deadline = time.monotonic() + timeout
        for spout, done in posted:
            if not done.wait(max(0.0, deadline - time.monotonic())):
                log.warning(
                    "spout %r was still in a turn %.1f s after it was held: what it emits "
                    "then still goes out",
                    spout.name,
                    timeout,
                )
                return False
        return True

    def spouts_active(self) -> bool:
        """Whether any spout is polled (none once held or stopped)."""
        return any(spout.active for spout in self.spout_tasks)

    def release_spouts(self) -> None:
        """Poll the spouts again, each activated first (Storm's ``activate``)."""
        if not self.running:
            return
        for spout in self.spout_tasks:
            spout.active = True
            self.post(spout, Activation(True, threading.Event()))

    # -- introspection (tests, metrics) ---------------------------------------------------

    def tracked_ids(self) -> int:
        """Coordination entries held across all tasks (0 when idle: nothing leaks)."""
        return sum(len(task.tracker) for task in self.coordinated_tasks if task.tracker)

    def gathered_ids(self) -> int:
        """Ids whose count reports the gatherer holds, some senders still to report."""
        with self._gather_lock:
            return len(self.gatherer)

    def pending_roots(self) -> int:
        return sum(len(acker.acker) for acker in self.ackers)

    def held_tuples(self) -> int:
        """Coordination tuples held across all tasks (the count reports held as folded
        edges count one per id)."""
        return sum(
            sum(len(held) for held in task.held.values()) + len(task.held_edges)
            for task in self.coordinated_tasks
        )

    def open_batches(self) -> int:
        return sum(getattr(task.runner, "open_batches", 0) for task in self.bolt_tasks)
