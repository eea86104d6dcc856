"""A run's partitioned states: which committers they are, where their partitions live, and
the commit of a txid across them.

Contract.

- ``partition_layouts(topology)``: a committer component with more than one task
  writes a partitioned state (Storm's way: a state's partitions are its committer's
  tasks). Its group is the committer bolt's ``partitioned_state`` (Trident's persist
  bolts name their map state when a ``parallelism_hint`` on the state asked for
  partitions, and None otherwise: their tasks then share the directory), else the
  component id; its key groups the topology's ``drpc.state.key.groups``
  (``DEFAULT_KEY_GROUPS``), which its groupings used. A partitioned committer must
  take its input from the processing phase (its partitions apply before the global
  record): one fed by another commit-phase component raises ``InvalidTopologyError``.
- ``apply_partition(partition, context, work)`` is what runs where a partition lives:
  the committer task's commit (``TaskRun``, its ``finish_batch``) inside the partition's
  write transaction (``StatePartition.apply``), with ``context.state`` the partition's
  maps; a write of a key another partition owns raises ``PartitionKeyError``. It returns
  a ``PartitionOutcome``: what the task sent on (to commit-phase bolts after it, run by
  the driver) and emitted to no one, the maps the partition holds, or the failure (the
  write then aborts; a ``PartitionLostError`` as ``lost``, a ``StateFullError`` or
  ``CheckpointStoreError`` as ``fatal``, which stop the run), and never raises.
  ``apply_here(partitions, layout, context, work, host, task)`` applies it to the
  partition this host holds, the outcome saying where it ran; one not here is ``lost``,
  naming ``host``.
- A ``PartitionHost`` keeps the partitions somewhere: ``LocalPartitionHost`` in this
  process, under ``partition_root`` (the local and spark-batch executors), applying
  the partitions of a txid on ``writers`` threads at once, and closing them when it
  stops.
- ``PartitionedCommit(topology, info, layouts, host, commit_phase, coordinator_state)``
  drives the rules of ``drpc.transactional.global_commit``: ``start()`` records the
  layouts in the global record's directory and finds what each partition holds (making
  new ones, raising ``PartitionLostError`` for a lost one); ``commit(attempt, captured,
  log_fields, what)`` applies ``attempt`` to every partition (each committer task's
  inbox, keeping what the oldest pinned read needs), then writes the global record in
  one transaction: the maps each partition holds, where it lives, the commit-phase
  bolts after the committers and the commit record. A partition that failed raises
  ``CommitFailed`` (the run replays the txid); a lost one ``PartitionLostError`` (the
  run stops). With a ``driver_checkpoint`` (the run has a checkpoint store) a lost
  partition is restored instead, and the driver's records are put in the store before
  the partitions apply a txid and inside the global commit's write, before it commits:
  nothing reads a commit the store does not hold (``drpc.state.driver_checkpoint``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from drpc.errors import (
    CheckpointStoreError,
    DRPCExceptionType,
    Failure,
    InvalidTopologyError,
    PartitionLostError,
    StateError,
    StateFullError,
)
from drpc.executors.batch import TaskHints, TaskRun
from drpc.executors.records import Shipment
from drpc.model.topology import Topology
from drpc.state import CoordinatorState, StateTxn
from drpc.state.checkpoint import CheckpointReport, PartitionCheckpoint, Restored
from drpc.state.checkpoint_store import CheckpointSettings
from drpc.state.driver_checkpoint import DriverCheckpoint
from drpc.state.keygroups import DEFAULT_KEY_GROUPS
from drpc.state.partition import PartitionLayout, StatePartition, partition_root
from drpc.state.partitioned import (
    LocalPartitions,
    map_kinds,
    record_layout,
    record_maps,
    record_placement,
)
from drpc.state.topology import STATE_SERVICE, TopologyState, commit_scope
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.builder import KEY_GROUPS_CONF, TransactionalInfo
from drpc.transactional.commit import CommitFailed, CommitPhase
from drpc.transactional.global_commit import (
    Apply,
    Create,
    Decision,
    GlobalCommit,
    Lost,
    PartitionRef,
    RecordGlobal,
    Replay,
    Restore,
    every_partition,
)

log = logging.getLogger(__name__)

DEFAULT_WRITERS = 4
"""Partitions a ``LocalPartitionHost`` applies at once."""

T = TypeVar("T")


def partition_layouts(topology: Topology) -> dict[str, PartitionLayout]:
    """The partitioned state of each committer with more than one task (see module doc)."""
    info = topology.transactional
    if info is None:
        return {}
    key_groups = int(topology.conf.get(KEY_GROUPS_CONF) or DEFAULT_KEY_GROUPS)
    commit = set(info.commit_components)
    found: dict[str, PartitionLayout] = {}
    for component in sorted(info.committers):
        spec = topology.components[component]
        if spec.parallelism < 2:
            continue
        feeding = sorted(
            {
                stream.component_id
                for stream in spec.inputs
                if stream.component_id in commit and stream.component_id != info.coordinator_id
            }
        )
        if feeding:
            raise InvalidTopologyError(
                f"a committer with {spec.parallelism} tasks writes a partitioned state, whose "
                "partitions apply each batch before the global commit record; it must take its "
                f"input from the processing phase, not from commit-phase {feeding}",
                component,
            )
        group = getattr(spec.user_component, "partitioned_state", component)
        if group is None:  # a committer whose tasks share the directory (Trident's unhinted)
            continue
        found[component] = PartitionLayout(group, info.id, spec.parallelism, key_groups)
    groups = [layout.group for layout in found.values()]
    if len(set(groups)) != len(groups):
        raise InvalidTopologyError(
            f"two partitioned committers write the same state: {sorted(groups)}"
        )
    return found


def partition_refs(layouts: Iterable[PartitionLayout]) -> tuple[PartitionRef, ...]:
    """Every partition of ``layouts``, in their order."""
    return every_partition((layout.group, layout.partitions) for layout in layouts)


@dataclass(frozen=True, slots=True)
class PartitionWork:
    """What partition ``ref`` applies for ``attempt``: its committer task's inbox."""

    ref: PartitionRef
    component: str
    attempt: TransactionAttempt
    inbox: list[Shipment]
    keep_from: int
    log_fields: dict[str, Any]
    deltas_from: int | None = None  # the oldest txid a standby copy catches up from


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What applying a ``PartitionWork`` did."""

    ref: PartitionRef
    held: int
    shipments: dict[int, Shipment] = field(default_factory=dict)
    unrouted: list[tuple[str, list[Any]]] = field(default_factory=list)
    maps: tuple[str, ...] = ()
    failure: Failure | None = None
    lost: PartitionLostError | None = None
    fatal: StateError | None = None  # a full map or the store past its limit: a replay fails too
    host: str | None = None
    task: int = 0  # the resident task it lives on (0: this process)
    keys: int = 0  # records the partition holds after it, and the bytes of its map in use
    bytes: int = 0
    checkpoint: CheckpointReport | None = None  # its journal's, when the run has a store


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a partition was found: the txid it holds (None: found nowhere), its host and
    the resident task it lives on (0: this process)."""

    txid: int | None
    host: str | None
    task: int = 0


@dataclass(frozen=True, slots=True)
class CommitContext:
    """What a partition's commit needs of the run, wherever it runs."""

    topology: Topology
    conf: dict[str, Any]
    services: dict[str, Any]
    hints: dict[str, TaskHints]


class _Failed(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def apply_partition(
    partition: StatePartition, context: CommitContext, work: PartitionWork
) -> PartitionOutcome:
    """Apply ``work`` to ``partition`` (see the module doc)."""
    attempt = work.attempt
    ref = work.ref
    services = {
        **context.services,
        STATE_SERVICE: TopologyState(partition.env, owner=(partition.layout, partition.index)),
    }

    def commit(txn: StateTxn) -> PartitionOutcome:
        with commit_scope(txn, attempt.txid):
            run = TaskRun(
                context.topology,
                work.component,
                ref.index,
                job_ids=(attempt,),
                conf=context.conf,
                services=services,
                hints=context.hints.get(work.component),
                log_fields={attempt: work.log_fields},
            ).run(work.inbox)
        if run.failures:
            raise _Failed(next(iter(run.failures.values())))
        maps = tuple(sorted(map_kinds(txn)))
        return PartitionOutcome(ref, attempt.txid, run.shipments(), list(run.unrouted), maps)

    try:
        outcome = partition.apply(
            attempt.txid, commit, keep_from=work.keep_from, deltas_from=work.deltas_from
        )
        status = partition.status()
        journal = partition.journal
        report = journal.report() if isinstance(journal, PartitionCheckpoint) else None
        return dataclasses.replace(outcome, keys=status.keys, bytes=status.bytes, checkpoint=report)
    except _Failed as failed:
        return PartitionOutcome(ref, partition.held(), failure=failed.failure)
    except PartitionLostError as error:
        return PartitionOutcome(ref, -1, lost=error)
    except (StateFullError, CheckpointStoreError) as error:  # a replay would fail the same
        return PartitionOutcome(ref, -1, fatal=error)
    except Exception as error:
        message = (
            f"Request failed: the commit of txid {attempt.txid} in partition {ref.index} of "
            f"{ref.group!r} raised {type(error).__name__}: {error}"
        )
        return PartitionOutcome(
            ref,
            -1,
            failure=Failure(DRPCExceptionType.FAILED_REQUEST, message, work.component, ref.index),
        )


def apply_here(
    partitions: LocalPartitions,
    layout: PartitionLayout,
    context: CommitContext,
    work: PartitionWork,
    host: str,
    task: int = 0,
) -> PartitionOutcome:
    """Apply ``work`` to its partition among ``partitions`` (see the module doc)."""
    try:
        partition = partitions.partition(layout, work.ref.index)
        held = partition.held()
        if held < work.attempt.txid - 1:
            raise PartitionLostError(
                layout.group,
                work.ref.index,
                host,
                f"it holds txid {held}, behind the global record's txid "
                f"{work.attempt.txid - 1} (an old copy)",
            )
    except PartitionLostError as error:
        lost = PartitionLostError(error.group, error.partition, host, error.detail)
        return PartitionOutcome(work.ref, -1, lost=lost, host=host, task=task)
    outcome = apply_partition(partition, context, work)
    return dataclasses.replace(outcome, host=host, task=task)


class PartitionHost(Protocol):
    """Where a run's partitions live (see the module doc)."""

    def held(self, layouts: Mapping[str, PartitionLayout]) -> dict[PartitionRef, Placement]:
        """Where each partition of ``layouts`` is, and what it holds."""
        ...

    def create(self, layout: PartitionLayout, index: int, start_txid: int) -> None: ...

    def restore(self, layout: PartitionLayout, index: int, txid: int, keep_from: int) -> Restored:
        """Rebuild a partition holding ``txid`` from the checkpoint store, where it is to
        live."""
        ...

    def apply(self, works: list[PartitionWork]) -> list[PartitionOutcome]: ...

    def store_waiting_since(self) -> float | None:
        """Since when a partition here has waited for the checkpoint store (None: none
        waits, or the partitions live elsewhere and this host cannot tell)."""
        ...

    def committed(self, txid: int, keep_from: int) -> None:
        """The global commit of ``txid`` is recorded (reads from ``keep_from`` on live)."""
        ...

    def standby_floor(self, global_txid: int) -> int:
        """The oldest txid a standby copy still catches up from (``global_txid``: none):
        the store keeps the deltas after it."""
        ...

    def standby_status(self) -> dict[str, Any] | None:
        """The standby copies of the partitions, how far each lags, and the last takeover
        of one (None: the run keeps none)."""
        ...

    def stop(self) -> None: ...


class LocalPartitionHost:
    """The partitions in this process, under ``partition_root(state_dir, conf)``."""

    def __init__(
        self,
        state_dir: str,
        context: CommitContext,
        *,
        writers: int = DEFAULT_WRITERS,
        state_options: Mapping[str, Any] | None = None,
        checkpoint: CheckpointSettings | None = None,
    ) -> None:
        self.context = context
        self.partitions = LocalPartitions(
            partition_root(state_dir, context.conf), state_options, checkpoint
        )
        self.host = os.uname().nodename
        self._layouts: dict[str, PartitionLayout] = {}
        self._pool = ThreadPoolExecutor(max(1, writers), thread_name_prefix="drpc-partition")

    def held(self, layouts: Mapping[str, PartitionLayout]) -> dict[PartitionRef, Placement]:
        self._layouts.update((layout.group, layout) for layout in layouts.values())
        found = self.partitions.held(layouts.values())
        return {
            ref: Placement(found.get((ref.group, ref.index)), self.host)
            for ref in partition_refs(layouts.values())
        }

    def create(self, layout: PartitionLayout, index: int, start_txid: int) -> None:
        self.partitions.partition(layout, index, create_at=start_txid)

    def restore(self, layout: PartitionLayout, index: int, txid: int, keep_from: int) -> Restored:
        return self.partitions.restore(layout, index, txid, keep_from)

    def apply(self, works: list[PartitionWork]) -> list[PartitionOutcome]:
        def one(work: PartitionWork) -> PartitionOutcome:
            layout = self._layouts[work.ref.group]
            return apply_here(self.partitions, layout, self.context, work, self.host)

        if len(works) == 1:
            return [one(works[0])]
        return list(self._pool.map(one, works))

    def store_waiting_since(self) -> float | None:
        store = self.partitions.store
        return None if store is None else store.waiting_since

    def committed(self, txid: int, keep_from: int) -> None:
        """Nothing to do: one process keeps no standby copies."""

    def standby_floor(self, global_txid: int) -> int:
        return global_txid

    def standby_status(self) -> dict[str, Any] | None:
        return None

    def stop(self) -> None:
        """Close the partitions: a stopped run holds no state open (readers reopen them)."""
        self._pool.shutdown(wait=True)
        self.partitions.close()


class PartitionedCommit:
    """The commits of a run's partitioned states (see the module doc)."""

    def __init__(
        self,
        topology: Topology,
        info: TransactionalInfo,
        layouts: Mapping[str, PartitionLayout],
        host: PartitionHost,
        commit_phase: CommitPhase,
        coordinator_state: CoordinatorState,
        *,
        driver_checkpoint: DriverCheckpoint | None = None,
    ) -> None:
        """:param driver_checkpoint: the run's checkpoint store keeps the driver's records
        (None: the run has no store). Then the partitions put their changes there too, so
        a lost one is restored from it (else the run stops)."""
        self.topology = topology
        self.info = info
        self.layouts = dict(layouts)  # by committer component
        self.host = host
        self.commit_phase = commit_phase
        self.coordinator_state = coordinator_state
        self.env = coordinator_state.env
        self._component_of = {layout.group: component for component, layout in layouts.items()}
        self.placed: dict[PartitionRef, PartitionOutcome] = {}
        """The last outcome of each partition: where it lives and what it holds."""
        self._recorded: dict[PartitionRef, tuple[str | None, int]] = {}
        """Where the global record says each partition lives (``record_placement``)."""
        self.driver_checkpoint = driver_checkpoint
        self.machine = GlobalCommit(
            partition_refs(layouts.values()), durable=driver_checkpoint is not None
        )
        self.restores: dict[PartitionRef, Restored] = {}
        """The last restore of each partition restored by this run."""
        self.last_restore: tuple[PartitionRef, Restored, float] | None = None
        """The partition this run restored last, how, and when (``time.time()``)."""

    def task_of(self, ref: PartitionRef) -> int:
        component = self._component_of[ref.group]
        return self.topology.component_task_ids[component][ref.index]

    def start(self) -> None:
        """Record the layouts in the global record and bring the partitions in line with
        it: make new ones, raise ``PartitionLostError`` for a lost one."""

        def record(txn: StateTxn) -> None:
            for layout in self.layouts.values():
                record_layout(txn, layout)

        self.env.run_write(record, what=f"the partition layouts of topology {self.info.id!r}")
        global_txid = self.coordinator_state.next_txid() - 1
        by_group = {layout.group: layout for layout in self.layouts.values()}
        found = self.host.held(self.layouts)
        self.placed = {
            ref: PartitionOutcome(
                ref,
                global_txid if place.txid is None else place.txid,
                host=place.host,
                task=place.task,
            )
            for ref, place in found.items()
        }
        held = {ref: place.txid for ref, place in found.items()}
        hosts = {ref: place.host for ref, place in found.items()}
        for decision in self.machine.recover(global_txid, held, hosts):
            if isinstance(decision, Create):
                self.host.create(
                    by_group[decision.partition.group], decision.partition.index, global_txid
                )
            elif isinstance(decision, Restore):
                self._restore(decision, global_txid)
            elif isinstance(decision, Lost):
                raise PartitionLostError(
                    decision.partition.group,
                    decision.partition.index,
                    decision.host,
                    decision.reason,
                )
        log.info(
            "transactional topology %r: %s at txid %d",
            self.info.id,
            ", ".join(
                f"state {layout.group!r} in {layout.partitions} partitions"
                for layout in self.layouts.values()
            ),
            global_txid,
            extra={"topology": self.info.id},
        )

    def oldest_read_txid(self, global_txid: int) -> int:
        """The oldest global txid a live request may read: the one the oldest pin of the
        global record's directory sees (partitions keep its version)."""
        oldest = self.env.pins.oldest(time.time())
        if oldest is None:
            return global_txid
        try:
            with self.env.read(version=oldest[0]) as txn:
                record = self.coordinator_state.last_commit(txn=txn)
        except StateError:  # reclaimed: that pin outlived its retention
            return global_txid
        return min(global_txid, 0 if record is None else record.txid)

    def commit(
        self,
        attempt: TransactionAttempt,
        captured: Mapping[int, list[Shipment]],
        log_fields: dict[str, Any],
        what: str,
    ) -> dict[str, list[list[Any]]]:
        """Commit ``attempt``: every partition applies its committer task's inbox, then
        one write of the global record's directory runs the commit-phase bolts after the
        committers and records the commit; returns what ``CommitPhase.run`` returns."""
        opened = self.machine.begin(attempt.txid)
        keep_from = self.oldest_read_txid(attempt.txid - 1)
        deltas_from = self.host.standby_floor(attempt.txid - 1)
        self._put_driver_records()  # the batch metadata of attempt.txid, before any applies
        works = [
            PartitionWork(
                decision.partition,
                self._component_of[decision.partition.group],
                attempt,
                self.commit_phase.inbox(self.task_of(decision.partition), attempt, captured),
                keep_from,
                log_fields,
                deltas_from,
            )
            for decision in opened
            if isinstance(decision, Apply)
        ]
        outcomes = {outcome.ref: outcome for outcome in self.host.apply(works)}
        for ref, outcome in outcomes.items():
            if outcome.failure is None and outcome.lost is None and outcome.fatal is None:
                self.placed[ref] = outcome
        decisions: list[Decision] = []
        for ref in sorted(outcomes):
            outcome = outcomes[ref]
            if outcome.fatal is not None:
                self.machine.abandon(attempt.txid, str(outcome.fatal))
                raise outcome.fatal
            if outcome.lost is not None:
                decisions += self.machine.lost(ref, outcome.host, outcome.lost.detail)
            elif outcome.failure is not None:
                decisions += self.machine.failed(ref, attempt.txid, outcome.failure.message)
            else:
                decisions += self.machine.applied(ref, attempt.txid)
        for decision in decisions:
            if isinstance(decision, Lost):
                lost = outcomes[decision.partition].lost
                assert lost is not None
                raise lost
        for decision in decisions:
            if isinstance(decision, Restore):
                self._restore(decision, keep_from)
        for decision in decisions:
            if isinstance(decision, Replay):
                raise CommitFailed(self._replay_failure(decision, outcomes))
            if isinstance(decision, RecordGlobal):
                try:
                    result = self._record(attempt, captured, log_fields, what, outcomes)
                except BaseException:
                    self.machine.abandon(attempt.txid, "the global commit failed")
                    raise
                self.machine.committed(attempt.txid)
                self.host.committed(attempt.txid, keep_from)
                return result
        raise AssertionError(f"the commit of txid {attempt.txid} ended without a decision")

    def _put_driver_records(self) -> None:
        if self.driver_checkpoint is not None:
            self.driver_checkpoint.put(self.env)

    def _replay_failure(
        self, decision: Replay, outcomes: Mapping[PartitionRef, PartitionOutcome]
    ) -> Failure:
        """The failure a replay reports: the failed partition's own, else (a partition
        was lost and restored) one saying so."""
        for ref in sorted(outcomes):
            failure = outcomes[ref].failure
            if failure is not None:
                return failure
        lost = next(ref for ref in sorted(outcomes) if outcomes[ref].lost is not None)
        return Failure(
            DRPCExceptionType.INTERNAL_ERROR, decision.reason, self._component_of[lost.group]
        )

    def _restore(self, decision: Restore, keep_from: int) -> None:
        """Rebuild a lost partition holding the global commit, where it is to live."""
        ref = decision.partition
        layout = next(layout for layout in self.layouts.values() if layout.group == ref.group)
        log.warning(
            "transactional topology %r: restoring partition %d of %r at txid %d from the "
            "checkpoint store",
            self.info.id,
            ref.index,
            ref.group,
            decision.txid,
            extra={"topology": self.info.id},
        )
        restored = self.host.restore(layout, ref.index, decision.txid, keep_from)
        self.restores[ref] = restored
        self.last_restore = (ref, restored, time.time())
        previous = self.placed.get(ref)
        self.placed[ref] = PartitionOutcome(
            ref,
            decision.txid,
            host=None if previous is None else previous.host,
            task=0 if previous is None else previous.task,
        )

    def _record(
        self,
        attempt: TransactionAttempt,
        captured: Mapping[int, list[Shipment]],
        log_fields: dict[str, Any],
        what: str,
        outcomes: dict[PartitionRef, PartitionOutcome],
    ) -> dict[str, list[list[Any]]]:
        """The global record's write of ``attempt``, once every partition holds it: the
        maps each partition holds and where it lives, the commit-phase bolts after the
        committers (given what those sent on) and the commit record."""
        done = {self.task_of(ref): outcome for ref, outcome in outcomes.items()}
        places = {ref: (outcome.host, outcome.task) for ref, outcome in outcomes.items()}

        def write(txn: StateTxn) -> dict[str, list[list[Any]]]:
            for ref, outcome in outcomes.items():
                record_maps(txn, ref.group, outcome.maps)
                if self._recorded.get(ref) != places[ref]:
                    record_placement(txn, ref.group, ref.index, *places[ref])
            result = self.commit_phase.run(txn, attempt, captured, log_fields, done=done)
            if self.driver_checkpoint is not None:  # durable before anyone can read it
                self.driver_checkpoint.put(self.env, txn=txn)
            return result

        result = self.env.run_write(write, what=what)
        self._recorded.update(places)
        return result

    def status(self) -> list[dict[str, Any]]:
        """Each partition's owner (host, task), the txid it holds, its keys and bytes, as
        of its last commit; with a checkpoint store, its last snapshot's txid and time,
        why the last one failed, and the bytes it keeps in the store."""
        found = []
        for ref, outcome in sorted(self.placed.items()):
            entry: dict[str, Any] = {
                "group": ref.group,
                "index": ref.index,
                "host": outcome.host,
                "task": outcome.task,
                "txid": outcome.held,
                "keys": outcome.keys,
                "bytes": outcome.bytes,
            }
            report = outcome.checkpoint
            if report is not None:
                entry.update(
                    snapshot=report.last_snapshot,
                    snapshot_at=report.snapshot_at,
                    snapshot_error=report.snapshot_error,
                    store_bytes=report.store_bytes,
                )
            found.append(entry)
        return found

    def checkpoint_status(self) -> dict[str, Any] | None:
        """The run's checkpoint store (None: it has none): where it is, since when a commit
        has waited for it (None: none waits), the bytes the partitions and the driver keep
        there, the driver's last record, and the last restore (a partition's, or the
        driver's directory's)."""
        records = self.driver_checkpoint
        if records is None:
            return None
        waits = [
            since
            for since in (records.store.waiting_since, self.host.store_waiting_since())
            if since is not None
        ]
        reports = [outcome.checkpoint for outcome in self.placed.values() if outcome.checkpoint]
        last_restore = None
        if self.last_restore is not None:
            ref, restored, at = self.last_restore
            last_restore = {
                "group": ref.group,
                "index": ref.index,
                "txid": restored.txid,
                "snapshot": restored.snapshot,
                "deltas": restored.deltas,
                "bytes": restored.bytes,
                "seconds": restored.seconds,
                "at": at,
            }
        driver_restore = records.restored
        return {
            "store": records.store.settings.describe(),
            "waiting_since": min(waits, default=None),
            "bytes": sum(report.store_bytes for report in reports) + records.record_bytes,
            "record": None
            if records.last_put is None
            else {"sequence": records.last_put[0], "txid": records.last_put[1]},
            "last_restore": last_restore,
            "driver_restore": None
            if driver_restore is None
            else {
                "record": driver_restore.name,
                "txid": driver_restore.txid,
                "seconds": driver_restore.seconds,
            },
            "standbys": self.host.standby_status(),
        }

    def stop(self) -> None:
        self.host.stop()
