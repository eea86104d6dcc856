"""Partitions on the resident Spark tasks: each lives on the local disk of the task that owns
it, and applies its txids there (``executor="spark"``).

Contract. ``ResidentPartitionHost(state_dir, context, cluster, ...)`` is a
``PartitionHost`` (``drpc.transactional.partitions``) whose partitions live on the
resident tasks (``drpc.executors.resident``), under ``partition_root(state_dir, conf)``
as each task's host resolves it (``drpc.state.local.dir``, else the state directory's
path on that host): never on the driver.

- **Placement.** Partition ``i`` of a state belongs to resident task ``1 + i mod
  slots`` (among the live tasks, when some are lost: ``ResidentCluster.live_workers``),
  unless only other tasks find it on their disk (a task of another host), then
  to the one of them holding the latest txid. ``held`` asks every task what it finds
  (``worker_held``); a partition no task finds is None (made anew while nothing was
  committed, lost otherwise). Placement is done again whenever the live tasks
  changed (``ResidentCluster.epoch``: a restart, a task lost or back).
- ``apply(works)`` sends each partition's work to its owner as a call
  (``worker_apply``), all at once; the owner applies it in its own LMDB write
  transaction (``apply_here``). A call that fails (the resident job broke, the
  task died) is that partition's failure: the txid is replayed, on the new job.
- ``owners()`` maps each partition to its task, for processing tasks that hand their
  per-key partials straight to the owner (``drpc.trident.fused``); placing them also
  tells every task and the driver where they are, so a read of a partition on another
  host asks its owner (``drpc.executors.resident.partition_reads``).
- **Standby replicas** (``standby_replicas=n``, with a checkpoint store): each partition
  also has ``n`` standby tasks, ones that do not own it, another host's first, the least
  loaded first, kept while they live. After each global commit (``committed``) every
  standby task brings its copies to it from the store (``drpc.state.standby``: deltas
  only, once built), one call at a time per copy, a commit meanwhile caught up by the
  next; ``standby_status`` says what each copy holds and how far it lags, and
  ``standby_floor`` the oldest txid one still catches up from (the run keeps the deltas
  after it). The host asks the cluster to keep the survivors serving when a task is
  lost (``ResidentCluster.keep_survivors``) and places the partitions again as soon as
  the live tasks change (``on_change``), not at the next commit. Placing a partition no
  live task holds but a standby copy does promotes the best copy (its own path becomes
  the partition's, nothing downloaded) and catches it up to the last global commit;
  ``promotions`` records each takeover. Copies no task is to keep are deleted.
- The owner of a partition stays where it is while it lives and holds it: another task
  may find a copy newer by a commit in flight, or the very same files on a shared disk,
  and a partition never has two owners.
- ``stop()`` closes the partitions on the tasks: a stopped run holds none open.
- Nothing per key goes through the driver: it sends each owner the txid's work (the
  inbox the processing phase captured for that committer task, or on Trident's compiled
  path a marker of the partials staged at the owner) and gets an outcome back.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from drpc.errors import DRPCExceptionType, Failure, ResidentTasksBrokenError
from drpc.executors.resident.cluster import ResidentCluster
from drpc.executors.resident.control import Placed
from drpc.executors.resident.partition_reads import driver_reader, place
from drpc.executors.resident.worker import current_worker
from drpc.executors.spark.stages import loaded_topology
from drpc.semantics.runners import freeze
from drpc.state.checkpoint import Restored
from drpc.state.checkpoint_store import CheckpointSettings
from drpc.state.partition import PartitionLayout
from drpc.state.partitioned import LocalPartitions, set_remote_reader
from drpc.state.standby import StandbyCopies
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

STANDBY_RETENTION_LAG = 20
"""Global commits a standby copy may lag while the store keeps the deltas it catches up
from."""

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
_standbys: dict[PartitionsAt, StandbyCopies] = {}
_roots_lock = threading.Lock()


def _partitions(at: PartitionsAt) -> LocalPartitions:
    """This task's partitions at ``at`` (one ``LocalPartitions`` each)."""
    with _roots_lock:
        found = _roots.get(at)
        if found is None:
            found = _roots[at] = LocalPartitions(at.root, dict(at.options), at.checkpoint)
        return found


def _standby_copies(at: PartitionsAt) -> StandbyCopies:
    partitions = _partitions(at)
    with _roots_lock:
        found = _standbys.get(at)
        if found is None or found.partitions is not partitions:
            found = _standbys[at] = StandbyCopies(partitions, current_worker().index)
        return found


@dataclass(frozen=True, slots=True)
class Held:
    """What a task finds on its disk: its host, each partition's txid, and each standby
    copy's."""

    host: str
    partitions: dict[tuple[str, int], int]
    standbys: dict[tuple[str, int], int]


def worker_held(at: PartitionsAt, layouts: list[PartitionLayout]) -> Held:
    """This task's host, and what each partition and standby copy on its disk holds."""
    return Held(
        current_worker().host,
        _partitions(at).held(layouts),
        _standby_copies(at).held(layouts) if at.checkpoint is not None else {},
    )


def worker_keep_standby(
    at: PartitionsAt, layout: PartitionLayout, index: int, target: int, keep_from: int
) -> int:
    """Bring this task's standby copy of the partition to ``target``; the txid it holds."""
    return _standby_copies(at).keep(layout, index, target, keep_from).txid


def worker_promote(
    at: PartitionsAt, layout: PartitionLayout, index: int, target: int | None, keep_from: int
) -> tuple[int, int] | None:
    """Make this task's standby copy of the partition its own, caught up to ``target`` (the
    last global commit; None: none yet) when it lags: what it held, and holds now (None:
    no copy here)."""
    held = _standby_copies(at).promote(layout, index)
    if held is None:
        return None
    if target is not None and held < target:
        _partitions(at).restore(layout, index, target, keep_from)
        return held, target
    return held, held


def worker_drop_standby(at: PartitionsAt, layout: PartitionLayout, index: int) -> None:
    _standby_copies(at).drop(layout, index)


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


@dataclass
class StandbyCopy:
    """A standby copy of a partition as the driver knows it: on which task, and what it
    held when it last said (None: none yet; ``error``: why its last catch-up failed)."""

    task: int
    host: str | None
    txid: int | None = None
    error: str | None = None


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
        standby_replicas: int = 0,
    ) -> None:
        """:param cluster: gives the process's resident job (asked when first needed).
        :param checkpoint: the run's checkpoint store (``drpc.state.checkpoint``).
        :param standby_replicas: warm copies of each partition on other tasks (module
            doc); they need ``checkpoint``."""
        if standby_replicas < 0:
            raise ValueError(f"standby_replicas must be >= 0, got {standby_replicas!r}")
        if standby_replicas and checkpoint is None:
            raise ValueError(
                "standby replicas apply the deltas of the checkpoint store: set checkpoint_dir"
            )
        self.root = root
        self.context = context
        self._cluster_of = cluster
        self._cluster: ResidentCluster | None = None
        self.at = PartitionsAt(root, tuple(sorted((state_options or {}).items())), checkpoint)
        # The tasks outlive this run and cache its topology by this token: an ``id()``
        # could name a later run's host once this one is freed, which would then commit
        # with this run's topology.
        self.token = token or f"partitions-{uuid.uuid4().hex}"
        self.standby_replicas = standby_replicas
        self._frozen = freeze(context.topology)
        self._layouts: dict[str, PartitionLayout] = {}
        self._owners: dict[PartitionRef, int] = {}
        self._hosts: dict[PartitionRef, str | None] = {}
        self._standbys: dict[PartitionRef, list[StandbyCopy]] = {}
        self._committed: tuple[int, int] | None = None  # the last global commit, keep_from
        self._catching: set[tuple[int, PartitionRef]] = set()  # copies catching up
        self._catch_again: set[tuple[int, PartitionRef]] = set()
        self._replacing = False  # the live tasks changed: placing again, no catch-up starts
        self._epoch = -1
        self._lock = threading.Lock()
        self._discovering = threading.Lock()
        self._withdraw: list[Callable[[], None]] = []
        self.promotions: list[dict[str, Any]] = []
        """Each standby copy made an owner: which, on which task, and how long it took."""

    @property
    def cluster(self) -> ResidentCluster:
        if self._cluster is None:
            self._cluster = self._cluster_of()
        return self._cluster

    def _default_owner(self, ref: PartitionRef, live: list[int]) -> int:
        workers = self.cluster.workers
        default = workers[ref.index % len(workers)]
        return default if default in live else live[ref.index % len(live)]

    def held(self, layouts: Mapping[str, PartitionLayout]) -> dict[PartitionRef, Placement]:
        self._layouts = {layout.group: layout for layout in layouts.values()}
        if self.standby_replicas and not self._withdraw:
            cluster = self.cluster
            self._withdraw = [cluster.keep_survivors(), cluster.on_change(self._on_change)]
        with self._discovering:
            return self._place()

    def _on_change(self) -> None:
        """The live tasks changed: place the partitions again at once (a lost owner's
        standby copy takes over, and reads find it there), not at the next commit. No
        standby catch-up starts meanwhile: a copy to promote would wait for it."""
        with self._lock:
            self._replacing = True

        def again() -> None:
            try:
                self._discover()
            except Exception as error:  # the run's next commit places them again
                log.warning("could not place the partitions again after a change: %s", error)

        threading.Thread(target=again, name="drpc-partitions-replace", daemon=True).start()

    def _discover(self) -> None:
        """Place the partitions again if the live tasks changed since they were placed."""
        with self._discovering:
            if self.cluster.epoch != self._epoch:
                self._place()

    def _place(self) -> dict[PartitionRef, Placement]:
        """Find what every live task holds, choose each partition's owner (promoting a
        standby copy when no task has the partition itself) and standbys. Holds
        ``_discovering``."""
        cluster = self.cluster
        epoch = cluster.epoch
        live = cluster.live_workers()
        if not live:
            raise ResidentTasksBrokenError("no resident task serves: the partitions have no owner")
        layouts = list(self._layouts.values())
        calls = {node: cluster.call(node, worker_held, self.at, layouts) for node in live}
        owned: dict[PartitionRef, dict[int, int]] = {}
        copies: dict[PartitionRef, dict[int, int]] = {}
        hosts: dict[int, str] = {}
        for node, call in calls.items():
            held: Held = call.result()
            hosts[node] = held.host
            for (group, index), txid in held.partitions.items():
                owned.setdefault(PartitionRef(group, index), {})[node] = txid
            for (group, index), txid in held.standbys.items():
                copies.setdefault(PartitionRef(group, index), {})[node] = txid
        held_by: dict[PartitionRef, int | None] = {}
        owners: dict[PartitionRef, int] = {}
        promoting: dict[PartitionRef, int] = {}
        for ref in partition_refs(layouts):
            default = self._default_owner(ref, live)
            on, standby = owned.get(ref, {}), copies.get(ref, {})
            best = max(on.values(), default=None)
            best_copy = max(standby.values(), default=None)
            previous = self._owners.get(ref)
            if previous in on:
                # The owner stays while it lives and holds the partition: its copy is the
                # one the run commits to (another task may read a txid newer by a commit in
                # flight, or the very same files on a shared disk: two owners must never be).
                assert previous is not None
                owners[ref], held_by[ref] = previous, on[previous]
            elif best is not None and (best_copy is None or best >= best_copy):
                owners[ref] = (
                    default
                    if on.get(default) == best
                    else min(node for node, txid in on.items() if txid == best)
                )
                held_by[ref] = best
            elif best_copy is not None:
                promoting[ref] = min(node for node, txid in standby.items() if txid == best_copy)
            else:
                owners[ref], held_by[ref] = default, None
        if promoting:  # at once: each waits for its copy's catch-up under way, if any
            with ThreadPoolExecutor(len(promoting), thread_name_prefix="drpc-promote") as pool:
                promoted = list(pool.map(self._promote, promoting.items()))
            for (ref, node), now in zip(promoting.items(), promoted, strict=True):
                # a copy gone meanwhile: the partition is found nowhere (restored, if it can)
                owners[ref] = node if now is not None else self._default_owner(ref, live)
                held_by[ref] = now
        standbys = self._choose_standbys(owners, live, hosts, copies)
        with self._lock:
            self._owners = owners
            self._hosts = {ref: hosts.get(node) for ref, node in owners.items()}
            self._standbys = standbys
            self._epoch = epoch
            self._replacing = False
            self._catch_again &= self._catching  # the others start below
        for layout in layouts:  # readers on other hosts ask the owners
            placed = tuple(owners[PartitionRef(layout.group, i)] for i in range(layout.partitions))
            place(self.root, layout.group, placed)
            cluster.announce((self.root, layout.group), Placed(self.root, layout.group, placed))
        set_remote_reader(driver_reader(cluster.call))
        self._drop_unwanted(copies, standbys, owners)
        log.info(
            "partitions on the resident tasks: %s",
            ", ".join(
                f"{ref.group}[{ref.index}] on task {node} ({hosts.get(node)})"
                + (
                    f", standby on {', '.join(str(c.task) for c in standbys[ref])}"
                    if standbys.get(ref)
                    else ""
                )
                for ref, node in sorted(owners.items())
            ),
        )
        if self.standby_replicas:
            for key in {(c.task, ref) for ref, chosen in standbys.items() for c in chosen}:
                self._catch_up(key)
        return {ref: Placement(held_by[ref], hosts.get(node), node) for ref, node in owners.items()}

    def _promote(self, promoting: tuple[PartitionRef, int]) -> int | None:
        """Make a task's standby copy of a partition its own, caught up to the last global
        commit when it lags; what it holds then (None: the copy was gone)."""
        ref, node = promoting
        started = time.monotonic()
        target, keep_from = self._committed or (None, 0)
        call = self.cluster.call(
            node, worker_promote, self.at, self._layouts[ref.group], ref.index, target, keep_from
        )
        found = call.result()
        if found is None:
            return None
        held, txid = found
        caught_up = txid - held
        seconds = time.monotonic() - started
        self.promotions.append(
            {
                "group": ref.group,
                "index": ref.index,
                "task": node,
                "txid": txid,
                "deltas": caught_up,
                "seconds": seconds,
                "at": time.time(),
            }
        )
        log.warning(
            "partition %d of %r: its standby copy on resident task %d took over at txid %d "
            "(%d delta(s) caught up, %.3f s)",
            ref.index,
            ref.group,
            node,
            txid,
            caught_up,
            seconds,
        )
        return txid

    def _choose_standbys(
        self,
        owners: Mapping[PartitionRef, int],
        live: list[int],
        hosts: Mapping[int, str],
        copies: Mapping[PartitionRef, Mapping[int, int]],
    ) -> dict[PartitionRef, list[StandbyCopy]]:
        """Each partition's standby tasks: the ones it had while they live and do not own
        it, then others, another host's first, the least loaded first."""
        chosen: dict[PartitionRef, list[StandbyCopy]] = {}
        if not self.standby_replicas:
            return chosen
        load: dict[int, int] = dict.fromkeys(live, 0)
        with self._lock:
            before = {ref: [c.task for c in found] for ref, found in self._standbys.items()}
        for ref, owner in sorted(owners.items()):
            kept = [node for node in before.get(ref, []) if node in live and node != owner]
            others = sorted(
                (node for node in live if node != owner and node not in kept),
                key=lambda node: (hosts.get(node) == hosts.get(owner), load[node], node),
            )
            tasks = (kept + others)[: self.standby_replicas]
            for node in tasks:
                load[node] += 1
            chosen[ref] = [
                StandbyCopy(node, hosts.get(node), copies.get(ref, {}).get(node)) for node in tasks
            ]
        return chosen

    def _drop_unwanted(
        self,
        copies: Mapping[PartitionRef, Mapping[int, int]],
        standbys: Mapping[PartitionRef, list[StandbyCopy]],
        owners: Mapping[PartitionRef, int],
    ) -> None:
        """Delete the standby copies no task is to keep (their disk is not needed)."""
        for ref, found in copies.items():
            wanted = {c.task for c in standbys.get(ref, [])}
            for node in found:
                if node not in wanted:
                    try:
                        self.cluster.call(
                            node, worker_drop_standby, self.at, self._layouts[ref.group], ref.index
                        )
                    except Exception as error:
                        log.debug("could not drop a standby copy on task %d: %s", node, error)

    def committed(self, txid: int, keep_from: int) -> None:
        """The global commit of ``txid`` is recorded: the standby copies catch up to it."""
        self._committed = (txid, keep_from)
        if not self.standby_replicas:
            return
        with self._lock:
            keys = [(c.task, ref) for ref, chosen in self._standbys.items() for c in chosen]
        for key in keys:
            self._catch_up(key)

    def _catch_up(self, key: tuple[int, PartitionRef]) -> None:
        """Bring one standby copy (its task, its partition) to the last global commit: one
        call at a time per copy, the copies of a task side by side; a commit meanwhile is
        caught up by the next call."""
        committed = self._committed
        if committed is None:
            return
        node, ref = key
        with self._lock:
            if key in self._catching or self._replacing:
                self._catch_again.add(key)
                return
            if not any(copy.task == node for copy in self._standbys.get(ref, ())):
                return
            self._catching.add(key)
        target, keep_from = committed
        layout = self._layouts[ref.group]
        try:
            call = self.cluster.call(
                node, worker_keep_standby, self.at, layout, ref.index, target, keep_from
            )
        except Exception as error:
            log.debug("the standby copy of %s on task %d not caught up: %s", ref, node, error)
            with self._lock:
                self._catching.discard(key)
            return
        call.add_done_callback(lambda done: self._caught_up(key, done))

    def _caught_up(self, key: tuple[int, PartitionRef], done: Future[int]) -> None:
        error = done.exception()
        node, ref = key
        with self._lock:
            self._catching.discard(key)
            again = key in self._catch_again
            self._catch_again.discard(key)
            for copy in self._standbys.get(ref, ()):
                if copy.task == node:
                    if error is None:
                        copy.txid, copy.error = done.result(), None
                    else:
                        copy.error = str(error)
        if again and error is None:
            threading.Thread(
                target=self._catch_up, args=(key,), name="drpc-standby-catch-up", daemon=True
            ).start()

    def standby_floor(self, global_txid: int) -> int:
        """The oldest txid a standby copy holds, when it lags by at most
        ``STANDBY_RETENTION_LAG``: the store keeps the deltas after it (a copy further
        behind, or broken, is built again from the newest snapshot rather than hold the
        store's retention back)."""
        with self._lock:
            held = [
                copy.txid
                for chosen in self._standbys.values()
                for copy in chosen
                if copy.txid is not None and global_txid - copy.txid <= STANDBY_RETENTION_LAG
            ]
        return min([global_txid, *held])

    def standby_status(self) -> dict[str, Any] | None:
        """None without standby replicas, else ``copies``: each standby copy, its partition,
        task and host, the txid it holds, how many global commits it lags (None: not built
        yet) and why its last catch-up failed; and ``last_takeover``: the last copy made an
        owner (``promotions``), None if none."""
        if not self.standby_replicas:
            return None
        committed = self._committed
        with self._lock:
            copies = [
                {
                    "group": ref.group,
                    "index": ref.index,
                    "task": copy.task,
                    "host": copy.host,
                    "txid": copy.txid,
                    "lag": None
                    if copy.txid is None or committed is None
                    else max(0, committed[0] - copy.txid),
                    "error": copy.error,
                }
                for ref, chosen in sorted(self._standbys.items())
                for copy in chosen
            ]
        return {
            "copies": copies,
            "last_takeover": self.promotions[-1] if self.promotions else None,
        }

    def owners(self) -> dict[PartitionRef, int]:
        if self.cluster.epoch != self._epoch:
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
        withdraw, self._withdraw = self._withdraw, []
        for undo in withdraw:
            undo()
        cluster = self._cluster
        if cluster is None:
            return
        try:
            calls = [cluster.call(node, worker_close, self.root) for node in cluster.live_workers()]
            for call in calls:
                call.result(timeout=30)
        except Exception as error:  # a stopped or broken job took its processes with it
            log.debug("could not close the partitions on the resident tasks: %s", error)
