"""The processing phase of transactional batches: what a backend does and reports.

Contract. A ``ProcessingBackend`` runs the processing phase of batch attempts:
the spout's emitter and every bolt that is neither a committer nor after
one. ``start(report)`` begins; ``submit(attempt, metadata, last_committed)``
hands it an attempt (in txid order, up to ``max_spout_pending`` at once);
``stop()`` ends it. For each attempt it calls ``report`` once, from any
thread, with

- ``Processed(attempt, captured, tuples)``: ``captured`` is what the
  processing phase sent to commit-phase bolts, as shipments by receiving
  task of the full topology (the commit phase runs over them,
  ``drpc.transactional.commit``); ``tuples``: how many the emitter emitted;
- or ``ProcessingFailed(attempt, failure)``.

Backends: ``drpc.transactional.local_backend`` (the in-process engine) and
``drpc.transactional.spark_backend`` (a Spark job per attempt).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from drpc.errors import Failure
from drpc.executors.records import Shipment
from drpc.transactional.attempt import TransactionAttempt


@dataclass(frozen=True)
class Processed:
    attempt: TransactionAttempt
    captured: dict[int, list[Shipment]]
    tuples: int


@dataclass(frozen=True)
class ProcessingFailed:
    attempt: TransactionAttempt
    failure: Failure


Event = Processed | ProcessingFailed


class ProcessingBackend(Protocol):
    """Runs the processing phase of batch attempts (see the module doc)."""

    def start(self, report: Callable[[Event], None]) -> None: ...

    def submit(
        self, attempt: TransactionAttempt, metadata: Any, last_committed: int | None
    ) -> None: ...

    def stop(self) -> None: ...


def batch_log_fields(topology_id: str, attempt: TransactionAttempt, phase: str) -> dict[str, Any]:
    """``extra=`` fields of a log line about one batch attempt (also the logging context
    while a task handles the batch)."""
    return {
        "topology": topology_id,
        "txid": attempt.txid,
        "attempt_id": attempt.attempt_id,
        "phase": phase,
    }
