"""``drpc-server`` (also ``python -m drpc.server``): serve DRPC functions until interrupted.

``drpc-server --topology drpc.examples.reach:topology [--topology ...]
[--executor spark|local] [--master local[*]] [--port 3772 --invocations-port
3773 --http-port 3774] [--timeout 600]`` hosts each topology in-process (a plain
topology runs beside the DRPC functions: ``drpc.topologies``, its figures on
``/metrics``) and listens for Thrift and HTTP callers; with no ``--topology`` it serves only
remote runners (``python -m drpc.runner``). Security: ``--acl FILE``
(Storm's ACL, ``--acl-strict``), ``--tokens FILE`` (HTTP bearer tokens),
``--tls-cert/--tls-key`` (TLS on every port), ``--tls-ca`` (client
certificates required; an HTTP call without one is answered 401 saying so) and
``--http-token-auth`` (HTTP callers may present a bearer token instead). It
warns when it listens beyond loopback with neither ``--acl`` nor TLS. Every
limit of ``drpc.server.limits.Limits`` is a flag. ``--topology`` modules are
imported from the working directory first, as ``python -m`` does.
``--transactional MODULE:ATTR --state-dir DIR`` also runs transactional
topologies in the server process (``--max-spout-pending``, ``--map-size``,
``--max-map-size``), resuming after their last commit in DIR; hosted DRPC
functions can answer from that committed state.
It logs what it serves and where, and on SIGINT/SIGTERM fails outstanding
calls with SERVER_SHUTDOWN and exits 0. Exit status 2 for bad arguments (an
unloadable topology or a transactional one, an ACL, tokens or
certificate file included: one line on stderr), 1 when a port cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence
from typing import Any

from drpc.server.acl import ACLAuthorizer
from drpc.server.app import (
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_INVOCATIONS_PORT,
    DEFAULT_PORT,
    DRPCServer,
)
from drpc.server.identity import CERTIFICATE, CERTIFICATE_OR_TOKEN, TokenTable
from drpc.server.limits import add_limit_arguments, limits_from_args
from drpc.server.service import DEFAULT_RUNNER_LIVENESS
from drpc.server.thrift_listener import DEFAULT_MAX_CONNECTIONS

from drpc.commandline import CommandLineParser
from drpc.errors import DRPCError
from drpc.hosting import add_hosting_arguments, hosting_setup, job_options
from drpc.protocol.tls import server_context
from drpc.requests import DEFAULT_REQUEST_TIMEOUT
from drpc.transactional.cli import add_hosted_arguments, hosted_runs

log = logging.getLogger("drpc-server")


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="drpc-server",
        description="Serve DRPC functions over Storm-compatible Thrift and HTTP.",
    )
    add_hosting_arguments(parser, topology_required=False)
    parser.add_argument("--host", default=DEFAULT_HOST, help="interface (default %(default)s)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="execute port (default %(default)s)"
    )
    parser.add_argument(
        "--invocations-port",
        type=int,
        default=DEFAULT_INVOCATIONS_PORT,
        help="invocations port (default %(default)s)",
    )
    parser.add_argument(
        "--http-port",
        type=int,
        default=DEFAULT_HTTP_PORT,
        help="HTTP port (default %(default)s; -1 disables HTTP)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT,
        help="seconds a request may take before it fails with SERVER_TIMEOUT (default %(default)g)",
    )
    parser.add_argument(
        "--runner-liveness",
        type=float,
        default=DEFAULT_RUNNER_LIVENESS,
        help="seconds a remote runner's last fetch keeps its function served (default %(default)g)",
    )
    parser.add_argument(
        "--request-path",
        choices=("tasks", "driver"),
        default=None,
        help="with --executor spark: where the hosted functions' requests go; tasks (the "
        "default: this process feeds each resident task requests for its own whole copy of "
        "the topology), driver (the spouts, scaffolding and ackers stay here and every tuple "
        "crosses to the tasks)",
    )
    parser.add_argument(
        "--startup-grace",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="for this long after the start, a call to a function nobody serves waits for a "
        "runner to fetch it instead of failing at once: a restarted server's runners "
        "reconnect meanwhile (default 0)",
    )
    parser.add_argument(
        "--wait-for-unserved",
        action="store_true",
        help="queue calls to functions nobody serves until they time out (Storm's behaviour) "
        "instead of failing them at once",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="most open connections per Thrift port; at it, the oldest idle one is closed to "
        "make room, or, with none idle, the new one (default %(default)s)",
    )
    security = parser.add_argument_group("security")
    security.add_argument(
        "--acl",
        metavar="FILE",
        help="Storm-style ACL (YAML or JSON): per function, client.users may execute and "
        "invocation.user may fetchRequest/result/failRequest (default: everyone may do "
        "everything)",
    )
    security.add_argument(
        "--acl-strict",
        action="store_true",
        help="with --acl, functions with no ACL entry are closed to everyone",
    )
    security.add_argument(
        "--tokens",
        metavar="FILE",
        help="HTTP bearer tokens (YAML or JSON mapping each user to a token or a list)",
    )
    security.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this certificate")
    security.add_argument(
        "--tls-key", metavar="FILE", help="the certificate's private key (default: in --tls-cert)"
    )
    security.add_argument(
        "--tls-ca",
        metavar="FILE",
        help="require client certificates signed by this CA on every port; their subject CN "
        "is the user (an HTTP call without one is answered 401 'this server requires a client "
        "certificate')",
    )
    security.add_argument(
        "--http-token-auth",
        action="store_true",
        help="with --tls-ca and --tokens: an HTTP caller may present a bearer token instead "
        "of a client certificate (Thrift callers still need a certificate)",
    )
    add_hosted_arguments(parser, "server")
    add_limit_arguments(parser)
    return parser


def _security(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """The server's security keywords from the flags; bad files exit through ``parser.error``."""
    if (args.tls_key or args.tls_ca) and not args.tls_cert:
        parser.error("--tls-key and --tls-ca need --tls-cert")
    if args.acl_strict and not args.acl:
        parser.error("--acl-strict needs --acl")
    if args.http_token_auth and not (args.tls_ca and args.tokens):
        parser.error("--http-token-auth needs --tls-ca and --tokens")
    try:
        return {
            "authorizer": ACLAuthorizer(args.acl, strict=args.acl_strict or None)
            if args.acl
            else None,
            "tokens": TokenTable.from_file(args.tokens) if args.tokens else None,
            **_tls(args),
            "limits": limits_from_args(args),
        }
    except (DRPCError, ValueError) as error:
        parser.error(str(error))


def _tls(args: argparse.Namespace) -> dict[str, Any]:
    """The server's TLS keywords. With ``--tls-ca`` the HTTP port asks for a certificate
    without requiring one in the handshake and refuses a call without one itself, so the
    caller is told what is missing instead of seeing the connection close."""
    if not args.tls_cert:
        return {}
    if not args.tls_ca:
        return {"ssl_context": server_context(args.tls_cert, args.tls_key)}
    return {
        "ssl_context": server_context(args.tls_cert, args.tls_key, args.tls_ca),
        "http_ssl_context": server_context(
            args.tls_cert, args.tls_key, args.tls_ca, require_client_cert=False
        ),
        "http_credentials": CERTIFICATE_OR_TOKEN if args.http_token_auth else CERTIFICATE,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    topologies, executor_options = hosting_setup(parser, args)
    if args.request_path is not None:
        if args.executor != "spark":
            parser.error("--request-path applies to --executor spark only")
        executor_options["request_path"] = args.request_path
    security = _security(parser, args)
    hosted = hosted_runs(parser, args)
    try:
        server = DRPCServer(
            host=args.host,
            port=args.port,
            invocations_port=args.invocations_port,
            http_port=None if args.http_port < 0 else args.http_port,
            timeout=args.timeout,
            max_connections=args.max_connections,
            runner_liveness=args.runner_liveness,
            startup_grace=args.startup_grace,
            wait_for_unserved=args.wait_for_unserved,
            executor=args.executor,
            **security,
        )
    except ValueError as error:  # limits that contradict each other, a non-positive one
        parser.error(str(error))
    try:
        for topology in topologies:
            if topology.drpc_function is None:
                server.register_plain(topology)
            else:
                server.register(topology, **executor_options)
        for topology in hosted.topologies:
            server.register_transactional(
                topology, **hosted.options, **job_options(executor_options)
            )
        return asyncio.run(_serve(server))
    except (OSError, DRPCError) as error:  # a port in use, a state directory another run writes
        log.error("cannot serve: %s", error)
        return 1
    finally:
        if not server.stopped:
            asyncio.run(server.stop())


async def _serve(server: DRPCServer) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    await server.start()
    try:
        await stop.wait()
        log.info("shutting down")
    finally:
        await server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
