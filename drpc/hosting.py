"""Choosing an executor and loading topologies named on a command line.

Contract:

- ``default_executor()`` is ``"spark"`` when ``drpc.executors.spark`` can be
  imported, else ``"local"``; the server and the remote runner use it when no
  executor is named;
- ``load_topology("package.module:attr")`` imports the module and resolves
  ``attr`` (dots allowed) to a ``Topology``: the attribute may be a built
  ``Topology``, a builder (anything with ``create_topology()``: a
  ``LinearDRPCTopologyBuilder``, a ``TransactionalTopologyBuilder``), or a
  zero-argument callable returning one; anything else raises ``ValueError``
  naming the spec;
- ``as_topology`` does the same conversion for a value already in hand;
- ``Wakeups`` is a thread-safe registry of per-function callbacks, the
  ``add_listener`` half of an invocations handle that can wake its spouts;
- ``add_hosting_arguments``/``hosting_setup`` give the command lines that host
  topologies (``drpc-server``, ``drpc.runner``) the same ``--topology``,
  ``--executor``, ``--master``, ``--log-level`` and ``--log-format text|json``
  options (logging set up by ``drpc.logs.configure_logging``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import threading
from collections.abc import Callable
from typing import Any

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.executors import EXECUTORS
from drpc.logs import add_logging_arguments, configure_logging
from drpc.model.topology import Topology

log = logging.getLogger(__name__)


def default_executor() -> str:
    try:
        found = importlib.util.find_spec("drpc.executors.spark") is not None
    except ImportError:
        found = False
    return "spark" if found else "local"


def as_topology(value: Any, source: str = "value") -> Topology:
    if isinstance(value, Topology):
        return value
    if isinstance(value, LinearDRPCTopologyBuilder) or callable(
        getattr(value, "create_topology", None)
    ):
        return value.create_topology()
    if callable(value):
        return as_topology(value(), f"{source}()")
    raise ValueError(
        f"{source} is a {type(value).__name__}, not a Topology, a topology builder "
        "or a zero-argument callable returning one"
    )


def as_transactional(value: Any, source: str = "value") -> Topology:
    """``as_topology`` for a transactional topology; ValueError naming ``source`` otherwise."""
    topology = as_topology(value, source)
    if topology.transactional is None:
        raise ValueError(
            f"{source} is not a transactional topology (build it with TransactionalTopologyBuilder)"
        )
    return topology


def load_topology(spec: str) -> Topology:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"topology {spec!r} is not of the form package.module:attribute")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"topology {spec!r}: cannot import {module_name!r}: {error}") from error
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"topology {spec!r}: {module_name} has no {attribute!r}") from None
    return as_topology(value, spec)


class Wakeups:
    """Callbacks per function, called when a request for it arrives. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[str, list[Callable[[], None]]] = {}

    def add(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Register ``callback``; returns a function that unregisters it."""
        with self._lock:
            self._callbacks.setdefault(function, []).append(callback)

        def remove() -> None:
            with self._lock:
                callbacks = self._callbacks.get(function, [])
                if callback in callbacks:
                    callbacks.remove(callback)

        return remove

    def notify(self, function: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks.get(function, ()))
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("wakeup callback for %r raised", function)


def add_hosting_arguments(parser: argparse.ArgumentParser, *, topology_required: bool) -> None:
    parser.add_argument(
        "--topology",
        action="append",
        default=None if topology_required else [],
        required=topology_required,
        metavar="MODULE:ATTR",
        help="a topology to host, e.g. drpc.examples.reach:topology (repeatable); ATTR may be "
        "a LinearDRPCTopologyBuilder, a Topology or a zero-argument callable returning one",
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=default_executor(),
        help="executor of the topologies (default: %(default)s)",
    )
    parser.add_argument(
        "--master", help="Spark master URL for --executor spark, e.g. local[*] or spark://host:7077"
    )
    add_logging_arguments(parser)


def hosting_setup(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[list[Topology], dict[str, Any]]:
    """Configure logging, load ``--topology`` values and build executor options from
    parsed ``add_hosting_arguments`` options; bad values exit through ``parser.error``."""
    configure_logging(args.log_level, args.log_format)
    try:
        topologies = [load_topology(spec) for spec in args.topology]
    except ValueError as error:
        parser.error(str(error))
    options: dict[str, Any] = {}
    if args.master is not None:
        if args.executor != "spark":
            parser.error("--master applies to --executor spark only")
        options["master"] = args.master
    return topologies, options
