"""Storm's Nimbus commands over HTTP for the plain topologies a server or a runner runs: kill,
activate, deactivate (``drpc-topology kill|activate|deactivate --server URL``).

Contract. ``add_topology_routes(app, cluster, identify, authorize)`` adds:

- ``POST /api/topologies/{name}/kill[?wait_secs=S]``: the topology's spouts stop, it runs
  ``S`` more seconds for its trees in flight, then stops (``LocalCluster.kill_topology``;
  ``S`` absent: its ``topology.message.timeout.secs``, as Storm's ``storm kill``). The
  answer comes once it stopped: 200 ``{"topology": name, "killed": true, "wait_secs": S}``.
- ``POST /api/topologies/{name}/activate`` and ``.../deactivate``: 200
  ``{"topology": name, "active": true|false}``.

Who may: ``authorize(identity, operation, name)`` decides (``DRPCService.authorize_admin``
on a server), with the caller named as for calls (its bearer token's user, else its client
certificate's CN, else anonymous): the users under ``nimbus.admins`` in the ``--acl``
file; nobody on a server or runner without an ACL. A refusal is
401 ``{"error": "AuthorizationException", ...}``, audited on ``drpc.audit`` like every
decision (an allowed one at INFO). A topology the server does not run is 404
``NotAliveError``; a ``wait_secs`` that is not a number >= 0 is 400 ``FAILED_REQUEST``.
The commands run in a worker thread: a kill that waits never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from drpc.server.service import ACTIVATE, DEACTIVATE, KILL_TOPOLOGY

from drpc.errors import AuthorizationException, NameTooLongError, NotAliveError

if TYPE_CHECKING:
    from drpc.topologies import LocalCluster

log = logging.getLogger(__name__)

OPERATIONS = {"kill": KILL_TOPOLOGY, "activate": ACTIVATE, "deactivate": DEACTIVATE}
"""The path's last part -> Storm's name of the operation (what the ACL decides)."""


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": kind, "errorMessage": message}, status=status)


def _wait_secs(request: web.Request) -> float | None:
    """The kill's ``wait_secs`` (None: the topology's message timeout)."""
    text = request.query.get("wait_secs")
    if text is None:
        return None
    try:
        wait = float(text)
    except ValueError:
        wait = math.nan
    if not (math.isfinite(wait) and wait >= 0):
        raise ValueError(f"wait_secs must be a number of seconds >= 0, got {text!r}")
    return wait


def add_topology_routes(
    app: web.Application,
    cluster: Callable[[], LocalCluster | None],
    identify: Callable[[web.Request], str | None],
    authorize: Callable[[str | None, str, str], None],
) -> None:
    """Add the routes of the module doc; ``cluster()`` is the plain topologies (None: it
    runs none), ``identify(request)`` the caller (raises ``AuthorizationException`` for an
    unknown token), ``authorize`` the decision."""

    async def command(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        action = request.match_info["action"]
        operation = OPERATIONS.get(action)
        if operation is None:
            return _error(404, "FAILED_REQUEST", f"no topology command {action!r}")
        try:
            wait = _wait_secs(request) if action == "kill" else None
        except ValueError as error:
            return _error(400, "FAILED_REQUEST", str(error))
        try:
            authorize(identify(request), operation, name)
        except AuthorizationException as error:
            return _error(401, "AuthorizationException", error.msg)
        except NameTooLongError as error:
            return _error(400, error.type.name, error.msg)
        plain = cluster()
        if plain is None:
            return _error(404, "NotAliveError", f"no topology named {name!r} is running")
        loop = asyncio.get_running_loop()
        try:
            if action == "kill":
                waited = await loop.run_in_executor(None, plain.kill_topology, name, wait)
                log.warning("topology %r killed over HTTP from %s", name, request.remote)
                body: dict[str, object] = {"topology": name, "killed": True, "wait_secs": waited}
            else:
                run = plain.activate if action == "activate" else plain.deactivate
                await loop.run_in_executor(None, run, name)
                log.info("topology %r: %s over HTTP from %s", name, action, request.remote)
                body = {"topology": name, "active": action == "activate"}
        except NotAliveError as error:
            return _error(404, "NotAliveError", str(error))
        return web.json_response(body)

    app.router.add_post("/api/topologies/{name}/{action}", command)
