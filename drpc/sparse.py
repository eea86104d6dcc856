"""streamparse projects on drpc: what ``drpc-sparse run -n NAME`` runs, as ``sparse run``.

Contract. ``SparseProject(directory)`` is a streamparse project: its ``config.json``
(``topology_specs``, default ``topologies/``) and its Python components under ``src/``.
``project.topology(name)`` imports ``topologies/NAME.py`` as streamparse does (``src/``
and the topologies' directory importable) and returns the one ``streamparse.Topology``
subclass it defines. ``project.builder(name)`` (or ``as_builder(topology_class, src)``)
makes a drpc ``TopologyBuilder`` of it, a plain topology for ``drpc.topologies``:

- every shell component runs as a multilang subprocess in ``src/``, as on Storm: a
  Python component of the project (command ``streamparse_run``) as ``python -m
  streamparse.run MODULE.CLASS`` with this interpreter and ``src/`` on ``PYTHONPATH``;
  any other as its command and script. It is a ``ShellSpout`` or ``ShellBolt``
  declaring the spec's streams (their fields, direct or not);
- with ``in_process``, the project's Python components run inside the tasks instead
  (``drpc.inprocess``: their own pystorm code, without a subprocess or JSON);
- ``par`` is the component's parallelism and ``config`` its configuration;
- groupings map one to one: shuffle, fields, global (fields of none), all, none,
  direct and local-or-shuffle.

What does not map raises ``SparseProjectError`` naming it: a missing project file or
topology, a file with no or several ``Topology`` classes, a Java component
(``JavaSpout.spec``, ``JavaBolt.spec``: drpc runs no JVM classes), a custom grouping.
streamparse is an optional dependency (``MissingExtraError`` when it is not installed).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from drpc.errors import SparseProjectError
from drpc.inprocess import InProcessBolt, InProcessSpout
from drpc.model.components import BaseRichSpout
from drpc.model.fields import Fields
from drpc.model.streams import GivenStreams, StreamInfo
from drpc.model.topology import BoltDeclarer, TopologyBuilder
from drpc.multilang import ShellBolt, ShellSpout
from drpc.transactional.brokers import require

PYTHON_COMPONENT = "streamparse_run"
"""The command streamparse gives its Python components."""


class SparseShellSpout(GivenStreams, ShellSpout):
    """A streamparse spout run as a multilang subprocess."""

    def __init__(self, *command: str, streams: dict[str, StreamInfo], **settings: Any) -> None:
        super().__init__(*command, **settings)
        self.streams = streams


class SparseShellBolt(GivenStreams, ShellBolt):
    """A streamparse bolt run as a multilang subprocess."""

    def __init__(self, *command: str, streams: dict[str, StreamInfo], **settings: Any) -> None:
        super().__init__(*command, **settings)
        self.streams = streams


class SparseProject:
    """A streamparse project's directory (see the module doc)."""

    def __init__(self, directory: str | os.PathLike[str] = ".") -> None:
        self.directory = Path(directory).resolve()
        config = self.directory / "config.json"
        if not config.is_file():
            raise SparseProjectError(
                f"{self.directory} is not a streamparse project: it has no config.json"
            )
        try:
            settings = json.loads(config.read_text())
        except (OSError, ValueError) as error:
            raise SparseProjectError(f"{config} cannot be read: {error}") from None
        self.topologies_dir = self.directory / str(settings.get("topology_specs", "topologies/"))
        self.src = self.directory / "src"

    def names(self) -> list[str]:
        """The project's topologies (``topologies/NAME.py``)."""
        return sorted(path.stem for path in self.topologies_dir.glob("*.py"))

    def topology(self, name: str) -> Any:
        """The ``streamparse.Topology`` subclass ``topologies/NAME.py`` defines."""
        streamparse = require("streamparse", "streamparse", "streamparse", "drpc-sparse")
        path = self.topologies_dir / f"{name}.py"
        if not path.is_file():
            known = ", ".join(self.names()) or "none"
            raise SparseProjectError(f"no topology {name!r} in {self.topologies_dir} ({known})")
        for directory in (str(self.src), str(self.topologies_dir)):
            if directory not in sys.path:
                sys.path.insert(0, directory)
        spec = importlib.util.spec_from_file_location(f"drpc_sparse_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            raise SparseProjectError(f"{path} raised {type(error).__name__}: {error}") from error
        found = [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, streamparse.Topology)
            and value is not streamparse.Topology
            and value.__module__ == module.__name__
        ]
        if len(found) != 1:
            raise SparseProjectError(
                f"{path} defines {len(found)} streamparse Topology classes, not one"
                + (f" ({', '.join(cls.__name__ for cls in found)})" if found else "")
            )
        return found[0]

    def builder(self, name: str, *, in_process: bool = False) -> TopologyBuilder:
        return as_builder(self.topology(name), self.src, in_process=in_process)


def _command(spec: Any, src: Path) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a shell component (see the module doc)."""
    shell = getattr(getattr(spec, "component_object", None), "shell", None)
    if shell is None:
        raise SparseProjectError(
            f"component {spec.name!r} is a {type(spec).__name__}: drpc runs shell components "
            "(Python, or any multilang command), not JVM classes"
        )
    if shell.execution_command == PYTHON_COMPONENT:
        path = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))
        return [sys.executable, "-m", "streamparse.run", shell.script], {"PYTHONPATH": path}
    return [shell.execution_command, shell.script], {}


def _streams(spec: Any) -> dict[str, StreamInfo]:
    return {
        name: StreamInfo(Fields(*info.output_fields), bool(info.direct))
        for name, info in sorted(spec.outputs.items())
    }


def _subscribe(declarer: BoltDeclarer, spec: Any) -> None:
    for source, grouping in spec.inputs.items():
        component, stream = source.componentId, source.streamId
        if grouping.fields is not None:
            if grouping.fields:
                declarer.fields_grouping(component, Fields(*grouping.fields), stream)
            else:
                declarer.global_grouping(component, stream)
        elif grouping.shuffle is not None:
            declarer.shuffle_grouping(component, stream)
        elif grouping.all is not None:
            declarer.all_grouping(component, stream)
        elif grouping.none is not None:
            declarer.none_grouping(component, stream)
        elif grouping.direct is not None:
            declarer.direct_grouping(component, stream)
        elif grouping.local_or_shuffle is not None:
            declarer.local_or_shuffle_grouping(component, stream)
        else:
            raise SparseProjectError(
                f"component {spec.name!r} subscribes to {component!r} with a custom grouping, "
                "which drpc cannot run"
            )


def _component(spec: Any, src: Path, in_process: bool) -> Any:
    """The drpc spout or bolt that runs ``spec`` (see the module doc)."""
    command, env = _command(spec, src)
    streams = _streams(spec)
    spout = "Spout" in type(spec).__name__
    if in_process and command[1:3] == ["-m", "streamparse.run"]:
        if spout:
            return InProcessSpout(command[3], streams, str(src))
        return InProcessBolt(command[3], streams, str(src))
    if spout:
        return SparseShellSpout(*command, cwd=str(src), env=env, streams=streams)
    return SparseShellBolt(*command, cwd=str(src), env=env, streams=streams)


def as_builder(
    topology: Any, src: str | os.PathLike[str], *, in_process: bool = False
) -> TopologyBuilder:
    """A drpc ``TopologyBuilder`` of a ``streamparse.Topology`` class (see the module doc);
    ``in_process``: the project's Python components run in the tasks
    (``drpc.inprocess``), not as subprocesses."""
    src_dir = Path(src).resolve()
    builder = TopologyBuilder()
    for spec in topology.specs:
        component = _component(spec, src_dir, in_process)
        conf = spec.config or {}
        if isinstance(conf, str):  # streamparse keeps a component's config as JSON text
            conf = json.loads(conf)
        if isinstance(component, BaseRichSpout):
            builder.set_spout(spec.name, component, spec.par).add_configurations(conf)
            continue
        bolt = builder.set_bolt(spec.name, component, spec.par)
        bolt.add_configurations(conf)
        _subscribe(bolt, spec)
    return builder
