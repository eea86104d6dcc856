"""``drpc-sparse``: run a streamparse project's topology on drpc, as ``sparse run`` runs it
on Storm.

Usage, from the project's directory (the one holding ``config.json``)::

    drpc-sparse run -n NAME [--project DIR] [--in-process] [--executor local|spark] [--seconds N]
        [--conf KEY=VALUE ...] [--stats-every S] [--json]
    drpc-sparse list [--project DIR]

``run`` builds ``topologies/NAME.py`` into a plain drpc topology (``drpc.sparse``: its
Python components as multilang subprocesses through pystorm, as on Storm) and runs it
as ``drpc-topology run`` does (``drpc.topology_cli``): until SIGINT or SIGTERM, or for
``--seconds``, each component's figures on stderr, the last ones on stdout;
``--in-process`` runs the Python components inside the tasks (``drpc.inprocess``). ``-n`` may
be left out when the project has one topology. ``list`` prints the project's
topologies. A project or topology that cannot run (a missing file, a Java component, a
custom grouping) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from drpc.commandline import CommandLineParser
from drpc.errors import MissingExtraError, SparseProjectError
from drpc.logs import configure_logging
from drpc.sparkconf import spark_options
from drpc.sparse import SparseProject
from drpc.topology_cli import add_run_arguments, run_until_stopped


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="drpc-sparse",
        description="Run a streamparse project's topology on drpc, as sparse run does on Storm.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run topologies/NAME.py until SIGINT/SIGTERM")
    run.add_argument(
        "-n", "--name", help="the topology (topologies/NAME.py; default: the only one)"
    )
    run.add_argument(
        "--project", default=".", metavar="DIR", help="the project (default: this directory)"
    )
    run.add_argument(
        "--in-process",
        action="store_true",
        help="run the project's Python components inside the tasks (their pystorm code, "
        "without a subprocess each)",
    )
    add_run_arguments(run)
    listing = commands.add_parser("list", help="list the project's topologies")
    listing.add_argument(
        "--project", default=".", metavar="DIR", help="the project (default: this directory)"
    )
    return parser


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    spark = spark_options(parser, args, args.executor)
    try:
        project = SparseProject(args.project)
        name = args.name
        if name is None:
            names = project.names()
            if len(names) != 1:
                parser.error(f"the project has {len(names)} topologies: name one with -n")
            name = names[0]
        topology = project.builder(name, in_process=args.in_process).create_topology(name)
    except (SparseProjectError, MissingExtraError) as error:
        parser.error(str(error))
    return run_until_stopped("drpc-sparse", topology, name, args, args.executor, spark)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "list":
        try:
            names = SparseProject(args.project).names()
        except SparseProjectError as error:
            parser.error(str(error))
        print("\n".join(names))
        return 0
    configure_logging(args.log_level, args.log_format)
    return _run(parser, args)


if __name__ == "__main__":
    raise SystemExit(main())
