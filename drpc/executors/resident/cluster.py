"""The driver side of the resident Spark job: its tasks, and the functions deployed on them.

Contract. ``ResidentCluster(sc, slots=...)`` is one long-running Spark job of
``slots`` barrier tasks (``drpc.executors.resident.worker``), started with
``start()`` in a job of its own (tagged, in the FAIR pool ``drpc-resident``);
every resident function of the process is deployed on it:

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
- Faults: a task's connection breaking, or the job failing, breaks the
  cluster: the job is given ``JOB_FAILURE_GRACE`` seconds to fail on its own
  and is cancelled otherwise, the requests in flight on every deployment
  fail with INTERNAL_ERROR naming the cause (Spark's error when there is
  one), and after ``restart_delay`` seconds a new job starts and every
  deployment is deployed again; requests that arrive meanwhile wait in the
  request table (on the fed path, too: feeding stops until the tasks are back).
  A continuous deployment (a plain topology, ``drpc.topologies``) keeps its driver
  share instead: its spouts are held while the job restarts, every tree they have in
  flight fails to their ``fail`` (a reliable spout replays it), and they go on once
  the new job runs their bolts.
  When the SparkContext itself is stopped (the driver's JVM shut down or died) no
  new job starts: the cluster stays broken and says why. A job that does not get
  all its tasks connected within ``start_timeout`` seconds fails ``deploy`` with
  ``DRPCError`` naming the master and the slots it asked for. ``serving(deployment)``
  says whether a deployment serves now (False while the job restarts).
- A job that breaks while ``deploy`` waits for its tasks does not fail it: the
  deployment is registered, so the recovery deploys it on the new job, and ``deploy``
  returns once that serves it (``DRPCError`` when it does not within
  ``start_timeout``).
- ``call(node, function, *args)`` runs ``function(*args)`` on resident task
  ``node`` (1..``slots``) and returns a ``Future`` of its result: it waits (up to
  ``start_timeout``) for the job to have every task connected, and a call in
  flight when the job breaks, or made while it restarts, fails with
  ``ResidentTasksBrokenError`` naming why (ask again: the next call waits for the new
  job). No Spark job runs per call.
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
        self._calls: dict[int, Future[Any]] = {}
        self._call_ids = itertools.count(1)
        self._job: threading.Thread | None = None
        self._job_error: BaseException | None = None
        self._tag = ""
        self._broken = False
        self._stopping = False
        self._gone: str | None = None
        """Why no job can start any more (the SparkContext is stopped), once so."""

    # -- the job ---------------------------------------------------------------------------

    def start(self) -> ResidentCluster:
        with self._cond:
            if self._job is not None or self._stopping or self._gone is not None:
                return self
            self._launch()
        return self

    def _launch(self) -> None:
        """Start a new generation of the job. Holds ``_cond``."""
        self.generation += 1
        self._ready = set()
        self._broken = False
        self._job_error = None
        self._tag = f"drpc-resident-{self.node.token[:4].hex()}-{self.generation}"
        self._job = threading.Thread(
            target=self._run_job,
            args=(self._tag, self.generation),
            name=f"drpc-resident-job-{self.generation}",
            daemon=True,
        )
        self._job.start()

    def _run_job(self, tag: str, generation: int) -> None:
        task = partial(
            resident_task,
            driver=self.address,
            token=self.node.token,
            threads=self.worker_threads,
            logging_settings=worker_settings(),
        )
        description = f"drpc resident tasks ({self.slots} slots), generation {generation}"
        try:
            with tagged_job(self.sc, tag, description, pool=POOL):
                rdd = self.sc.parallelize(range(self.slots), self.slots)
                ended = rdd.barrier().mapPartitionsWithIndex(task).collect()
            reason = "the resident job ended: " + "; ".join(sorted(set(ended)))
        except BaseException as error:
            with self._cond:
                self._job_error = error
            reason = f"the resident Spark job failed: {describe_spark_error(error)}"
        with self._cond:
            if self._stopping or generation != self.generation:
                return
        self._break(reason)

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while set(self.workers) - self._ready or self._broken:
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
        if not self.wait_ready(self.start_timeout):
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

    def _deploy(self, deployment: Deployment) -> None:
        with self._cond:
            deployment.deployed = set()
            deployment.failed = None
        for worker in self.workers:
            self.node.send(
                worker,
                (
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
                ),
            )
        deadline = time.monotonic() + self.start_timeout
        with self._cond:
            while set(self.workers) - deployment.deployed and deployment.failed is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._broken:
                    break
                self._cond.wait(remaining)
            failed = deployment.failed
            missing = sorted(set(self.workers) - deployment.deployed)
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
            deployment.feeder.start(self.workers)
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
            if set(self.workers) - deployment.deployed:
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
        if not self.wait_ready(self.start_timeout):
            raise DRPCError(self._not_ready_message())
        future: Future[Any] = Future()
        work = freeze((function, args))
        with self._cond:
            if self._broken:
                raise ResidentTasksBrokenError(
                    f"the resident Spark tasks are restarting: {self.last_failure}"
                )
            call_id = next(self._call_ids)
            self._calls[call_id] = future
        self.node.send(node, (None, CONTROL, Call(call_id, work)))
        return future

    def _call_done(self, done: CallDone) -> None:
        with self._cond:
            future = self._calls.pop(done.call_id, None)
        if future is not None:
            settle(future, done)

    def _fail_calls(self, reason: str) -> None:
        with self._cond:
            calls, self._calls = self._calls, {}
        for future in calls.values():
            future.set_exception(
                ResidentTasksBrokenError(f"the resident Spark tasks broke: {reason}")
            )

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
        with self._cond:
            if isinstance(message, Ready):
                self._ready.add(message.node)
                self.engine_builds[message.node] = message.engine_build
                if message.engine_build != engine_build():
                    log.warning(
                        "resident task %d runs the %s engine, this driver the %s one",
                        message.node,
                        message.engine_build,
                        engine_build(),
                    )
            elif isinstance(message, Deployed):
                deployment = self._deployments.get(message.key)
                if deployment is not None:
                    deployment.deployed.add(message.node)
            elif isinstance(message, DeployFailed):
                deployment = self._deployments.get(message.key)
                if deployment is not None:
                    deployment.failed = f"resident task {message.node}: {message.reason}"
            self._cond.notify_all()

    def _on_lost(self, peer: int, reason: str) -> None:
        with self._cond:
            if self._stopping or peer not in self._ready:
                return
        self._break(f"resident task {peer} went away: {reason}")

    # -- faults ----------------------------------------------------------------------------

    def _break(self, reason: str) -> None:
        """The job is gone or going: fail what was in flight, start a new one."""
        with self._cond:
            if self._broken or self._stopping:
                return
            self._broken = True
            self._broke_because = reason
            self._cond.notify_all()
            job, tag = self._job, self._tag
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
            target=self._recover, args=(reason, job, tag), name="drpc-resident-recover", daemon=True
        ).start()

    def _recover(self, reason: str, job: threading.Thread | None, tag: str) -> None:
        waits = job is not None and job is not threading.current_thread()
        if waits:
            assert job is not None
            job.join(JOB_FAILURE_GRACE)  # Spark's own error names the cause best
        cancelled = waits and job is not None and job.is_alive()
        if cancelled or not waits:
            try:
                self.sc.cancelJobsWithTag(tag)
            except Exception:
                log.debug("could not cancel the resident job %s", tag, exc_info=True)
            if cancelled and job is not None:
                job.join(JOB_END_WAIT)
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

    def _not_ready_message(self) -> str:
        if self._gone is not None:
            return f"the resident Spark tasks are gone: {self._gone}"
        with self._cond:
            connected = sorted(self._ready)
        return (
            f"the resident Spark job on {self.sc.master} did not get its {self.slots} task(s) "
            f"running within {self.start_timeout:g} s (connected: {connected or 'none'}); it "
            "needs that many free executor slots at once (barrier execution), and the "
            f"executors must reach the driver at {self.address[0]}:{self.address[1]}"
        )

    # -- stopping --------------------------------------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            job, tag = self._job, self._tag
            deployments = list(self._deployments.values())
            self._cond.notify_all()
        for deployment in deployments:
            self.undeploy(deployment)
        self._fail_calls("the resident job was stopped")
        self.node.broadcast((None, CONTROL, Stop()))
        if job is not None:
            job.join(timeout)
            if job.is_alive():
                try:
                    self.sc.cancelJobsWithTag(tag)
                except Exception:
                    log.debug("could not cancel the resident job", exc_info=True)
                job.join(timeout)
        self.node.close()
        log.info("stopped the resident Spark tasks")
