"""The DRPC HTTP front end (aiohttp), Storm's REST mapping.

Contract:

- ``GET /drpc/{function}/{args}`` (args percent-decoded; slashes allowed),
  ``GET /drpc/{function}`` (args ""), ``POST /drpc/{function}`` (body = args,
  UTF-8) answer 200 with the raw result as ``text/plain``;
- a failed call answers JSON ``{"error": TYPE_NAME, "errorMessage": msg}``
  with FAILED_REQUEST → 400, SERVER_SHUTDOWN → 503, SERVER_TIMEOUT → 504,
  any other type → 500; a refused identity → 401 with
  ``"error": "AuthorizationException"``;
- a body over ``max_body_size`` bytes is refused with 413 (aiohttp's limit);
  a body that is not UTF-8 gets 400;
- ``GET /health`` answers 200 JSON ``{"status": "ok", "functions": [...],
  "outstanding": n}`` while serving, 503 with ``"status": "shutting down"``
  after shutdown began.
"""

from __future__ import annotations

from aiohttp import web

from drpc.errors import AuthorizationException, DRPCExceptionType, DRPCExecutionException
from drpc.wire import MAX_FRAME_SIZE
from server.service import EXECUTE, DRPCService

HTTP_STATUS = {
    DRPCExceptionType.FAILED_REQUEST: 400,
    DRPCExceptionType.SERVER_SHUTDOWN: 503,
    DRPCExceptionType.SERVER_TIMEOUT: 504,
}
"""HTTP status of each failure type; any other type answers 500."""

_SERVICE = web.AppKey("drpc_service", DRPCService)


def create_http_app(
    service: DRPCService, *, max_body_size: int = MAX_FRAME_SIZE
) -> web.Application:
    app = web.Application(client_max_size=max_body_size)
    app[_SERVICE] = service
    app.router.add_get("/drpc/{function}", _execute_get)
    app.router.add_get("/drpc/{function}/{args:.*}", _execute_get)
    app.router.add_post("/drpc/{function}", _execute_post)
    app.router.add_get("/health", _health)
    return app


async def _execute_get(request: web.Request) -> web.Response:
    return await _execute(request, request.match_info.get("args", ""))


async def _execute_post(request: web.Request) -> web.Response:
    body = await request.read()
    try:
        args = body.decode("utf-8")
    except UnicodeDecodeError:
        return _error(400, "FAILED_REQUEST", "the request body is not UTF-8")
    return await _execute(request, args)


async def _execute(request: web.Request, args: str) -> web.Response:
    service = request.app[_SERVICE]
    function = request.match_info["function"]
    try:
        service.authorize(None, EXECUTE, function)
        result = await service.execute(function, args)
    except DRPCExecutionException as error:
        return _error(HTTP_STATUS.get(error.type, 500), error.type.name, error.msg)
    except AuthorizationException as error:
        return _error(401, "AuthorizationException", error.msg)
    return web.Response(text=result, content_type="text/plain", charset="utf-8")


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": kind, "errorMessage": message}, status=status)


async def _health(request: web.Request) -> web.Response:
    service = request.app[_SERVICE]
    if service.closed:
        return web.json_response({"status": "shutting down"}, status=503)
    return web.json_response(
        {
            "status": "ok",
            "functions": service.served_functions(),
            "outstanding": service.outstanding(),
        }
    )
