"""``DRPCServer``: the Thrift and HTTP listeners, the request table, and hosted runtimes.

Contract. ``async with DRPCServer(...) as server`` (or ``await start()`` /
``await stop()``) serves, on one asyncio event loop:

- ``DistributedRPC`` (Thrift, framed binary) on ``port`` (3772),
- ``DistributedRPCInvocations`` on ``invocations_port`` (3773),
- HTTP on ``http_port`` (3774; None disables it), with ``/metrics``
  (``self.metrics``) and the live dashboard at ``/`` (``self.dashboard``);

port 0 picks a free port, readable after ``start()`` from the same attribute.
``register(topology, executor=...)`` hosts a DRPC topology in this process:
its runtime pulls requests straight from the request table (no sockets) with
the at-most-once contract remote runners get through the invocations port.
``register_plain(topology)`` runs a plain topology (``drpc.topologies``) beside them,
on the server's executor (``local`` or ``spark``), its components' figures on
``/metrics``.
``stop()`` stops accepting, fails every outstanding request with
SERVER_SHUTDOWN (callers get that reply), stops the hosted runtimes, and closes.

Limits and settings are keyword arguments; see ``DRPCServer.__init__`` and
``drpc.server.limits.Limits``. With ``ssl_context`` every port speaks TLS; with
``authorizer`` (e.g. ``drpc.server.acl.ACLAuthorizer``) every network operation is
authorized; ``tokens`` maps HTTP bearer tokens to users. ``host`` defaults to every
interface, as Storm's; a server started beyond loopback with neither an authorizer
nor TLS logs a warning saying so (``drpc.server.exposure``). Lines about refused
client input go through one rate-limited ``refusals`` log; while serving,
``trimmer`` (``drpc.server.trim``) gives memory that bursts freed back to the
operating system.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import replace
from typing import Any

from aiohttp import web
from drpc.server.dashboard import Dashboard
from drpc.server.exposure import exposure_warning
from drpc.server.handlers import execute_methods, invocations_methods, release_fetched
from drpc.server.http import RequestDeadline, create_http_app
from drpc.server.identity import CERTIFICATE_OR_TOKEN, CREDENTIALS, TokenTable
from drpc.server.limits import Limits
from drpc.server.metrics import ServerMetrics
from drpc.server.refusals import HTTPServerLog, RefusalLog
from drpc.server.service import (
    DEFAULT_RUNNER_LIVENESS,
    Authorizer,
    DRPCService,
    EmbeddedInvocations,
)
from drpc.server.thrift_listener import DEFAULT_MAX_CONNECTIONS, ThriftListener
from drpc.server.trim import MemoryTrimmer

from drpc import runtime
from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.compiled import engine_build
from drpc.errors import DRPCError, NameTooLongError
from drpc.hosting import Host, as_topology, as_transactional, default_executor
from drpc.model.topology import Topology
from drpc.requests import DEFAULT_REQUEST_TIMEOUT
from drpc.sparkconf import DEFAULT_START_TIMEOUT, session_options
from drpc.topologies import PLAIN_EXECUTORS, LocalCluster, TopologyInfo
from drpc.transactional.hosted import HostedTransactional

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
        max_frame_size: int | None = None,
        limits: Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        http_ssl_context: ssl.SSLContext | None = None,
        http_credentials: str | None = None,
        tokens: TokenTable | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        runner_liveness: float = DEFAULT_RUNNER_LIVENESS,
        wait_for_unserved: bool = False,
        startup_grace: float = 0.0,
        executor: str | None = None,
        conf: dict[str, Any] | None = None,
        master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        authorizer: Authorizer | None = None,
        shutdown_grace: float = 5.0,
        metrics: ServerMetrics | None = None,
        dashboard: Dashboard | None = None,
    ) -> None:
        """
        :param host: interface to listen on (default every interface, as Storm).
        :param port: ``DistributedRPC`` (execute) port, default 3772.
        :param invocations_port: ``DistributedRPCInvocations`` port, default 3773.
        :param http_port: HTTP port, default 3774; None serves no HTTP.
        :param timeout: seconds a request may wait for its result before it fails with
            SERVER_TIMEOUT, default 600 (Storm's ``drpc.request.timeout.secs``).
        :param max_frame_size: shortcut setting both ``limits.max_frame_size`` and
            ``limits.max_body_size`` (largest Thrift frame and HTTP body, default 1 MiB).
        :param limits: every resource limit (``drpc.server.limits.Limits``; its defaults when
            None).
        :param ssl_context: serve TLS on every port (``drpc.protocol.tls.server_context``); a
            verified client certificate's CN is the caller's user name.
        :param http_ssl_context: the HTTP port's own TLS context (default ``ssl_context``),
            e.g. one that asks for client certificates without requiring them
            (``server_context(..., require_client_cert=False)``) while the Thrift ports
            require them.
        :param http_credentials: what every HTTP request must present (None: nothing);
            ``"certificate"``: a verified client certificate, ``"certificate-or-token"``:
            one or a bearer token of ``tokens`` (``drpc.server.identity.check_credentials``).
            A request without them is answered 401 "this server requires a client
            certificate" (or "... or a bearer token").
        :param tokens: HTTP bearer tokens and their users; None accepts no token.
        :param max_connections: most open connections per Thrift port, default 4096.
        :param runner_liveness: seconds a remote runner's last ``fetchRequest`` keeps its
            function served, default 30.
        :param wait_for_unserved: queue calls to functions nobody serves until they time
            out (Storm's behaviour) instead of failing them at once, default False.
        :param startup_grace: seconds after the start during which a call to a function
            nobody serves waits for a runner to fetch it, so that the runners of a
            restarted server reconnect before calls are refused; default 0.
        :param executor: executor of registered topologies, default ``"spark"`` when the
            Spark executor is installed, else ``"local"``.
        :param conf: topology configuration for registered topologies, under each
            topology's own (e.g. ``topology.message.timeout.secs``, default 30: a tuple
            tree stuck longer fails its request with FAILED_REQUEST, as in Storm).
        :param master: Spark master of the runtimes on Spark (DRPC and transactional); default
            None: ``spark.master`` from spark-submit or spark-defaults.conf, else ``local[*]``.
        :param spark_conf: Spark settings of those runtimes, over spark-defaults.conf and
            drpc's defaults (``drpc.sparkconf``); default none.
        :param start_timeout: seconds for a Spark executor to register before starting a
            runtime fails with ``SparkStartError`` (default 120).
        :param authorizer: called before every network operation with (identity,
            operation, function); raises ``AuthorizationException`` to refuse.
        :param shutdown_grace: seconds ``stop()`` waits for replies and runtimes.
        :param metrics: the Prometheus metrics served at ``GET /metrics``; by default
            ``ServerMetrics`` with its function label bound at ``limits.max_functions``
            and label values cut at ``limits.max_label_length``.
        :param dashboard: the live page at ``GET /``; by default ``Dashboard`` tracking at
            most ``limits.max_outstanding`` requests (its other bounds are its defaults).
        """
        limits = limits or Limits()
        if max_frame_size is not None:
            limits = replace(limits, max_frame_size=max_frame_size, max_body_size=max_frame_size)
        self.limits = limits
        self.ssl_context = ssl_context
        self.http_ssl_context = http_ssl_context or ssl_context
        _check_http_credentials(http_credentials, self.http_ssl_context, tokens)
        self.http_credentials = http_credentials
        self.tokens = tokens
        self.authorizer = authorizer
        self.host = host
        self.port = port
        self.invocations_port = invocations_port
        self.http_port = http_port
        self.executor = executor or default_executor()
        self.shutdown_grace = shutdown_grace
        self._conf = dict(conf or {})
        self.spark_options = session_options(master, spark_conf, start_timeout)
        self.metrics = metrics or ServerMetrics(
            max_functions=limits.max_functions, max_label_length=limits.max_label_length
        )
        self.refusals = RefusalLog(limits.refusal_logs_per_second)
        """Where every line about refused client input goes, at most
        ``limits.refusal_logs_per_second`` a second (``drpc.server.refusals``)."""
        self.dashboard = dashboard or Dashboard(max_tracked=limits.max_outstanding)
        self.service = DRPCService(
            timeout=timeout,
            runner_liveness=runner_liveness,
            wait_for_unserved=wait_for_unserved,
            startup_grace=startup_grace,
            authorizer=authorizer,
            limits=limits,
            observers=(self.metrics, self.dashboard),
            refusals=self.refusals,
        )
        self.metrics.bind(self.service)
        listener_options: dict[str, Any] = {
            "limits": limits,
            "ssl_context": ssl_context,
            "max_connections": max_connections,
            "refusals": self.refusals,
        }
        self._execute_listener = ThriftListener(
            "DistributedRPC", execute_methods(self.service), **listener_options
        )
        self._invocations_listener = ThriftListener(
            "DistributedRPCInvocations",
            invocations_methods(self.service),
            on_close=release_fetched(self.service),
            holds=self.service.holds,
            **listener_options,
        )
        self._http_runner: web.AppRunner | None = None
        self._http_deadline: asyncio.Task[None] | None = None
        self.trimmer = MemoryTrimmer()
        """Returns what bursts of abusive (or just large) traffic freed to the OS
        (``drpc.server.trim``)."""
        self._trimming: asyncio.Task[None] | None = None
        self.transactional: dict[str, HostedTransactional] = {}
        self.dashboard.watch_transactional(self._hosted_status)
        self.metrics.watch_transactional(self._hosted_status)
        self.dashboard.watch_spark_ui(runtime.ui_url)
        self.observer = self.service.observer
        """The one event bus (``drpc.observe``): requests, and every hosted runtime's
        events, reach the metrics, the dashboard and traces; append observers to
        ``observer.observers``."""
        self._host = Host(
            EmbeddedInvocations(self.service),
            executor=self.executor,
            conf=self._conf,
            observer=self.observer,
            spark_options=self.spark_options,
        )
        self.plain: LocalCluster | None = None
        """The plain topologies this server runs (``register_plain``), made with the first."""
        self.metrics.watch_plain(self._plain_infos)
        self.dashboard.watch_plain(self._plain_infos)
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
        if self.stopped:
            raise DRPCError("the DRPC server is stopped")
        assert built.drpc_function is not None
        try:
            self.service.check_name(built.drpc_function)
        except NameTooLongError as error:
            raise DRPCError(
                f"cannot serve {built.drpc_function[:40]!r}...: {error.msg}; callers could "
                "not name it"
            ) from None
        runtime = self._host.register(built, executor, **executor_options)
        self.service.register_embedded(built.drpc_function)
        return runtime

    def register_plain(self, topology: Any, *, name: str | None = None) -> str:
        """Run a plain topology (``drpc.topologies``) in this process until the server
        stops, on the server's executor; returns the name it runs under (default its
        own). Blocks while it starts, as ``register`` does."""
        if self.stopped:
            raise DRPCError("the DRPC server is stopped")
        built = as_topology(topology)
        if self.plain is None:
            if self.executor not in PLAIN_EXECUTORS:
                raise DRPCError(
                    f"plain topologies run on the {' or '.join(PLAIN_EXECUTORS)} executor, "
                    f"not on this server's {self.executor!r}"
                )
            self.plain = LocalCluster(self.executor, **self.spark_options)
        name = name or built.name
        self.plain.submit_topology(name, self._conf, built)
        return name

    def _plain_infos(self) -> dict[str, TopologyInfo]:
        """Each plain topology's figures (none that stopped meanwhile)."""
        plain = self.plain
        return {} if plain is None else plain.infos()

    def _hosted_status(self) -> dict[str, dict[str, Any]]:
        """Each hosted transactional run's status, by topology."""
        return {name: hosted.status() for name, hosted in self.transactional.items()}

    def register_transactional(
        self,
        topology: Any,
        *,
        state_dir: str,
        executor: str | None = None,
        **options: Any,
    ) -> HostedTransactional:
        """Run a transactional topology in this process while the server serves
        (``drpc.transactional.hosted.HostedTransactional``; its ``options`` are keywords of
        it). It starts with ``start()`` (at once if the server already started), resumes
        after the last commit in ``state_dir``, and stops with the server."""
        if self.stopped:
            raise DRPCError("the DRPC server is stopped")
        topology = as_transactional(topology)
        topology_id = topology.transactional.id
        if topology_id in self.transactional:
            raise DRPCError(f"transactional topology {topology_id!r} is already registered")
        hosted = HostedTransactional(
            topology,
            state_dir=state_dir,
            executor=executor or self.executor,
            observer=self.observer,
            **{**self.spark_options, **options},
        )
        self.transactional[hosted.topology_id] = hosted
        if self.started:
            hosted.start()
        log.info(
            "registered transactional topology %r on the %s executor, state in %s",
            hosted.topology_id,
            hosted.runner.executor,
            state_dir,
        )
        return hosted

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
                deadline = RequestDeadline(
                    self.limits.read_timeout, self.limits.write_timeout, self.refusals
                )
                app = create_http_app(
                    self.service,
                    limits=self.limits,
                    tokens=self.tokens,
                    deadline=deadline,
                    metrics=self.metrics,
                    dashboard=self.dashboard,
                    credentials=self.http_credentials,
                    topologies=lambda: self.plain,
                )
                self._http_runner = web.AppRunner(
                    app,
                    access_log=None,
                    # An idle or half-sent request is closed after read_timeout (slowloris).
                    keepalive_timeout=self.limits.read_timeout,
                    lingering_time=self.limits.read_timeout,
                    max_line_size=self.limits.max_header_size,
                    max_field_size=self.limits.max_header_size,
                    # A call whose client went away is cancelled, which withdraws its request.
                    handler_cancellation=True,
                    logger=HTTPServerLog(self.refusals),
                )
                await self._http_runner.setup()
                site = web.TCPSite(
                    self._http_runner, self.host, self.http_port, ssl_context=self.http_ssl_context
                )
                await site.start()
                self.http_port = int(self._http_runner.addresses[0][1])
                assert self._http_runner.server is not None
                self._http_deadline = asyncio.create_task(deadline.run(self._http_runner.server))
        except BaseException:
            await self._close_listeners()
            raise
        self.started = True
        self._trimming = asyncio.create_task(self.trimmer.run())
        for hosted in self.transactional.values():
            hosted.start()
        log.info("%s", self.describe())
        exposed = exposure_warning(
            self.host, acl=self.authorizer is not None, tls=self.ssl_context is not None
        )
        if exposed is not None:
            log.warning("%s", exposed)
        return self

    def describe(self) -> str:
        functions = ", ".join(self.functions) or "none yet (waiting for remote runners)"
        scheme = "https" if self.http_ssl_context is not None else "http"
        base = f"{scheme}://{self.host}:{self.http_port}"
        http = (
            f"; HTTP on {base}/drpc/<function>/<args> (dashboard {base}/, metrics {base}/metrics)"
            if self.http_port is not None
            else ""
        )
        return (
            f"DRPC server serving {functions}; execute (Thrift) on {self.host}:{self.port}, "
            f"invocations (Thrift) on {self.host}:{self.invocations_port}{http}; "
            f"request timeout {self.timeout:g} s; {engine_build()} engine"
            + ("; TLS" if self.ssl_context is not None else "")
            + (f"; Spark UI {spark_ui}" if (spark_ui := self.dashboard.spark_ui()) else "")
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
        for topology_id, hosted in self.transactional.items():
            try:
                await loop.run_in_executor(None, hosted.stop)
            except Exception:
                log.exception("stopping transactional topology %r failed", topology_id)
        if self.plain is not None:
            await loop.run_in_executor(None, self.plain.shutdown)
        for function in self._host.functions:
            self.service.unregister_embedded(function)
        await loop.run_in_executor(None, self._host.stop)
        log.info("DRPC server stopped")

    async def _close_listeners(self) -> None:
        if self._trimming is not None:
            self._trimming.cancel()
            self._trimming = None
        await self._execute_listener.close(self.shutdown_grace)
        await self._invocations_listener.close(self.shutdown_grace)
        if self._http_deadline is not None:
            self._http_deadline.cancel()
            self._http_deadline = None
        if self._http_runner is not None:
            await self._http_runner.cleanup()
            self._http_runner = None

    async def __aenter__(self) -> DRPCServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _check_http_credentials(
    credentials: str | None, context: ssl.SSLContext | None, tokens: TokenTable | None
) -> None:
    """ValueError for ``http_credentials`` the HTTP port could never see presented."""
    if credentials is None:
        return
    if credentials not in CREDENTIALS:
        raise ValueError(
            f"http_credentials must be one of {CREDENTIALS} or None, got {credentials!r}"
        )
    if credentials == CERTIFICATE_OR_TOKEN and tokens is None:
        raise ValueError(f"http_credentials={credentials!r} needs tokens")
    if context is None or context.verify_mode == ssl.CERT_NONE:
        raise ValueError(
            f"http_credentials={credentials!r} needs an HTTP TLS context that asks for "
            "client certificates"
        )
