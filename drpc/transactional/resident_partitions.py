"""Partitions on the resident Spark tasks: each lives on the local disk of the task that owns
it, and applies its txids there (``executor="spark"``).

Contract. ``ResidentPartitionHost(state_dir, context, cluster, ...)`` is a
``PartitionHost`` (``drpc.transactional.partitions``) whose partitions live on the
resident tasks (``drpc.executors.resident``), under ``partition_root(state_dir, conf)``
as each task's host resolves it (``drpc.state.local.dir``, else the state directory's
path on that host): never on the driver.

- **Placement.** Partition ``i`` of a state belongs to resident task ``1 + i mod
  slots``, unless only other tasks find it on their disk (a task of another host), then
  to the one of them holding the latest txid. ``held`` asks every task what it finds
  (``worker_held``); a partition no task finds is None (made anew while nothing was
  committed, lost otherwise). Placement is done again whenever the resident job
  restarted (its tasks are new processes, maybe on other hosts).
- ``apply(works)`` sends each partition's work to its owner as a call
  (``worker_apply``), all at once; the owner applies it in its own LMDB write
  transaction (``apply_here``). A call that fails (the resident job broke, the
  task died) is that partition's failure: the txid is replayed, on the new job.
- ``owners()`` maps each partition to its task, for processing tasks that hand their
  per-key partials straight to the owner (``drpc.trident.fused``); placing them also
  tells every task and the driver where they are, so a read of a partition on another
  host asks its owner (``drpc.executors.resident.partition_reads``).
- ``stop()`` closes the partitions on the tasks: a stopped run holds none open.
- Nothing per key goes through the driver: it sends each owner the txid's work (the
  inbox the processing phase captured for that committer task, or on Trident's compiled
  path a marker of the partials staged at the owner) and gets an outcome back.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from drpc.errors import DRPCExceptionType, Failure
from drpc.executors.resident.cluster import ResidentCluster
from drpc.executors.resident.control import Placed
from drpc.executors.resident.partition_reads import driver_reader, place
from drpc.executors.resident.routing import CONTROL
from drpc.executors.resident.worker import current_worker
from drpc.executors.spark.stages import loaded_topology
from drpc.semantics.runners import freeze
from drpc.state.checkpoint import Restored
from drpc.state.checkpoint_store import CheckpointSettings
from drpc.state.partition import PartitionLayout
from drpc.state.partitioned import LocalPartitions, set_remote_reader
from drpc.transactional.global_commit import PartitionRef
from drpc.transactional.partitions import (
    CommitContext,
    PartitionOutcome,
    PartitionWork,
    Placement,
    apply_here,
    partition_refs,
)

log = logging.getLogger(__name__)

PARTITIONS_SERVICE = "drpc.partitions"
"""The run's partition host, for processing backends that stage partials at the owners."""

# -- on the resident tasks --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionsAt:
    """Where a run keeps its partitions on a task: the partition root as the task's host
    resolves it, the LMDB options and the checkpoint store (None: none)."""

    root: str
    options: tuple[tuple[str, Any], ...] = ()
    checkpoint: CheckpointSettings | None = None


_roots: dict[PartitionsAt, LocalPartitions] = {}
_roots_lock = threading.Lock()


def _partitions(at: PartitionsAt) -> LocalPartitions:
    """This task's partitions at ``at`` (one ``LocalPartitions`` each)."""
    with _roots_lock:
        found = _roots.get(at)
        if found is None:
            found = _roots[at] = LocalPartitions(at.root, dict(at.options), at.checkpoint)
        return found


def worker_held(
    at: PartitionsAt, layouts: list[PartitionLayout]
) -> tuple[str, dict[tuple[str, int], int]]:
    """This task's host, and what each partition found on its disk holds."""
    return current_worker().host, _partitions(at).held(layouts)


def worker_create(at: PartitionsAt, layout: PartitionLayout, index: int, start_txid: int) -> None:
    _partitions(at).partition(layout, index, create_at=start_txid)


def worker_restore(
    at: PartitionsAt, layout: PartitionLayout, index: int, txid: int, keep_from: int
) -> Restored:
    return _partitions(at).restore(layout, index, txid, keep_from)


def worker_apply(
    at: PartitionsAt,
    token: str,
    frozen: bytes,
    conf: dict[str, Any],
    hints: dict[str, Any],
    layout: PartitionLayout,
    work: PartitionWork,
) -> PartitionOutcome:
    """Apply ``work`` to this task's partition (see the module doc)."""
    worker = current_worker()
    context = CommitContext(loaded_topology(token, frozen), conf, {}, hints)
    partitions = _partitions(at)
    return apply_here(partitions, layout, context, work, worker.host, worker.index)


def worker_close(root: str) -> None:
    """Close this task's partitions under ``root`` (a stopped run holds none open)."""
    with _roots_lock:
        closing = [key for key in _roots if key.root == root]
        found = [_roots.pop(key) for key in closing]
    for partitions in found:
        partitions.close()


# -- on the driver ----------------------------------------------------------------------------


class ResidentPartitionHost:
    """The run's partitions on the resident tasks (see the module doc)."""

    def __init__(
        self,
        root: str,
        context: CommitContext,
        cluster: Callable[[], ResidentCluster],
        *,
        state_options: Mapping[str, Any] | None = None,
        checkpoint: CheckpointSettings | None = None,
        token: str = "",
    ) -> None:
        """:param cluster: gives the process's resident job (asked when first needed).
        :param checkpoint: the run's checkpoint store (``drpc.state.checkpoint``)."""
        self.root = root
        self.context = context
        self._cluster_of = cluster
        self._cluster: ResidentCluster | None = None
        self.at = PartitionsAt(root, tuple(sorted((state_options or {}).items())), checkpoint)
        # The tasks outlive this run and cache its topology by this token: an ``id()``
        # could name a later run's host once this one is freed, which would then commit
        # with this run's topology.
        self.token = token or f"partitions-{uuid.uuid4().hex}"
        self._frozen = freeze(context.topology)
        self._layouts: dict[str, PartitionLayout] = {}
        self._owners: dict[PartitionRef, int] = {}
        self._hosts: dict[PartitionRef, str | None] = {}
        self._generation = -1
        self._lock = threading.Lock()

    @property
    def cluster(self) -> ResidentCluster:
        if self._cluster is None:
            self._cluster = self._cluster_of()
        return self._cluster

    def _default_owner(self, ref: PartitionRef) -> int:
        workers = self.cluster.workers
        return workers[ref.index % len(workers)]

    def held(self, layouts: Mapping[str, PartitionLayout]) -> dict[PartitionRef, Placement]:
        self._layouts = {layout.group: layout for layout in layouts.values()}
        return self._discover()

    def _discover(self) -> dict[PartitionRef, Placement]:
        cluster = self.cluster
        generation = cluster.generation
        layouts = list(self._layouts.values())
        calls = {
            node: cluster.call(node, worker_held, self.at, layouts) for node in cluster.workers
        }
        found: dict[PartitionRef, dict[int, int]] = {}
        hosts: dict[int, str] = {}
        for node, call in calls.items():
            host, held = call.result()
            hosts[node] = host
            for (group, index), txid in held.items():
                found.setdefault(PartitionRef(group, index), {})[node] = txid
        held_by: dict[PartitionRef, int | None] = {}
        owners: dict[PartitionRef, int] = {}
        for ref in partition_refs(layouts):
            default = self._default_owner(ref)
            on = found.get(ref, {})
            if not on:
                held_by[ref] = None
                owners[ref] = default
                continue
            best = max(on.values())
            owner = (
                default
                if on.get(default) == best
                else min(node for node, txid in on.items() if txid == best)
            )
            owners[ref] = owner
            held_by[ref] = best
        with self._lock:
            self._owners = owners
            self._hosts = {ref: hosts.get(node) for ref, node in owners.items()}
            self._generation = generation
        for layout in layouts:  # readers on other hosts ask the owners
            placed = tuple(owners[PartitionRef(layout.group, i)] for i in range(layout.partitions))
            place(self.root, layout.group, placed)
            cluster.node.broadcast((None, CONTROL, Placed(self.root, layout.group, placed)))
        set_remote_reader(driver_reader(cluster.call))
        log.info(
            "partitions on the resident tasks: %s",
            ", ".join(
                f"{ref.group}[{ref.index}] on task {node} ({hosts.get(node)})"
                for ref, node in sorted(owners.items())
            ),
        )
        return {ref: Placement(held_by[ref], hosts.get(node), node) for ref, node in owners.items()}

    def owners(self) -> dict[PartitionRef, int]:
        if self.cluster.generation != self._generation:
            self._discover()
        with self._lock:
            return dict(self._owners)

    def create(self, layout: PartitionLayout, index: int, start_txid: int) -> None:
        ref = PartitionRef(layout.group, index)
        node = self.owners()[ref]
        self.cluster.call(node, worker_create, self.at, layout, index, start_txid).result()

    def restore(self, layout: PartitionLayout, index: int, txid: int, keep_from: int) -> Restored:
        node = self.owners()[PartitionRef(layout.group, index)]
        call = self.cluster.call(node, worker_restore, self.at, layout, index, txid, keep_from)
        return call.result()

    def apply(self, works: list[PartitionWork]) -> list[PartitionOutcome]:
        try:
            owners = self.owners()
        except Exception as error:
            return [self._failed(work, error) for work in works]
        calls: list[tuple[PartitionWork, Future[PartitionOutcome] | Exception]] = []
        for work in works:
            try:
                calls.append(
                    (
                        work,
                        self.cluster.call(
                            owners[work.ref],
                            worker_apply,
                            self.at,
                            self.token,
                            self._frozen,
                            self.context.conf,
                            self.context.hints,
                            self._layouts[work.ref.group],
                            work,
                        ),
                    )
                )
            except Exception as error:
                calls.append((work, error))
        outcomes = []
        for work, call in calls:
            if isinstance(call, Exception):
                outcomes.append(self._failed(work, call))
                continue
            try:
                outcomes.append(call.result())
            except Exception as error:
                outcomes.append(self._failed(work, error))
        return outcomes

    def _failed(self, work: PartitionWork, error: BaseException) -> PartitionOutcome:
        message = (
            f"the commit of txid {work.attempt.txid} in partition {work.ref.index} of "
            f"{work.ref.group!r} on the resident tasks failed: {error}"
        )
        return PartitionOutcome(
            work.ref,
            -1,
            failure=Failure(DRPCExceptionType.INTERNAL_ERROR, message, work.component),
            host=self._hosts.get(work.ref),
        )

    def store_waiting_since(self) -> float | None:
        """None: the resident tasks wait for the store on their hosts; the driver sees the
        store wait when its own put of the driver's records does."""
        return None

    def stop(self) -> None:
        """Close the partitions on the resident tasks (when the job still runs)."""
        cluster = self._cluster
        if cluster is None:
            return
        try:
            calls = [cluster.call(node, worker_close, self.root) for node in cluster.workers]
            for call in calls:
                call.result(timeout=30)
        except Exception as error:  # a stopped or broken job took its processes with it
            log.debug("could not close the partitions on the resident tasks: %s", error)
