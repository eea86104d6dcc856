"""The runner's topology port: the plain topologies a ``drpc-runner`` hosts, reached as a
server's are (``drpc-topology list|kill|activate|deactivate --server URL``).

Contract. ``TopologyPort(cluster, host=..., port=..., authorizer=..., tokens=...)``;
``start()`` serves HTTP on an event loop in a thread of its own and returns once it
listens (``url`` then names it, with the port bound when ``port`` was 0); ``stop()``
ends it. It answers:

- ``GET /api/status``: ``{"topologies": [...]}``, each plain topology's figures in the
  shape of a server's ``/api/status`` (what ``drpc-topology list`` reads);
- ``GET /metrics``: the ``drpc_topology_*`` metrics of a server's ``/metrics`` (Storm
  UI's emitted, acked, failed and complete latency of each component);
- ``GET /health``: 200 ``{"status": "ok", "topologies": [names]}``;
- ``POST /api/topologies/{name}/kill|activate|deactivate``: as on a server
  (``drpc.server.topology_admin``), for the users the ``authorizer`` (Storm's ACL,
  ``--acl``) lists under ``nimbus.admins``, each named by its bearer token (``tokens``);
  with no ACL, for no one.

``cluster()`` is the runner's ``LocalCluster`` (None while it runs no plain topology).
The port serves no DRPC call (those reach the runner through the servers) and has no
TLS: it listens on loopback unless told otherwise, and warns when a bearer token would
cross a network in the clear.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from drpc.server.identity import TokenTable, bearer_user
from drpc.server.metrics import PlainTopologyCollector
from drpc.server.service import Authorizer, authorize_admin
from drpc.server.topology_admin import add_topology_routes

if TYPE_CHECKING:
    from drpc.topologies import LocalCluster, TopologyInfo

log = logging.getLogger(__name__)

DEFAULT_HOST: Final = "127.0.0.1"
"""Where the topology port listens unless told otherwise: this host only."""
START_TIMEOUT: Final = 30.0
"""Seconds ``start`` waits for the port to listen."""
_LOOPBACK: Final = ("127.", "::1", "localhost")


class TopologyPort:
    """The HTTP port of the module doc."""

    def __init__(
        self,
        cluster: Callable[[], LocalCluster | None],
        *,
        host: str = DEFAULT_HOST,
        port: int = 0,
        authorizer: Authorizer | None = None,
        tokens: TokenTable | None = None,
    ) -> None:
        """
        :param host: the address to listen on (default ``DEFAULT_HOST``, loopback).
        :param port: the port (default 0: any free one, read from ``url``).
        :param authorizer: who may kill, activate and deactivate (default None: no one).
        :param tokens: the bearer tokens that name callers (default None: every caller is
            anonymous, so only an ACL naming anonymous an admin lets a command through).
        """
        self._cluster = cluster
        self.host = host
        self.port = port
        self._tokens = tokens
        self._authorize = partial(authorize_admin, authorizer, process="runner")
        self._registry = CollectorRegistry(auto_describe=True)
        self._registry.register(PlainTopologyCollector(self._infos))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        if tokens is not None and not host.startswith(_LOOPBACK):
            log.warning(
                "the topology port listens on %s without TLS: bearer tokens cross the "
                "network in the clear; keep it on a trusted network",
                host,
            )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        started: Future[None] = Future()
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._main(started),), name="drpc-topology-port", daemon=True
        )
        self._thread.start()
        started.result(START_TIMEOUT)
        log.info("topology commands and figures at %s", self.url)

    def stop(self) -> None:
        loop, stopped, thread = self._loop, self._stopped, self._thread
        if loop is None or stopped is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(stopped.set)
        thread.join(START_TIMEOUT)
        self._loop = self._stopped = self._thread = None

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/api/status", self._status)
        app.router.add_get("/metrics", self._metrics)
        add_topology_routes(app, self._cluster, self._identify, self._authorize)
        return app

    async def _main(self, started: Future[None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        runner = web.AppRunner(self._app(), access_log=None)
        try:
            await runner.setup()
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
        except BaseException as error:
            await runner.cleanup()
            started.set_exception(error)
            return
        if self.port == 0:
            self.port = runner.addresses[0][1]
        started.set_result(None)
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()

    def _infos(self) -> dict[str, TopologyInfo]:
        cluster = self._cluster()
        return {} if cluster is None else cluster.infos()

    def _identify(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization")
        return None if header is None else bearer_user(header, self._tokens)

    async def _health(self, request: web.Request) -> web.Response:
        cluster = self._cluster()
        names = [] if cluster is None else cluster.get_topology_names()
        return web.json_response({"status": "ok", "topologies": names})

    async def _status(self, request: web.Request) -> web.Response:
        infos = await asyncio.get_running_loop().run_in_executor(None, self._infos)
        shown = [infos[name].as_dict() for name in sorted(infos)]
        return web.json_response({"topologies": shown})

    async def _metrics(self, request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(None, generate_latest, self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def __enter__(self) -> TopologyPort:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
