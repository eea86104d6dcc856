"""Output routing of one task: which tasks receive an emit, checked against its stream.

Contract: ``OutputRouter(topology, component_id, task_id)`` validates an emit
(declared stream, direct or not, a list of exactly as many values as the
stream has fields) and returns the receiving task ids, using one partitioner
per subscription built from the grouping spec; ``targets_many`` routes a
batch of checked emits at once, choosing exactly as ``targets`` would. Both executors route through
it, so a tuple lands on the same task on each. ``serialize`` pickles values
and turns a failure into ``UnserializableValueError`` naming the step;
``pickled`` does the same unless every value is immutable, for an emit handed to
receivers in the same process at once (``receiver_tuple`` gives each its own
``Tuple`` and list of values); ``freeze_values``/``thaw_values`` are the same for
values that travel between processes first (the resident executor).
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Sequence
from typing import Any, Final

from drpc.errors import InvalidTupleError, UnserializableValueError
from drpc.model.fields import Fields
from drpc.model.partitioners import Partitioner
from drpc.model.streams import StreamInfo
from drpc.model.topology import Topology
from drpc.model.tuples import Tuple
from drpc.requests import ReturnInfo
from drpc.state.versions import PinnedRequest


class _TaskIds(dict[tuple[int, ...], tuple[int, ...]]):
    """A route's task ids for each choice of task indexes, worked out once per choice."""

    __slots__ = ("_tasks",)

    def __init__(self, tasks: list[int]) -> None:
        super().__init__()
        self._tasks = tasks

    def __missing__(self, chosen: tuple[int, ...]) -> tuple[int, ...]:
        ids = self[chosen] = tuple(self._tasks[index] for index in chosen)
        return ids


class _Route:
    __slots__ = ("partitioner", "subscriber", "task_ids", "tasks")

    def __init__(self, subscriber: str, partitioner: Partitioner, tasks: list[int]) -> None:
        self.subscriber = subscriber
        self.partitioner = partitioner
        self.tasks = tasks
        self.task_ids = _TaskIds(tasks)


class OutputRouter:
    def __init__(self, topology: Topology, component_id: str, task_id: int) -> None:
        spec = topology.components[component_id]
        self.component_id = component_id
        self.outputs = spec.outputs
        self.index = topology.component_task_ids[component_id].index(task_id)
        self.routes: dict[str, list[_Route]] = {}
        self.direct_targets: dict[str, set[int]] = {}
        self.widths = {stream: len(info.fields) for stream, info in spec.outputs.items()}
        # the widths of the streams emitted on with ``emit`` (not direct)
        self.list_widths = {
            stream: len(info.fields) for stream, info in spec.outputs.items() if not info.direct
        }
        for stream_id, info in spec.outputs.items():
            routes: list[_Route] = []
            direct: set[int] = set()
            for subscriber, grouping in topology.subscribers(component_id, stream_id):
                tasks = topology.component_task_ids[subscriber]
                if grouping.needs_direct_stream:
                    direct.update(tasks)
                    continue
                partitioner = grouping.partitioner(
                    info.fields, self.index, spec.parallelism, len(tasks)
                )
                routes.append(_Route(subscriber, partitioner, tasks))
            self.routes[stream_id] = routes
            self.direct_targets[stream_id] = direct
        # The last stream ``check`` passed a list emit on, and ``targets`` routed on, with
        # what was looked up for it: a step mostly emits on one stream, and the same string
        # object (a literal, or the default) needs no look-up.
        self._checked_stream: str | None = None
        self._checked_width = 0
        self._routed_stream: str | None = None
        self._routed: list[_Route] = []
        self._fields_stream: str | None = None
        self._fields: Fields | None = None

    def check(self, stream: str, values: Sequence[Any], direct: bool) -> None:
        if type(values) is list and not direct:  # the common emit
            if stream is self._checked_stream:
                if self._checked_width == len(values):
                    return
            else:
                width = self.list_widths.get(stream)
                if width is not None and width == len(values):
                    self._checked_stream = stream
                    self._checked_width = width
                    return
        info = self.check_stream(stream, direct)
        # list and tuple first: the Sequence check goes through the ABC machinery, in Python
        if not isinstance(values, (list, tuple)) and (
            isinstance(values, (str, bytes)) or not isinstance(values, Sequence)
        ):
            raise InvalidTupleError(
                f"step {self.component_id!r} emitted {type(values).__name__} on stream "
                f"{stream!r}; emit a list of values, e.g. Values(...)"
            )
        if len(values) != self.widths[stream]:
            raise InvalidTupleError(
                f"step {self.component_id!r} emitted {len(values)} values on stream {stream!r}, "
                f"which declares {len(info.fields)} fields {info.fields.to_list()}"
            )

    def check_stream(self, stream: str, direct: bool) -> StreamInfo:
        """The declaration of ``stream``, which must be declared, and direct if ``direct``."""
        info = self.outputs.get(stream)
        if info is None:
            declared = sorted(s for s in self.outputs if not s.startswith("__"))
            raise InvalidTupleError(
                f"step {self.component_id!r} emitted on undeclared stream {stream!r} "
                f"(declared: {declared})"
            )
        if info.direct != direct:
            raise InvalidTupleError(
                f"step {self.component_id!r} used {'emit_direct' if direct else 'emit'} on "
                f"stream {stream!r}, which is {'' if info.direct else 'not '}declared direct"
            )
        return info

    def fields(self, stream: str) -> Fields:
        """The declared fields of ``stream``: its receivers' tuples carry them."""
        fields = self._fields
        if fields is None or stream is not self._fields_stream:
            fields = self._fields = self.outputs[stream].fields
            self._fields_stream = stream
        return fields

    def targets(self, stream: str, values: Sequence[Any]) -> list[int]:
        if stream is self._routed_stream:
            routes = self._routed
        else:
            routes = self._routed = self.routes[stream]
            self._routed_stream = stream
        chosen: list[int] = []
        for route in routes:
            for index in route.partitioner.choose(values):
                chosen.append(route.tasks[index])
        return chosen

    def targets_many(self, stream: str, many: Sequence[Sequence[Any]]) -> list[tuple[int, ...]]:
        """The receiving task ids of each of ``many`` (emits on ``stream``, checked already),
        in order: what ``targets`` returns for each, in one pass per subscription."""
        routes = self.routes[stream]
        if len(routes) == 1:
            task_ids = routes[0].task_ids
            return [task_ids[chosen] for chosen in routes[0].partitioner.choose_many(many)]
        if not routes:
            return [()] * len(many)
        each_route = [
            [route.task_ids[chosen] for chosen in route.partitioner.choose_many(many)]
            for route in routes
        ]
        return [sum(ids, ()) for ids in zip(*each_route, strict=True)]

    def direct_target(self, stream: str, task: int) -> list[int]:
        if task not in self.direct_targets[stream]:
            raise InvalidTupleError(
                f"step {self.component_id!r} emitted directly to task {task} on stream "
                f"{stream!r}, but that task does not subscribe to it with a direct grouping"
            )
        return [task]

    def serialize(self, stream: str, values: Sequence[Any]) -> bytes:
        return serialize_values(self.component_id, stream, values)

    def pickled(self, stream: str, values: Sequence[Any]) -> bytes | None:
        return pickled_values(self.component_id, stream, values)


Payload = bytes | tuple[Any, ...]
"""Emitted values for receivers in the same process (``freeze_values``)."""

SHAREABLE: Final = frozenset({str, int, float, bool, bytes, type(None), ReturnInfo, PinnedRequest})
"""Types whose values no receiver can change: passed as they are, not pickled."""


def freeze_values(component_id: str, stream: str, values: Sequence[Any]) -> Payload:
    """``values`` as receivers in this process get them: a tuple when each one is of a
    ``SHAREABLE`` type (exactly: a subclass may be mutable), which every receiver may
    share; otherwise pickled (``serialize_values``), so a receiver gets a copy of its own
    and a value that could not travel between processes fails here as on Spark."""
    # most emits are lists: compiled, a list's own loop and copy (``serialize_values``
    # pickles a list of the values either way)
    items = values if isinstance(values, list) else list(values)
    if _shareable(items):
        return tuple(items)
    return serialize_values(component_id, stream, items)


def _shareable(items: list[Any]) -> bool:
    for value in items:
        kind = type(value)
        if kind is not str and kind is not int and kind not in SHAREABLE:
            return False
    return True


def thaw_values(payload: Payload) -> list[Any]:
    """A receiver's own list of the values ``freeze_values`` made ``payload`` from."""
    return pickle.loads(payload) if isinstance(payload, bytes) else list(payload)


def pickled_values(component_id: str, stream: str, values: Sequence[Any]) -> bytes | None:
    """``freeze_values`` for receivers an emitter hands its values to at once: None when
    each one is ``SHAREABLE`` (each receiver then gets a copy of ``values`` themselves,
    ``receiver_values``), else pickled. One copy per receiver, none in between."""
    if isinstance(values, list):
        if _shareable(values):
            return None
        return serialize_values(component_id, stream, values)
    return pickled_values(component_id, stream, list(values))


def receiver_values(values: Sequence[Any], pickled: bytes | None) -> list[Any]:
    """A receiver's own list of emitted ``values``: unpickled from ``pickled`` (what
    ``pickled_values`` made of them), else copied."""
    if pickled is not None:
        return pickle.loads(pickled)
    return values.copy() if isinstance(values, list) else list(values)


def receiver_tuple(
    values: Sequence[Any],
    pickled: bytes | None,
    fields: Fields,
    source: str,
    stream: str,
    source_task: int,
    message_id: dict[int, int],
) -> Tuple:
    """The ``Tuple`` one receiver of an emit gets: its own values (``receiver_values``),
    where they came from and its acking ``message_id``."""
    return Tuple(receiver_values(values, pickled), fields, source, stream, source_task, message_id)


def serialize_values(component_id: str, stream: str, values: Any) -> bytes:
    try:
        return pickle.dumps(list(values), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:
        raise UnserializableValueError(
            f"step {component_id!r} emitted a value on stream {stream!r} that cannot "
            f"be pickled, so it cannot travel between tasks: {type(error).__name__}: {error}"
        ) from error


class IdOwner:
    """Whether task ``index`` owns an id: the id stream's grouping sends a tuple carrying it
    (the id first, the other fields None) to that task. A class, not a closure: compiled,
    a caller typed with it calls ``owns`` directly."""

    __slots__ = ("_index", "_padding", "_partitioner")

    def __init__(self, partitioner: Partitioner, index: int, fields: int) -> None:
        self._partitioner = partitioner
        self._index = index
        self._padding: list[Any] = [None] * (fields - 1)

    def owns(self, id: Hashable) -> bool:
        return self._index in self._partitioner.choose([id, *self._padding])

    def __call__(self, id: Hashable) -> bool:
        return self.owns(id)


def id_owner_check(topology: Topology, component_id: str, index: int) -> IdOwner | None:
    """Whether task ``index`` of a coordinated component owns an id (receives its id tuple).

    None when every task owns every id it sees (no id stream, or a single task).
    The id stream is grouped on the id, its first field (or all-grouped, when
    every task owns every id), so ownership is the grouping's choice for a
    tuple carrying that id.
    """
    spec = topology.components[component_id]
    coordination = spec.coordination
    if coordination is None or coordination.id_stream is None or spec.parallelism == 1:
        return None
    stream = coordination.id_stream
    fields = topology.output_fields(stream.component_id, stream.stream_id)
    source_tasks = topology.components[stream.component_id].parallelism
    partitioner = spec.inputs[stream].partitioner(fields, 0, source_tasks, spec.parallelism)
    return IdOwner(partitioner, index, len(fields))
