"""The resident Spark executor (``executor="spark"``): millisecond calls on long-lived tasks.

Contract. ``ResidentExecutor(topology, services={"drpc.invocations": ...},
master=None, spark_conf=None, slots=None, threads=4, start_timeout=120)``
serves one DRPC topology on this process's resident Spark job
(``drpc.executors.resident.cluster``), shared by every resident function of
the process:

- ``start()`` gets the process's SparkSession (``drpc.runtime``: no executor
  registering within ``start_timeout`` raises ``SparkStartError``), starts the
  resident job if none runs (``slots`` resident tasks, default half the
  default parallelism, at least one; the first function to start it decides),
  deploys the topology's bolt tasks on the resident tasks and its spouts,
  DRPC scaffolding and ackers on the driver. It returns once the function is
  served; a job that cannot get its slots within ``start_timeout`` seconds
  raises ``DRPCError`` saying so.
- A request goes from the request table into the driver's share and through
  the resident tasks as a stream of messages: the same engine as the local
  executor (``drpc.executors.local``), its tasks spread over processes, so
  every rule (acking, coordination, tree timeouts, asynchronous acks) is the
  local executor's. No Spark job runs per request.
- ``request_path`` says where requests enter and leave. ``"tasks"`` (the
  default, ``"auto"``): every resident task runs the DRPC spout, scaffolding and
  ackers beside its bolts. With an invocations handle the tasks can rebuild
  (``drpc.requests.ShippableInvocations``: a remote runner's ``RemoteInvocations``,
  which then leaves the function to them, ``hand_off``) each task fetches requests
  from the DRPC servers itself and answers each to its server: the driver does
  nothing per request. With a handle whose request table is in this process and
  that wakes its readers (``add_listener``: a topology embedded in the server or in
  ``LocalDRPC``) the driver feeds the tasks the table's requests over the resident
  link and hands their outcomes back (``drpc.executors.resident.feeding``, at most
  ``feed_window`` in flight per task): two items per request, no tuple; it feeds
  whole copies only. Any other handle with ``"tasks"`` raises ``ValueError``.
  ``"driver"``: as described above, every tuple between the driver's share and the
  tasks; ``"auto"`` takes it where the tasks can neither fetch nor be fed.
- ``replicate`` (with the ``"tasks"`` path; default True): each resident task
  runs a whole copy of the topology, every step with its parallelism, so a
  request never leaves the task that fetched it and throughput grows with the
  tasks; a fields grouping then holds within each copy (within a request, as a
  DRPC step sees it), not across copies. False: one copy whose tasks are dealt
  over the resident tasks, as on the driver path (Storm's placement: every
  fields grouping holds across requests too), at the price of messages between
  tasks.
- A resident task or executor that dies fails the requests in flight with
  INTERNAL_ERROR naming the cause; the job restarts and serving resumes.
- ``serving`` says whether the function is served now (False while the job restarts).
- ``stop()`` undeploys the function (the resident job keeps running for the
  others, and ends with the session: ``drpc.runtime.stop_session``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from drpc import config, runtime
from drpc.builders.drpc_components import (
    INVOCATIONS_SERVICE,
    required_invocations,
    served_function,
)
from drpc.errors import DRPCError
from drpc.executors.resident.cluster import (
    DEFAULT_START_TIMEOUT,
    DEFAULT_WORKER_THREADS,
    Deployment,
    ResidentCluster,
    default_slots,
)
from drpc.executors.resident.feeding import DEFAULT_FEED_WINDOW
from drpc.model.topology import Topology
from drpc.requests import ShippableInvocations

log = logging.getLogger(__name__)

_clusters_lock = threading.Lock()
_cluster: ResidentCluster | None = None


REQUEST_PATHS = ("auto", "tasks", "driver")


def _fetching_settings(invocations: Any) -> Any:
    """The settings the resident tasks rebuild ``invocations`` from, or None when they
    cannot (the request table is in this process)."""
    return invocations.settings if isinstance(invocations, ShippableInvocations) else None


def resident_cluster(
    sc: Any, *, slots: int | None = None, start_timeout: float = DEFAULT_START_TIMEOUT
) -> ResidentCluster:
    """This process's resident job on ``sc``, created (not yet started) on first use."""
    global _cluster
    with _clusters_lock:
        cluster = _cluster
        if cluster is not None and cluster.sc is sc:
            if slots is not None and slots != cluster.slots:
                raise ValueError(
                    f"the resident Spark job of this process already runs {cluster.slots} "
                    f"slot(s); cannot also run {slots} (one resident job per process)"
                )
            return cluster
        cluster = ResidentCluster(sc, slots=slots or default_slots(sc), start_timeout=start_timeout)
        _cluster = cluster
    runtime.before_stop(lambda: _stop_cluster(cluster))
    return cluster


def resident_cluster_of(
    master: str | None,
    spark_conf: dict[str, Any] | None,
    start_timeout: float,
    slots: int | None = None,
) -> ResidentCluster:
    """This process's resident job on its SparkSession (``drpc.runtime``), started and with
    every task connected (``DRPCError`` saying why not, after ``start_timeout``)."""
    session = runtime.get_session(master, spark_conf, start_timeout=start_timeout)
    cluster = resident_cluster(session.sparkContext, slots=slots, start_timeout=start_timeout)
    cluster.start()
    if not cluster.wait_ready(start_timeout):
        raise DRPCError(cluster._not_ready_message())
    return cluster


def _stop_cluster(cluster: ResidentCluster) -> None:
    global _cluster
    with _clusters_lock:
        if _cluster is cluster:
            _cluster = None
    cluster.stop()


def current_cluster() -> ResidentCluster | None:
    """The resident job of this process, if one was made."""
    with _clusters_lock:
        return _cluster


class ResidentExecutor:
    """Serves one DRPC topology on the resident Spark job (see the module doc)."""

    name = "spark"

    def __init__(
        self,
        topology: Topology,
        *,
        services: dict[str, Any] | None = None,
        conf: dict[str, Any] | None = None,
        master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        slots: int | None = None,
        threads: int = DEFAULT_WORKER_THREADS,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        request_path: str = "auto",
        replicate: bool = True,
        feed_window: int = DEFAULT_FEED_WINDOW,
    ) -> None:
        self.function = served_function(topology, "resident Spark executor")
        if slots is not None and slots < 1:
            raise ValueError(f"slots must be None or >= 1, got {slots}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if start_timeout <= 0:
            raise ValueError(f"start_timeout must be positive, got {start_timeout}")
        self.topology = topology
        self.conf = config.resolve(topology.conf, conf)
        self.services = dict(services or {})
        invocations = required_invocations(self.services, "resident Spark executor")
        if request_path not in REQUEST_PATHS:
            raise ValueError(
                f"request_path must be one of {', '.join(REQUEST_PATHS)}, got {request_path!r}"
            )
        if feed_window < 1:
            raise ValueError(f"feed_window must be >= 1, got {feed_window}")
        self.replicate = replicate
        self.feed_window = feed_window
        self.fetching = _fetching_settings(invocations) if request_path != "driver" else None
        wakes = callable(getattr(invocations, "add_listener", None))
        fed = self.fetching is None and request_path != "driver" and wakes and replicate
        if request_path == "tasks" and self.fetching is None and not fed:
            raise ValueError(
                "request_path='tasks' needs an invocations handle the resident tasks can "
                "rebuild (drpc.runner.RemoteInvocations), or for the driver to feed them, one "
                "that wakes it (add_listener) and replicate=True (whole copies); got "
                f"{type(invocations).__name__} with replicate={replicate}"
            )
        self.feed = invocations if fed else None
        self.master = master
        self.spark_conf = dict(spark_conf or {})
        self.slots = slots
        self.threads = threads
        self.start_timeout = start_timeout
        self.cluster: ResidentCluster | None = None
        self.deployment: Deployment | None = None

    def start(self) -> ResidentExecutor:
        if self.deployment is not None:
            return self
        session = runtime.get_session(
            self.master, self.spark_conf, start_timeout=self.start_timeout
        )
        self.cluster = resident_cluster(
            session.sparkContext, slots=self.slots, start_timeout=self.start_timeout
        )
        self.deployment = self.cluster.deploy(
            self.topology,
            self.conf,
            self.services,
            threads=self.threads,
            fetching=self.fetching,
            replicate=self.replicate,
            feed=self.feed,
            feed_window=self.feed_window,
        )
        if self.fetching is not None:
            self.services[INVOCATIONS_SERVICE].hand_off(self.function)
        log.info(
            "serving DRPC function %r on the resident Spark tasks (%d slots on %s); %s",
            self.function,
            self.cluster.slots,
            session.sparkContext.master,
            (
                "each task fetches and answers requests itself, on a whole copy of the topology"
                if self.replicate
                else "each task fetches and answers requests itself"
            )
            if self.fetching is not None
            else "the driver feeds each task requests for its own whole copy of the topology"
            if self.feed is not None
            else "requests enter and leave through the driver",
        )
        return self

    def stop(self) -> None:
        deployment, self.deployment = self.deployment, None
        if deployment is not None and self.cluster is not None:
            self.cluster.undeploy(deployment)
            log.info("stopped serving DRPC function %r on the resident Spark tasks", self.function)

    def __enter__(self) -> ResidentExecutor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def serving(self) -> bool:
        """Whether the function is served now (False while the resident job restarts)."""
        deployment, cluster = self.deployment, self.cluster
        return deployment is not None and cluster is not None and cluster.serving(deployment)

    @property
    def engine(self) -> Any:
        """The driver's share of this function (``LocalExecutor``), while deployed."""
        return self.deployment.engine if self.deployment is not None else None
