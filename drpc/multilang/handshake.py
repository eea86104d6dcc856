"""The first message a multilang subprocess receives: ``{"conf", "context", "pidDir"}``.

Contract: ``setup_message(conf, context, pid_dir)`` is Storm's setup info as
``JsonSerializer.connect`` sends it:

- ``conf``: the topology configuration the component was prepared with, keeping only
  the entries JSON can carry (drpc's own entries may hold Python objects; the others
  are dropped, not turned into text a subprocess could mistake for a value);
- ``pidDir``: the directory the subprocess writes an empty file named by its pid to;
- ``context``: ``context_message(context)``, Storm's ``TopologyContext.toJSONString``:
  ``task->component`` (every task of the topology, task ids as strings), ``taskid``,
  ``componentid``, ``streams``, ``stream->outputfields``, ``stream->target->grouping``,
  ``source->stream->grouping`` and ``source->stream->fields``. A grouping is
  ``{"type": NAME}`` with Storm's names (``SHUFFLE``, ``FIELDS``, ``ALL``, ``NONE``,
  ``DIRECT``, ``LOCAL_OR_SHUFFLE``) and ``"fields"`` for a fields grouping; a global
  grouping is, as in Storm, a fields grouping on no fields.

The answer is ``{"pid": N}``: ``pid_of(message)`` reads it, ``None`` for anything else.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drpc.model.context import TopologyContext
    from drpc.model.grouping import Grouping
    from drpc.model.topology import Topology

_FIELDS_KINDS = {"fields", "key_group"}
_NO_FIELDS_KINDS = {"global", "batch_global"}


def setup_message(conf: dict[str, Any], context: TopologyContext, pid_dir: str) -> dict[str, Any]:
    return {"conf": jsonable_conf(conf), "pidDir": pid_dir, "context": context_message(context)}


def jsonable_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``conf`` whose key is a string and whose value JSON can carry."""
    kept: dict[str, Any] = {}
    for key, value in conf.items():
        if not isinstance(key, str):
            continue
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            continue
        kept[key] = value
    return kept


def grouping_message(grouping: Grouping) -> dict[str, Any]:
    kind = grouping.kind
    if kind in _FIELDS_KINDS:
        return {"type": "FIELDS", "fields": list(getattr(grouping, "fields", ()))}
    if kind in _NO_FIELDS_KINDS:
        return {"type": "FIELDS", "fields": []}
    return {"type": kind.upper()}


def context_message(context: TopologyContext) -> dict[str, Any]:
    # TopologyContext offers no public view of every task; Storm's context sends them all.
    topology: Topology = context._topology
    component = context.this_component_id
    streams = sorted(topology.components[component].outputs)
    sources: dict[str, dict[str, Any]] = {}
    source_fields: dict[str, dict[str, list[str]]] = {}
    for stream, grouping in sorted(context.this_sources().items()):
        sources.setdefault(stream.component_id, {})[stream.stream_id] = grouping_message(grouping)
        source_fields.setdefault(stream.component_id, {})[stream.stream_id] = list(
            topology.output_fields(stream.component_id, stream.stream_id)
        )
    return {
        "task->component": {str(task): name for task, name in topology.task_component.items()},
        "taskid": context.this_task_id,
        "componentid": component,
        "streams": streams,
        "stream->outputfields": {
            stream: list(context.this_output_fields(stream)) for stream in streams
        },
        "stream->target->grouping": {
            stream: {target: grouping_message(g) for target, g in targets.items()}
            for stream, targets in context.this_targets().items()
        },
        "source->stream->grouping": sources,
        "source->stream->fields": source_fields,
    }


def pid_of(message: Any) -> int | None:
    """The pid of a handshake answer, or None when ``message`` is no ``{"pid": N}``."""
    if isinstance(message, dict):
        pid = message.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
            return pid
    return None
