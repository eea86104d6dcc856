"""The commit phase of one transactional batch: strictly in txid order, on the driver.

Contract. ``CommitPhase(topology, info, conf, services, transactional,
coordinator_state)``; ``run(txn, attempt, captured, log_fields)`` runs, inside
the commit's LMDB write transaction ``txn``, every commit-phase component in
topology order: the committers (their ``finish_batch`` only now, once the
commit tuple arrived, as in Storm) and the bolts after them, each task a
``TaskRun`` over what the processing phase sent it (``captured``) and what
earlier commit-phase tasks sent it. Then the opaque spout's partition metas
of this txid and the commit record are written in the same transaction, so
a crash keeps all of a commit or none of it. Returns what commit-phase bolts
emitted to no one, by component. A task that fails the batch raises
``CommitFailed`` with its failure (the caller replays the batch).

The tasks of a partitioned state's committer already committed in their partitions
(``drpc.transactional.partitions``): ``run(..., done=...)`` takes, by task, what each
sent on and emitted to no one there, and runs only the rest. ``inbox(task, attempt,
captured)`` is what such a task commits over: what the processing phase sent it, and
the commit tuple.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from drpc.errors import Failure
from drpc.executors.batch import TaskHints, TaskRun
from drpc.executors.records import Shipment
from drpc.model.topology import Topology
from drpc.state import CoordinatorState, StateTxn
from drpc.state.topology import commit_scope
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.builder import TransactionalInfo
from drpc.transactional.spouts import (
    COMMIT_STREAM,
    TransactionalServices,
    commit_opaque_metas,
)


class Done(Protocol):
    """What a committer task did where its partition lives: what it sent on, by receiving
    task, and what it emitted to no one."""

    @property
    def shipments(self) -> dict[int, Shipment]: ...

    @property
    def unrouted(self) -> list[tuple[str, list[Any]]]: ...


class CommitFailed(Exception):
    """A commit-phase task failed the batch."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class CommitPhase:
    """Runs the commit phase of one transactional topology (see the module doc)."""

    def __init__(
        self,
        topology: Topology,
        info: TransactionalInfo,
        conf: dict[str, Any],
        services: dict[str, Any],
        transactional: TransactionalServices,
        coordinator_state: CoordinatorState,
    ) -> None:
        self.topology = topology
        self.info = info
        self.conf = conf
        self.services = services
        self.transactional = transactional
        self.coordinator_state = coordinator_state
        # Committers' inputs from the processing phase ship only non-zero count reports.
        self.hints = {
            component: TaskHints(
                implied_sources=tuple(
                    (source, 1 if args.single else topology.components[source].parallelism)
                    for source, args in sorted(coordination.sources.items())
                ),
                omit_zero_reports=True,
            )
            for component in info.commit_components
            if (coordination := topology.components[component].coordination) is not None
        }
        self._coordinator_task = topology.component_task_ids[info.coordinator_id][0]

    def commit_tuple(self, attempt: TransactionAttempt) -> Shipment:
        return Shipment(
            self.info.coordinator_id, self._coordinator_task, [(COMMIT_STREAM, [[attempt]])]
        )

    def inbox(
        self, task: int, attempt: TransactionAttempt, captured: Mapping[int, list[Shipment]]
    ) -> list[Shipment]:
        """What committer task ``task`` commits over (see the module doc)."""
        return [*captured.get(task, ()), self.commit_tuple(attempt)]

    def run(
        self,
        txn: StateTxn,
        attempt: TransactionAttempt,
        captured: Mapping[int, list[Shipment]],
        log_fields: dict[str, Any],
        done: Mapping[int, Done] | None = None,
    ) -> dict[str, list[list[Any]]]:
        topology, info = self.topology, self.info
        done = done or {}
        inboxes = {task: list(shipments) for task, shipments in captured.items()}
        commit_tuple = self.commit_tuple(attempt)
        for committer in info.committers:
            for task in topology.component_task_ids[committer]:
                inboxes.setdefault(task, []).append(commit_tuple)
        outputs: dict[str, list[list[Any]]] = {}
        with commit_scope(txn, attempt.txid):
            for component in info.commit_components:
                for index, task in enumerate(topology.component_task_ids[component]):
                    finished = done.get(task)
                    if finished is not None:
                        inboxes.pop(task, None)
                        for target, shipment in finished.shipments.items():
                            inboxes.setdefault(target, []).append(shipment)
                        for _, values in finished.unrouted:
                            outputs.setdefault(component, []).append(values)
                        continue
                    run = TaskRun(
                        topology,
                        component,
                        index,
                        job_ids=(attempt,),
                        conf=self.conf,
                        services=self.services,
                        hints=self.hints.get(component),
                        log_fields={attempt: log_fields},
                    ).run(inboxes.pop(task, []))
                    if run.failures:
                        raise CommitFailed(next(iter(run.failures.values())))
                    for target, shipment in run.shipments().items():
                        inboxes.setdefault(target, []).append(shipment)
                    for _, values in run.unrouted:
                        outputs.setdefault(component, []).append(values)
            commit_opaque_metas(self.transactional, attempt.txid, txn)
            self.coordinator_state.record_commit(txn, attempt.txid)
        return outputs
