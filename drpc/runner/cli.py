"""``drpc-runner`` (also ``python -m drpc.runner``): the remote runner's command line.

Contract: ``main(argv)`` parses the arguments (a mistake is one line and exit 2),
builds a ``RemoteRunner`` over ``--servers`` for the ``--topology`` given, with the
``--transactional`` runs (``--state-dir`` ...) hosted beside them, and serves until
SIGINT or SIGTERM, then stops it; exit 0, or 1 when a topology cannot start (its
error is logged) or, on Spark, when its driver's JVM is lost while it serves (said in the
log, so that a supervisor starts the runner again instead of leaving it refusing calls).
With ``--standby`` it first warms its executor and waits for the runner writing the
state directory to stop, then takes over (``drpc.runner.standby``). With
``--topology-port`` the plain topologies it hosts answer ``drpc-topology`` there
(``drpc.runner.topology_port``), their commands allowed to ``--acl``'s
``nimbus.admins``, named by ``--tokens``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
from collections.abc import Sequence
from types import FrameType

from drpc.client import DEFAULT_INVOCATIONS_PORT
from drpc.commandline import CommandLineParser, add_tls_arguments, port_number
from drpc.errors import DRPCError
from drpc.executors.resident.executor import REQUEST_PATHS
from drpc.hosting import add_hosting_arguments, hosting_setup, job_options
from drpc.protocol.tls import tls_from_args
from drpc.runner.invocations import (
    DEFAULT_MAX_QUEUED_OUTCOMES,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_RECONNECT_INTERVAL,
)
from drpc.runner.remote_runner import RemoteRunner
from drpc.runner.standby import wait_for_state, warm
from drpc.runner.topology_port import DEFAULT_HOST, TopologyPort
from drpc.server.acl import ACLAuthorizer
from drpc.server.identity import TokenTable
from drpc.transactional.cli import add_hosted_arguments, hosted_runs

log = logging.getLogger("drpc.runner")  # not "__main__" under python -m
SPARK_CHECK_INTERVAL = 1.0
"""Seconds between two checks that the Spark driver still runs."""


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="drpc-runner",
        description="Serve DRPC topologies for DRPC servers through their invocations ports.",
    )
    parser.add_argument(
        "--servers",
        required=True,
        help="invocations ports, host:port[,host:port...] "
        f"(port default {DEFAULT_INVOCATIONS_PORT})",
    )
    add_hosting_arguments(parser, topology_required=True)
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=DEFAULT_POLL_INTERVAL,
        help="longest wait, in seconds, between polls that find nothing: a poller backs "
        "off from 1 ms to it while a server has nothing (default %(default)g)",
    )
    parser.add_argument(
        "--reconnect-interval",
        type=float,
        default=DEFAULT_RECONNECT_INTERVAL,
        help="seconds between attempts to reach a server that is down (default %(default)g)",
    )
    parser.add_argument(
        "--max-queued-outcomes",
        type=int,
        default=DEFAULT_MAX_QUEUED_OUTCOMES,
        help="most results and failures waiting to be sent to one server; past it an "
        "outcome is dropped, logged and counted (default %(default)d)",
    )
    parser.add_argument(
        "--request-path",
        choices=REQUEST_PATHS,
        default=None,
        help="with --executor spark: where requests enter and leave; tasks (every resident "
        "task fetches from the servers and answers itself, nothing per request on this "
        "process), driver (this process fetches, acks and answers), auto (default: tasks)",
    )
    parser.add_argument(
        "--one-copy",
        action="store_true",
        help="with --executor spark on the tasks path: deal one copy of each topology over "
        "the resident tasks (Storm's placement: a fields grouping holds across requests) "
        "instead of a whole copy on every task (a request never leaves its task; default)",
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="with --transactional: start the executor now, then wait while another runner "
        "writes --state-dir and take over its runs when it stops (a killed runner is "
        "replaced without a Spark start)",
    )
    add_tls_arguments(parser)
    add_hosted_arguments(parser, "runner")
    port = parser.add_argument_group("topology port (the plain topologies this runner hosts)")
    port.add_argument(
        "--topology-port",
        type=port_number,
        metavar="PORT",
        help="answer drpc-topology list, kill, activate and deactivate, and serve /metrics "
        "of the plain topologies on PORT (0: any free port, logged; default: no port)",
    )
    port.add_argument(
        "--topology-host",
        metavar="HOST",
        help=f"the address of --topology-port (default {DEFAULT_HOST}: this host only)",
    )
    port.add_argument(
        "--acl",
        metavar="FILE",
        help="Storm-style ACL whose nimbus.admins may kill, activate and deactivate on "
        "--topology-port (default: no one may)",
    )
    port.add_argument(
        "--tokens",
        metavar="FILE",
        help="bearer tokens naming the callers of --topology-port (YAML or JSON mapping "
        "each user to a token or a list)",
    )
    return parser


def _topology_port(
    parser: argparse.ArgumentParser, args: argparse.Namespace, runner: RemoteRunner
) -> TopologyPort | None:
    """The ``--topology-port`` the arguments ask for (None: none), its files loaded."""
    if args.topology_port is None:
        given = [flag for flag in ("topology_host", "acl", "tokens") if getattr(args, flag)]
        if given:
            parser.error(f"--{given[0].replace('_', '-')} needs --topology-port")
        return None
    if not runner.plain_topologies:
        parser.error("--topology-port needs a plain topology among --topology")
    try:
        return TopologyPort(
            lambda: runner.plain,
            host=args.topology_host or DEFAULT_HOST,
            port=args.topology_port,
            authorizer=ACLAuthorizer(args.acl) if args.acl else None,
            tokens=TokenTable.from_file(args.tokens) if args.tokens else None,
        )
    except (DRPCError, ValueError, OSError) as error:  # an unreadable or malformed file
        parser.error(str(error))


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    topologies, executor_options = hosting_setup(parser, args)
    hosted = hosted_runs(parser, args)
    if args.request_path is not None or args.one_copy:
        if args.executor != "spark":
            parser.error("--request-path and --one-copy apply to --executor spark only")
        if args.one_copy and args.request_path == "driver":
            parser.error("--one-copy applies to the tasks path, not --request-path driver")
        if args.request_path is not None:
            executor_options["request_path"] = args.request_path
        if args.one_copy:
            executor_options["replicate"] = False
    try:
        runner = RemoteRunner(
            topologies,
            args.servers,
            executor=args.executor,
            executor_options=executor_options,
            poll_interval=args.poll_interval,
            reconnect_interval=args.reconnect_interval,
            max_queued_outcomes=args.max_queued_outcomes,
            tls=tls_from_args(args),
        )
    except (ValueError, DRPCError) as error:  # a bad --servers, an unusable TLS file
        parser.error(str(error))
    if args.standby and not hosted.topologies:
        parser.error("--standby needs --transactional: it waits to take over a state directory")
    topology_port = _topology_port(parser, args, runner)
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(signum, request_stop)
    standby = None
    if args.standby:
        try:
            warm(args.executor, executor_options)
        except DRPCError as error:
            log.error("cannot stand by: %s", error)
            return 1
        state = hosted.options
        if not stopping.is_set():  # a stop while it warmed: never take over
            standby = wait_for_state(state["state_dir"], state["state_options"], stopping)
        if standby is None:
            log.info("stopping")
            return 0
    run_options = job_options(executor_options)
    try:
        for topology in hosted.topologies:
            runner.register_transactional(topology, **hosted.options, **run_options)
    except DRPCError as error:  # a state directory another run writes, a duplicate topology
        log.error("cannot serve: %s", error)
        return 1
    finally:
        if standby is not None:
            standby.release()  # the runs hold the directory now (or it is given up)
    try:
        runner.start()
    except DRPCError as error:  # e.g. SparkStartError: no executor registered in time
        log.error("cannot serve: %s", error)
        return 1
    if topology_port is not None:
        try:
            topology_port.start()
        except OSError as error:  # the port is taken, the address is not this host's
            log.error("cannot serve --topology-port %d: %s", args.topology_port, error)
            runner.stop()
            return 1
    status = 0
    try:
        while not stopping.wait(SPARK_CHECK_INTERVAL):
            lost = runner.spark_lost()
            if lost is not None:
                log.error("cannot serve any more: %s; exiting (start the runner again)", lost)
                status = 1
                break
        else:
            log.info("stopping")
    finally:
        if topology_port is not None:
            topology_port.stop()
        runner.stop()
    return status
