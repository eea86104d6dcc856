"""The Trident graph as the API records it: one node per operation, typed, before compiling.

Contract. A ``Node`` is one step of a stream: its operation (one of the
records below), the fields of the tuples it outputs, its parent (None for a
source) and its children (a stream used twice has two). Aggregations are
already expanded here into the steps that run them (``drpc.trident.stream``):
a combiner's partial aggregate per partition, a ``Repartition``, then the
combine; so the compiler (``drpc.trident.compiler``) only cuts the graph at
``Repartition``, ``Persist``, ``PartitionPersist``, ``WindowStep``, ``Merge``
and ``Join`` nodes. A ``Merge`` or ``Join`` node has no parent: its operation names its
input nodes, and it is a child of each of them.

A node also carries what ``Stream.name`` and the resource hints
(``set_cpu_load``, ``set_memory_load``) gave it: its ``name`` (the label of the
stream it was declared on, Storm's), its ``resources`` (``Resources``), and its
``created`` order, by which the compiler lists a component's names as Storm does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from drpc.errors import InvalidTopologyError
from drpc.model.grouping import Grouping
from drpc.trident.operations import (
    AnyAggregator,
    CombinerAggregator,
    Consumer,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    QueryFunction,
    StateUpdater,
)
from drpc.trident.state import MapStateFactory
from drpc.trident.window_store import LMDBWindowsStoreFactory
from drpc.trident.windowing import WindowConfig

Names = tuple[str, ...]

CPU_LOAD_CONF = "topology.component.cpu.pcore.percent"
"""Storm's key of a component's CPU load: percent of one core (100: a whole core)."""
ON_HEAP_CONF = "topology.component.resources.onheap.memory.mb"
"""Storm's key of a component's on-heap memory, in MB."""
OFF_HEAP_CONF = "topology.component.resources.offheap.memory.mb"
"""Storm's key of a component's off-heap memory, in MB."""


def checked_load(value: Any, what: str, *, zero: bool = False) -> float:
    """``value`` as a finite number > 0 (>= 0 with ``zero``), else ``InvalidTopologyError``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        bound = ">= 0" if zero else "> 0"
        raise InvalidTopologyError(f"{what} is a finite number {bound}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Resources:
    """Storm's resource hints of one step or one component (None: not set).

    A component's are the sum of its steps' (Storm sums a bolt's operations
    too; where Storm refuses a bolt whose operations set a resource unevenly
    without topology defaults, here a step that sets none adds nothing).
    """

    cpu_load: float | None = None
    on_heap: float | None = None
    off_heap: float | None = None

    def __add__(self, other: Resources) -> Resources:
        def plus(a: float | None, b: float | None) -> float | None:
            return b if a is None else a if b is None else a + b

        return Resources(
            plus(self.cpu_load, other.cpu_load),
            plus(self.on_heap, other.on_heap),
            plus(self.off_heap, other.off_heap),
        )

    def conf(self) -> dict[str, float]:
        """The component configuration Storm's declarer would hold for these hints."""
        keys = ((CPU_LOAD_CONF, self.cpu_load), (ON_HEAP_CONF, self.on_heap))
        conf = {key: value for key, value in keys if value is not None}
        if self.off_heap is not None:
            conf[OFF_HEAP_CONF] = self.off_heap
        return conf


@dataclass(frozen=True, slots=True)
class SpoutSource:
    txid: str
    spout: Any
    parallelism: int


@dataclass(frozen=True, slots=True)
class DRPCSource:
    function: str


@dataclass(frozen=True, slots=True)
class Each:
    input: Names
    function: Function
    output: Names


@dataclass(frozen=True, slots=True)
class FilterStep:
    input: Names
    filter: Filter


@dataclass(frozen=True, slots=True)
class Project:
    fields: Names


@dataclass(frozen=True, slots=True)
class MapStep:
    function: MapFunction


@dataclass(frozen=True, slots=True)
class FlatMapStep:
    function: FlatMapFunction


@dataclass(frozen=True, slots=True)
class Peek:
    consumer: Consumer


@dataclass(frozen=True, slots=True)
class StateQuery:
    state: MapStateFactory
    input: Names
    function: QueryFunction
    output: Names


@dataclass(frozen=True, slots=True)
class PartitionAggregate:
    """Aggregate each group (``group``: none for the whole partition) of a batch partition."""

    group: Names
    input: Names
    aggregator: AnyAggregator
    output: Names


@dataclass(frozen=True, slots=True)
class Repartition:
    """Send tuples on to other tasks: ``fields`` (hash), ``global`` (the first),
    ``batch_global`` (one per batch), ``all``, ``shuffle``, ``none``, ``local`` (local or
    shuffle), ``identity`` (task i to task i, as many tasks each side), ``custom``
    (``grouping``, a user's ``Grouping``)."""

    how: str
    fields: Names = ()
    grouping: Grouping | None = None


@dataclass(frozen=True, slots=True)
class Persist:
    """Apply each group's batch aggregate to a map state in the commit (a committer)."""

    state: MapStateFactory
    group: Names
    input: Names
    aggregator: CombinerAggregator[Any] | Any


@dataclass(frozen=True, slots=True)
class PartitionPersist:
    """Hand each batch partition's tuples to a state updater in the commit (a committer)."""

    state: MapStateFactory
    input: Names
    updater: StateUpdater


@dataclass(frozen=True, slots=True)
class WindowStep:
    """Windows over the stream's tuples, fired in the commits (``drpc.trident.windowing``):
    ``name`` keys the window's store, ``clock`` gives the time in seconds."""

    config: WindowConfig
    store: LMDBWindowsStoreFactory
    name: str
    input: Names
    aggregator: AnyAggregator
    output: Names
    clock: Callable[[], float]


@dataclass(frozen=True, slots=True, eq=False)
class Merge:
    """The tuples of every input node, as one stream (the first input's field names)."""

    inputs: tuple[Node, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Join:
    """The inner join of two input nodes' batch tuples on ``keys`` (one per input).

    Output: the join fields, then the other fields of the first input, then
    those of the second (renamed to the join's out fields).
    """

    inputs: tuple[Node, Node]
    keys: tuple[Names, Names]


Operation = (
    SpoutSource
    | DRPCSource
    | Each
    | FilterStep
    | Project
    | MapStep
    | FlatMapStep
    | Peek
    | StateQuery
    | PartitionAggregate
    | Repartition
    | Persist
    | PartitionPersist
    | WindowStep
    | Merge
    | Join
)


_created = itertools.count()


@dataclass(eq=False, slots=True)
class Node:
    operation: Operation
    fields: Names
    parent: Node | None
    children: list[Node] = field(default_factory=list)
    parallelism: int | None = None  # set by parallelism_hint on the step ending a segment
    name: str | None = None
    resources: Resources = field(default_factory=Resources)
    created: int = field(default_factory=lambda: next(_created))

    def add(self, operation: Operation, fields: Names, name: str | None = None) -> Node:
        child = Node(operation, fields, self, name=name)
        self.children.append(child)
        return child


class CombinePartials(CombinerAggregator[Any]):
    """Combines the partial aggregates a combiner produced per partition (its one input field)."""

    def __init__(self, aggregator: CombinerAggregator[Any]) -> None:
        self.aggregator = aggregator

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.aggregator.prepare(conf, context)

    def init(self, tuple: Any) -> Any:
        return tuple.get_value(0)

    def combine(self, a: Any, b: Any) -> Any:
        return self.aggregator.combine(a, b)

    def zero(self) -> Any:
        return self.aggregator.zero()
