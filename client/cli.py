"""``drpc-client FUNCTION ARGS [ARGS ...]``: call a DRPC function from the shell.

Prints one line per argument, ``FUNCTION "ARGS" => "RESULT"`` (Storm's
drpc-client format). A failed call prints ``FUNCTION "ARGS" failed: TYPE: msg``
to stderr; the exit status is 0 when every call succeeded, 1 when a call
failed, 2 for usage errors, 3 when no server could be reached. ``--http URL``
calls the HTTP port instead, with the bearer token of ``--token-file`` or of
the ``DRPC_TOKEN`` environment variable (never a command-line argument, which
other local users can read); ``--tls-ca/--tls-cert/--tls-key`` speak TLS.

``--trace`` prints the server's timings of each call under its result line
(request id, total, then each step with its milliseconds and Spark job id).
Traces travel over HTTP only (Storm's Thrift ``execute`` returns a bare
string), so ``--trace`` without ``--http`` calls ``http(s)://HOST:3774`` of
the first ``--servers`` host (https when TLS options are given).
``--log-level`` (default WARNING) and ``--log-format text|json`` set up its
logging (``drpc.logs``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from drpc.client.calls import format_address, parse_servers
from drpc.client.errors import (
    AuthorizationException,
    DRPCConnectionError,
    DRPCExecutionException,
    DRPCTimeoutError,
    ProtocolError,
)
from drpc.client.http import HTTPDRPCClient, TracedResult
from drpc.client.sync import DEFAULT_PORT, DRPCClient

from drpc.commandline import (
    TOKEN_ENVIRONMENT,
    CommandLineParser,
    add_tls_arguments,
    token_from,
)
from drpc.errors import DRPCError
from drpc.logs import add_logging_arguments, configure_logging
from drpc.protocol.tls import tls_from_args

DEFAULT_HTTP_PORT = 3774


EXIT_CODES = """\
exit status:
  0  every call returned a result
  1  a call failed (the server's error is printed: FAILED_REQUEST, SERVER_TIMEOUT,
     AuthorizationException, ...)
  2  a usage error (a bad option, server address, URL or token file)
  3  no server could be reached"""


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="drpc-client",
        description="Call a DRPC function on a drpc (or Storm) DRPC server and print the result.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    parser.add_argument(
        "--trace",
        action="store_true",
        help="print the server's per-step timings of each call (over HTTP: --http URL, or "
        f"port {DEFAULT_HTTP_PORT} of the first --servers host)",
    )
    add_tls_arguments(parser)
    add_logging_arguments(parser, default_level="WARNING")
    return parser


def _trace_url(args: argparse.Namespace) -> str:
    """Where ``--trace`` calls: ``--http``, else the HTTP port of the first server."""
    if args.http:
        return str(args.http)
    host, _ = parse_servers(args.servers, DEFAULT_PORT)[0]
    scheme = "https" if args.tls_ca or args.tls_cert else "http"
    return f"{scheme}://{format_address((host, DEFAULT_HTTP_PORT))}"


def _token(args: argparse.Namespace) -> str | None:
    return token_from(args.token_file)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    status = 0
    try:
        client: DRPCClient | HTTPDRPCClient
        if args.http or args.trace:
            url = _trace_url(args)
            https = url.startswith("https:")
            client = HTTPDRPCClient(
                url,
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
                    if args.trace:
                        assert isinstance(client, HTTPDRPCClient)
                        traced = client.execute_traced(args.function, argument)
                        result = traced.result
                    else:
                        result = client.execute(args.function, argument)
                except DRPCExecutionException as error:
                    print(
                        f'{args.function} "{argument}" failed: {error.type.name}: {error.msg}',
                        file=sys.stderr,
                    )
                    _print_failed_trace(error)
                    status = 1
                except (AuthorizationException, DRPCTimeoutError, ProtocolError) as error:
                    print(f'{args.function} "{argument}" failed: {error}', file=sys.stderr)
                    status = 1
                else:
                    print(f'{args.function} "{argument}" => "{result}"', flush=True)
                    if args.trace:
                        print(traced.describe(), flush=True)
    except DRPCConnectionError as error:
        print(f"drpc-client: {error}", file=sys.stderr)
        return 3
    except (ValueError, OSError, DRPCError) as error:
        print(f"drpc-client: {error}", file=sys.stderr)
        return 2
    return status


def _print_failed_trace(error: Exception) -> None:
    """The server's trace of a failed traced call, to stderr."""
    answer = getattr(error, "trace", None)
    if not isinstance(answer, dict) or "trace" not in answer:
        return
    traced = TracedResult(
        "",
        str(answer.get("request_id")),
        float(answer.get("total_ms", 0.0)),
        answer["trace"],
        list(answer.get("reads", [])),
    )
    failed_in = answer.get("failed_in")
    if isinstance(failed_in, dict):
        print(f"failed in {failed_in.get('step')}", file=sys.stderr)
    print(traced.describe(), file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
