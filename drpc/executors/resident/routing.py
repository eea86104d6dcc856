"""Where a resident function's tasks run, and how its messages reach them.

Contract.

- ``place(topology, workers)`` maps every task id to a node: 0 (the driver)
  for spouts and the DRPC scaffolding around the user's steps
  (``prepare-request``, ``join-result``, ``return-results``: they talk to the
  request table, which lives with the driver), 1..``workers`` for the user's
  bolt tasks, dealt round-robin in component order so every step is spread
  over every worker. A bolt whose task i queries partition i of a partitioned
  state (its ``reads_partitions``, as many tasks as partitions) goes where those
  partitions live, when this process placed them
  (``drpc.executors.resident.partition_reads.PLACEMENTS``): Storm's routing, each
  key read on the task that owns it. The ackers run on the driver, beside the spouts whose
  roots they track. With ``scaffolding_on_workers`` (a topology given one
  scaffolding task per worker, ``spread_scaffolding``: each worker fetches
  requests from the servers itself) task ``i`` of every spout and
  scaffolding component runs on worker ``i + 1`` and nothing on the driver;
  each worker's ackers track the roots its spouts make
  (``acker_roots(worker, workers)``).
- ``Route`` is the ``Remote`` (``drpc.executors.local.executor``) of one
  process's share of one deployment: a message for a task elsewhere goes to
  that task's node, an acker message to the driver (with ``acker_modulus``,
  to the worker whose spouts make the root: ``root_node``), a failed root's
  broadcast to every worker, each as a wire item ``(key, destination,
  payload)`` (``drpc.executors.resident.transport``).
- ``dispatch(engine, destination, payload)`` hands an item that arrived for
  this process to the engine of its deployment; ``SPANS`` items carry the
  step spans a worker's tasks recorded (``ShippedSpans``) to the driver,
  which keeps the requests' spans, and ``FIELDS`` items the log fields of a
  request to a worker, ahead of its first tuple there (once per request and
  worker while the request is in flight: what was told is forgotten once the
  request is over). ``FED`` items carry requests from the driver to a task and
  ``OUTCOMES`` items their outcomes back, on the fed path
  (``drpc.executors.resident.feeding``); ``dispatch_items`` hands both to its ``fed``
  callback.

``key`` names a deployment (one function's topology on the current resident
job); ``CONTROL`` items carry the deployment protocol instead
(``drpc.executors.resident.control``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from drpc.builders.linear_drpc import JOIN_ID, PREPARE_ID, RETURN_ID
from drpc.executors.local.executor import LocalExecutor
from drpc.executors.local.messages import Message, TupleMessage, decode, encode
from drpc.executors.local.spans import KNOWN_REQUESTS, ShippedSpans, SpanEvent, record_shipped
from drpc.executors.resident.partition_reads import PLACEMENTS
from drpc.executors.resident.transport import Node
from drpc.model.topology import ComponentSpec, Topology
from drpc.model.tuples import Tuple
from drpc.state.partition import partition_root
from drpc.state.topology import STATE_DIR_CONF

DRIVER = 0
ACKER = -1
ABANDON = -2
CONTROL = -3
SPANS = -4
FIELDS = -5
FED = -6
OUTCOMES = -7

DRIVER_COMPONENTS = frozenset({PREPARE_ID, JOIN_ID, RETURN_ID})


def place(
    topology: Topology, workers: int, *, scaffolding_on_workers: bool = False
) -> dict[int, int]:
    """The node of every task (see the module doc)."""
    if workers < 1:
        raise ValueError(f"a resident deployment needs at least one worker, got {workers}")
    node_of: dict[int, int] = {}
    dealt = 0
    for component_id, spec in topology.components.items():
        on_driver = spec.kind == "spout" or component_id in DRIVER_COMPONENTS
        owners = None if on_driver else partition_owners(topology, spec, workers)
        for index, task_id in enumerate(topology.component_task_ids[component_id]):
            if owners is not None:
                node_of[task_id] = owners[index]
                continue
            if on_driver and scaffolding_on_workers:
                if spec.parallelism != workers:
                    raise ValueError(
                        f"{component_id!r} has {spec.parallelism} tasks for {workers} workers; "
                        "spread the scaffolding first (spread_scaffolding)"
                    )
                node_of[task_id] = 1 + index
            elif on_driver:
                node_of[task_id] = DRIVER
            else:
                node_of[task_id] = 1 + dealt % workers
                dealt += 1
    return node_of


def partition_owners(
    topology: Topology, spec: ComponentSpec, workers: int
) -> tuple[int, ...] | None:
    """The owner node of each partition a component's tasks query, one per task, when
    they are placed here and on these workers (see ``place``)."""
    group = getattr(spec.user_component, "reads_partitions", None)
    directory = topology.conf.get(STATE_DIR_CONF)
    if group is None or not directory:
        return None
    owners = PLACEMENTS.get((partition_root(str(directory), topology.conf), group))
    if (
        owners is None
        or len(owners) != spec.parallelism
        or not set(owners) <= set(range(1, workers + 1))
    ):
        return None
    return owners


def acker_roots(worker: int, workers: int) -> tuple[int, int]:
    """``LocalExecutor``'s ``acker_roots`` for worker ``worker`` (1..``workers``) of a
    deployment whose workers run its spouts: the roots ``root_node`` sends to it."""
    return workers, worker - 1


def root_node(root: int, workers: int) -> int:
    """The worker whose ackers track ``root`` (``acker_roots``)."""
    return 1 + root % workers


def hosted_by(node_of: dict[int, int], node: int) -> set[int]:
    return {task for task, owner in node_of.items() if owner == node}


class Route:
    """Sends one share's messages for elsewhere (see the module doc)."""

    def __init__(
        self,
        node: Node,
        key: str,
        node_of: dict[int, int],
        log_fields: Callable[[int], dict[str, Any] | None] | None = None,
        *,
        acker_modulus: int = 0,
    ) -> None:
        """
        :param acker_modulus: the number of workers when each worker's ackers track its
            spouts' roots (``root_node``); 0 (default): the ackers are on the driver.
        :param log_fields: the log fields of a root's request (the driver, when it keeps
            the requests' spans): sent to a worker ahead of the request's first tuple
            there, so the worker's log lines about it carry them.
        """
        self.node = node
        self.key = key
        self.node_of = node_of
        self.log_fields = log_fields
        self.acker_modulus = acker_modulus
        self._told: OrderedDict[tuple[int, int], None] = OrderedDict()

    def deliver(self, task_id: int, message: Message) -> None:
        node = self.node_of[task_id]
        if self.log_fields is not None and isinstance(message, (Tuple, TupleMessage)):
            self._tell_fields(node, message.message_id)
        self.node.send(node, (self.key, task_id, encode(message)))

    def _tell_fields(self, node: int, roots: dict[int, int]) -> None:
        told = self._told
        for root in roots:
            if (root, node) in told:
                continue
            assert self.log_fields is not None
            fields = self.log_fields(root)
            if fields is None:
                continue
            told[(root, node)] = None
            self._forget_finished()
            self.node.send(node, (self.key, FIELDS, (root, fields)))

    @property
    def remembered(self) -> int:
        """How many (request, worker) pairs it remembers having told."""
        return len(self._told)

    def _forget_finished(self) -> None:
        """Look at the two oldest entries for each one added: drop one whose request is
        over (or past ``KNOWN_REQUESTS``), move one in flight to the back. The map then
        follows the requests in flight instead of filling to its bound, which at a few
        hundred calls a second took minutes and held megabytes per function."""
        told, known = self._told, self.log_fields
        assert known is not None
        for _ in range(2):
            oldest = next(iter(told))
            if len(told) > KNOWN_REQUESTS or known(oldest[0]) is None:
                told.popitem(last=False)
            else:
                told.move_to_end(oldest)

    def to_acker(self, root: int, message: Message) -> None:
        modulus = self.acker_modulus
        node = root_node(root, modulus) if modulus else DRIVER
        self.node.send(node, (self.key, ACKER, encode(message)))

    def broadcast_abandon(self, root: int) -> None:
        self.node.broadcast((self.key, ABANDON, root))

    def ship_spans(self, events: list[SpanEvent]) -> None:
        self.node.send(DRIVER, (self.key, SPANS, events))


def dispatch_items(
    items: list[Any],
    engine_of: Callable[[str], LocalExecutor | None],
    control: Callable[[Any], None],
    fed: Callable[[str, Any], None] | None = None,
) -> None:
    """Hand a frame's items to the engines they are for (``engine_of(key)``; None: not
    running here, the item is dropped), its control items to ``control`` and its fed
    path items (``FED``, ``OUTCOMES``) to ``fed(key, payload)``. What one engine gets
    between control items is posted as its ``holding`` block ends: one post per
    destination task, each root's acks folded into one."""
    held = ExitStack()
    holding: set[str] = set()
    with held:
        for key, destination, payload in items:
            if destination == CONTROL:
                held.close()
                holding.clear()
                control(payload)
                continue
            if destination in (FED, OUTCOMES):
                if fed is not None:
                    fed(key, payload)
                continue
            engine = engine_of(key)
            if engine is None:
                continue
            if key not in holding:
                held.enter_context(engine.holding())
                holding.add(key)
            dispatch(engine, destination, payload)


def dispatch(engine: LocalExecutor, destination: int, payload: Any) -> None:
    """Hand an item that arrived for ``engine``'s share to it."""
    if destination >= 0:
        message = decode(payload)
        if isinstance(message, TupleMessage):
            message = engine.tuple_of(message)
        engine.deliver(destination, message)
    elif destination == ACKER:
        message = decode(payload)
        engine.to_acker(message.root, message)  # type: ignore[union-attr]
    elif destination == ABANDON:
        engine.abandon_local(payload)
    elif destination == SPANS and engine.spans is not None:
        record_shipped(engine.spans, payload)
    elif destination == FIELDS and isinstance(engine.recorder, ShippedSpans):
        engine.recorder.learn(*payload)
