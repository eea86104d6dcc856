"""``drpc-topology``: run a plain Storm-style topology until it is stopped.

Usage::

    drpc-topology run MODULE:ATTR [--name NAME] [--executor local|spark]
        [--conf KEY=VALUE ...] [--seconds N] [--stats-every S] [--json]
    drpc-topology list [--server http://localhost:3774] [--json]
    drpc-topology kill NAME [-w SECONDS] [--server URL]
    drpc-topology activate|deactivate NAME [--server URL]

``run`` submits the topology (a ``Topology``, a ``TopologyBuilder``, or a
zero-argument callable returning one) to a ``drpc.topologies.LocalCluster`` on
the executor, prints each component's figures (emitted, acked, failed, complete
latency) every ``--stats-every`` seconds on stderr, and runs until SIGINT or
SIGTERM, or for ``--seconds``; then it deactivates the spouts, gives the trees in
flight ``--drain`` seconds, prints the last figures on stdout (``--json``: as JSON)
and kills the topology.
``--conf`` sets a topology setting, its value read as JSON when it parses
(``topology.max.spout.pending=100``), else as text. ``MODULE`` is imported as
``python -m`` would, the working directory first. ``list`` prints the plain topologies a
``drpc-server`` runs (``--topology``) with their figures, read from its ``/api/status``
(a server it cannot read: one line, exit status 1). ``kill``, ``activate`` and
``deactivate`` are Storm's commands of the same names, sent to that server
(``drpc.server.topology_admin``): ``kill`` deactivates the spouts, waits ``-w`` seconds
(default: the topology's ``topology.message.timeout.secs``, as ``storm kill``) and returns
once the topology stopped. The server lets only the users its ACL lists under
``nimbus.admins`` run them; the caller is named by the bearer token of ``--token-file``
(else ``$DRPC_TOKEN``) or by the client certificate of ``--tls-cert`` (HTTPS). A refusal,
an unknown topology or a server it cannot reach is one line on stderr and exit status 1.
A usage mistake is one line on stderr and exit status 2; a topology that cannot start,
one line and status 1.
"""

from __future__ import annotations

import argparse
import json
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drpc.commandline import (
    TOKEN_ENVIRONMENT,
    WORKING_DIRECTORY_HELP,
    CommandLineParser,
    add_tls_arguments,
    import_from_working_directory,
    positive_seconds,
    seconds_or_zero,
    token_from,
)
from drpc.errors import DRPCError
from drpc.executors.stats import ComponentStats
from drpc.hosting import as_topology, load_topology
from drpc.logs import add_logging_arguments, configure_logging
from drpc.progress import Progress
from drpc.protocol.tls import tls_from_args
from drpc.sparkconf import add_spark_arguments, spark_options
from drpc.topologies import PLAIN_EXECUTORS, LocalCluster, TopologyInfo


def _setting(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="drpc-topology",
        description="Run plain Storm-style topologies (spouts, bolts, acking) at least once.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a topology until SIGINT/SIGTERM or --seconds")
    run.add_argument(
        "topology",
        metavar="MODULE:ATTR",
        help="a plain topology, e.g. drpc.examples.word_count_topology:topology; "
        + WORKING_DIRECTORY_HELP,
    )
    run.add_argument("--name", help="the name to run it under (default: the topology's own)")
    add_run_arguments(run)
    listing = commands.add_parser(
        "list", help="list the plain topologies a drpc-server runs, with their figures"
    )
    _add_server_arguments(listing)
    listing.add_argument("--json", action="store_true", help="print JSON")
    kill = commands.add_parser(
        "kill", help="deactivate a topology a drpc-server runs, wait, then stop it (admins)"
    )
    kill.add_argument("name", help="the topology's name, as list shows it")
    kill.add_argument(
        "-w",
        "--wait",
        type=seconds_or_zero,
        metavar="SECONDS",
        help="seconds its trees in flight get after the spouts stop "
        "(default: its topology.message.timeout.secs)",
    )
    _add_server_arguments(kill)
    for command, says in (
        ("activate", "poll the spouts of a deactivated topology again (admins)"),
        ("deactivate", "stop polling a topology's spouts; what is in flight completes (admins)"),
    ):
        sub = commands.add_parser(command, help=says)
        sub.add_argument("name", help="the topology's name, as list shows it")
        _add_server_arguments(sub)
    return parser


def _add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        default="http://localhost:3774",
        metavar="URL",
        help="the server's HTTP address (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=10.0,
        metavar="S",
        help="seconds to wait for the server, beyond a kill's wait (default: %(default)g)",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"bearer token naming the caller, read from FILE (default: ${TOKEN_ENVIRONMENT})",
    )
    add_tls_arguments(parser)


KILL_WAIT_UNKNOWN = 600.0
"""Seconds a kill without ``-w`` may take beyond ``--timeout``: the topology's
``topology.message.timeout.secs``, read on the server, bounded here."""


class ServerAnswer(Exception):
    """The server refused or failed a command: its message, said in one line."""


def _open(args: argparse.Namespace, path: str, *, post: bool = False, wait: float = 0.0) -> Any:
    """The JSON the server answers at ``path`` (``ServerAnswer`` for an error it sent,
    ``OSError`` when it cannot be reached)."""
    request = urllib.request.Request(
        f"{args.server.rstrip('/')}{path}",
        method="POST" if post else "GET",
        data=b"" if post else None,
    )
    token = token_from(args.token_file)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    tls = tls_from_args(args)
    context: ssl.SSLContext | None = None if tls is None else tls.client_context()
    try:
        with urllib.request.urlopen(
            request, timeout=args.timeout + wait, context=context
        ) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:
        try:
            body = json.loads(error.read())
            said = f"{body['error']}: {body['errorMessage']}"
        except (ValueError, KeyError, TypeError):
            said = f"HTTP {error.code} {error.reason}"
        raise ServerAnswer(said) from None


def _check_server(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.server.startswith(("http://", "https://")):
        parser.error(f"--server must be an http:// or https:// URL, got {args.server!r}")
    if args.token_file and not Path(args.token_file).is_file():
        parser.error(f"--token-file {args.token_file!r} is not a readable file")


def _command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``kill``, ``activate`` or ``deactivate`` sent to the server."""
    _check_server(parser, args)
    path = f"/api/topologies/{urllib.parse.quote(args.name, safe='')}/{args.command}"
    wait = getattr(args, "wait", None)
    if wait is not None:
        path += f"?wait_secs={wait:g}"
    try:
        # the server answers a kill once the topology stopped, after its wait (without -w,
        # the topology's message timeout, which only the server knows)
        beyond = 0.0 if args.command != "kill" else KILL_WAIT_UNKNOWN if wait is None else wait
        answer = _open(args, path, post=True, wait=beyond)
    except (ServerAnswer, OSError) as error:
        print(
            f"drpc-topology: {args.command} {args.name!r} at {args.server}: {error}",
            file=sys.stderr,
        )
        return 1
    if args.command == "kill":
        print(f"killed {args.name} (after {answer['wait_secs']:g} s for its trees in flight)")
    else:
        print(f"{args.name} is {'active' if answer['active'] else 'inactive'}")
    return 0


def server_topologies(args: argparse.Namespace) -> list[TopologyInfo]:
    """The plain topologies a server runs, read from its ``/api/status``."""
    status = _open(args, "/api/status")
    return [
        TopologyInfo(
            shown["name"],
            shown["executor"],
            shown["uptime_secs"],
            {stats["component"]: ComponentStats(**stats) for stats in shown["components"]},
        )
        for shown in status.get("topologies", [])
    ]


def _list(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    _check_server(parser, args)
    try:
        infos = server_topologies(args)
    except (OSError, ValueError, ServerAnswer) as error:
        print(f"drpc-topology: cannot read {args.server}/api/status: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([info.as_dict() for info in infos], indent=2))
    else:
        print("\n".join(render(info) for info in infos) or "no plain topology runs there")
    return 0


def render(info: TopologyInfo) -> str:
    """The figures as Storm's UI lists them: one line per component."""
    lines = [f"{info.name} on {info.executor}, up {info.uptime_secs:.1f} s"]
    for stats in info.components.values():
        latency = (
            ""
            if stats.complete_latency_ms is None
            else f", complete latency {stats.complete_latency_ms:.2f} ms"
        )
        lines.append(
            f"  {stats.component} ({stats.kind} x{stats.tasks}): emitted {stats.emitted}, "
            f"acked {stats.acked}, failed {stats.failed}{latency}"
        )
    return "\n".join(lines)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    spark = spark_options(parser, args, args.executor)
    import_from_working_directory()
    try:
        topology = as_topology(load_topology(args.topology), args.topology)
    except ValueError as error:
        parser.error(str(error))
    if topology.drpc_function is not None:
        parser.error(
            f"{args.topology} serves DRPC function {topology.drpc_function!r}: serve it with "
            "drpc-server (or drpc-runner)"
        )
    if topology.transactional is not None:
        parser.error(f"{args.topology} is a transactional topology: run it with drpc-transactional")
    return run_until_stopped(
        "drpc-topology", topology, args.name or topology.name, args, args.executor, spark
    )


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """The options of running a plain topology until stopped (``run_until_stopped``)."""
    run.add_argument(
        "--executor",
        choices=PLAIN_EXECUTORS,
        default="local",
        help="local (every task in this process) or spark (the spouts here, the bolts on "
        "resident Spark tasks) (default: %(default)s)",
    )
    run.add_argument(
        "--conf",
        action="append",
        default=[],
        type=_setting,
        metavar="KEY=VALUE",
        help="a topology setting, e.g. topology.max.spout.pending=100 (repeatable)",
    )
    run.add_argument("--seconds", type=positive_seconds, metavar="N", help="stop after N seconds")
    run.add_argument(
        "--stats-every",
        type=positive_seconds,
        default=5.0,
        metavar="S",
        help="print the figures every S seconds on stderr (default: %(default)g)",
    )
    run.add_argument(
        "--drain",
        type=seconds_or_zero,
        default=1.0,
        metavar="S",
        help="seconds the trees in flight get when stopping (default: %(default)g)",
    )
    run.add_argument("--json", action="store_true", help="print the last figures as JSON")
    add_spark_arguments(run)
    add_logging_arguments(run, default_level="WARNING")


def run_until_stopped(
    prog: str,
    topology: Any,
    name: str,
    args: argparse.Namespace,
    executor: str,
    spark: dict[str, Any],
) -> int:
    """Run ``topology`` on a ``LocalCluster`` until SIGINT/SIGTERM or ``args.seconds``,
    printing the figures (see the module doc); the exit status."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    progress = Progress(sys.stderr)
    try:
        cluster = LocalCluster(executor, **spark)
        cluster.submit_topology(name, dict(args.conf), topology)
    except (DRPCError, ValueError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    try:
        deadline = None if args.seconds is None else time.monotonic() + args.seconds
        next_figures = time.monotonic() + args.stats_every
        while True:
            wake = next_figures if deadline is None else min(next_figures, deadline)
            if stop.wait(max(0.0, wake - time.monotonic())):
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            progress.update(render(cluster.get_topology_info(name)).replace("\n", ";"))
            next_figures += args.stats_every
        cluster.deactivate(name)
        time.sleep(args.drain)
        info = cluster.get_topology_info(name)
        cluster.kill_topology(name)
    finally:
        cluster.shutdown()
    progress.close()
    print(json.dumps(info.as_dict(), indent=2) if args.json else render(info))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list(parser, args)
    if args.command in ("kill", "activate", "deactivate"):
        return _command(parser, args)
    configure_logging(args.log_level, args.log_format)
    return _run(parser, args)


if __name__ == "__main__":
    raise SystemExit(main())
