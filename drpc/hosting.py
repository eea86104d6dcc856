"""Hosting DRPC topologies: the one ``Host``, choosing an executor, loading topologies.

Contract:

- ``Host(invocations, executor=..., conf=..., observer=..., spark_options=...)``
  runs the DRPC
  functions one process serves from one invocations handle: the DRPC server
  (its request table), ``LocalDRPC`` and the remote runner (the servers'
  invocations ports) all host through it. ``register(topology, executor=None,
  **options)`` takes a builder, a ``Topology`` or a zero-argument factory,
  refuses one that serves no DRPC function or a function already registered
  (``DRPCError``), creates the executor (``drpc.executors.create_executor``,
  with the handle and the observer as services; a Spark executor also gets
  ``spark_options``: ``master``, ``spark_conf``, ``start_timeout``) and starts it, returning the
  started runtime (a runtime that fails to start is not registered).
  ``runtime(function)``, ``functions`` and ``stop()`` (every runtime, in
  registration order; one that fails to stop is logged and the others still
  stop). Thread-safe; ``register`` blocks while the runtime starts.

- ``default_executor()`` is ``"spark"`` when ``drpc.executors.spark`` can be
  imported, else ``"local"``; the server and the remote runner use it when no
  executor is named;
- ``load_topology("package.module:attr")`` imports the module and resolves
  ``attr`` (dots allowed) to a ``Topology``: the attribute may be a built
  ``Topology``, a builder (anything with ``create_topology()``: a
  ``LinearDRPCTopologyBuilder``, a ``TransactionalTopologyBuilder``), or a
  zero-argument callable returning one; anything else, a callable that needs
  arguments included, raises ``ValueError`` naming the spec;
- ``as_topology`` does the same conversion for a value already in hand;
  ``as_drpc``, ``as_hosted`` (a DRPC function or a plain topology) and
  ``as_transactional`` also check the kind (``ValueError`` naming the spec: a
  transactional topology is not a DRPC function);
- ``Wakeups`` is a thread-safe registry of per-function callbacks, the
  ``add_listener`` half of an invocations handle that can wake its spouts;
- ``add_hosting_arguments``/``hosting_setup`` give the command lines that host
  topologies (``drpc-server``, ``drpc.runner``) the same ``--topology``,
  ``--executor``, ``--log-level`` and ``--log-format text|json`` options
  (logging set up by ``drpc.logs.configure_logging``), the Spark flags of
  ``drpc.sparkconf.add_spark_arguments`` (``--master``, ``--spark-conf``,
  ``--spark-conf-file``, ``--start-timeout``) and ``--slots``; ``--topology``
  modules are imported from the working directory first, as ``python -m``
  does (``drpc.commandline``), and must serve a DRPC function.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

from drpc.builders.drpc_components import INVOCATIONS_SERVICE
from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.commandline import WORKING_DIRECTORY_HELP, import_from_working_directory
from drpc.errors import DRPCError
from drpc.executors import EXECUTORS, SPARK_EXECUTORS, create_executor
from drpc.logs import add_logging_arguments, configure_logging
from drpc.model.topology import Topology
from drpc.observe import OBSERVER_SERVICE, Observer
from drpc.requests import Invocations
from drpc.sparkconf import add_spark_arguments, spark_options

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
        _check_takes_no_arguments(value, source)
        return as_topology(value(), f"{source}()")
    raise ValueError(
        f"{source} is a {type(value).__name__}, not a Topology, a topology builder "
        "or a zero-argument callable returning one"
    )


def _check_takes_no_arguments(factory: Callable[..., Any], source: str) -> None:
    """ValueError naming ``source`` and the parameters if ``factory()`` cannot be called."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature to read (some built-ins): just call it
        return
    try:
        signature.bind()
    except TypeError:
        needed = [
            name
            for name, parameter in signature.parameters.items()
            if parameter.default is parameter.empty
            and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        ]
        raise ValueError(
            f"{source} needs arguments ({', '.join(needed)}); name a topology builder, a "
            "Topology or a zero-argument callable returning one"
        ) from None


def as_transactional(value: Any, source: str = "value") -> Topology:
    """``as_topology`` for a transactional topology; ValueError naming ``source`` otherwise."""
    topology = as_topology(value, source)
    if topology.transactional is None:
        raise ValueError(
            f"{source} is not a transactional topology (build it with TransactionalTopologyBuilder)"
        )
    return topology


def as_hosted(value: Any, source: str = "value") -> Topology:
    """``as_topology`` for what a server or runner hosts beside its runs: a DRPC function
    or a plain topology (``drpc.topologies``); ValueError naming ``source`` for a
    transactional one (run with ``--transactional`` or ``drpc-transactional run``)."""
    topology = as_topology(value, source)
    if topology.transactional is not None:
        raise ValueError(
            f"{source} is a transactional topology, not a DRPC function: run it with "
            "--transactional (drpc-server) or drpc-transactional run"
        )
    return topology


def as_drpc(value: Any, source: str = "value") -> Topology:
    """``as_hosted`` for a topology serving a DRPC function; ValueError naming ``source``
    otherwise."""
    topology = as_hosted(value, source)
    if topology.drpc_function is None:
        raise ValueError(
            f"{source} serves no DRPC function (build it with LinearDRPCTopologyBuilder)"
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


class Host:
    """The runtimes of the DRPC functions served from one invocations handle (see the
    module doc)."""

    def __init__(
        self,
        invocations: Invocations,
        *,
        executor: str | None = None,
        conf: dict[str, Any] | None = None,
        observer: Observer | None = None,
        executor_options: dict[str, Any] | None = None,
        spark_options: dict[str, Any] | None = None,
    ) -> None:
        """
        :param executor: the default executor of registered topologies (default
            ``default_executor()``).
        :param conf: topology configuration for every runtime (under each topology's own).
        :param observer: receives the runtimes' events (``drpc.observe``).
        :param executor_options: default keywords of every executor.
        :param spark_options: default keywords of Spark executors only (``master``,
            ``spark_conf``, ``start_timeout``: ``drpc.runtime.get_session``); none by default.
        """
        self.invocations = invocations
        self.executor = executor or default_executor()
        self.conf = dict(conf or {})
        self.observer = observer
        self.executor_options = dict(executor_options or {})
        self.spark_options = dict(spark_options or {})
        self._lock = threading.Lock()
        self._runtimes: dict[str, tuple[str, Any] | None] = {}  # None: starting
        self._stopped = False

    def register(self, topology: Any, executor: str | None = None, **options: Any) -> Any:
        built = as_topology(topology, "the topology")
        function = built.drpc_function
        if function is None:
            raise DRPCError(f"topology {built.name!r} does not serve a DRPC function")
        name = executor or self.executor
        with self._lock:
            if self._stopped:
                raise DRPCError("the host is stopped")
            if function in self._runtimes:
                raise DRPCError(f"function {function!r} is already registered")
            self._runtimes[function] = None
        defaults = self.spark_options if name in SPARK_EXECUTORS else {}
        try:
            runtime = create_executor(
                name,
                built,
                services={INVOCATIONS_SERVICE: self.invocations, OBSERVER_SERVICE: self.observer},
                conf=self.conf,
                **{**defaults, **self.executor_options, **options},
            )
            runtime.start()
        except BaseException:
            with self._lock:
                self._runtimes.pop(function, None)
            raise
        with self._lock:
            self._runtimes[function] = (name, runtime)
        log.info("registered DRPC function %r on the %s executor", function, name)
        return runtime

    def runtime(self, function: str) -> Any:
        with self._lock:
            entry = self._runtimes.get(function)
        if entry is None:
            raise KeyError(function)
        return entry[1]

    def executor_of(self, function: str) -> str:
        with self._lock:
            entry = self._runtimes.get(function)
        if entry is None:
            raise KeyError(function)
        return entry[0]

    def __contains__(self, function: object) -> bool:
        """Whether ``function`` is registered (or starting)."""
        with self._lock:
            return function in self._runtimes

    @property
    def functions(self) -> list[str]:
        """The registered functions (those still starting included), sorted."""
        with self._lock:
            return sorted(self._runtimes)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            entries = [entry for entry in self._runtimes.items() if entry[1] is not None]
        for function, entry in entries:
            assert entry is not None
            try:
                entry[1].stop()
            except Exception:
                log.exception("stopping the runtime of %r failed", function)


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
        help="a DRPC topology to host, e.g. drpc.examples.reach:topology, or a plain one to "
        "run beside it (drpc.topologies) (repeatable); ATTR may be a "
        "LinearDRPCTopologyBuilder, a TopologyBuilder, a Topology or a zero-argument callable "
        f"returning one; {WORKING_DIRECTORY_HELP}",
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=default_executor(),
        help="executor of the topologies: local (in this process), spark (resident Spark "
        "tasks, millisecond calls) or spark-batch (a Spark job per batch of requests) "
        "(default: %(default)s)",
    )
    add_spark_arguments(parser)
    parser.add_argument(
        "--slots",
        type=int,
        metavar="N",
        help="executor slots the resident Spark tasks take (--executor spark; default half "
        "the Spark default parallelism, at least 1: the rest runs batch jobs)",
    )
    add_logging_arguments(parser)


def hosting_setup(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[list[Topology], dict[str, Any]]:
    """Configure logging, load ``--topology`` values and build executor options from
    parsed ``add_hosting_arguments`` options; bad values exit through ``parser.error``."""
    configure_logging(args.log_level, args.log_format)
    import_from_working_directory()
    try:
        topologies = [as_hosted(load_topology(spec), spec) for spec in args.topology]
    except ValueError as error:
        parser.error(str(error))
    options = spark_options(parser, args, args.executor)
    if args.slots is not None:
        if args.executor != "spark":
            parser.error("--slots applies to --executor spark only")
        if args.slots < 1:
            parser.error("--slots must be >= 1")
        options["slots"] = args.slots
    return topologies, options


SERVING_OPTIONS = frozenset({"slots", "request_path", "replicate"})
"""Executor options of served functions only: they size and route the resident tasks."""


def job_options(options: dict[str, Any]) -> dict[str, Any]:
    """The executor options that apply to runs made of Spark jobs (transactional runs):
    all but ``SERVING_OPTIONS``."""
    return {name: value for name, value in options.items() if name not in SERVING_OPTIONS}
