"""``RemoteRunner``: topologies served in this process for servers in others.

Contract: ``RemoteRunner(topologies, servers, executor=..., **invocations_options)``
runs each topology on an executor of this process (``drpc.hosting.Host``), fed by
one ``RemoteInvocations`` over every server (its keywords pass through).
``register_transactional(topology, state_dir=..., **options)`` adds a transactional
or Trident run hosted beside them (``drpc.transactional.hosted.HostedTransactional``,
on the runner's executor), so the functions that read its state, partitioned state
included, are served from the process that runs it. A plain topology among
``topologies`` (no DRPC function: ``drpc.topologies``) runs beside them on the same
executor until ``stop()``. ``start()`` registers every
topology, starts the runs, then starts fetching (a topology that cannot start stops
what started, and its error propagates); ``stop()`` fetches no more, stops the runs
after the commit in progress, lets the topologies settle what they can, then sends
the queued outcomes within ``stop_timeout``. It is a context manager.
``spark_lost()`` says why a runner on a Spark executor can run nothing any more (its
driver's JVM shut down or died), or None.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from drpc import runtime
from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.client.calls import Address
from drpc.errors import DRPCError
from drpc.executors import SPARK_EXECUTORS
from drpc.hosting import Host, as_topology
from drpc.model.topology import Topology
from drpc.runner.invocations import RemoteInvocations
from drpc.topologies import LocalCluster
from drpc.transactional.hosted import HostedTransactional

log = logging.getLogger("drpc.runner")

PLAIN_OPTIONS = frozenset({"master", "spark_conf", "start_timeout", "slots"})
"""The executor options a plain topology's ``LocalCluster`` takes."""


class RemoteRunner:
    """Runs topologies in this process for the servers' invocations ports."""

    def __init__(
        self,
        topologies: Sequence[LinearDRPCTopologyBuilder | Topology],
        servers: str | Sequence[str | Address],
        *,
        executor: str | None = None,
        conf: dict[str, Any] | None = None,
        executor_options: dict[str, Any] | None = None,
        **invocations_options: Any,
    ) -> None:
        self.topologies: list[Topology] = []
        self.plain_topologies: list[Topology] = []
        """Plain topologies (``drpc.topologies``) run beside the functions."""
        functions: list[str] = []
        for topology in map(as_topology, topologies):
            if topology.drpc_function is None:
                self.plain_topologies.append(topology)
            else:
                self.topologies.append(topology)
                functions.append(topology.drpc_function)
        self.invocations = RemoteInvocations(servers, functions, **invocations_options)
        self.host = Host(
            self.invocations,
            executor=executor,
            conf=conf,
            executor_options=executor_options,
        )
        self.executor = self.host.executor
        self.transactional: dict[str, HostedTransactional] = {}
        self._cluster_options = {
            name: value for name, value in (executor_options or {}).items() if name in PLAIN_OPTIONS
        }
        self.plain: LocalCluster | None = None

    def register_transactional(
        self, topology: Any, *, state_dir: str, **options: Any
    ) -> HostedTransactional:
        """Host a transactional topology's run in this process (``options`` are keywords of
        ``HostedTransactional``); it starts with ``start()`` and stops with ``stop()``."""
        hosted = HostedTransactional(
            topology, state_dir=state_dir, executor=self.executor, **options
        )
        if hosted.topology_id in self.transactional:
            hosted.runner.close()
            raise DRPCError(f"transactional topology {hosted.topology_id!r} is already registered")
        self.transactional[hosted.topology_id] = hosted
        return hosted

    def start(self) -> RemoteRunner:
        try:
            for topology in self.topologies:
                self.host.register(topology)
            if self.plain_topologies:
                self.plain = LocalCluster(self.executor, **self._cluster_options)
                for topology in self.plain_topologies:
                    self.plain.submit_topology(topology.name, None, topology)
            for hosted in self.transactional.values():
                hosted.start()
                log.info(
                    "runner running transactional topology %r on the %s executor, state in %s",
                    hosted.topology_id,
                    hosted.runner.executor,
                    hosted.state_dir,
                )
        except BaseException:
            self.stop()
            raise
        invocations = self.invocations
        invocations.start()
        log.info(
            "runner serving %s for %s on the %s executor%s",
            ", ".join(invocations.functions + invocations.handed_off),
            ", ".join(invocations.origins),
            self.executor,
            f"; the resident Spark tasks fetch {', '.join(invocations.handed_off)} themselves"
            if invocations.handed_off
            else "",
        )
        return self

    def spark_lost(self) -> str | None:
        """Why this runner's Spark driver can run nothing any more, or None (always None
        off Spark, and before ``start``)."""
        if self.executor not in SPARK_EXECUTORS:
            return None
        session = runtime.current_session()
        if session is None or runtime.context_usable(session.sparkContext):
            return None
        return "its Spark driver's JVM shut down or went away"

    def stop(self) -> None:
        # Fetch no more, let the topologies settle what they can, then send the outcomes.
        self.invocations.stop_fetching()
        for hosted in self.transactional.values():
            hosted.stop()
        if self.plain is not None:
            self.plain.shutdown()
        self.host.stop()
        self.invocations.stop()

    def __enter__(self) -> RemoteRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
