"""``TransactionalTopologyBuilder``: batches with txids, processed in parallel, committed in order.

Contract. ``TransactionalTopologyBuilder(id, spout_id, spout,
spout_parallelism=1)``, then ``set_bolt(id, bolt, parallelism=1)`` and
``set_committer_bolt(...)`` (or a bolt that is an ``ICommitter``), each
returning a declarer for its subscriptions by component name (the spout's
tuples come from ``spout_id``). ``create_topology()`` builds Storm's
structure:

    <spout_id>/coordinator (spout) -batch, all-> <spout_id> (the emitter, xN) -> bolts

- the emitter is a coordinated first step that gets one batch tuple
  ``[attempt, metadata, last committed txid]`` per attempt;
- every bolt is coordinated, expecting count reports from every task of each
  component it subscribes to;
- a committer also waits for the coordinator's commit tuple (``commit``
  stream, all grouping) before ``finish_batch``: it finishes only in the commit
  phase, in txid order; bolts after a committer finish after it;
- a committer with more than one task writes a partitioned state
  (``drpc.transactional.partitions``): its fields groupings become key-group
  groupings (``KeyGroupGrouping``, ``drpc.state.key.groups`` of ``conf`` key groups),
  so each task receives the keys its partition holds.

``topology.transactional`` records the id, the committers and the commit
components (the committers and everything downstream of one: what runs in the
commit phase). Build-time checks raise ``InvalidTopologyError`` naming the
component: an unknown spout kind, a committer that cannot finish batches, a
subscription to the coordinator, and the usual wiring errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from drpc.errors import InvalidTopologyError
from drpc.model.components import (
    BaseBatchBolt,
    BaseRichSpout,
    Conf,
    FinishedCallback,
    ICommitter,
    IComponent,
)
from drpc.model.fields import Fields
from drpc.model.grouping import FieldsGrouping, KeyGroupGrouping
from drpc.model.streams import COORDINATED_STREAM_ID, GlobalStreamId, OutputFieldsDeclarer
from drpc.model.topology import (
    BOLT_TYPES,
    BoltDeclarer,
    ComponentSpec,
    CoordinatedBolt,
    SourceArgs,
    Topology,
    TopologyBuilder,
)
from drpc.state.keygroups import DEFAULT_KEY_GROUPS
from drpc.transactional.spouts import (
    BATCH_STREAM,
    COMMIT_STREAM,
    SPOUT_TYPES,
    TRANSACTIONAL_SERVICE,
    TransactionalSpoutBatchExecutor,
)

COORDINATOR_SUFFIX = "/coordinator"
KEY_GROUPS_CONF = "drpc.state.key.groups"
"""Key groups of the partitioned states the topology's committers write (default 128)."""


@dataclass(frozen=True)
class TransactionalInfo:
    id: str
    spout_id: str
    coordinator_id: str
    spout: IComponent
    committers: frozenset[str]
    commit_components: tuple[str, ...]  # in topological order
    # The processing backend of executor="spark-batch" (SparkBackend's arguments); None:
    # SparkBackend. Of executor="spark" (the same arguments): None, ResidentBackend. Of
    # executor="local" (LocalBackend's arguments): None, LocalBackend.
    spark_backend: Callable[..., Any] | None = None
    resident_backend: Callable[..., Any] | None = None
    local_backend: Callable[..., Any] | None = None


class TransactionalSpoutCoordinator(BaseRichSpout):
    """The coordinator spout: emits the batch tuples a transactional run asks for.

    The run's coordinator (``drpc.transactional.coordinator``) decides; this
    spout only carries its decisions into the in-process engine and reports
    each batch's outcome back.
    """

    def __init__(self, spout: IComponent) -> None:
        self.spout = spout
        self._batches: Any = None
        self._collector: Any = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(BATCH_STREAM, Fields("tx", "metadata", "last-committed"))
        declarer.declare_stream(COMMIT_STREAM, Fields("tx"))

    def open(self, conf: Conf, context: Any, collector: Any) -> None:
        self._collector = collector
        self._batches = context.services[TRANSACTIONAL_SERVICE].batches
        self._batches.attach(context.request_wakeup)

    def next_tuple(self) -> None:
        batch = self._batches.next_batch()
        if batch is not None:
            attempt, metadata, last_committed = batch
            self._collector.emit(
                [attempt, metadata, last_committed], msg_id=attempt, stream=BATCH_STREAM
            )

    def ack(self, msg_id: Any) -> None:
        self._batches.processed(msg_id)

    def fail(self, msg_id: Any) -> None:
        self._batches.failed(msg_id, None)

    def fail_with(self, msg_id: Any, failure: Any) -> None:
        self._batches.failed(msg_id, failure)


class TransactionalTopologyBuilder:
    def __init__(
        self, id: str, spout_id: str, spout: IComponent, spout_parallelism: int = 1
    ) -> None:
        if not isinstance(id, str) or not id or "/" in id:
            raise InvalidTopologyError(
                f"a transactional topology id must be a non-empty string without '/', got {id!r}"
            )
        if not isinstance(spout, SPOUT_TYPES):
            raise InvalidTopologyError(
                "the spout must be a BaseTransactionalSpout, BasePartitionedTransactionalSpout "
                f"or BaseOpaquePartitionedTransactionalSpout, got {type(spout).__name__}",
                spout_id,
            )
        self.id = id
        self.spout_id = spout_id
        self.spout = spout
        self.spout_parallelism = spout_parallelism
        self._bolts: dict[str, tuple[ComponentSpec, bool]] = {}

    def _add(
        self, component_id: str, bolt: IComponent, parallelism: int, committer: bool
    ) -> BoltDeclarer:
        if component_id in self._bolts or component_id in (
            self.spout_id,
            self.spout_id + COORDINATOR_SUFFIX,
        ):
            raise InvalidTopologyError("duplicate component id", component_id)
        if not isinstance(bolt, BOLT_TYPES):
            raise InvalidTopologyError(
                "bolts are BaseBasicBolt, BaseRichBolt or BaseBatchBolt (BaseTransactionalBolt), "
                f"got {type(bolt).__name__}",
                component_id,
            )
        committer = committer or isinstance(bolt, ICommitter)
        if committer and not isinstance(bolt, (BaseBatchBolt, FinishedCallback)):
            raise InvalidTopologyError(
                "a committer must be a batch bolt (its finish_batch is the commit)", component_id
            )
        spec = ComponentSpec(component_id, bolt, "bolt", parallelism)
        self._bolts[component_id] = (spec, committer)
        return BoltDeclarer(spec)

    def set_bolt(self, id: str, bolt: IComponent, parallelism: int = 1) -> BoltDeclarer:
        return self._add(id, bolt, parallelism, committer=False)

    def set_committer_bolt(self, id: str, bolt: IComponent, parallelism: int = 1) -> BoltDeclarer:
        return self._add(id, bolt, parallelism, committer=True)

    def create_topology(self, conf: Mapping[str, Any] | None = None) -> Topology:
        coordinator = self.spout_id + COORDINATOR_SUFFIX
        key_groups = int((conf or {}).get(KEY_GROUPS_CONF) or DEFAULT_KEY_GROUPS)
        builder = TopologyBuilder()
        builder.set_spout(coordinator, TransactionalSpoutCoordinator(self.spout))
        builder.set_bolt(
            self.spout_id,
            CoordinatedBolt(TransactionalSpoutBatchExecutor(self.spout), {}),
            self.spout_parallelism,
        ).all_grouping(coordinator, BATCH_STREAM)
        committers: set[str] = set()
        for component_id, (spec, committer) in self._bolts.items():
            sources = sorted({stream.component_id for stream in spec.inputs})
            if coordinator in sources:
                raise InvalidTopologyError(
                    f"subscribes to {coordinator!r}, the coordinator; subscribe to "
                    f"{self.spout_id!r} for the spout's tuples",
                    component_id,
                )
            declarer = builder.set_bolt(
                component_id,
                CoordinatedBolt(
                    spec.component,
                    {source: SourceArgs.all() for source in sources},
                    commit_stream=GlobalStreamId(coordinator, COMMIT_STREAM) if committer else None,
                ),
                spec.parallelism,
            )
            declarer.add_configurations(spec.conf)
            for stream, grouping in spec.inputs.items():
                if committer and spec.parallelism > 1 and type(grouping) is FieldsGrouping:
                    grouping = KeyGroupGrouping(grouping.fields, key_groups)
                declarer.grouping(stream.component_id, grouping, stream.stream_id)
            for source in sources:
                declarer.direct_grouping(source, COORDINATED_STREAM_ID)
            if committer:
                committers.add(component_id)
                declarer.all_grouping(coordinator, COMMIT_STREAM)
        topology = builder.create_topology(f"transactional-{self.id}", conf)
        topology.transactional = TransactionalInfo(
            self.id,
            self.spout_id,
            coordinator,
            self.spout,
            frozenset(committers),
            _commit_components(topology, committers),
        )
        return topology


def _commit_components(topology: Topology, committers: set[str]) -> tuple[str, ...]:
    """The committers and every component downstream of one, in topological order."""
    downstream: dict[str, set[str]] = {c: set() for c in topology.components}
    for component_id, spec in topology.components.items():
        for stream in spec.inputs:
            downstream[stream.component_id].add(component_id)
    commit: set[str] = set()
    pending = list(committers)
    while pending:
        component = pending.pop()
        if component not in commit:
            commit.add(component)
            pending.extend(downstream[component])
    order: list[str] = []

    def visit(component: str) -> None:
        if component in order:
            return
        for stream in topology.components[component].inputs:
            if stream.component_id in commit and stream.component_id != component:
                visit(stream.component_id)
        order.append(component)

    for component in sorted(commit):
        visit(component)
    return tuple(order)
