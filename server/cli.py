"""``drpc-server`` (also ``python -m server``): serve DRPC functions until interrupted.

``drpc-server --topology drpc.examples.reach:topology [--topology ...]
[--executor spark|local] [--master local[*]] [--port 3772 --invocations-port
3773 --http-port 3774] [--timeout 600]`` hosts each topology in-process and
listens for Thrift and HTTP callers; with no ``--topology`` it serves only
remote runners (``python -m drpc.runner``). It logs what it serves and where,
and on SIGINT/SIGTERM fails outstanding calls with SERVER_SHUTDOWN and exits 0.
Exit status 2 for bad arguments (an unloadable topology included), 1 when a
port cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence

from drpc.hosting import add_hosting_arguments, hosting_setup
from drpc.requests import DEFAULT_REQUEST_TIMEOUT
from drpc.wire import MAX_FRAME_SIZE
from server.app import (
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_INVOCATIONS_PORT,
    DEFAULT_PORT,
    DRPCServer,
)
from server.service import DEFAULT_RUNNER_LIVENESS

log = logging.getLogger("drpc-server")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
        "--max-frame-size",
        type=int,
        default=MAX_FRAME_SIZE,
        help="largest Thrift frame and HTTP body in bytes (default %(default)s)",
    )
    parser.add_argument(
        "--runner-liveness",
        type=float,
        default=DEFAULT_RUNNER_LIVENESS,
        help="seconds a remote runner's last fetch keeps its function served (default %(default)g)",
    )
    parser.add_argument(
        "--wait-for-unserved",
        action="store_true",
        help="queue calls to functions nobody serves until they time out (Storm's behaviour) "
        "instead of failing them at once",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    topologies, executor_options = hosting_setup(parser, args)
    server = DRPCServer(
        host=args.host,
        port=args.port,
        invocations_port=args.invocations_port,
        http_port=None if args.http_port < 0 else args.http_port,
        timeout=args.timeout,
        max_frame_size=args.max_frame_size,
        runner_liveness=args.runner_liveness,
        wait_for_unserved=args.wait_for_unserved,
        executor=args.executor,
    )
    try:
        for topology in topologies:
            server.register(topology, **executor_options)
        return asyncio.run(_serve(server))
    except OSError as error:
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
