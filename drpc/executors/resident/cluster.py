"""The driver side of the resident Spark job: its tasks, and the functions deployed on them.

Contract. ``ResidentCluster(sc, slots=...)`` is ``slots`` long-running resident tasks
(``drpc.executors.resident.worker``), started with ``start()``, each the one task of a
Spark job of its own (tagged, in the FAIR pool ``drpc-resident``): a task that is lost
ends its own job only. They find each other through the driver (``Joined``, ``Peers``:
``drpc.executors.resident.control``). Every resident function of the process is
deployed on them:

- ``deploy(topology, conf, services)`` sends each task its share of the
  topology, waits until every task runs it, then starts the driver's share
  (spouts, the DRPC scaffolding, the ackers) and returns the ``Deployment``;
  ``undeploy`` stops both. A request enters through the driver's share:
  nothing launches a Spark job per request. With ``fetching`` (the
  ``InvocationsSettings`` of remote servers) the driver has no share: every
  task fetches requests from the servers itself, acks them and answers them,
  and the driver does nothing per request. With ``replicate`` (default) each
  task runs a whole copy of the topology, so a request never leaves the task
  that fetched it; without, the topology's tasks are dealt over the resident
  tasks as usual, each of which runs one scaffolding task of each kind
  (``spread_scaffolding``). With ``feed`` (an invocations handle of this process: the
  request table of the server or ``LocalDRPC`` it runs in) the tasks run whole copies
  as with ``fetching``, and the driver feeds them the table's requests over the
  resident link and hands their outcomes back (``drpc.executors.resident.feeding``):
  per request it moves two items, no tuple.
- The job occupies ``slots`` executor slots for as long as it runs; batch jobs
  and transactional runs use the rest. ``default_slots(sc)`` is half the
  default parallelism, at least one.
- Faults: a task's connection breaking, or its job failing, breaks the
  cluster: the jobs are given ``JOB_FAILURE_GRACE`` seconds to fail on their own
  and are cancelled otherwise, the requests in flight on every deployment
  fail with INTERNAL_ERROR naming the cause (Spark's error when there is
  one), and after ``restart_delay`` seconds every task starts again and every
  deployment is deployed again; requests that arrive meanwhile wait in the
  request table (on the fed path, too: feeding stops until the tasks are back).
  A continuous deployment (a plain topology, ``drpc.topologies``) keeps its driver
  share instead: its spouts are held while the job restarts, every tree they have in
  flight fails to their ``fail`` (a reliable spout replays it), and they go on once
  the new job runs their bolts.
  When the SparkContext itself is stopped (the driver's JVM shut down or died) no
  new job starts: the cluster stays broken and says why. Tasks that do not all get
  connected within ``start_timeout`` seconds fail ``deploy`` with
  ``DRPCError`` naming the master and the slots it asked for. ``serving(deployment)``
  says whether a deployment serves now (False while the job restarts).
- **Survivors.** While something asked for it (``keep_survivors()``, held by a run with
  standby replicas) and every deployment is a whole copy on each task (fed or fetching),
  the loss of one task breaks nothing else: the calls in flight on it fail with
  ``ResidentTasksBrokenError``, so do the requests it was fed, its peers fail their
  calls to it, and its job alone starts again after ``restart_delay`` (or Spark retries
  its task). The other tasks keep serving and ``live_workers()`` lists them; a call to
  the lost one fails at once. When it is back (``Ready``) it gets every deployment and
  every ``announce``d message, and only then counts as live again. ``epoch`` counts
  every change of the live tasks (a loss, a return, a whole restart), so a caller that
  placed work on them knows to place it again; ``on_change(callback)`` is told of each.
- A job that breaks while ``deploy`` waits for its tasks does not fail it: the
  deployment is registered, so the recovery deploys it on the new job, and ``deploy``
  returns once that serves it (``DRPCError`` when it does not within
  ``start_timeout``).
- ``call(node, function, *args)`` runs ``function(*args)`` on resident task
  ``node`` (1..``slots``) and returns a ``Future`` of its result: it waits (up to
  ``start_timeout``) for every task not lost to be connected, and a call in
  flight when the job breaks, or made while it restarts, or to a lost task, fails with
  ``ResidentTasksBrokenError`` naming why (ask again: the next call waits for the new
  job). No Spark job runs per call.
- ``announce(key, message)`` sends a control message to every task and to every task
  that joins later (the newest per ``key``): where partitions live (``Placed``).
- ``stop()`` ends the job (the tasks return) and closes the node.

The wire is ``drpc.executors.resident.transport`` (node 0 here, listening on
the driver's address), the routing ``drpc.executors.resident.routing``.
"""

from __future__ import annotations

import itertools
import logging
import pickle
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from drpc.builders.coordinated_drpc import spread_scaffolding
from drpc.compiled import engine_build
from drpc.config import TOPOLOGY_STATS_SAMPLE_RATE
from drpc.errors import DRPCError, DRPCExceptionType, Failure, ResidentTasksBrokenError
from drpc.executors.local.executor import LocalExecutor
from drpc.executors.resident.control import (
    Call,
    CallDone,
    Deploy,
    Deployed,
    DeployFailed,
    Joined,
    Peers,
    Ready,
    Stop,
    Undeploy,
    settle,
)
from drpc.executors.resident.feeding import DEFAULT_FEED_WINDOW, FedBlueprint, RequestFeeder
from drpc.executors.resident.routing import (
    CONTROL,
    DRIVER,
    FED,
    Route,
    dispatch_items,
    hosted_by,
    place,
)
from drpc.executors.resident.transport import Node
from drpc.executors.resident.worker import resident_task
from drpc.executors.spark.stages import tagged_job
from drpc.logs import worker_settings
from drpc.model.topology import Topology
from drpc.observe import NULL_OBSERVER, observer_of
from drpc.runtime import context_usable, describe_spark_error
from drpc.semantics.runners import freeze

log = logging.getLogger(__name__)

POOL = "drpc-resident"
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_RESTART_DELAY = 1.0
DEFAULT_WORKER_THREADS = 4
JOB_FAILURE_GRACE = 5.0
"""Seconds a broken cluster waits for Spark to fail the job itself (its error names the
cause: a Python worker that exited, a lost executor) before it cancels the job."""
JOB_END_WAIT = 10.0
"""Seconds a broken cluster waits for its cancelled Spark job to end."""
STOP_WAIT = 2.0
"""Seconds a broken cluster waits for a task it told to stop to end before it cancels its
job."""

_keys = itertools.count(1)


def default_slots(sc: Any) -> int:
    """Half the default parallelism, at least one: the rest stays free for batch jobs."""
    return max(1, int(sc.defaultParallelism) // 2)


@dataclass
class Deployment:
    """One function's topology on the resident job, and its driver-side share."""

    key: str
    topology: Topology
    frozen: bytes
    conf: dict[str, Any]
    services: dict[str, Any]
    threads: int
    node_of: dict[int, int] = field(default_factory=dict)
    observed: bool = False  # the resident tasks ship their step spans to the driver
    fetching: Any = None  # InvocationsSettings: the tasks fetch and answer requests themselves
    replicated: bool = False  # with fetching: a whole copy of the topology on each task
    feeder: RequestFeeder | None = None  # the driver feeds the tasks its requests
    engine: LocalExecutor | None = None
    continuous: bool = False  # a plain topology: its driver share outlives a job restart
    held: bool = False  # continuous: its spouts were held for a job restart (not by the user)
    deployed: set[int] = field(default_factory=set)
    failed: str | None = None


class ResidentCluster:
    """The resident job and its deployments (see the module doc)."""

    def __init__(
        self,
        sc: Any,
        *,
        slots: int,
        worker_threads: int = DEFAULT_WORKER_THREADS,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        restart_delay: float = DEFAULT_RESTART_DELAY,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.sc = sc
        self.slots = slots
        self.worker_threads = worker_threads
        self.start_timeout = start_timeout
        self.restart_delay = restart_delay
        self.workers = list(range(1, slots + 1))
        self.node = Node(DRIVER, secrets.token_bytes(32), self._on_items, self._on_lost)
        conf = sc.getConf()
        bind_host = conf.get("spark.driver.bindAddress", None) or conf.get(
            "spark.driver.host", "127.0.0.1"
        )
        _, port = self.node.listen(bind_host)
        self.address = (conf.get("spark.driver.host", bind_host), port)
        self.generation = 0
        self.restarts = 0
        self.last_failure: str | None = None
        self._broke_because = ""  # what broke the job last, as soon as it is seen
        self._cond = threading.Condition()
        self._ready: set[int] = set()
        self.engine_builds: dict[int, str] = {}  # each resident task's, as it said Ready
        self._deployments: dict[str, Deployment] = {}
        self._calls: dict[int, tuple[int, Future[Any]]] = {}  # id: (node, future)
        self._call_ids = itertools.count(1)
        self._jobs: dict[int, threading.Thread] = {}  # each task's job, this generation
        self._job_error: BaseException | None = None
        self._tag = ""
        self._addresses: dict[int, tuple[str, int]] = {}  # where each joined task listens
        self._lost: dict[int, str] = {}  # tasks lost while the others serve on: why
        self._survivors_wanted = 0
        self._announced: dict[Any, Any] = {}
        self._change_listeners: list[Callable[[], None]] = []
        self.epoch = 0
        """Counts every change of the live tasks (see the module doc)."""
        self._broken = False
        self._stopping = False
        self._gone: str | None = None
        """Why no job can start any more (the SparkContext is stopped), once so."""

    # -- the job ---------------------------------------------------------------------------

    def start(self) -> ResidentCluster:
        with self._cond:
            if self._jobs or self._stopping or self._gone is not None:
                return self
            self._launch()
        return self

    def _launch(self) -> None:
        """Start a new generation: every task's job. Holds ``_cond``."""
        self.generation += 1
        self.epoch += 1
        self._ready = set()
        self._lost = {}
        self._addresses = {}
        self._broken = False
        self._job_error = None
        self._tag = f"drpc-resident-{self.node.token[:4].hex()}-{self.generation}"
        self._jobs = {
            node: threading.Thread(
                target=self._run_task_job,
                args=(node, self._tag, self.generation),
                name=f"drpc-resident-job-{self.generation}-{node}",
                daemon=True,
            )
            for node in self.workers
        }
        for job in self._jobs.values():
            job.start()

    def _task_tag(self, tag: str, node: int) -> str:
        return f"{tag}-t{node}"

    def _run_task_job(self, node: int, tag: str, generation: int) -> None:
        """Run task ``node``'s job; when it ends, start it alone again (survivors serve on)
        or break the cluster."""
        task = partial(
            resident_task,
            node_index=node,
            driver=self.address,
            token=self.node.token,
            threads=self.worker_threads,
            logging_settings=worker_settings(),
        )
        while True:
            description = f"drpc resident task {node} of {self.slots}, generation {generation}"
            try:
                with tagged_job(self.sc, self._task_tag(tag, node), description, pool=POOL):
                    rdd = self.sc.parallelize([node], 1)
                    ended = rdd.mapPartitionsWithIndex(task).collect()
                reason = f"resident task {node}'s job ended: " + "; ".join(sorted(set(ended)))
            except BaseException as error:
                with self._cond:
                    if self._job_error is None:  # the first: a cancelled task's is no cause
                        self._job_error = error
                reason = (
                    f"the Spark job of resident task {node} failed: {describe_spark_error(error)}"
                )
            with self._cond:
                if self._stopping or generation != self.generation or self._broken:
                    return
                survives = self._survives_loss()
            if not survives or not context_usable(self.sc):
                self._break(reason)
                return
            self._lose(node, reason)
            time.sleep(self.restart_delay)
            with self._cond:
                if self._stopping or generation != self.generation or self._broken:
                    return
                self.restarts += 1
            log.warning("starting resident task %d again (%s)", node, reason)

    def _survives_loss(self) -> bool:
        """Whether losing one task leaves the others serving (module doc). Holds ``_cond``."""
        return (
            self._survivors_wanted > 0
            and len(self.workers) > 1
            and all(d.replicated and not d.continuous for d in self._deployments.values())
        )

    def keep_survivors(self) -> Callable[[], None]:
        """Ask that the loss of one task leave the others serving (module doc); returns the
        call that withdraws the ask."""
        with self._cond:
            self._survivors_wanted += 1
        withdrawn = threading.Event()

        def withdraw() -> None:
            if not withdrawn.is_set():
                withdrawn.set()
                with self._cond:
                    self._survivors_wanted -= 1

        return withdraw

    def on_change(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (on a thread of the cluster's) after each change of the live
        tasks; returns the call that stops it."""
        with self._cond:
            self._change_listeners.append(callback)

        def remove() -> None:
            with self._cond:
                if callback in self._change_listeners:
                    self._change_listeners.remove(callback)

        return remove

    def _changed(self) -> None:
        with self._cond:
            listeners = list(self._change_listeners)
        for callback in listeners:
            try:
                callback()
            except Exception:
                log.exception("a listener of the resident tasks' changes raised")

    def live_workers(self) -> list[int]:
        """The tasks that serve now (all of them, but for lost ones: module doc)."""
        with self._cond:
            return [node for node in self.workers if node in self._ready]

    def announce(self, key: Any, message: Any) -> None:
        """Send ``message`` to every task, and to every task that joins later (module doc)."""
        with self._cond:
            self._announced[key] = message
        self.node.broadcast((None, CONTROL, message))

    def wait_ready(self, timeout: float) -> bool:
        """Wait until every task is connected (False after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while set(self.workers) - self._ready or self._broken:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopping or self._gone is not None:
                    return False
                self._cond.wait(remaining)
            return True

    def _wait_usable(self, timeout: float) -> bool:
        """Wait until every task but the lost ones is connected (False after ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while set(self.workers) - self._ready - set(self._lost) or self._broken:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopping or self._gone is not None:
                    return False
                self._cond.wait(remaining)
            return True

    # -- deployments -----------------------------------------------------------------------

    def deploy(
        self,
        topology: Topology,
        conf: dict[str, Any],
        services: dict[str, Any],
        *,
        threads: int = DEFAULT_WORKER_THREADS,
        fetching: Any = None,
        replicate: bool = True,
        feed: Any = None,
        feed_window: int = DEFAULT_FEED_WINDOW,
        continuous: bool = False,
    ) -> Deployment:
        """Run ``topology`` on the resident tasks and its driver share here (none with
        ``fetching`` or ``feed``: see the module doc). ``continuous``: a plain topology,
        whose spouts keep running on the driver through a restart of the job."""
        if continuous and (fetching is not None or feed is not None or replicate):
            raise ValueError(
                "a continuous deployment keeps its spouts on the driver: it takes neither "
                "fetching nor feed, and replicate=False"
            )
        self.start()
        key = f"{topology.name}#{next(_keys)}"
        feeder = None
        if feed is not None:
            if fetching is not None:
                raise ValueError("a deployment is fed by the driver or fetches, not both")
            assert topology.drpc_function is not None
            feeder = RequestFeeder(
                feed,
                topology.drpc_function,
                partial(self._feed, key),
                observer_of(services),
                window=feed_window,
                sample_rate=float(conf.get(TOPOLOGY_STATS_SAMPLE_RATE, 1.0)),
            )
            fetching, replicate = FedBlueprint(key), True
        spread = fetching is not None
        replicated = spread and replicate
        if spread and not replicated:
            topology = spread_scaffolding(topology, self.slots)
        deployment = Deployment(
            key=key,
            topology=topology,
            frozen=freeze(topology),
            conf=dict(conf),
            services=services,
            threads=threads,
            node_of={}
            if replicated
            else place(topology, self.slots, scaffolding_on_workers=spread),
            observed=(not spread or feeder is not None)
            and observer_of(services) is not NULL_OBSERVER,
            fetching=fetching,
            replicated=replicated,
            feeder=feeder,
            continuous=continuous,
        )
        # A whole copy on each task needs only the tasks that serve; a share of one copy
        # needs every task.
        ready = self._wait_usable if replicated else self.wait_ready
        if not ready(self.start_timeout):
            raise DRPCError(self._not_ready_message())
        with self._cond:
            self._deployments[deployment.key] = deployment
        try:
            self._deploy(deployment)
        except ResidentTasksBrokenError as broke:
            # The recovery deploys every registered deployment on the new job: wait for it.
            if not self._wait_serving(deployment, time.monotonic() + self.start_timeout):
                self.undeploy(deployment)
                raise DRPCError(
                    f"the resident tasks broke while they started {topology.name!r} ({broke}) "
                    f"and the restarted ones did not serve it within {self.start_timeout:g} s"
                ) from None
            log.info(
                "the resident tasks broke while they started %r; the restarted ones serve it",
                topology.name,
            )
        except BaseException:
            self.undeploy(deployment)
            raise
        return deployment

    def _wait_serving(self, deployment: Deployment, deadline: float) -> bool:
        """Wait until ``deployment`` is served (see ``serving``) or ``deadline`` passes."""
        while not self.serving(deployment):
            remaining = deadline - time.monotonic()
            with self._cond:
                if remaining <= 0 or self._stopping or self._gone is not None:
                    return False
                self._cond.wait(min(remaining, 0.05))  # the driver share starts unannounced
        return True

    def _deploy_message(self, deployment: Deployment) -> tuple[None, int, Deploy]:
        return (
            None,
            CONTROL,
            Deploy(
                deployment.key,
                deployment.frozen,
                deployment.conf,
                deployment.node_of,
                deployment.observed,
                self.slots,
                None if deployment.fetching is None else pickle.dumps(deployment.fetching),
                deployment.replicated,
            ),
        )

    def _deploy(self, deployment: Deployment) -> None:
        with self._cond:
            deployment.deployed = set()
            deployment.failed = None
            targets = set(self.workers) - set(self._lost)
        for worker in sorted(targets):
            self.node.send(worker, self._deploy_message(deployment))
        deadline = time.monotonic() + self.start_timeout
        with self._cond:
            while targets - deployment.deployed and deployment.failed is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._broken:
                    break
                self._cond.wait(remaining)
            failed = deployment.failed
            missing = sorted(targets - deployment.deployed)
            broken = self._broken and self._broke_because
        if broken and failed is None:
            raise ResidentTasksBrokenError(
                f"the resident Spark tasks broke while they started {deployment.topology.name!r}: "
                f"{broken}"
            )
        if failed is not None:
            raise DRPCError(
                f"the resident tasks could not run {deployment.topology.name!r}: {failed}"
            )
        if missing:
            raise DRPCError(
                f"resident tasks {missing} did not start {deployment.topology.name!r} within "
                f"{self.start_timeout:g} s"
            )
        if deployment.feeder is not None:
            deployment.feeder.start(sorted(targets))
        if deployment.fetching is not None:
            return  # the tasks run every part of it
        if deployment.engine is not None:  # continuous: its spouts waited for the new job
            if deployment.held:
                deployment.held = False
                deployment.engine.release_spouts()
            return
        route = Route(self.node, deployment.key, deployment.node_of)
        engine = LocalExecutor(
            deployment.topology,
            conf=deployment.conf,
            services=deployment.services,
            threads=deployment.threads,
            hosted=hosted_by(deployment.node_of, DRIVER),
            remote=route,
        )
        if engine.spans is not None:
            route.log_fields = engine.spans.log_fields
        engine.start()
        deployment.engine = engine

    def undeploy(self, deployment: Deployment) -> None:
        with self._cond:
            self._deployments.pop(deployment.key, None)
        engine, deployment.engine = deployment.engine, None
        if deployment.feeder is not None:
            deployment.feeder.stop()
        self.node.broadcast((None, CONTROL, Undeploy(deployment.key)))
        shutdown = Failure(DRPCExceptionType.SERVER_SHUTDOWN, "Server Shutting Down")
        if engine is not None:
            engine.stop()
            engine.fail_pending(shutdown)
        if deployment.feeder is not None:
            # What the tasks still held; what they answered meanwhile is settled already.
            deployment.feeder.fail_pending(shutdown)

    def serving(self, deployment: Deployment) -> bool:
        """Whether ``deployment`` serves now: every task runs its share, and the driver's
        share (its engine, or its feeder) runs too; False while the job restarts."""
        with self._cond:
            if self._broken or deployment.key not in self._deployments:
                return False
            if set(self.workers) - set(self._lost) - deployment.deployed:
                return False
        if deployment.feeder is not None:
            return deployment.feeder.feeding
        return deployment.fetching is not None or deployment.engine is not None

    def deployments(self) -> list[Deployment]:
        with self._cond:
            return list(self._deployments.values())

    # -- calls -------------------------------------------------------------------------------

    def call(self, node: int, function: Callable[..., Any], *args: Any) -> Future[Any]:
        """``function(*args)`` on resident task ``node`` (see the module doc)."""
        self.start()
        if not self._wait_usable(self.start_timeout):
            raise DRPCError(self._not_ready_message())
        future: Future[Any] = Future()
        work = freeze((function, args))
        with self._cond:
            if self._broken:
                raise ResidentTasksBrokenError(
                    f"the resident Spark tasks are restarting: {self.last_failure}"
                )
            if node in self._lost:
                raise ResidentTasksBrokenError(
                    f"resident task {node} is restarting: {self._lost[node]}"
                )
            call_id = next(self._call_ids)
            self._calls[call_id] = (node, future)
        if not self.node.send(node, (None, CONTROL, Call(call_id, work))):
            with self._cond:
                self._calls.pop(call_id, None)
            raise ResidentTasksBrokenError(f"resident task {node} is not connected")
        return future

    def _call_done(self, done: CallDone) -> None:
        with self._cond:
            found = self._calls.pop(done.call_id, None)
        if found is not None:
            settle(found[1], done)

    def _fail_calls(self, reason: str, node: int | None = None) -> None:
        """Fail the calls in flight (on ``node`` only, when given)."""
        with self._cond:
            if node is None:
                failing, self._calls = list(self._calls.values()), {}
            else:
                ids = [cid for cid, (on, _) in self._calls.items() if on == node]
                failing = [self._calls.pop(cid) for cid in ids]
        message = f"the resident Spark tasks broke: {reason}" if node is None else reason
        for _, future in failing:
            future.set_exception(ResidentTasksBrokenError(message))

    # -- what arrives ----------------------------------------------------------------------

    def _on_items(self, peer: int, items: list[Any]) -> None:
        dispatch_items(items, self._engine_of, self._control, self._outcomes)

    def _feed(self, key: str, worker: int, requests: list[Any]) -> bool:
        return self.node.send(worker, (key, FED, requests))

    def _outcomes(self, key: str, outcomes: Any) -> None:
        deployment = self._deployments.get(key)
        if deployment is not None and deployment.feeder is not None:
            deployment.feeder.settle(outcomes)

    def _engine_of(self, key: str) -> LocalExecutor | None:
        deployment = self._deployments.get(key)
        return deployment.engine if deployment is not None else None

    def _control(self, message: Any) -> None:
        if isinstance(message, CallDone):
            self._call_done(message)
            return
        if isinstance(message, Joined):
            self._joined(message)
            return
        rejoined = False
        with self._cond:
            if isinstance(message, Ready):
                self.engine_builds[message.node] = message.engine_build
                if message.engine_build != engine_build():
                    log.warning(
                        "resident task %d runs the %s engine, this driver the %s one",
                        message.node,
                        message.engine_build,
                        engine_build(),
                    )
                if message.node in self._lost:
                    rejoined = True  # it serves once it runs every deployment
                else:
                    self._ready.add(message.node)
            elif isinstance(message, Deployed):
                deployment = self._deployments.get(message.key)
                if deployment is not None:
                    deployment.deployed.add(message.node)
            elif isinstance(message, DeployFailed):
                deployment = self._deployments.get(message.key)
                if deployment is not None:
                    deployment.failed = f"resident task {message.node}: {message.reason}"
            self._cond.notify_all()
        if rejoined:
            threading.Thread(
                target=self._rejoin,
                args=(message.node, self.generation),
                name=f"drpc-resident-rejoin-{message.node}",
                daemon=True,
            ).start()

    def _joined(self, joined: Joined) -> None:
        """A task connected: tell it the tasks to connect to (those that joined before)."""
        with self._cond:
            stale = joined.node in self._ready  # its last run's loss went unseen
        if stale:
            self._lost_task(joined.node, "it joined again")
        with self._cond:
            earlier = tuple(
                (node, host, port)
                for node, (host, port) in sorted(self._addresses.items())
                if node != joined.node
            )
            self._addresses[joined.node] = (joined.host, joined.port)
        self.node.send(joined.node, (None, CONTROL, Peers(earlier)))

    def _on_lost(self, peer: int, reason: str) -> None:
        with self._cond:
            self._addresses.pop(peer, None)
            if self._stopping or peer not in self._ready:
                return
        self._lost_task(peer, f"resident task {peer} went away: {reason}")

    def _lost_task(self, node: int, reason: str) -> None:
        with self._cond:
            survives = self._survives_loss() and context_usable(self.sc)
        if survives:
            self._lose(node, reason)
        else:
            self._break(reason)

    def _lose(self, node: int, reason: str) -> None:
        """Task ``node`` is gone; the others serve on (module doc)."""
        with self._cond:
            if self._broken or self._stopping or node in self._lost:
                return
            self._lost[node] = reason
            self._ready.discard(node)
            self.epoch += 1
            for deployment in self._deployments.values():
                deployment.deployed.discard(node)
            feeders = [d.feeder for d in self._deployments.values() if d.feeder is not None]
            self._cond.notify_all()
        failure = Failure(
            DRPCExceptionType.INTERNAL_ERROR,
            f"Internal error: the request was in flight on resident task {node} and {reason}",
        )
        failed = sum(feeder.lose(node, failure) for feeder in feeders)
        self._fail_calls(reason, node)
        log.error(
            "resident task %d was lost (%s); %d request(s) in flight on it failed; tasks %s "
            "serve on while it starts again",
            node,
            reason,
            failed,
            self.live_workers(),
        )
        self._changed()

    def _rejoin(self, node: int, generation: int) -> None:
        """Give a task that came back every deployment and announcement, then count it live."""
        deadline = time.monotonic() + self.start_timeout
        sent: set[str] = set()
        while True:
            with self._cond:
                if self._broken or self._stopping or generation != self.generation:
                    return
                pending = [d for key, d in self._deployments.items() if key not in sent]
                if not pending:
                    announced = list(self._announced.values())
                    break
            for deployment in pending:
                sent.add(deployment.key)
                self.node.send(node, self._deploy_message(deployment))
            with self._cond:
                while (
                    any(
                        node not in d.deployed and d.failed is None and d.key in self._deployments
                        for d in pending
                    )
                    and not self._broken
                    and time.monotonic() < deadline
                ):
                    self._cond.wait(max(0.0, deadline - time.monotonic()))
                failed = [d.failed for d in pending if d.failed is not None]
            if failed or time.monotonic() >= deadline:
                self._break(
                    f"resident task {node} came back but could not run every deployment: "
                    f"{failed[0] if failed else 'timed out'}"
                )
                return
        for message in announced:
            self.node.send(node, (None, CONTROL, message))
        with self._cond:
            if self._broken or generation != self.generation or node not in self._lost:
                return
            del self._lost[node]
            self._ready.add(node)
            self.epoch += 1
            feeders = [d.feeder for d in self._deployments.values() if d.feeder is not None]
            self._cond.notify_all()
        for feeder in feeders:
            feeder.join(node)
        log.info("resident task %d is back and serves (generation %d)", node, generation)
        self._changed()

    # -- faults ----------------------------------------------------------------------------

    def _break(self, reason: str) -> None:
        """The job is gone or going: fail what was in flight, start a new one."""
        with self._cond:
            if self._broken or self._stopping:
                return
            self._broken = True
            self._broke_because = reason
            self._cond.notify_all()
            jobs, tag = dict(self._jobs), self._tag
            feeders = [d.feeder for d in self._deployments.values() if d.feeder is not None]
            holding = [d for d in self._deployments.values() if d.continuous and d.engine]
        for feeder in feeders:
            feeder.stop()  # what arrives now waits in the table for the tasks to be back
        for deployment in holding:
            assert deployment.engine is not None
            if deployment.engine.spouts_active():  # what they emitted now would go nowhere
                # no wait: this may run on a spout's own turn, whose send found the link lost
                deployment.engine.hold_spouts(timeout=0)
                deployment.held = True
        self._fail_calls(reason)
        threading.Thread(
            target=self._recover,
            args=(reason, jobs, tag),
            name="drpc-resident-recover",
            daemon=True,
        ).start()

    def _recover(self, reason: str, jobs: dict[int, threading.Thread], tag: str) -> None:
        others = {n: j for n, j in jobs.items() if j is not threading.current_thread()}
        deadline = time.monotonic() + JOB_FAILURE_GRACE
        # The lost task's job fails on its own within the grace, and Spark's error names
        # the cause best; the other tasks serve on until they are stopped.
        while (
            len(others) == len(jobs)
            and all(job.is_alive() for job in others.values())
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        cancelled = len(others) == len(jobs) and all(job.is_alive() for job in others.values())
        # A task no longer connected cannot hear Stop (its job waits for Spark to retry it):
        # cancel its job at once; the connected ones end their jobs themselves.
        connected = set(self.node.peers())
        self._end_jobs(
            {n: j for n, j in others.items() if n not in connected}, tag, 0.0, JOB_END_WAIT
        )
        self.node.broadcast((None, CONTROL, Stop()))
        self._end_jobs(
            {n: j for n, j in others.items() if n in connected}, tag, STOP_WAIT, JOB_END_WAIT
        )
        with self._cond:
            error = self._job_error
        if error is not None and not cancelled:
            reason = f"{reason}; the Spark job: {describe_spark_error(error)}"
        self.last_failure = reason
        failure = Failure(
            DRPCExceptionType.INTERNAL_ERROR,
            f"Internal error: the request was in flight on the resident Spark tasks and {reason}",
        )
        failed = 0
        for deployment in self.deployments():
            if deployment.continuous and deployment.engine is not None:
                # The spouts live on: told of every tree in flight, they may replay it.
                failed += deployment.engine.fail_in_flight(failure)
                continue
            engine, deployment.engine = deployment.engine, None
            if engine is not None:
                engine.stop()
                failed += engine.fail_pending(failure)
            if deployment.feeder is not None:
                failed += deployment.feeder.fail_pending(failure)
        if not context_usable(self.sc):
            # Nothing can run on a stopped SparkContext: restarting would fail for ever.
            with self._cond:
                self._gone = f"{reason}; the SparkContext is stopped"
                self._cond.notify_all()
            log.error(
                "the resident Spark tasks broke (%s); %d request(s) in flight failed; the "
                "SparkContext is stopped (its JVM shut down or went away), so they are not "
                "restarted",
                reason,
                failed,
            )
            return
        log.error(
            "the resident Spark tasks broke (%s); %d request(s) in flight failed; restarting in "
            "%g s",
            reason,
            failed,
            self.restart_delay,
        )
        time.sleep(self.restart_delay)
        with self._cond:
            if self._stopping:
                return
            self.restarts += 1
            self._launch()
        if not self.wait_ready(self.start_timeout):
            log.error("the resident Spark tasks did not come back: %s", self._not_ready_message())
            self._break("the restarted resident job never got all its tasks connected")
            return
        for deployment in self.deployments():
            try:
                self._deploy(deployment)
            except Exception:
                log.exception("redeploying %s failed", deployment.topology.name)
        log.info("the resident Spark tasks are back (generation %d)", self.generation)
        self._changed()

    def _end_jobs(
        self, jobs: dict[int, threading.Thread], tag: str, stop_wait: float, end_wait: float
    ) -> None:
        """Wait up to ``stop_wait`` seconds in all for the tasks told to stop to end their
        jobs, cancel the jobs still running, and wait ``end_wait`` for each to end."""
        deadline = time.monotonic() + stop_wait
        for job in jobs.values():
            job.join(max(0.0, deadline - time.monotonic()))
        for node, job in jobs.items():
            if job.is_alive():
                try:
                    self.sc.cancelJobsWithTag(self._task_tag(tag, node))
                except Exception:
                    log.debug("could not cancel resident task %d's job", node, exc_info=True)
        for job in jobs.values():
            job.join(end_wait)

    def _not_ready_message(self) -> str:
        if self._gone is not None:
            return f"the resident Spark tasks are gone: {self._gone}"
        with self._cond:
            connected = sorted(self._ready)
        return (
            f"the resident Spark job on {self.sc.master} did not get its {self.slots} task(s) "
            f"running within {self.start_timeout:g} s (connected: {connected or 'none'}); it "
            "needs that many free executor slots, one per task, and the "
            f"executors must reach the driver at {self.address[0]}:{self.address[1]}"
        )

    # -- stopping --------------------------------------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            jobs, tag = dict(self._jobs), self._tag
            deployments = list(self._deployments.values())
            self._cond.notify_all()
        for deployment in deployments:
            self.undeploy(deployment)
        self._fail_calls("the resident job was stopped")
        self.node.broadcast((None, CONTROL, Stop()))
        self._end_jobs(jobs, tag, timeout, timeout)
        self.node.close()
        log.info("stopped the resident Spark tasks")
