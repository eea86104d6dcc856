"""``DRPCServer``: the Thrift and HTTP listeners, the request table, and hosted runtimes.

Contract. ``async with DRPCServer(...) as server`` (or ``await start()`` /
``await stop()``) serves, on one asyncio event loop:

- ``DistributedRPC`` (Thrift, framed binary) on ``port`` (3772),
- ``DistributedRPCInvocations`` on ``invocations_port`` (3773),
- HTTP on ``http_port`` (3774; None disables it);

port 0 picks a free port, readable after ``start()`` from the same attribute.
``register(topology, executor=...)`` hosts a DRPC topology in this process:
its runtime pulls requests straight from the request table (no sockets) with
the at-most-once contract remote runners get through the invocations port.
``stop()`` stops accepting, fails every outstanding request with
SERVER_SHUTDOWN (callers get that reply), stops the hosted runtimes, and closes.

Limits and settings are keyword arguments; see ``DRPCServer.__init__``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from drpc.builders.drpc_components import INVOCATIONS_SERVICE
from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.errors import DRPCError
from drpc.executors import create_executor
from drpc.hosting import as_topology, default_executor
from drpc.model.topology import Topology
from drpc.requests import DEFAULT_REQUEST_TIMEOUT
from drpc.wire import MAX_FRAME_SIZE
from server.handlers import execute_methods, invocations_methods
from server.http import create_http_app
from server.service import DEFAULT_RUNNER_LIVENESS, Authorizer, DRPCService, EmbeddedInvocations
from server.thrift_listener import ThriftListener

log = logging.getLogger(__name__)

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 3772
DEFAULT_INVOCATIONS_PORT = 3773
DEFAULT_HTTP_PORT = 3774


class DRPCServer:
    def __init__(
        self,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        invocations_port: int = DEFAULT_INVOCATIONS_PORT,
        http_port: int | None = DEFAULT_HTTP_PORT,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_frame_size: int = MAX_FRAME_SIZE,
        runner_liveness: float = DEFAULT_RUNNER_LIVENESS,
        wait_for_unserved: bool = False,
        executor: str | None = None,
        conf: dict[str, Any] | None = None,
        authorizer: Authorizer | None = None,
        shutdown_grace: float = 5.0,
    ) -> None:
        """
        :param host: interface to listen on (default every interface, as Storm).
        :param port: ``DistributedRPC`` (execute) port, default 3772.
        :param invocations_port: ``DistributedRPCInvocations`` port, default 3773.
        :param http_port: HTTP port, default 3774; None serves no HTTP.
        :param timeout: seconds a request may wait for its result before it fails with
            SERVER_TIMEOUT, default 600 (Storm's ``drpc.request.timeout.secs``).
        :param max_frame_size: largest Thrift frame body, and largest HTTP body, accepted
            in bytes, default 1 MiB; bigger ones close the connection (HTTP: 413).
        :param runner_liveness: seconds a remote runner's last ``fetchRequest`` keeps its
            function served, default 30.
        :param wait_for_unserved: queue calls to functions nobody serves until they time
            out (Storm's behaviour) instead of failing them at once, default False.
        :param executor: executor of registered topologies, default ``"spark"`` when the
            Spark executor is installed, else ``"local"``.
        :param conf: topology configuration for registered topologies
            (``topology.message.timeout.secs`` defaults to ``timeout``).
        :param authorizer: called before every network operation with (identity,
            operation, function); raises ``AuthorizationException`` to refuse.
        :param shutdown_grace: seconds ``stop()`` waits for replies and runtimes.
        """
        if max_frame_size < 1:
            raise ValueError(f"max_frame_size must be positive, got {max_frame_size!r}")
        self.host = host
        self.port = port
        self.invocations_port = invocations_port
        self.http_port = http_port
        self.max_frame_size = max_frame_size
        self.executor = executor or default_executor()
        self.shutdown_grace = shutdown_grace
        self._conf = dict(conf or {})
        self._conf.setdefault("topology.message.timeout.secs", timeout)
        self.service = DRPCService(
            timeout=timeout,
            runner_liveness=runner_liveness,
            wait_for_unserved=wait_for_unserved,
            authorizer=authorizer,
        )
        self._execute_listener = ThriftListener(
            "DistributedRPC", execute_methods(self.service), max_frame_size=max_frame_size
        )
        self._invocations_listener = ThriftListener(
            "DistributedRPCInvocations",
            invocations_methods(self.service),
            max_frame_size=max_frame_size,
        )
        self._http_runner: web.AppRunner | None = None
        self._runtimes: dict[str, tuple[str, Any]] = {}
        self.started = False
        self.stopped = False

    @property
    def timeout(self) -> float:
        return self.service.timeout

    # -- hosting ------------------------------------------------------------------------------

    def register(
        self,
        topology: LinearDRPCTopologyBuilder | Topology,
        executor: str | None = None,
        **executor_options: Any,
    ) -> Any:
        """Host a DRPC topology in this process; returns its started runtime.

        Blocks while the runtime starts (a Spark session may take seconds): call it
        before ``start()``, or from a thread other than the server's event loop.
        """
        built = as_topology(topology)
        function = built.drpc_function
        if function is None:
            raise DRPCError(f"topology {built.name!r} does not serve a DRPC function")
        if self.stopped:
            raise DRPCError("the DRPC server is stopped")
        if function in self._runtimes:
            raise DRPCError(f"function {function!r} is already registered")
        name = executor or self.executor
        runtime = create_executor(
            name,
            built,
            services={INVOCATIONS_SERVICE: EmbeddedInvocations(self.service)},
            conf=self._conf,
            **executor_options,
        )
        self._runtimes[function] = (name, runtime)
        try:
            runtime.start()
        except BaseException:
            del self._runtimes[function]
            raise
        self.service.register_embedded(function)
        log.info("registered DRPC function %r on the %s executor", function, name)
        return runtime

    @property
    def functions(self) -> list[str]:
        """Functions served now: registered here or fetched recently by a remote runner."""
        return self.service.served_functions()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> DRPCServer:
        if self.started:
            return self
        self.service.attach(asyncio.get_running_loop())
        try:
            self.port = await self._execute_listener.start(self.host, self.port)
            self.invocations_port = await self._invocations_listener.start(
                self.host, self.invocations_port
            )
            if self.http_port is not None:
                app = create_http_app(self.service, max_body_size=self.max_frame_size)
                self._http_runner = web.AppRunner(app, access_log=None)
                await self._http_runner.setup()
                site = web.TCPSite(self._http_runner, self.host, self.http_port)
                await site.start()
                self.http_port = int(self._http_runner.addresses[0][1])
        except BaseException:
            await self._close_listeners()
            raise
        self.started = True
        log.info("%s", self.describe())
        return self

    def describe(self) -> str:
        functions = ", ".join(self.functions) or "none yet (waiting for remote runners)"
        http = (
            f"; HTTP on http://{self.host}:{self.http_port}/drpc/<function>/<args>"
            if self.http_port is not None
            else ""
        )
        return (
            f"DRPC server serving {functions}; execute (Thrift) on {self.host}:{self.port}, "
            f"invocations (Thrift) on {self.host}:{self.invocations_port}{http}; "
            f"request timeout {self.timeout:g} s"
        )

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        failed = self.service.shutdown()
        if failed:
            log.info("failed %d outstanding request(s) with SERVER_SHUTDOWN", failed)
        await self._close_listeners()
        loop = asyncio.get_running_loop()
        for function, (_, runtime) in list(self._runtimes.items()):
            self.service.unregister_embedded(function)
            try:
                await loop.run_in_executor(None, runtime.stop)
            except Exception:
                log.exception("stopping the runtime of %r failed", function)
        log.info("DRPC server stopped")

    async def _close_listeners(self) -> None:
        await self._execute_listener.close(self.shutdown_grace)
        await self._invocations_listener.close(self.shutdown_grace)
        if self._http_runner is not None:
            await self._http_runner.cleanup()
            self._http_runner = None

    async def __aenter__(self) -> DRPCServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
