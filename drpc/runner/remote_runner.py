"""``RemoteRunner``: topologies served in this process for servers in others.

Contract: ``RemoteRunner(topologies, servers, executor=..., **invocations_options)``
runs each topology on an executor of this process (``drpc.hosting.Host``), fed by
one ``RemoteInvocations`` over every server (its keywords pass through).
``start()`` registers every topology, then starts fetching (a topology that
cannot start stops what started, and its error propagates); ``stop()`` fetches
no more, lets the topologies settle what they can, then sends the queued
outcomes within ``stop_timeout``. It is a context manager.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.client.calls import Address
from drpc.errors import DRPCError
from drpc.hosting import Host, as_topology
from drpc.model.topology import Topology
from drpc.runner.invocations import RemoteInvocations

log = logging.getLogger("drpc.runner")


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
        self.topologies = [as_topology(topology) for topology in topologies]
        functions = []
        for topology in self.topologies:
            if topology.drpc_function is None:
                raise DRPCError(f"topology {topology.name!r} does not serve a DRPC function")
            functions.append(topology.drpc_function)
        self.invocations = RemoteInvocations(servers, functions, **invocations_options)
        self.host = Host(
            self.invocations,
            executor=executor,
            conf=conf,
            executor_options=executor_options,
        )
        self.executor = self.host.executor

    def start(self) -> RemoteRunner:
        try:
            for topology in self.topologies:
                self.host.register(topology)
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

    def stop(self) -> None:
        # Fetch no more, let the topologies settle what they can, then send the outcomes.
        self.invocations.stop_fetching()
        self.host.stop()
        self.invocations.stop()

    def __enter__(self) -> RemoteRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
