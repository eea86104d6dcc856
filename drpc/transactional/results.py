"""What a transactional run reports: each committed batch, and the run as a whole.

Contract. ``CommitInfo`` is one committed batch: its txid and attempt, the tuples its
spout emitted, what commit-phase bolts emitted to no one, the commit phase's seconds and
``BatchPhases`` (where the batch's time went: emit, process, wait, commit). ``RunResult``
is a run's commits in txid order, its replays by cause and its seconds; ``tuples``,
``last_txid`` and ``outputs(component)`` read across the commits.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from drpc.transactional.attempt import TransactionAttempt


@dataclass
class CommitInfo:
    txid: int
    attempt: TransactionAttempt
    tuples: int  # emitted by the spout for this batch
    outputs: dict[str, list[list[Any]]]  # what commit-phase bolts emitted to no one
    seconds: float  # commit phase duration
    phases: BatchPhases | None = None  # where the batch's time went


@dataclass(frozen=True, slots=True)
class BatchPhases:
    """Where one committed batch's time went, in seconds, from the transaction's start:
    ``emit`` (its batch decided and handed to the backend: the emitters, or the ranges),
    ``process`` (the processing phase), ``wait`` (processed, waiting for the batches
    before it to commit) and ``commit``."""

    emit: float
    process: float
    wait: float
    commit: float

    @property
    def total(self) -> float:
        return self.emit + self.process + self.wait + self.commit

    def as_dict(self) -> dict[str, float]:
        return {
            "emit": self.emit,
            "process": self.process,
            "wait": self.wait,
            "commit": self.commit,
        }


@dataclass
class RunResult:
    topology_id: str
    commits: list[CommitInfo] = field(default_factory=list)
    replays: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: float = 0.0

    @property
    def tuples(self) -> int:
        return sum(commit.tuples for commit in self.commits)

    @property
    def last_txid(self) -> int | None:
        return self.commits[-1].txid if self.commits else None

    def outputs(self, component: str) -> list[list[Any]]:
        """Everything ``component`` emitted to no one, commit after commit."""
        return [values for commit in self.commits for values in commit.outputs.get(component, [])]
