"""Plain topologies, as in Storm: spouts that emit with message ids, bolts that anchor, ack
and fail, running at least once until killed.

Contract. ``LocalCluster(executor="local", *, master=None, spark_conf=None, slots=None,
start_timeout=120, threads=4)`` runs plain topologies in this process, Storm's
``LocalCluster`` in snake_case:

- ``submit_topology(name, conf, topology)`` starts ``topology`` (a ``Topology`` or a
  ``TopologyBuilder``) under ``name`` with ``conf`` over the topology's own conf, and
  returns once it runs. A name already running raises ``AlreadyAliveError``; a DRPC
  topology (``drpc_function``) raises ``InvalidTopologyError`` (serve it with
  ``LocalDRPC`` or ``drpc-server``), as do a transactional one (run it with
  ``TransactionalRunner``), a spout's ``open`` and a bolt's ``prepare`` that raise.
- Storm's rules hold (the seed on guaranteed message processing): a spout's tuple
  tree completes (``ack(msg_id)``) once every tuple anchored in it is acked, fails
  (``fail(msg_id)``) when a bolt fails one or it outlives
  ``topology.message.timeout.secs`` (default 30); a spout has at most
  ``topology.max.spout.pending`` trees in flight (default None: no bound). Replaying
  a failed tuple is the spout's business, as in Storm.
- ``executor="local"``: every task in this process (``drpc.executors.local``).
  ``executor="spark"``: the spouts and ackers on this process (the Spark driver),
  the bolts' tasks dealt over the resident Spark tasks (``drpc.executors.resident``),
  every tuple between them over the resident link, no Spark job per tuple. A
  resident task that dies fails the trees in flight at once (each spout's ``fail``,
  so a reliable spout replays them), the spouts wait while the job restarts, and go
  on. ``"spark-batch"`` runs requests, not streams: it raises ``ValueError``.
- ``kill_topology(name, wait_secs=0)``: the spouts stop emitting, the topology runs
  ``wait_secs`` more seconds for the trees in flight (Storm's ``KillOptions``; None: its
  ``topology.message.timeout.secs``, Storm's default when the option is not set), then
  stops; returns the seconds it waited. An unknown name raises ``NotAliveError``.
- ``get_topology_info(name)``: a ``TopologyInfo`` with each component's figures as
  Storm's UI shows them (``drpc.executors.stats``: emitted, acked, failed, complete
  latency), summed over every process running its tasks. On ``spark`` it never waits
  for a restarting job: while the resident tasks restart, or do not answer within
  ``STATS_TIMEOUT`` (2 s), only the driver's tasks (the spouts) are counted, and a
  restarted task counts from zero, as a restarted Storm worker does.
- ``deactivate(name)`` stops polling its spouts (the trees in flight complete),
  ``activate(name)`` polls them again (Storm's commands of the same names).
- ``get_topology_names()``; ``shutdown()`` kills every topology; a context manager.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from drpc import config
from drpc.errors import AlreadyAliveError, DRPCError, InvalidTopologyError, NotAliveError
from drpc.executors.local import LocalExecutor
from drpc.executors.resident.executor import resident_cluster_of
from drpc.executors.resident.worker import current_worker
from drpc.executors.stats import ComponentStats, TaskFigures, component_stats, engine_figures
from drpc.model.topology import Topology, TopologyBuilder
from drpc.sparkconf import DEFAULT_START_TIMEOUT

log = logging.getLogger(__name__)

PLAIN_EXECUTORS = ("local", "spark")
STATS_TIMEOUT = 2.0
"""Seconds ``get_topology_info`` waits for the resident tasks' figures."""


@dataclass(frozen=True)
class TopologyInfo:
    """A running topology: its name, executor, seconds up, and each component's figures."""

    name: str
    executor: str
    uptime_secs: float
    components: dict[str, ComponentStats] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "executor": self.executor,
            "uptime_secs": self.uptime_secs,
            "components": [stats.as_dict() for stats in self.components.values()],
        }


def share_figures(key: str) -> list[TaskFigures]:
    """On a resident task: the figures of its share of deployment ``key``."""
    engine = current_worker().engines.get(key)
    return [] if engine is None else engine_figures(engine)


class _Running:
    """One submitted topology on its executor."""

    def __init__(self, name: str, topology: Topology, executor: str, conf: dict[str, Any]) -> None:
        self.name = name
        self.topology = topology
        self.executor = executor
        self.conf = conf
        self.started = time.monotonic()
        self.engine: LocalExecutor | None = None
        self.cluster: Any = None
        self.deployment: Any = None

    def driver_engine(self) -> LocalExecutor | None:
        if self.deployment is not None:
            return self.deployment.engine
        return self.engine

    def figures(self) -> list[TaskFigures]:
        engine = self.driver_engine()
        driver = [] if engine is None else engine_figures(engine)
        deployment, cluster = self.deployment, self.cluster
        if deployment is None or not cluster.serving(deployment):
            return driver  # restarting: no resident task to ask (see the module doc)
        try:
            calls = [cluster.call(node, share_figures, deployment.key) for node in cluster.workers]
            resident = [figure for call in calls for figure in call.result(timeout=STATS_TIMEOUT)]
        except (DRPCError, TimeoutError) as error:
            log.debug("the resident tasks' figures of %r are left out: %s", self.name, error)
            return driver
        return driver + resident

    def hold(self) -> None:
        engine = self.driver_engine()
        if engine is not None:
            engine.hold_spouts()

    def release(self) -> None:
        engine = self.driver_engine()
        if engine is not None:
            engine.release_spouts()

    def stop(self) -> None:
        if self.deployment is not None:
            self.cluster.undeploy(self.deployment)
            self.deployment = None
        elif self.engine is not None:
            self.engine.stop()
            self.engine = None


class LocalCluster:
    """Runs plain topologies (see the module doc)."""

    def __init__(
        self,
        executor: str = "local",
        *,
        master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        slots: int | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        threads: int = 4,
    ) -> None:
        """
        :param executor: ``"local"`` (default) or ``"spark"`` (see the module doc).
        :param master: the Spark master of ``"spark"`` (default: ``drpc.runtime``'s).
        :param spark_conf: that session's settings.
        :param slots: the resident tasks of ``"spark"`` (default half the default
            parallelism, at least one; the process's first resident user decides).
        :param start_timeout: seconds for Spark's executors to register (default 120).
        :param threads: worker threads of each in-process share (default 4).
        """
        if executor not in PLAIN_EXECUTORS:
            raise ValueError(
                f"plain topologies run on {' or '.join(PLAIN_EXECUTORS)}, not {executor!r}"
                + (" (it runs DRPC requests in batch jobs)" if executor == "spark-batch" else "")
            )
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if start_timeout <= 0:
            raise ValueError(f"start_timeout must be positive, got {start_timeout}")
        self.executor = executor
        self.master = master
        self.spark_conf = dict(spark_conf or {})
        self.slots = slots
        self.start_timeout = start_timeout
        self.threads = threads
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()

    def submit_topology(
        self,
        name: str,
        conf: dict[str, Any] | None,
        topology: Topology | TopologyBuilder,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a topology's name must be a non-empty string, got {name!r}")
        if isinstance(topology, TopologyBuilder):
            topology = topology.create_topology(name)
        if not isinstance(topology, Topology):
            raise TypeError(
                f"submit_topology needs a Topology or a TopologyBuilder, got "
                f"{type(topology).__name__}"
            )
        if topology.drpc_function is not None:
            raise InvalidTopologyError(
                f"topology {topology.name!r} serves DRPC function {topology.drpc_function!r}: "
                "serve it with LocalDRPC or drpc-server, not as a plain topology"
            )
        if topology.transactional is not None:
            raise InvalidTopologyError(
                f"topology {topology.name!r} is a transactional topology: run it with "
                "drpc.transactional.TransactionalRunner or drpc-transactional, not as a plain one"
            )
        merged = config.resolve(topology.conf, conf)
        running = _Running(name, topology, self.executor, merged)
        with self._lock:
            if name in self._running:
                raise AlreadyAliveError(f"topology {name!r} is already running")
            self._running[name] = running
        try:
            if self.executor == "local":
                running.engine = LocalExecutor(topology, conf=merged, threads=self.threads).start()
            else:
                self._deploy(running, merged)
        except BaseException:
            with self._lock:
                self._running.pop(name, None)
            raise
        log.info(
            "topology %r running on the %s executor: %s",
            name,
            self.executor,
            ", ".join(
                f"{component} x{len(tasks)}"
                for component, tasks in sorted(topology.component_task_ids.items())
                if not component.startswith("__")
            ),
        )

    def _deploy(self, running: _Running, conf: dict[str, Any]) -> None:
        cluster = resident_cluster_of(self.master, self.spark_conf, self.start_timeout, self.slots)
        running.cluster = cluster
        running.deployment = cluster.deploy(
            running.topology, conf, {}, threads=self.threads, replicate=False, continuous=True
        )

    def deactivate(self, name: str) -> None:
        """Stop polling the topology's spouts and call each one's ``deactivate``; their
        trees in flight go on to complete. Once it returns, the spouts emit nothing more
        (a ``next_tuple`` in progress is waited for, up to 10 s, else a warning is logged)."""
        self._get(name).hold()

    def activate(self, name: str) -> None:
        """Call each spout's ``activate`` and poll it again."""
        self._get(name).release()

    def kill_topology(self, name: str, wait_secs: float | None = 0.0) -> float:
        if wait_secs is not None and not wait_secs >= 0:
            raise ValueError(f"wait_secs must be >= 0, got {wait_secs}")
        with self._lock:
            running = self._running.pop(name, None)
        if running is None:
            raise NotAliveError(f"no topology named {name!r} is running")
        if wait_secs is None:
            wait_secs = float(running.conf[config.TOPOLOGY_MESSAGE_TIMEOUT_SECS])
        if wait_secs:
            running.hold()
            time.sleep(wait_secs)
        running.stop()
        log.info("killed topology %r", name)
        return wait_secs

    def get_topology_info(self, name: str) -> TopologyInfo:
        running = self._get(name)
        return TopologyInfo(
            name,
            running.executor,
            time.monotonic() - running.started,
            component_stats(running.topology, running.figures()),
        )

    def get_topology_names(self) -> list[str]:
        with self._lock:
            return sorted(self._running)

    def infos(self) -> dict[str, TopologyInfo]:
        """Each running topology's figures, by name (none that stopped meanwhile)."""
        infos = {}
        for name in self.get_topology_names():
            with contextlib.suppress(NotAliveError):  # killed meanwhile by another thread
                infos[name] = self.get_topology_info(name)
        return infos

    def _get(self, name: str) -> _Running:
        with self._lock:
            running = self._running.get(name)
        if running is None:
            raise NotAliveError(f"no topology named {name!r} is running")
        return running

    def shutdown(self) -> None:
        for name in self.get_topology_names():
            with contextlib.suppress(NotAliveError):  # killed meanwhile by another thread
                self.kill_topology(name)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
