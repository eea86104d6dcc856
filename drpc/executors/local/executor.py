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
- bolt tasks run the shared task core (``drpc.executors.task``): the bolt
  runners and the coordination rules of every executor; count reports travel
  as real tuples on the direct ``__coord`` stream, held coordination tuples
  keep the request's tree open until each task finishes, exactly as Storm's
  CoordinatedBolt;
- spouts are polled with a short idle back-off; a spout whose source can
  notify calls ``context.request_wakeup()`` to be polled at once;
- a bolt's collector is thread-safe: a rich bolt may emit, ack and fail from
  threads of its own (acking asynchronously, as Storm allows); such calls
  wait while the task handles a message.

Engine bugs and exceptions from spout callbacks are logged, never allowed to
kill a worker thread.

Per-request spans for the observer: ``drpc.executors.local.spans``. The
actors, messages and tasks: ``actors``, ``messages``, ``tasks``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from drpc import config
from drpc.builders.drpc_components import INVOCATIONS_SERVICE
from drpc.errors import Failure, InvalidTopologyError
from drpc.executors.local.actors import Actor, Scheduler, Timer
from drpc.executors.local.messages import Abandon, Message, Tick
from drpc.executors.local.spans import ObservedInvocations, RequestSpans
from drpc.executors.local.tasks import AckerTask, BoltTask, SpoutTask
from drpc.model.topology import Topology
from drpc.observe import NULL_OBSERVER, Observer, bus, observer_of

log = logging.getLogger(__name__)


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
        self.observer: Observer = bus(observer_of(self.services))
        self.spans: RequestSpans | None = None
        invocations = self.services.get(INVOCATIONS_SERVICE)
        if (
            self.observer is not NULL_OBSERVER
            and topology.drpc_function is not None
            and invocations is not None
        ):
            self.spans = RequestSpans(self.observer, topology.drpc_function)
            self.services[INVOCATIONS_SERVICE] = ObservedInvocations(invocations, self.spans)
        self.tick_interval = tick_interval
        label = topology.name
        self.scheduler = Scheduler(threads, label)
        self.timer = Timer(label)
        self.tasks: dict[int, BoltTask | SpoutTask] = {}
        self.bolt_tasks: list[BoltTask] = []
        self.coordinated_tasks: list[BoltTask] = []
        self.spout_tasks: list[SpoutTask] = []
        self.message_timeout = float(self.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        self.ackers = [
            AckerTask(self, i, self.message_timeout)
            for i in range(int(self.conf[config.TOPOLOGY_ACKER_EXECUTORS]))
        ]
        self.running = False
        for component_id, task_ids in topology.component_task_ids.items():
            spec = topology.components[component_id]
            for task_id in task_ids:
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

    def post(self, actor: Actor, message: Message) -> None:
        if self.running:
            self.scheduler.post(actor, message)

    def deliver(self, task_id: int, message: Message) -> None:
        self.post(self.tasks[task_id], message)

    def to_acker(self, root: int, message: Message) -> None:
        self.post(self.ackers[root % len(self.ackers)], message)

    def broadcast_abandon(self, root: int) -> None:
        for task in self.coordinated_tasks:
            self.post(task, Abandon(root))

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
            self.post(acker, Tick(now))
        for task in self.coordinated_tasks:
            self.post(task, Tick(now))
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
