"""``drpc-transactional``: run a transactional topology, or show a state directory.

    drpc-transactional run MODULE:ATTR --state-dir DIR [--executor local|spark|spark-batch]
                       [--master URL] [--spark-conf KEY=VALUE ...] [--spark-conf-file FILE]
                       [--start-timeout SECONDS] [--max-spout-pending N] [--until-idle | --forever]
                       [--max-batches N] [--map-size SIZE] [--max-map-size SIZE]
                       [--log-level LEVEL] [--log-format text|json]
    drpc-transactional status --state-dir DIR [--json]

``run`` resumes after the last commit in ``DIR`` and shows a live progress line
(txid, batches/s, tuples/s, last commit) on a terminal, plain periodic lines
otherwise; it stops when the source runs dry (``--until-idle``, the default),
after ``--max-batches`` commits, or on SIGINT/SIGTERM (finishing the commit in
progress). Exit status: 0 done, 1 the run failed, 2 bad arguments.
``status`` lists each topology's last committed txid and time, the committed
state maps with their sizes, and each partition of a partitioned state: where the
run last had it (host, resident task) and, when it is on this host, the txid it
holds, its keys and bytes; it only reads, so a directory that does not exist or
holds no state is reported (exit 2), never created.
``MODULE`` is imported as ``python -m`` would, the working directory first
(``drpc.commandline``); usage errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from drpc.commandline import (
    WORKING_DIRECTORY_HELP,
    CommandLineParser,
    import_from_working_directory,
    positive_seconds,
)
from drpc.errors import CheckpointStoreError, DRPCError, StateError, StateFormatError
from drpc.executors import EXECUTORS
from drpc.hosting import as_transactional, load_topology
from drpc.logs import add_logging_arguments, configure_logging
from drpc.progress import Progress
from drpc.sparkconf import add_spark_arguments, spark_options
from drpc.state import CoordinatorState, StateEnvironment
from drpc.state.checkpoint_store import CheckpointSettings
from drpc.state.codec import encode_name
from drpc.state.env import (
    DEFAULT_MAP_SIZE,
    DEFAULT_MAX_MAP_SIZE,
    DEFAULT_VERSION_RETENTION,
    MAPS_DB,
    MIN_MAP_SIZE,
    parse_size,
)
from drpc.state.partition import PartitionLayout, partition_root
from drpc.state.partitioned import LocalPartitions, layouts, map_kinds, placements
from drpc.transactional.run import DEFAULT_MAX_TIMEOUTS, CommitInfo, TransactionalRunner


def _size(text: str) -> int:
    try:
        size = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if size < MIN_MAP_SIZE:
        raise argparse.ArgumentTypeError(f"at least {MIN_MAP_SIZE} bytes, got {text!r}")
    return size


def add_state_arguments(parser: argparse._ActionsContainer) -> None:
    """``--map-size``, ``--max-map-size`` and ``--version-retention`` of the LMDB state
    directory."""
    parser.add_argument(
        "--map-size",
        type=_size,
        default=DEFAULT_MAP_SIZE,
        metavar="SIZE",
        help="initial LMDB map size, e.g. 64MiB (default 64MiB; it doubles on demand)",
    )
    parser.add_argument(
        "--max-map-size",
        type=_size,
        default=DEFAULT_MAX_MAP_SIZE,
        metavar="SIZE",
        help="the map never grows past this, e.g. 16GiB (default 16GiB); a commit that "
        "does not fit stops the run with nothing of it committed",
    )
    parser.add_argument(
        "--version-retention",
        type=positive_seconds,
        default=DEFAULT_VERSION_RETENTION,
        metavar="SECONDS",
        help="a DRPC query reads one committed version of the state for at least this "
        "long after it started; older versions are reclaimed and a query still reading "
        "one fails (default %(default)g)",
    )


def add_checkpoint_argument(parser: argparse._ActionsContainer) -> None:
    """``--checkpoint-dir`` of a run's partitioned states."""
    parser.add_argument(
        "--checkpoint-dir",
        metavar="URI",
        help="the checkpoint store of the run's partitioned states and its driver's records: "
        "file:///shared/path or s3://bucket/prefix (S3 endpoint and credentials: the AWS_* "
        "environment, e.g. AWS_ENDPOINT_URL_S3, or the conf's drpc.checkpoint.s3.*); a lost "
        "partition, or the driver's lost directory, is restored from it (default: none, a "
        "lost partition stops the run)",
    )
    parser.add_argument(
        "--standby-replicas",
        type=int,
        default=0,
        metavar="N",
        help="warm copies of each partition that other resident tasks keep from the "
        "checkpoint store's deltas: when a task is lost the others serve on and its "
        "partitions' standbys take over with nothing downloaded (needs --checkpoint-dir "
        "and --executor spark; default %(default)s)",
    )


def checkpoint_option(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """``--checkpoint-dir``, checked: a URI that names no store exits through
    ``parser.error``."""
    if args.checkpoint_dir is not None:
        try:
            CheckpointSettings(args.checkpoint_dir)
        except CheckpointStoreError as error:
            parser.error(f"--checkpoint-dir: {error}")
    return args.checkpoint_dir


def standby_option(parser: argparse.ArgumentParser, args: argparse.Namespace, executor: str) -> int:
    """``--standby-replicas``, checked against ``--checkpoint-dir`` and the executor."""
    replicas: int = args.standby_replicas
    if replicas < 0:
        parser.error("--standby-replicas must be >= 0")
    if replicas and args.checkpoint_dir is None:
        parser.error("--standby-replicas needs --checkpoint-dir: standbys apply its deltas")
    if replicas and executor != "spark":
        parser.error(
            f"--standby-replicas needs --executor spark (standbys live on other resident "
            f"tasks), not {executor}"
        )
    return replicas


def state_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    if args.max_map_size < args.map_size:
        parser.error(
            f"--max-map-size ({args.max_map_size}) must be at least --map-size ({args.map_size})"
        )
    return {
        "map_size": args.map_size,
        "max_map_size": args.max_map_size,
        "version_retention": args.version_retention,
    }


@dataclass(frozen=True)
class HostedRuns:
    """The ``--transactional`` runs a serving process hosts, from its command line:
    each topology and the keywords of ``drpc.transactional.hosted.HostedTransactional``
    they all share (``state_dir``, ``max_spout_pending``, ``state_options``,
    ``checkpoint_dir``, ``standby_replicas``)."""

    topologies: list[Any] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


def add_hosted_arguments(parser: argparse.ArgumentParser, host: str) -> None:
    """The ``transactional topologies`` group of a serving command line (``drpc-server``,
    ``drpc-runner``): ``--transactional`` (repeatable), ``--state-dir``,
    ``--max-spout-pending``, the state directory's sizes and ``--checkpoint-dir``."""
    group = parser.add_argument_group("transactional topologies")
    group.add_argument(
        "--transactional",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help=f"also run this transactional topology in the {host} (repeatable), e.g. "
        f"drpc.examples.transactional_words:topology; needs --state-dir; {WORKING_DIRECTORY_HELP}",
    )
    group.add_argument(
        "--state-dir", metavar="DIR", help="LMDB state directory of --transactional runs"
    )
    group.add_argument(
        "--max-spout-pending",
        type=int,
        metavar="N",
        help="batches in flight per transactional run (default: the topology's "
        "topology.max.spout.pending, else 1)",
    )
    add_state_arguments(group)
    add_checkpoint_argument(group)


def hosted_runs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> HostedRuns:
    """The ``--transactional`` runs of ``add_hosted_arguments``'s flags, loaded; a bad
    value exits through ``parser.error``."""
    options = state_options(parser, args)
    checkpoint_dir = checkpoint_option(parser, args)
    standby_replicas = standby_option(parser, args, args.executor)
    if not args.transactional:
        return HostedRuns()
    if not args.state_dir:
        parser.error("--transactional needs --state-dir")
    if args.max_spout_pending is not None and args.max_spout_pending < 1:
        parser.error("--max-spout-pending must be >= 1")
    try:
        topologies = [as_transactional(load_topology(spec), spec) for spec in args.transactional]
    except ValueError as error:
        parser.error(str(error))
    return HostedRuns(
        topologies,
        {
            "state_dir": args.state_dir,
            "max_spout_pending": args.max_spout_pending,
            "state_options": options,
            "checkpoint_dir": checkpoint_dir,
            **({"standby_replicas": standby_replicas} if standby_replicas else {}),
        },
    )


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="drpc-transactional",
        description="Run transactional topologies exactly once into an LMDB state directory.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a topology, resuming after the last commit")
    run.add_argument(
        "topology",
        metavar="MODULE:ATTR",
        help="a transactional topology, e.g. drpc.examples.transactional_words:topology; "
        + WORKING_DIRECTORY_HELP,
    )
    run.add_argument("--state-dir", required=True, help="LMDB state directory (created if missing)")
    run.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local (in this process), spark (the batches on resident Spark tasks, no "
        "Spark job per batch) or spark-batch (a Spark job per batch, for backfills) "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--max-spout-pending",
        type=int,
        metavar="N",
        help="batches in flight (default: the topology's topology.max.spout.pending, else 1)",
    )
    idle = run.add_mutually_exclusive_group()
    idle.add_argument(
        "--until-idle",
        dest="until_idle",
        action="store_true",
        default=True,
        help="stop when a batch comes back empty (default)",
    )
    idle.add_argument(
        "--forever", dest="until_idle", action="store_false", help="keep polling the source"
    )
    run.add_argument("--max-batches", type=int, metavar="N", help="stop after N commits")
    run.add_argument(
        "--max-attempts",
        type=int,
        default=100,
        metavar="N",
        help="give up when a batch fails N times (default 100)",
    )
    run.add_argument(
        "--max-timeouts",
        type=int,
        default=DEFAULT_MAX_TIMEOUTS,
        metavar="N",
        help="give up when a batch's tuple tree outlives topology.message.timeout.secs N times "
        f"(default {DEFAULT_MAX_TIMEOUTS})",
    )
    add_checkpoint_argument(run)
    add_state_arguments(run)
    add_spark_arguments(run)
    add_logging_arguments(run, default_level="WARNING")
    status = commands.add_parser("status", help="show the topologies and maps of a state directory")
    status.add_argument("--state-dir", required=True, help="an existing LMDB state directory")
    status.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    for flag in ("max_spout_pending", "max_attempts", "max_timeouts"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    spark = spark_options(parser, args, args.executor)
    import_from_working_directory()
    try:
        topology = as_transactional(load_topology(args.topology), args.topology)
    except ValueError as error:
        parser.error(str(error))
    options = state_options(parser, args)
    checkpoint_dir = checkpoint_option(parser, args)
    standby_replicas = standby_option(parser, args, args.executor)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    progress = Progress(sys.stderr)
    started = time.monotonic()
    committed = {"batches": 0, "tuples": 0}

    def on_commit(info: CommitInfo) -> None:
        committed["batches"] += 1
        committed["tuples"] += info.tuples
        elapsed = max(time.monotonic() - started, 1e-9)
        progress.update(
            f"txid {info.txid}: {committed['batches']} batches, {committed['tuples']} tuples, "
            f"{committed['batches'] / elapsed:.1f} batches/s, {committed['tuples'] / elapsed:.0f} "
            f"tuples/s, last commit {time.strftime('%H:%M:%S')}"
        )

    try:
        with TransactionalRunner(
            topology,
            state_dir=args.state_dir,
            executor=args.executor,
            max_spout_pending=args.max_spout_pending,
            max_attempts=args.max_attempts,
            max_timeouts=args.max_timeouts,
            **spark,
            state_options=options,
            checkpoint_dir=checkpoint_dir,
            standby_replicas=standby_replicas,
        ) as runner:
            result = runner.run(
                until_idle=args.until_idle,
                max_batches=args.max_batches,
                stop=stop,
                on_commit=on_commit,
            )
    except DRPCError as error:
        progress.close()
        print(f"drpc-transactional: {error}", file=sys.stderr)
        return 1
    replays = ", ".join(f"{n} {cause}" for cause, n in sorted(result.replays.items())) or "none"
    progress.close(
        f"{topology.transactional.id}: committed {len(result.commits)} batches "
        f"({result.tuples} tuples) up to txid {result.last_txid} in {result.seconds:.1f} s; "
        f"replays: {replays}"
    )
    return 0


def status(state_dir: str) -> dict[str, Any]:
    """What ``state_dir`` holds; ``StateError`` if it is not a state directory (it is only
    read: a mistyped path is reported, never created)."""
    env = StateEnvironment.open(state_dir, create=False)
    with env.read() as txn:
        topologies = {
            topology_id: {"last_txid": record.txid, "committed_at": record.committed_at}
            for topology_id, record in CoordinatorState.topologies(env, txn=txn).items()
        }
        maps: dict[str, dict[str, Any]] = {}
        for name, kind in map_kinds(txn).items():
            keys = sum(1 for _ in txn.scan(MAPS_DB, encode_name(name, "map name")))
            maps[name] = {"kind": kind, "keys": keys}
        groups = layouts(env, txn)
        places = placements(env, txn)
    versions = env.version_status()
    return {
        "state_dir": state_dir,
        "topologies": topologies,
        "maps": maps,
        "partitions": partition_report(state_dir, groups, places),
        "versions": {
            "latest": versions.latest,
            "oldest_readable": versions.horizon,
            "undo_logs": versions.undo_logs,
            "oldest_pinned": versions.oldest_pinned,
            "oldest_pin_age": versions.oldest_pin_age,
        },
    }


def partition_report(
    state_dir: str,
    groups: dict[str, PartitionLayout],
    places: dict[tuple[str, int], dict[str, Any]],
) -> list[dict[str, Any]]:
    """Each partition of the directory's partitioned states: where the run last had it
    (host, resident task) and, when it is on this host, what it holds."""
    partitions = LocalPartitions(partition_root(state_dir))
    report = []
    try:
        for layout in groups.values():
            for index in range(layout.partitions):
                entry: dict[str, Any] = {
                    "group": layout.group,
                    "index": index,
                    **places.get((layout.group, index), {"host": None, "task": None}),
                }
                if partitions.exists(layout, index):
                    found = partitions.partition(layout, index).status()
                    entry.update(txid=found.held, keys=found.keys, bytes=found.bytes)
                    entry["path"] = found.path
                report.append(entry)
    finally:
        partitions.close()
    return report


def _status(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        report = status(args.state_dir)
    except StateFormatError as error:  # a record drpc refuses to read: not a usage error
        print(f"drpc-transactional: {error}", file=sys.stderr)
        return 1
    except StateError as error:
        parser.error(str(error))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"state directory {report['state_dir']}")
    for topology_id, info in sorted(report["topologies"].items()):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["committed_at"]))
        print(f"  topology {topology_id}: last committed txid {info['last_txid']} at {when}")
    if not report["topologies"]:
        print("  no commits yet")
    for name, info in sorted(report["maps"].items()):
        print(f"  map {name} ({info['kind']}): {info['keys']} keys")
    for entry in report["partitions"]:
        where = f"on {entry['host'] or 'an unknown host'}"
        if entry["task"]:
            where += f", resident task {entry['task']}"
        held = (
            f"txid {entry['txid']}, {entry['keys']} keys, {entry['bytes']} bytes"
            if "txid" in entry
            else "not on this host"
        )
        print(f"  partition {entry['index']} of {entry['group']} {where}: {held}")
    versions = report["versions"]
    pinned = (
        f"oldest pinned {versions['oldest_pinned']} ({versions['oldest_pin_age']:.1f} s ago)"
        if versions["oldest_pinned"] is not None
        else "nothing pinned"
    )
    print(f"  version {versions['latest']}: {pinned}, {versions['undo_logs']} undo log(s) kept")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "status":
        return _status(parser, args)
    configure_logging(args.log_level, args.log_format)
    return _run(parser, args)


if __name__ == "__main__":
    raise SystemExit(main())
