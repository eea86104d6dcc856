"""The DRPC HTTP front end (aiohttp), Storm's REST mapping.

Contract:

- ``GET /drpc/{function}/{args}`` (args percent-decoded; slashes allowed),
  ``GET /drpc/{function}`` (args ""), ``POST /drpc/{function}`` (body = args,
  UTF-8) answer 200 with the raw result as ``text/plain``;
- with ``?trace=1`` (or true/yes/on) the answer is JSON instead of text:
  ``{"result": ..., "request_id": "12", "function": ..., "total_ms": ...,
  "trace": [{"step": "queue", "ms": ...}, {"step": "bolt0", "ms": ...,
  "start_ms": ..., "end_ms": ..., "busy_ms": ..., "spark_job_id": ...}, ...,
  {"step": "return", "ms": ...}]}``, the entries' ``ms`` summing to
  ``total_ms`` (``drpc.requests.RequestTrace.timeline``); a traced call that
  fails adds the same fields (and ``failed_in``: step and reason) to its error
  body;
- a failed call answers JSON ``{"error": TYPE_NAME, "errorMessage": msg}``
  with FAILED_REQUEST → 400, SERVER_SHUTDOWN → 503, SERVER_TIMEOUT → 504,
  any other type → 500; a refused identity, a malformed ``Authorization``
  header or an unknown bearer token → 401 with
  ``"error": "AuthorizationException"``; a call refused by a server limit
  (``ServerBusyError``) → 503 with ``Retry-After: limits.retry_after``;
- the caller is the user of its bearer token (``tokens``), else the CN of
  its verified TLS client certificate, else anonymous (``drpc.server.identity``);
- ``credentials`` (``drpc.server.identity.CREDENTIALS``) is what every request,
  the operations endpoints below included, must present: ``"certificate"``
  or ``"certificate-or-token"``; a request without it gets 401
  ``AuthorizationException`` "this server requires a client certificate" (or
  "... or a bearer token"). Served over a TLS context that asks for client
  certificates without requiring them, this replaces a failed handshake (which
  a client sees as a closed connection) with an answer saying what is missing;
- a body over ``limits.max_body_size`` bytes is refused with 413 (aiohttp's
  limit), a body that does not arrive within ``limits.read_timeout`` seconds
  gets 408, a connection whose first request has not arrived whole within
  ``read_timeout`` (checked every half of it) is closed by ``RequestDeadline``
  (later requests on a kept-alive connection are bounded by aiohttp's
  keep-alive timeout, set to ``read_timeout`` too); a body or path that is
  not UTF-8 gets 400; a function name over ``limits.max_function_name``
  UTF-8 bytes gets 400 before the caller is identified, authorized or logged;
- a connection with reply bytes unsent for ``limits.write_timeout`` seconds
  (a client that does not read) is closed by ``RequestDeadline``;
- a call is held to its caller's quota (the user, else the client address:
  ``drpc.server.identity.caller_of``); a call whose client disconnects is
  cancelled (the server runs with aiohttp's handler cancellation), which
  withdraws its request if no runtime fetched it yet;
- ``GET /health`` answers 200 JSON ``{"status": "ok", "functions": [...],
  "functions_total": n, "outstanding": n}`` while serving (at most
  ``limits.max_listed_functions`` names), 503 with ``"status": "shutting
  down"`` after shutdown began;
- with ``metrics`` (``drpc.server.metrics.ServerMetrics``), ``GET /metrics``
  answers the Prometheus text format (requests by function and outcome,
  latencies, queues, jobs, transactional progress, the versions of the open
  state directories: see that module), rendered
  in a worker thread, one rendering at a time shared by the scrapes that
  arrive meanwhile, so a large one never stalls the event loop;
- with ``dashboard`` (``drpc.server.dashboard.Dashboard``), ``GET /`` is a live
  page of the server (functions, in-flight requests, recent failures,
  transactional topologies), ``GET /api/status`` the JSON it polls and
  ``GET /ui/{file}`` its script and style sheet. These operations endpoints,
  like ``/health``, need no token: they show function names, counts, request
  ids, failure messages and state directory paths, never call arguments or
  results; keep the HTTP
  port on a trusted network if failure messages are sensitive;
- with ``topologies`` (the server's plain topologies), ``POST
  /api/topologies/{name}/kill|activate|deactivate``: Storm's commands, for the users
  the ACL lists under ``nimbus.admins`` only (``drpc.server.topology_admin``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from drpc.server.dashboard import Dashboard, add_routes
from drpc.server.identity import TokenTable, bearer_user, caller_of, check_credentials
from drpc.server.limits import Limits
from drpc.server.metrics import ServerMetrics
from drpc.server.refusals import RefusalLog
from drpc.server.service import EXECUTE, DRPCService
from drpc.server.topology_admin import add_topology_routes
from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE

from drpc.errors import (
    AuthorizationException,
    DRPCExceptionType,
    DRPCExecutionException,
    NameTooLongError,
    ServerBusyError,
)
from drpc.protocol.tls import common_name
from drpc.requests import RequestTrace

if TYPE_CHECKING:
    from drpc.topologies import LocalCluster

TRACE_ON = ("1", "true", "yes", "on")
"""Values of the ``trace`` query parameter that ask for a traced answer."""

HTTP_STATUS = {
    DRPCExceptionType.FAILED_REQUEST: 400,
    DRPCExceptionType.SERVER_SHUTDOWN: 503,
    DRPCExceptionType.SERVER_TIMEOUT: 504,
}
"""HTTP status of each failure type; any other type answers 500."""

log = logging.getLogger(__name__)
audit = logging.getLogger("drpc.audit")

Middleware = Callable[
    [web.Request, Callable[[web.Request], Awaitable[web.StreamResponse]]],
    Awaitable[web.StreamResponse],
]

_SERVICE = web.AppKey("drpc_service", DRPCService)
_TOKENS = web.AppKey("drpc_tokens", TokenTable)
_LIMITS = web.AppKey("drpc_limits", Limits)


class RequestDeadline:
    """Closes HTTP connections whose first request does not arrive whole in time
    (``timeout``), and connections that leave reply bytes unsent for ``write_timeout``.

    ``middleware`` marks a connection once a request of it reaches a handler;
    ``run(server)`` sweeps ``drpc.server.connections`` every half of the shorter
    deadline."""

    def __init__(
        self,
        timeout: float,
        write_timeout: float | None = None,
        refusals: RefusalLog | None = None,
    ) -> None:
        self.timeout = timeout
        self.write_timeout = timeout if write_timeout is None else write_timeout
        self.refusals = refusals or RefusalLog(Limits().refusal_logs_per_second)
        self.closed = 0
        self.write_timeouts = 0
        self._first_seen: dict[asyncio.BaseTransport, float] = {}
        self._unsent_since: dict[asyncio.BaseTransport, float] = {}
        self._requested: set[asyncio.BaseTransport] = set()

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.transport is not None:
            self._requested.add(request.transport)
        return await handler(request)

    async def run(self, server: web.Server) -> None:
        while True:
            await asyncio.sleep(min(self.timeout, self.write_timeout) / 2)
            self.sweep([handler.transport for handler in server.connections], time.monotonic())

    def sweep(self, transports: Iterable[asyncio.BaseTransport | None], now: float) -> None:
        first_seen: dict[asyncio.BaseTransport, float] = {}
        live = {transport for transport in transports if transport is not None}
        self._sweep_unsent(live, now)
        self._requested &= live
        for transport in live - self._requested:
            if not _overdue(self._first_seen, first_seen, transport, now, self.timeout):
                continue
            self.closed += 1
            self.refusals.refuse(
                "HTTP: closing connection from %s: no whole request within %g s",
                transport.get_extra_info("peername"),
                self.timeout,
            )
            transport.close()
        self._first_seen = first_seen

    def _sweep_unsent(self, live: set[asyncio.BaseTransport], now: float) -> None:
        unsent_since: dict[asyncio.BaseTransport, float] = {}
        for transport in live:
            if not isinstance(transport, asyncio.WriteTransport) or transport.is_closing():
                continue
            unsent = transport.get_write_buffer_size()
            if not unsent or not _overdue(
                self._unsent_since, unsent_since, transport, now, self.write_timeout
            ):
                continue
            self.write_timeouts += 1
            self.refusals.refuse(
                "HTTP: closing connection from %s: %d reply bytes not taken within %g s "
                "(write_timeout)",
                transport.get_extra_info("peername"),
                unsent,
                self.write_timeout,
            )
            transport.abort()
        self._unsent_since = unsent_since


def _overdue(
    seen: dict[asyncio.BaseTransport, float],
    kept: dict[asyncio.BaseTransport, float],
    transport: asyncio.BaseTransport,
    now: float,
    limit: float,
) -> bool:
    """Whether ``transport``, in its state since ``seen[transport]`` (or now, if first seen),
    has been so for ``limit`` seconds; if not, it is carried over into ``kept``."""
    since = seen.get(transport, now)
    if now - since < limit:
        kept[transport] = since
        return False
    return True


def create_http_app(
    service: DRPCService,
    *,
    limits: Limits | None = None,
    tokens: TokenTable | None = None,
    deadline: RequestDeadline | None = None,
    metrics: ServerMetrics | None = None,
    dashboard: Dashboard | None = None,
    credentials: str | None = None,
    topologies: Callable[[], LocalCluster | None] | None = None,
) -> web.Application:
    limits = limits or service.limits
    middlewares = [deadline.middleware] if deadline is not None else []
    if credentials is not None:
        middlewares.append(_credentials_middleware(credentials))
    app = web.Application(client_max_size=limits.max_body_size, middlewares=middlewares)
    app[_SERVICE] = service
    app[_LIMITS] = limits
    if tokens is not None:
        app[_TOKENS] = tokens
    app.router.add_get("/drpc/{function}", _execute_get)
    app.router.add_get("/drpc/{function}/{args:.*}", _execute_get)
    app.router.add_post("/drpc/{function}", _execute_post)
    app.router.add_get("/health", _health)
    if metrics is not None:
        app.router.add_get("/metrics", _metrics_handler(metrics))
    if dashboard is not None:
        add_routes(app, dashboard, service)
    if topologies is not None:
        add_topology_routes(app, topologies, _identity, service.authorize_admin)
    return app


def _metrics_handler(
    metrics: ServerMetrics,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    rendering: asyncio.Future[bytes] | None = None

    async def handler(request: web.Request) -> web.Response:
        nonlocal rendering
        if rendering is None:
            loop = asyncio.get_running_loop()
            rendering = loop.run_in_executor(None, metrics.exposition)
            rendering.add_done_callback(lambda _: _forget())
        body = await asyncio.shield(rendering)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    def _forget() -> None:
        nonlocal rendering
        rendering = None

    return handler


async def _execute_get(request: web.Request) -> web.Response:
    return await _execute(request, request.match_info.get("args", ""))


async def _execute_post(request: web.Request) -> web.Response:
    timeout = request.app[_LIMITS].read_timeout
    try:
        async with asyncio.timeout(timeout):
            body = await request.read()
    except TimeoutError:
        return _error(
            408, "FAILED_REQUEST", f"the request body did not arrive within {timeout:g} s"
        )
    try:
        args = body.decode("utf-8")
    except UnicodeDecodeError:
        return _error(400, "FAILED_REQUEST", "the request body is not UTF-8")
    return await _execute(request, args)


def _credentials_middleware(required: str) -> Middleware:
    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        function = request.match_info.get("function")
        if function is not None and (refused := _name_refused(request, function)) is not None:
            return refused  # before anything looks at the name, credentials included
        try:
            check_credentials(
                required,
                bool(_peer_certificate(request)),
                request.headers.get("Authorization"),
                request.app.get(_TOKENS),
            )
        except AuthorizationException as error:
            return _refuse(request, error)
        return await handler(request)

    return middleware


def _peer_certificate(request: web.Request) -> dict[str, Any] | None:
    """The client certificate the TLS handshake verified, if any."""
    transport = request.transport
    return transport.get_extra_info("peercert") if transport else None


def _identity(request: web.Request) -> str | None:
    header = request.headers.get("Authorization")
    if header is not None:
        return bearer_user(header, request.app.get(_TOKENS))
    return common_name(_peer_certificate(request))


def _refuse(request: web.Request, error: AuthorizationException) -> web.Response:
    """401 for a caller refused before its call was authorized (counted and audited)."""
    function = request.match_info.get("function")
    if function is not None:
        request.app[_SERVICE].refused(function, error)
        audit.warning("denied %s of %r from %s: %s", EXECUTE, function, request.remote, error.msg)
    else:
        audit.warning("denied %s from %s: %s", request.path, request.remote, error.msg)
    return _error(401, "AuthorizationException", error.msg)


def _name_refused(request: web.Request, function: str) -> web.Response | None:
    """400 for a function name over ``max_function_name`` bytes (counted), else None."""
    service = request.app[_SERVICE]
    try:
        service.check_name(function)
    except NameTooLongError as error:
        service.refused(function, error)
        return _error(400, error.type.name, error.msg)
    return None


def _path_is_utf8(request: web.Request) -> bool:
    """Whether the percent-decoded path is UTF-8 (the URL parser leaves escapes of other
    bytes, such as %FF, undecoded instead of refusing them)."""
    try:
        urllib.parse.unquote_to_bytes(request.raw_path.partition("?")[0]).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def _execute(request: web.Request, args: str) -> web.Response:
    service = request.app[_SERVICE]
    function = request.match_info["function"]
    if not _path_is_utf8(request):
        return _error(400, "FAILED_REQUEST", "the request path is not UTF-8")
    if (refused := _name_refused(request, function)) is not None:
        return refused
    try:
        identity = _identity(request)
    except AuthorizationException as error:
        return _refuse(request, error)
    trace = RequestTrace(function) if _wants_trace(request) else None
    try:
        service.authorize(identity, EXECUTE, function)
        caller = caller_of(identity, request.remote or "")
        result = await service.execute(function, args, trace=trace, caller=caller)
    except ServerBusyError as error:
        response = _error(503, error.type.name, error.msg)
        response.headers["Retry-After"] = str(request.app[_LIMITS].retry_after)
        return response
    except DRPCExecutionException as error:
        return _error(HTTP_STATUS.get(error.type, 500), error.type.name, error.msg, trace)
    except AuthorizationException as error:
        return _error(401, "AuthorizationException", error.msg)
    if trace is not None:
        return web.json_response({"result": result, **trace.as_json()})
    return web.Response(text=result, content_type="text/plain", charset="utf-8")


def _wants_trace(request: web.Request) -> bool:
    return bool(request.query_string) and request.query.get("trace", "").lower() in TRACE_ON


def _error(status: int, kind: str, message: str, trace: RequestTrace | None = None) -> web.Response:
    body: dict[str, Any] = {"error": kind, "errorMessage": message}
    if trace is not None and trace.request_id is not None:
        body.update(trace.as_json())
    return web.json_response(body, status=status)


async def _health(request: web.Request) -> web.Response:
    service = request.app[_SERVICE]
    if service.closed:
        return web.json_response({"status": "shutting down"}, status=503)
    listed, total = service.served_summary()
    return web.json_response(
        {
            "status": "ok",
            "functions": listed,
            "functions_total": total,
            "outstanding": service.outstanding(),
        }
    )
