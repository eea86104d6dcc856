"""Trident's compiled path: the file log read where the batch runs, no tuple through the engine.

Contract. ``fused_plan(topology)`` says whether a compiled Trident topology
(``drpc.trident.compiler``) can take this path: its spout is a
``RangeSpout`` (``drpc.transactional.ranges``: the file log, Redis Streams,
JetStream; not opaque, not several spouts), one segment
reads it (``each``, ``filter``, ``map``, ``flat_map``, ``project`` and a
``CombinerAggregator``'s partial aggregate of ``group_by`` +
``persistent_aggregate``), and everything that segment emits goes to
``persistent_aggregate`` committers (``PersistBolt``) of combiners. Anything
else (opaque or several spouts, joins, merges, ``partition_persist``, state
queries, reducers and plain aggregators, a step after a repartition,
``peek``) returns None and keeps the general path (``SparkBackend``).

``FusedBackend`` (a ``ProcessingBackend`` with ``SparkBackend``'s
constructor; ``ResidentFusedBackend`` on the resident tasks, ``LocalFusedBackend``
with ``LocalBackend``'s in this process) processes a batch attempt as follows. On the run loop's
thread, in txid order, the driver decides and stores each partition's
range (``drpc.transactional.ranges.RangePlanner``: the spout's coordinator
decides it without reading a tuple: the file log scans for line ends, Redis
and JetStream ask for ids or sequences), so a replay, on this path or the
general one, reads the same tuples. Then one Spark job (up to ``max_jobs`` in flight)
of one task per emitter task of the spout (its parallelism; partition p
goes to task p mod parallelism, as in Storm): read the ranges, run the
segment's steps (``execute_many`` over each range's tuples) and
combine per key within the task; the driver collects the per-key partials
(one Spark attempt's output per task, so a retried task does not count
twice) and combines them per key, and only those per-key values reach the
commit, as one tuple per committer (``KeyedPartials``). A state with a
``parallelism_hint`` is partitioned (``drpc.transactional.partitions``): its
partials are split by partition, one tuple to each committer task; on the
resident tasks each emitter task hands each partition's partials straight to
the task owning it (``Staging``, ``drpc.executors.resident.staging``) and the
driver sends the committer only a ``StagedPartials`` marker, so no per-key value
passes through the driver. The commit stays the transactional machinery's (txid
order, the map kinds' txid rules; one LMDB transaction, or one per partition and
then the global record). A failure in the job fails the
attempt, which is replayed with the same ranges.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from drpc import runtime
from drpc.errors import DRPCExceptionType, Failure, InvalidTopologyError
from drpc.executors.records import Shipment
from drpc.executors.resident.executor import resident_cluster_of
from drpc.executors.resident.worker import current_worker
from drpc.executors.spark.stages import load_topology, loaded_topology, tagged_job
from drpc.gcpolicy import collected_less_often
from drpc.model.context import TopologyContext
from drpc.model.streams import COORDINATED_STREAM_ID
from drpc.model.topology import Topology
from drpc.semantics.runners import freeze
from drpc.sparkconf import DEFAULT_START_TIMEOUT
from drpc.state.keygroups import DEFAULT_KEY_GROUPS, partition_of
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.builder import KEY_GROUPS_CONF, TransactionalInfo
from drpc.transactional.global_commit import PartitionRef
from drpc.transactional.processing import Event, Processed, ProcessingFailed
from drpc.transactional.ranges import RangePlanner, RangeSpout, owned_by, reads_on_executors
from drpc.transactional.resident_partitions import PARTITIONS_SERVICE
from drpc.transactional.spouts import TransactionalServices
from drpc.trident.bolts import (
    KeyedPartials,
    PersistBolt,
    SegmentBolt,
    StagedPartials,
    combine_into,
)
from drpc.trident.builtins import key_of
from drpc.trident.operations import CombinerAggregator
from drpc.trident.processors import (
    BatchContext,
    EachProcessor,
    Emit,
    FilterProcessor,
    FlatMapProcessor,
    MapProcessor,
    PartitionAggregateProcessor,
    Processor,
    ProjectProcessor,
    Root,
    Values,
    group_rows,
)

_STEPS = (EachProcessor, FilterProcessor, ProjectProcessor, MapProcessor, FlatMapProcessor, Emit)


@dataclass(frozen=True, slots=True)
class Target:
    """Where one emitted stream of the segment goes: a combiner's committer tasks (one, or
    one per partition of a partitioned state, whose keys spread by ``key_groups``)."""

    stream: str
    tasks: tuple[int, ...]
    persist: PersistBolt
    key_groups: int = DEFAULT_KEY_GROUPS

    def split(self, combined: dict[Any, Any]) -> list[tuple[int, dict[Any, Any]]]:
        """``combined`` by committer task: all to the first, or each key to its partition's."""
        if not self.persist.partitioned:
            return [(self.tasks[0], combined)] if combined else []
        return [(self.tasks[index], part) for index, part in self.split_by_partition(combined)]

    def split_by_partition(self, combined: dict[Any, Any]) -> list[tuple[int, dict[Any, Any]]]:
        """``combined`` by the partition each key belongs to (those with keys)."""
        parts: list[dict[Any, Any]] = [{} for _ in self.tasks]
        partitions, groups = len(self.tasks), self.key_groups
        for key, value in combined.items():
            parts[partition_of(key, partitions, groups)][key] = value
        return [(index, part) for index, part in enumerate(parts) if part]


@dataclass(frozen=True, slots=True)
class FusedPlan:
    spout: RangeSpout
    emitter_tasks: int  # the spout's parallelism: Spark tasks per batch
    segment: str  # the segment bolt's component id
    segment_task: int
    spout_stream: str
    targets: tuple[Target, ...]


@dataclass(frozen=True, slots=True)
class RangeTask:
    """One Spark task of a batch: a partition's range."""

    partition: int
    meta: Any  # the spout's RangeMeta


@dataclass(frozen=True, slots=True)
class TaskOutput:
    """What one Spark task sends the driver: its partials by group key per stream (but those
    of streams it staged at their partitions' owners), its tuple count, and the partitions
    it staged partials for, by stream."""

    partials: dict[str, dict[Any, Any]]
    tuples: int
    staged: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Staging:
    """Where a resident task hands its partials of partitioned targets: the owner task of
    each partition, by stream (``drpc.transactional.resident_partitions``)."""

    token: str
    sender: int  # the emitter share this task computes
    owners: dict[str, tuple[int, ...]]  # stream -> the node owning each partition


def stage_key(
    token: str, stream: str, partition: int, attempt: TransactionAttempt
) -> tuple[Any, ...]:
    """The key a batch attempt's partials of one partition are staged under at its owner."""
    return (token, stream, partition, attempt.txid, attempt.attempt_id)


def _steps_fit(processor: Processor) -> bool:
    fits = isinstance(processor, _STEPS) or (
        isinstance(processor, PartitionAggregateProcessor)
        and isinstance(processor.aggregator, CombinerAggregator)
    )
    return fits and all(_steps_fit(child) for child in processor.children)


def _emits(processor: Processor) -> Iterator[Emit]:
    if isinstance(processor, Emit):
        yield processor
    for child in processor.children:
        yield from _emits(child)


def fused_plan(topology: Topology) -> FusedPlan | None:
    """The compiled path's plan of ``topology``, or None when it needs the general path."""
    info = topology.transactional
    if info is None or not reads_on_executors(info.spout):
        return None
    driver = {info.spout_id, info.coordinator_id, *info.commit_components}
    middle = [spec for id, spec in topology.components.items() if id not in driver]
    if len(middle) != 1:
        return None
    segment = middle[0]
    bolt = segment.user_component
    if (
        not isinstance(bolt, SegmentBolt)
        or type(bolt.root) is not Root
        or not all(source.component_id == info.spout_id for source in segment.inputs)
        or not all(_steps_fit(child) for child in bolt.root.children)
    ):
        return None
    targets = []
    for emit in _emits(bolt.root):
        readers = [
            spec
            for spec in topology.components.values()
            if any(
                source.component_id == segment.id and source.stream_id == emit.stream
                for source in spec.inputs
            )
        ]
        if len(readers) != 1 or readers[0].id not in info.committers:
            return None
        persist = readers[0].user_component
        if not isinstance(persist, PersistBolt) or not isinstance(
            persist.aggregator, CombinerAggregator
        ):
            return None
        tasks = tuple(topology.component_task_ids[readers[0].id])
        key_groups = int(topology.conf.get(KEY_GROUPS_CONF) or DEFAULT_KEY_GROUPS)
        targets.append(Target(emit.stream, tasks, persist, key_groups))
    if not targets:
        return None
    spout_streams = {s.stream_id for s in segment.inputs if s.stream_id != COORDINATED_STREAM_ID}
    if len(spout_streams) != 1:
        return None
    (spout_stream,) = spout_streams
    return FusedPlan(
        info.spout,
        len(topology.component_task_ids[info.spout_id]),
        segment.id,
        topology.component_task_ids[segment.id][0],
        spout_stream,
        tuple(targets),
    )


def range_partials(
    topology: Topology,
    plan: FusedPlan,
    conf: dict[str, Any],
    attempt: TransactionAttempt,
    ranges: Iterable[RangeTask],
) -> TaskOutput:
    """What one emitter task of a batch computes: read its ranges, run the segment's steps
    and combine per key (see the module doc)."""
    bolt = topology.components[plan.segment].user_component
    assert isinstance(bolt, SegmentBolt)
    root = pickle.loads(freeze(bolt.root))
    combiners = {target.stream: target.persist for target in plan.targets}
    partials: dict[str, dict[Any, Any]] = {stream: {} for stream in combiners}

    def output(stream: str, values: Values) -> None:
        output_many(stream, [values])

    def output_many(stream: str, rows: list[Values]) -> None:
        persist = combiners[stream]
        group, (partial_at,) = persist.group.positions, persist.input.positions
        pairs = (
            [(values[group[0]], values[partial_at]) for values in rows]
            if len(group) == 1
            else [(key_of(persist.group.values(values)), values[partial_at]) for values in rows]
        )
        seen = partials[stream]
        if not seen:
            seen.update(pairs)
            if len(seen) == len(pairs):  # distinct keys (a partial aggregate's): done
                return
            seen.clear()
        combine_into(seen, pairs, persist.aggregator.combine)

    def output_groups(stream: str, groups: dict[Values, Any]) -> None:
        """A group aggregate's ``{group values: partial}``: taken as the partials by key
        when the committer groups by those values and combines the last field (the
        plan's usual shape), else as its tuples."""
        persist = combiners[stream]
        width = len(next(iter(groups))) if groups else 0
        if persist.group.positions != tuple(range(width)) or persist.input.positions != (width,):
            output_many(stream, group_rows(groups))
            return
        by_key = {key[0]: value for key, value in groups.items()} if width == 1 else groups
        seen = partials[stream]
        if not seen:
            seen.update(by_key)
            return
        combine_into(seen, by_key.items(), persist.aggregator.combine)

    context = TopologyContext(topology, plan.segment, plan.segment_task, conf=conf)
    with collected_less_often():
        root.prepare(BatchContext(conf, context, attempt, output, output_many, output_groups))
        reader: Any = plan.spout.get_emitter(conf, context)
        tuples = 0
        try:
            for task in ranges:
                rows = list(map(tuple, reader.values_in(task.partition, task.meta)))
                tuples += len(rows)
                root.receive_many(plan.spout_stream, rows)
        finally:
            reader.close()
        root.finish()
    return TaskOutput(partials, tuples)


def _run_ranges(
    token: str,
    frozen: Any,
    plan: FusedPlan,
    conf: dict[str, Any],
    attempt: TransactionAttempt,
) -> Callable[[Iterator[list[RangeTask]]], Iterator[TaskOutput]]:
    """The function each Spark task runs over its ranges (a broadcast topology)."""

    def run(tasks: Iterator[list[RangeTask]]) -> Iterator[TaskOutput]:
        topology = load_topology(token, frozen)
        yield range_partials(topology, plan, conf, attempt, (t for share in tasks for t in share))

    return run


def resident_ranges(
    token: str,
    frozen: bytes,
    plan: FusedPlan,
    conf: dict[str, Any],
    attempt: TransactionAttempt,
    ranges: list[RangeTask],
    staging: Staging | None = None,
) -> TaskOutput:
    """What a resident task runs for its ranges of a batch (a call; the topology is
    unpickled once per process). With ``staging`` the partials of partitioned targets go
    to their partitions' owners, task to task, and only which partitions got some returns."""
    output = range_partials(loaded_topology(token, frozen), plan, conf, attempt, ranges)
    if staging is None:
        return output
    worker = current_worker()
    staged: dict[str, list[int]] = {}
    for target in plan.targets:
        owners = staging.owners.get(target.stream)
        if owners is None:
            continue
        partials = output.partials.pop(target.stream)
        for index, part in target.split_by_partition(partials):
            key = stage_key(staging.token, target.stream, index, attempt)
            worker.stage(owners[index], key, staging.sender, part)
            staged.setdefault(target.stream, []).append(index)
    return TaskOutput(output.partials, output.tuples, staged)


def warm_ranges(token: str, frozen: bytes, plan: FusedPlan, conf: dict[str, Any]) -> None:
    """Load the topology and the spout's reader in a resident task's process before the
    first batch, so that batch does not pay for unpickling and imports (about 0.1 s)."""
    topology = loaded_topology(token, frozen)
    bolt = topology.components[plan.segment].user_component
    assert isinstance(bolt, SegmentBolt)
    pickle.loads(freeze(bolt.root))
    context = TopologyContext(topology, plan.segment, plan.segment_task, conf=conf)
    plan.spout.get_emitter(conf, context).close()


def _shares(ranges: list[RangeTask], tasks: int) -> list[list[RangeTask]]:
    """The ranges each Spark task of a batch reads: partition p goes to task p mod ``tasks``,
    as a Storm spout's partitions go to its emitter tasks."""
    shares = [
        [task for task in ranges if owned_by(task.partition, index, tasks)]
        for index in range(tasks)
    ]
    return [share for share in shares if share]


class _FusedBatches:
    """What both compiled backends share: the driver decides each batch's ranges in txid
    order, ``_outputs`` computes the emitter tasks' partials somewhere, and the driver
    combines them per key for the committers (see the module doc)."""

    where = "the executors"

    def __init__(
        self,
        topology: Topology,
        info: TransactionalInfo,
        conf: dict[str, Any],
        services: dict[str, Any],
        transactional: TransactionalServices,
        max_jobs: int,
        master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        plan = fused_plan(topology)
        if plan is None:
            raise InvalidTopologyError(
                f"topology {info.id!r} cannot take Trident's compiled path (drpc.trident.fused)"
            )
        self.plan = plan
        self.topology = topology
        self.info = info
        self.conf = conf
        self.transactional = transactional
        self.services = services
        self.master = master
        self.spark_conf = spark_conf
        self.start_timeout = start_timeout
        spout_task = topology.component_task_ids[info.spout_id][0]
        context = TopologyContext(topology, info.spout_id, spout_task, services=services, conf=conf)
        self._planner = RangePlanner(plan.spout, conf, context, transactional.coordinator_state)
        self._pool = ThreadPoolExecutor(max_jobs, thread_name_prefix=f"drpc-fused-{info.id}")
        self._report: Callable[[Event], None] | None = None
        self._token = uuid.uuid4().hex[:8]

    def start(self, report: Callable[[Event], None]) -> None:
        self._report = report

    def stop(self) -> None:
        self._pool.shutdown(wait=True)
        self._planner.close()

    def submit(
        self, attempt: TransactionAttempt, metadata: Any, last_committed: int | None
    ) -> None:
        try:
            metas = self._planner.metas(attempt.txid, int(metadata), last_committed)
        except Exception as error:
            message = f"deciding the ranges of batch {attempt} failed: {error}"
            self._fail(attempt, DRPCExceptionType.FAILED_REQUEST, message)
            return
        ranges = [RangeTask(partition, meta) for partition, meta in metas.items()]
        self._pool.submit(self._process, attempt, ranges)

    def _fail(self, attempt: TransactionAttempt, kind: DRPCExceptionType, message: str) -> None:
        assert self._report is not None
        self._report(ProcessingFailed(attempt, Failure(kind, message)))

    def _process(self, attempt: TransactionAttempt, ranges: list[RangeTask]) -> None:
        assert self._report is not None
        try:
            outputs: list[TaskOutput] = []
            if ranges:
                outputs = self._outputs(attempt, _shares(ranges, self.plan.emitter_tasks))
        except Exception as error:
            message = (
                f"processing batch {attempt} on {self.where} failed: "
                f"{runtime.describe_spark_error(error)}"
            )
            self._fail(attempt, DRPCExceptionType.INTERNAL_ERROR, message)
            return
        self._report(
            Processed(attempt, self._captured(attempt, outputs), sum(o.tuples for o in outputs))
        )

    def _outputs(
        self, attempt: TransactionAttempt, shares: list[list[RangeTask]]
    ) -> list[TaskOutput]:
        raise NotImplementedError

    def _captured(
        self, attempt: TransactionAttempt, outputs: list[TaskOutput]
    ) -> dict[int, list[Shipment]]:
        """The batch's partials combined per group key: one tuple to each committer."""
        captured: dict[int, list[Shipment]] = {}
        plan = self.plan

        def send(task: int, stream: str, partials: KeyedPartials | StagedPartials) -> None:
            shipment = Shipment(plan.segment, plan.segment_task, [(stream, [[attempt, partials]])])
            shipment.reports[attempt] = 1
            captured.setdefault(task, []).append(shipment)

        for target in plan.targets:
            senders: dict[int, list[int]] = {}
            for sender, output in enumerate(outputs):
                for index in output.staged.get(target.stream, ()):
                    senders.setdefault(index, []).append(sender)
            for index, staged_by in sorted(senders.items()):
                key = stage_key(self._token, target.stream, index, attempt)
                send(target.tasks[index], target.stream, StagedPartials(key, tuple(staged_by)))
            if senders:
                continue
            combined: dict[Any, Any] = {}
            combine = target.persist.aggregator.combine
            for output in outputs:
                combine_into(combined, output.partials.get(target.stream, {}).items(), combine)
            for task, part in target.split(combined):
                send(task, target.stream, KeyedPartials(part))
        return captured


class LocalFusedBackend(_FusedBatches):
    """The same batches in this process (``executor="local"``, the default): each emitter
    task's ranges read, run through the segment and combined per key here, no tuple
    passing through the engine. Takes ``LocalBackend``'s arguments; ``threads`` bounds the
    batches processed at once."""

    where = "this process"

    def __init__(
        self,
        topology: Topology,
        info: TransactionalInfo,
        conf: dict[str, Any],
        services: dict[str, Any],
        transactional: TransactionalServices,
        threads: int = 4,
    ) -> None:
        super().__init__(topology, info, conf, services, transactional, max(1, threads))

    def _outputs(
        self, attempt: TransactionAttempt, shares: list[list[RangeTask]]
    ) -> list[TaskOutput]:
        return [
            range_partials(self.topology, self.plan, self.conf, attempt, share) for share in shares
        ]


class FusedBackend(_FusedBatches):
    """One Spark job per batch over the file log's byte ranges (``executor="spark-batch"``)."""

    where = "Spark"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sc: Any = None
        self._broadcast: Any = None
        self._tags: set[str] = set()

    def start(self, report: Callable[[Event], None]) -> None:
        super().start(report)
        session = runtime.get_session(
            self.master, self.spark_conf, start_timeout=self.start_timeout
        )
        self._sc = session.sparkContext
        self._broadcast = self._sc.broadcast(freeze(self.topology))

    def stop(self) -> None:
        for tag in list(self._tags):
            self._sc.cancelJobsWithTag(tag)
        super().stop()
        if self._broadcast is not None:
            self._broadcast.unpersist()

    def _outputs(
        self, attempt: TransactionAttempt, shares: list[list[RangeTask]]
    ) -> list[TaskOutput]:
        tag = f"drpc-fused-{self._token}-{attempt.txid}-{attempt.attempt_id}"
        self._tags.add(tag)
        try:
            with tagged_job(self._sc, tag, f"drpc Trident {self.info.id}: batch {attempt}"):
                job = self._sc.parallelize(shares, len(shares)).mapPartitions(
                    _run_ranges(self._token, self._broadcast, self.plan, self.conf, attempt)
                )
                with collected_less_often():
                    return list(job.collect())
        finally:
            self._tags.discard(tag)


class ResidentFusedBackend(_FusedBatches):
    """The same batches as calls on the resident Spark tasks (``executor="spark"``): no
    Spark job per batch. Emitter task i's ranges go to the i mod n-th of the n resident
    tasks that serve."""

    where = "the resident Spark tasks"

    def __init__(self, *args: Any, slots: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = slots
        self._cluster: Any = None
        self._frozen = freeze(self.topology)

    def start(self, report: Callable[[Event], None]) -> None:
        super().start(report)
        cluster = self._cluster = resident_cluster_of(
            self.master, self.spark_conf, self.start_timeout, self.slots
        )
        warming = [
            cluster.call(node, warm_ranges, self._token, self._frozen, self.plan, self.conf)
            for node in cluster.live_workers()
        ]
        for call in warming:
            call.result()

    def _outputs(
        self, attempt: TransactionAttempt, shares: list[list[RangeTask]]
    ) -> list[TaskOutput]:
        cluster = self._cluster
        owners = self._owners()
        workers = cluster.live_workers()
        calls = [
            cluster.call(
                workers[index % len(workers)],
                resident_ranges,
                self._token,
                self._frozen,
                self.plan,
                self.conf,
                attempt,
                share,
                None if owners is None else Staging(self._token, index, owners),
            )
            for index, share in enumerate(shares)
        ]
        with collected_less_often():
            return [call.result() for call in calls]

    def _owners(self) -> dict[str, tuple[int, ...]] | None:
        """The owner task of each partition of the partitioned targets, by stream (None:
        no target is partitioned, or the partitions are not on the resident tasks)."""
        host = self.services.get(PARTITIONS_SERVICE)
        partitioned = [target for target in self.plan.targets if target.persist.partitioned]
        if host is None or not partitioned:
            return None
        placed = host.owners()
        return {
            target.stream: tuple(
                placed[PartitionRef(target.persist.state.name, index)]
                for index in range(len(target.tasks))
            )
            for target in partitioned
        }
