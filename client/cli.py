"""``drpc-client FUNCTION ARGS [ARGS ...]``: call a DRPC function from the shell.

Prints one line per argument, ``FUNCTION "ARGS" => "RESULT"`` (Storm's
drpc-client format). A failed call prints ``FUNCTION "ARGS" failed: TYPE: msg``
to stderr; the exit status is 0 when every call succeeded, 1 when a call
failed, 2 for usage errors, 3 when no server could be reached. ``--http URL``
calls the HTTP port instead, with the bearer token of ``--token-file`` or of
the ``DRPC_TOKEN`` environment variable (never a command-line argument, which
other local users can read); ``--tls-ca/--tls-cert/--tls-key`` speak TLS.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from client.errors import (
    AuthorizationException,
    DRPCConnectionError,
    DRPCExecutionException,
    DRPCTimeoutError,
    ProtocolError,
)
from client.http import HTTPDRPCClient
from client.sync import DEFAULT_PORT, DRPCClient
from drpc.errors import DRPCError
from drpc.tls import TLSSettings

TOKEN_ENVIRONMENT = "DRPC_TOKEN"


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
    parser.add_argument(
        "--http",
        metavar="URL",
        help="call the HTTP port at this URL (http(s)://host:3774) instead of Thrift",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"bearer token for --http, read from FILE (default: ${TOKEN_ENVIRONMENT} if set)",
    )
    add_tls_arguments(parser)
    return parser


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls-ca/--tls-cert/--tls-key``, shared with the remote runner."""
    parser.add_argument("--tls-ca", metavar="FILE", help="CA that signed the server's certificate")
    parser.add_argument(
        "--tls-cert", metavar="FILE", help="client certificate to present (its CN is the user)"
    )
    parser.add_argument("--tls-key", metavar="FILE", help="the client certificate's key")


def tls_from_args(args: argparse.Namespace, force: bool = False) -> TLSSettings | None:
    if not (force or args.tls_ca or args.tls_cert):
        return None
    return TLSSettings(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key)


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        return Path(args.token_file).read_text(encoding="utf-8").strip()
    return os.environ.get(TOKEN_ENVIRONMENT) or None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    status = 0
    try:
        client: DRPCClient | HTTPDRPCClient
        if args.http:
            https = args.http.startswith("https:")
            client = HTTPDRPCClient(
                args.http,
                token=_token(args),
                tls=tls_from_args(args, force=https),
                timeout=args.timeout,
            )
        else:
            if args.token_file:
                raise ValueError("a bearer token travels over HTTP only: add --http URL")
            client = DRPCClient(servers=args.servers, timeout=args.timeout, tls=tls_from_args(args))
        with client:
            for argument in args.args:
                try:
                    result = client.execute(args.function, argument)
                except DRPCExecutionException as error:
                    print(
                        f'{args.function} "{argument}" failed: {error.type.name}: {error.msg}',
                        file=sys.stderr,
                    )
                    status = 1
                except (AuthorizationException, DRPCTimeoutError, ProtocolError) as error:
                    print(f'{args.function} "{argument}" failed: {error}', file=sys.stderr)
                    status = 1
                else:
                    print(f'{args.function} "{argument}" => "{result}"', flush=True)
    except DRPCConnectionError as error:
        print(f"drpc-client: {error}", file=sys.stderr)
        return 3
    except (ValueError, OSError, DRPCError) as error:
        print(f"drpc-client: {error}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    raise SystemExit(main())
