"""The processing phase on the in-process streaming engine.

Contract. ``LocalBackend`` (a ``ProcessingBackend``, ``drpc.transactional.
processing``) runs the processing topology (``processing_topology``: the full
topology with every commit-phase bolt replaced by a ``CaptureBolt``) on a
``LocalExecutor``. The coordinator spout pulls submitted attempts
(``next_batch``, woken through ``attach``) and tells the backend when an
attempt's tuple tree completed (``processed``) or failed (``failed``); what the
capture bolts received for it is reported as ``Processed.captured``.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from drpc import config
from drpc.errors import DRPCExceptionType, Failure
from drpc.executors.local import LocalExecutor
from drpc.executors.records import Shipment
from drpc.model.components import BaseRichBolt, BaseRichSpout, Conf, OutputCollector
from drpc.model.context import TopologyContext
from drpc.model.streams import COORDINATED_STREAM_ID
from drpc.model.topology import Topology, TopologyBuilder
from drpc.model.tuples import Tuple
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.builder import TransactionalInfo
from drpc.transactional.processing import Event, Processed, ProcessingFailed
from drpc.transactional.spouts import TransactionalServices

CAPTURE_SERVICE = "drpc.transactional.capture"


class CaptureBolt(BaseRichBolt):
    """Stands in for a commit-phase bolt during processing: keeps what it receives."""

    def __init__(self, component_id: str) -> None:
        self.component_id = component_id
        self._store: Captures | None = None
        self._collector: OutputCollector | None = None
        self._index = 0

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        self._store = context.services[CAPTURE_SERVICE]
        self._collector = collector
        self._index = context.this_task_index

    def execute(self, tuple: Tuple) -> None:
        assert self._store is not None and self._collector is not None
        self._store.add(self.component_id, self._index, tuple)
        self._collector.ack(tuple)


class Captures:
    """What capture bolts received, per attempt, as shipments of the full topology."""

    def __init__(self, processing: Topology, full: Topology) -> None:
        self._lock = threading.Lock()
        # attempt -> receiving task -> (source component, source task) -> shipment
        self._shipments: dict[TransactionAttempt, dict[int, dict[tuple[str, int], Shipment]]] = {}
        self._processing = processing
        self._full = full

    def _full_task(self, task: int) -> int:
        component = self._processing.task_component[task]
        index = self._processing.component_task_ids[component].index(task)
        return self._full.component_task_ids[component][index]

    def add(self, component: str, index: int, received: Tuple) -> None:
        source = received.source_component
        source_task = self._full_task(received.source_task)
        target = self._full.component_task_ids[component][index]
        with self._lock:
            by_source = self._shipments.setdefault(received[0], {}).setdefault(target, {})
            shipment = by_source.get((source, source_task))
            if shipment is None:
                shipment = by_source[(source, source_task)] = Shipment(source, source_task)
            if received.source_stream == COORDINATED_STREAM_ID:
                shipment.reports[received[0]] = received[1]
            else:
                shipment.add(received.source_stream, received.values)

    def take(self, attempt: TransactionAttempt) -> dict[int, list[Shipment]]:
        with self._lock:
            taken = self._shipments.pop(attempt, {})
        return {target: list(by_source.values()) for target, by_source in taken.items()}


class LocalBackend:
    """Processes attempts on the in-process engine; commit-phase bolts are captured."""

    def __init__(
        self,
        topology: Topology,
        info: TransactionalInfo,
        conf: dict[str, Any],
        services: dict[str, Any],
        transactional: TransactionalServices,
        threads: int = 4,
    ) -> None:
        self.info = info
        self.transactional = transactional
        self.processing = processing_topology(topology, info)
        self.captures = Captures(self.processing, topology)
        self._queue: collections.deque[tuple[TransactionAttempt, Any, int | None]] = (
            collections.deque()
        )
        self._wakeup: Callable[[], None] | None = None
        self._report: Callable[[Event], None] | None = None
        transactional.batches = self
        self.executor = LocalExecutor(
            self.processing,
            conf={**conf, config.TOPOLOGY_MAX_SPOUT_PENDING: None},
            services={**services, CAPTURE_SERVICE: self.captures},
            threads=threads,
        )

    def start(self, report: Callable[[Event], None]) -> None:
        self._report = report
        self.executor.start()

    def stop(self) -> None:
        self.executor.stop()

    def submit(
        self, attempt: TransactionAttempt, metadata: Any, last_committed: int | None
    ) -> None:
        self._queue.append((attempt, metadata, last_committed))
        if self._wakeup is not None:
            self._wakeup()

    # the coordinator spout's side
    def attach(self, wakeup: Callable[[], None]) -> None:
        self._wakeup = wakeup

    def next_batch(self) -> tuple[TransactionAttempt, Any, int | None] | None:
        try:
            return self._queue.popleft()
        except IndexError:
            return None

    def processed(self, attempt: TransactionAttempt) -> None:
        assert self._report is not None
        captured = self.captures.take(attempt)
        tuples = self.transactional.take_emitted(attempt)
        self._report(Processed(attempt, captured, tuples))

    def failed(self, attempt: TransactionAttempt, failure: Failure | None) -> None:
        assert self._report is not None
        self.captures.take(attempt)
        self.transactional.take_emitted(attempt)
        self._report(
            ProcessingFailed(
                attempt,
                failure or Failure(DRPCExceptionType.FAILED_REQUEST, f"batch {attempt} failed"),
            )
        )


def processing_topology(topology: Topology, info: TransactionalInfo) -> Topology:
    """The topology without its commit phase: commit-phase bolts become capture bolts."""
    commit = set(info.commit_components)
    builder = TopologyBuilder()
    for component_id, spec in topology.components.items():
        if spec.kind == "spout":
            assert isinstance(spec.component, BaseRichSpout)
            builder.set_spout(component_id, spec.component, spec.parallelism)
            continue
        inputs = dict(spec.inputs)
        component = spec.component
        if component_id in commit:
            inputs = {
                stream: grouping
                for stream, grouping in inputs.items()
                if stream.component_id not in commit and stream.component_id != info.coordinator_id
            }
            if not inputs:
                continue
            component = CaptureBolt(component_id)
        declarer = builder.set_bolt(component_id, component, spec.parallelism)
        declarer.add_configurations(spec.conf)
        for stream, grouping in inputs.items():
            declarer.grouping(stream.component_id, grouping, stream.stream_id)
    return builder.create_topology(topology.name + "/processing", topology.conf)
