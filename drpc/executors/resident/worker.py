"""A resident Spark task: one node of the deployment, hosting its share of every function.

Contract. ``resident_task(partition, items, *, node_index, driver, token, threads,
logging_settings)`` is the body of resident task ``node_index``, the one task of a
Spark job of its own (``drpc.executors.resident.cluster``). It connects to the
driver, opens a node on the address of the interface that reached it, says
``Joined`` with that address, connects to every task the driver's ``Peers`` answer
lists (the tasks that joined before it; later ones connect to it), says ``Ready`` (a
connect returns once the peer has the connection: by then each of them can send to it),
and serves until the driver sends ``Stop`` or its connection to the driver breaks:

- ``Deploy``: build and start this worker's share of the function
  (``LocalExecutor`` over the tasks ``place`` gave this node, routed through
  ``Route``, shipping its step spans to the driver when observed) and answer
  ``Deployed``, or ``DeployFailed`` naming why. With ``fetching`` the share
  also runs its DRPC spout, scaffolding and ackers, fed by an invocations
  handle of its own (built from the shipped settings,
  ``InvocationsBlueprint.build``) that fetches from
  every server and answers each request to the server it came from; with
  ``replicated`` it runs a whole copy of the topology by itself (a plain
  ``LocalExecutor``: a request never leaves the task that fetched it). The handle
  may instead be fed by the driver (a ``FedBlueprint``: ``drpc.executors.resident.
  feeding``): ``FED`` items bring its requests, ``answer`` sends their outcomes back,
  and when the deployment is observed its engine reports to the handle's observer;
- ``Undeploy``: stop that share (the requests its spouts hold fail with
  SERVER_SHUTDOWN);
- ``Call``: run the function on a thread of the worker's call pool (``threads``
  of them) and answer ``CallDone`` with what it returned or why it raised; a function
  running in a call finds this worker with ``current_worker()`` (its node index, and
  ``stage(node, key, sender, payload)`` to hand a peer something: ``Stage``);
- ``Stage``: keep the payload in the process's ``STAGED`` (``drpc.executors.resident.
  staging``) until a call takes it; ``Placed``: where a partitioned state's partitions
  live (``drpc.executors.resident.partition_reads``: a read of one on another host asks
  its owner, ``call(node, function, *args)``, answered by its ``CallDone``);
- a deployment's items go to its share (``routing.dispatch``); items for a
  deployment this worker does not run (an undeployed one) are dropped.

When it returns, its Spark task ends, and the requests its spouts still hold
fail with INTERNAL_ERROR naming why. A peer task that goes away does not end this
one: the calls this task has in flight to it fail at once, and the driver decides what
the loss means (it restarts every task, or only the lost one: ``drpc.executors.
resident.cluster``).
"""

from __future__ import annotations

import itertools
import logging
import pickle
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from drpc.builders.drpc_components import INVOCATIONS_SERVICE
from drpc.compiled import engine_build
from drpc.errors import DRPCExceptionType, Failure
from drpc.executors.local.executor import LocalExecutor
from drpc.executors.local.spans import ShippedSpans
from drpc.executors.resident.control import (
    Call,
    CallDone,
    Deploy,
    Deployed,
    DeployFailed,
    Joined,
    Peers,
    Placed,
    Ready,
    Stage,
    Stop,
    Undeploy,
    settle,
)
from drpc.executors.resident.partition_reads import place, worker_reader
from drpc.executors.resident.routing import (
    CONTROL,
    DRIVER,
    OUTCOMES,
    Route,
    acker_roots,
    dispatch_items,
    hosted_by,
)
from drpc.executors.resident.staging import STAGED
from drpc.executors.resident.transport import Address, Node
from drpc.logs import configure_worker_logging
from drpc.observe import OBSERVER_SERVICE
from drpc.semantics.runners import freeze
from drpc.state.partitioned import set_remote_reader

log = logging.getLogger(__name__)

PEER_TIMEOUT = 60.0
"""Seconds a resident task waits for the driver to say which tasks run before it gives up."""

_current: ResidentWorker | None = None


def current_worker() -> ResidentWorker:
    """The resident task this process runs (for functions running in its calls)."""
    if _current is None:
        raise RuntimeError("no resident task runs in this process")
    return _current


class ResidentWorker:
    """One resident Spark task's node and the shares it runs."""

    def __init__(self, node_index: int, token: bytes, threads: int) -> None:
        self.index = node_index
        self.host = ""  # the executor's address this task listens on (set once listening)
        self.threads = threads
        self.node = Node(node_index, token, self._on_items, self._on_lost)
        self.engines: dict[str, LocalExecutor] = {}
        self.fetchers: dict[str, Any] = {}  # a deployment's own invocations handle
        self.calls = ThreadPoolExecutor(threads, thread_name_prefix=f"drpc-calls-{node_index}")
        self._lock = threading.Lock()
        self._calls: dict[int, tuple[int, Future[Any]]] = {}  # to its peers: (node, future)
        self._call_ids = itertools.count(1)
        self._done = threading.Event()
        self._peers: Peers | None = None
        self._peers_known = threading.Event()
        self.reason = ""

    def serve(self) -> str:
        """Serve until stopped; returns why it stopped."""
        self._done.wait()
        with self._lock:
            keys = list(self.engines)
        failure = Failure(
            DRPCExceptionType.INTERNAL_ERROR,
            f"Internal error: resident task {self.index} stopped ({self.reason}) with the "
            "request in flight",
        )
        for key in keys:
            self._stop_share(key, failure)
        self.calls.shutdown(wait=False, cancel_futures=True)
        self.node.close()
        return self.reason

    def _finish(self, reason: str) -> None:
        if not self._done.is_set():
            self.reason = reason
            self._done.set()

    def _on_lost(self, peer: int, reason: str) -> None:
        if peer == DRIVER:
            self._finish(f"lost the driver: {reason}")
            return
        # once the driver said stop, every peer goes too: that is no news
        level = logging.DEBUG if self._done.is_set() else logging.WARNING
        log.log(level, "resident task %d lost resident task %d: %s", self.index, peer, reason)
        with self._lock:
            lost = [cid for cid, (node, _) in self._calls.items() if node == peer]
            futures = [self._calls.pop(cid)[1] for cid in lost]
        for future in futures:
            future.set_exception(RuntimeError(f"resident task {peer} went away: {reason}"))

    def join(self, driver: Address, timeout: float) -> None:
        """Connect to the driver and to the tasks that joined before this one (module doc),
        listening on the interface that reaches the driver."""
        here = self.node.connect(DRIVER, driver)
        host, port = self.node.listen(here)
        self.host = host
        self.node.send(DRIVER, (None, CONTROL, Joined(self.index, host, port)))
        if not self._peers_known.wait(timeout) or self._peers is None:
            raise RuntimeError(
                f"resident task {self.index}: the driver never said which tasks run "
                f"(waited {timeout:g} s)"
            )
        for peer, peer_host, peer_port in self._peers.addresses:
            self.node.connect(peer, (peer_host, peer_port))

    def _on_items(self, peer: int, items: list[Any]) -> None:
        dispatch_items(items, self.engines.get, self._control, self._fed)

    def _fed(self, key: str, requests: Any) -> None:
        fetcher = self.fetchers.get(key)
        if fetcher is not None:
            fetcher.arrived(requests)

    def answer(self, key: str, outcome: Any) -> None:
        """Send the driver the outcome of a request it fed this task (``FedOutcome``)."""
        self.node.send(DRIVER, (key, OUTCOMES, [outcome]))

    def _control(self, message: Any) -> None:
        if isinstance(message, Peers):
            self._peers = message
            self._peers_known.set()
        elif isinstance(message, Deploy):
            self._deploy(message)
        elif isinstance(message, Undeploy):
            # On a thread of its own: stopping a share waits for its pollers and its last
            # answers (up to the runner's stop_timeout), which must not hold up the items
            # of the other deployments this connection carries.
            threading.Thread(
                target=self._stop_share,
                args=(
                    message.key,
                    Failure(DRPCExceptionType.SERVER_SHUTDOWN, "Server Shutting Down"),
                ),
                name=f"drpc-undeploy-{message.key}",
                daemon=True,
            ).start()
        elif isinstance(message, Call):
            self.calls.submit(self._call, message)
        elif isinstance(message, CallDone):  # the answer to a call this task made
            with self._lock:
                found = self._calls.pop(message.call_id, None)
            if found is not None:
                settle(found[1], message)
        elif isinstance(message, Stage):
            STAGED.put(message.key, message.sender, message.payload)
        elif isinstance(message, Placed):
            place(message.root, message.group, message.owners)
        elif isinstance(message, Stop):
            self._finish("stopped by the driver")

    def _call(self, message: Call) -> None:
        try:
            function, args = pickle.loads(message.work)
            result = pickle.dumps(function(*args), protocol=pickle.HIGHEST_PROTOCOL)
            done = CallDone(message.call_id, self.index, result, None)
        except BaseException as error:
            log.exception("resident task %d: call %d raised", self.index, message.call_id)
            done = CallDone(message.call_id, self.index, None, f"{type(error).__name__}: {error}")
        self.node.send(message.reply_to, (None, CONTROL, done))

    def call(self, node: int, function: Callable[..., Any], *args: Any) -> Future[Any]:
        """``function(*args)`` on peer task ``node`` (this one: on its call pool), as the
        driver calls a task (``Call``)."""
        if node == self.index:
            return self.calls.submit(function, *args)
        future: Future[Any] = Future()
        with self._lock:
            call_id = next(self._call_ids)
            self._calls[call_id] = (node, future)
        work = freeze((function, args))
        if not self.node.send(node, (None, CONTROL, Call(call_id, work, self.index))):
            with self._lock:
                self._calls.pop(call_id, None)
            future.set_exception(RuntimeError(f"resident task {node} is not connected"))
        return future

    def stage(self, node: int, key: Any, sender: Any, payload: Any) -> None:
        """Hand ``payload`` from ``sender`` to worker ``node`` under ``key`` (this worker:
        directly)."""
        if node == self.index:
            STAGED.put(key, sender, payload)
        elif not self.node.send(node, (None, CONTROL, Stage(key, sender, payload))):
            raise RuntimeError(f"resident task {self.index}: resident task {node} is not connected")

    def _stop_share(self, key: str, failure: Failure) -> None:
        """Stop a deployment's share: its fetching, its engine, then the requests its
        spouts hold fail with ``failure``, then its invocations handle, which sends those
        failures before it closes."""
        with self._lock:
            engine = self.engines.pop(key, None)
            fetcher = self.fetchers.pop(key, None)
        if fetcher is not None:
            fetcher.stop_fetching()
        if engine is not None:
            engine.stop()
            failed = engine.fail_pending(failure)
            if failed:
                log.warning(
                    "resident task %d: %d request(s) in flight on %s failed: %s",
                    self.index,
                    failed,
                    key,
                    failure.message,
                )
        if fetcher is not None:
            fetcher.stop()

    def _share(self, message: Deploy, topology: Any, services: dict[str, Any]) -> LocalExecutor:
        """This worker's engine for a deployment: a whole copy of the topology, or the
        tasks ``place`` gave it of one copy, routed to the other nodes (its ackers track
        its own spouts' roots when it fetches)."""
        if message.replicated:
            return LocalExecutor(
                topology, conf=message.conf, services=services, threads=self.threads
            )
        fetches = message.fetching is not None
        route = Route(
            self.node,
            message.key,
            message.node_of,
            acker_modulus=message.workers if fetches else 0,
        )
        engine = LocalExecutor(
            topology,
            conf=message.conf,
            services=services,
            threads=self.threads,
            hosted=hosted_by(message.node_of, self.index),
            remote=route,
            ackers=fetches,
            acker_roots=acker_roots(self.index, message.workers) if fetches else None,
        )
        if message.observed:
            engine.recorder = ShippedSpans(engine.holding, route.ship_spans)
        return engine

    def _deploy(self, message: Deploy) -> None:
        fetcher = None
        try:
            topology = pickle.loads(message.topology)
            fetching = None if message.fetching is None else pickle.loads(message.fetching)
            services: dict[str, Any] = {}
            if fetching is not None:
                fetcher = fetching.build([topology.drpc_function])
                services[INVOCATIONS_SERVICE] = fetcher
                observer = getattr(fetcher, "observer", None)
                if message.observed and observer is not None:
                    services[OBSERVER_SERVICE] = observer
            engine = self._share(message, topology, services)
            with self._lock:
                previous = self.engines.get(message.key)
                previous_fetcher = self.fetchers.pop(message.key, None)
                self.engines[message.key] = engine
                if fetcher is not None:
                    self.fetchers[message.key] = fetcher
            if previous is not None:  # deployed again after a restart raced a new deploy
                previous.stop()
            if previous_fetcher is not None:
                previous_fetcher.stop()
            engine.start()
            if fetcher is not None:
                fetcher.start()
        except Exception as error:
            with self._lock:
                self.engines.pop(message.key, None)
                self.fetchers.pop(message.key, None)
            if fetcher is not None:
                fetcher.stop()
            reason = f"{type(error).__name__}: {error}"
            log.exception("resident task %d could not deploy %s", self.index, message.key)
            self.node.send(DRIVER, (None, CONTROL, DeployFailed(message.key, self.index, reason)))
            return
        self.node.send(DRIVER, (None, CONTROL, Deployed(message.key, self.index)))


def resident_task(
    partition: int,
    items: Iterable[Any],
    *,
    node_index: int,
    driver: Address,
    token: bytes,
    threads: int,
    logging_settings: tuple[str, int] | None,
) -> Iterator[str]:
    """Resident task ``node_index`` (see the module doc); yields why it ended."""
    if logging_settings is not None:
        configure_worker_logging(*logging_settings)
    global _current
    worker = _current = ResidentWorker(node_index, token, threads)
    set_remote_reader(worker_reader(worker))
    worker.join(driver, PEER_TIMEOUT)
    build = engine_build()
    worker.node.send(DRIVER, (None, CONTROL, Ready(node_index, build)))
    log.info("resident task %d (%s engine) serving on %s", node_index, build, worker.host)
    reason = worker.serve()
    log.info("resident task %d ended: %s", node_index, reason)
    yield reason
