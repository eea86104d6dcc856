"""``drpc-client FUNCTION ARGS [ARGS ...]``: call a DRPC function from the shell.

Prints one line per argument, ``FUNCTION "ARGS" => "RESULT"`` (Storm's
drpc-client format). A failed call prints ``FUNCTION "ARGS" failed: TYPE: msg``
to stderr; the exit status is 0 when every call succeeded, 1 when a call
failed, 2 for usage errors, 3 when no server could be reached.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from client.errors import (
    AuthorizationException,
    DRPCConnectionError,
    DRPCExecutionException,
    DRPCTimeoutError,
)
from client.sync import DEFAULT_PORT, DRPCClient


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drpc-client",
        description="Call a DRPC function on a drpc (or Storm) DRPC server and print the result.",
    )
    parser.add_argument("function", metavar="FUNCTION", help="the DRPC function to call")
    parser.add_argument(
        "args", metavar="ARGS", nargs="+", help="the argument string; several make several calls"
    )
    parser.add_argument(
        "--servers",
        default=f"localhost:{DEFAULT_PORT}",
        help="execute port(s) to call, host:port[,host:port...] with failover "
        f"(default localhost:{DEFAULT_PORT})",
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per call (default: no client limit)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    status = 0
    try:
        with DRPCClient(servers=args.servers, timeout=args.timeout) as client:
            for argument in args.args:
                try:
                    result = client.execute(args.function, argument)
                except DRPCExecutionException as error:
                    print(
                        f'{args.function} "{argument}" failed: {error.type.name}: {error.msg}',
                        file=sys.stderr,
                    )
                    status = 1
                except (AuthorizationException, DRPCTimeoutError) as error:
                    print(f'{args.function} "{argument}" failed: {error}', file=sys.stderr)
                    status = 1
                else:
                    print(f'{args.function} "{argument}" => "{result}"', flush=True)
    except DRPCConnectionError as error:
        print(f"drpc-client: {error}", file=sys.stderr)
        return 3
    except ValueError as error:
        print(f"drpc-client: {error}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    raise SystemExit(main())
