"""CoordinatedBolt's rules for one task, as a pure state machine.

A coordinated task must know when it has every tuple of an id (a DRPC request
or a transactional batch attempt) so it can call ``finish_batch`` exactly once,
then tell each downstream task how many tuples it sent it. Per id it tracks:
tuples acked, count reports received, the sum of the reported counts, tuples
emitted per downstream task, whether the id (and commit) tuple arrived.

Finish rule. An id finishes at this task when

- every expected report is in (``expected_reports``: 1 after a first step,
  because only the one task that got the request knows the id; the number of
  upstream tasks after later steps) and the tuples acked equal the reported
  total; a first step (``expected_reports == 0``) instead expects exactly one
  tuple, the request itself;
- and, if ``waits_for_id``, the id tuple has arrived (only the task owning the
  id receives it; the others give the id up silently once their reports are
  complete, without finishing);
- and, if ``waits_for_commit``, the commit tuple has arrived.

Then the tracker says ``FinishBatch``; the driver runs the bolt's finish
(which may emit, and those emits count) and calls ``finish_done``, which says
``SendReports`` with a count for EVERY downstream task (0 included; none
when it has none) and ``Completed``. A failed tuple, a failed finish, a count mismatch or the
deadline says ``Failed``; a failure elsewhere (``abandon``) says
``Abandoned``. After any of these the id is forgotten; failed and abandoned
ids are remembered as tombstones until their deadline so late events for them
are ``Ignored`` instead of resurrecting the id. Finish never follows a
failure, and no tracking entry outlives its deadline.

Driver contract: after ``FinishBatch`` call ``finish_done`` or
``finish_failed`` before feeding another event for that id.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

from drpc.errors import DRPCExceptionType, Failure
from drpc.semantics.values import Value


@dataclass(frozen=True, slots=True)
class CoordinationConfig:
    expected_reports: int
    downstream_tasks: tuple[int, ...] = ()
    waits_for_id: bool = False
    waits_for_commit: bool = False
    timeout: float = 30.0
    component: str | None = None
    task: int | None = None

    def __post_init__(self) -> None:
        if self.expected_reports < 0:
            raise ValueError(f"expected_reports must be >= 0, got {self.expected_reports}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout:g}")


@dataclass(frozen=True, slots=True)
class TrackStatus:
    """Where a tracked id stands at one task (for diagnostics)."""

    reports: int
    expected_reports: int
    reported_tuples: int
    acked: int
    id_received: bool
    commit_received: bool
    received: int = 0

    @property
    def waits_upstream(self) -> bool:
        """Every tuple received here is acked and count reports are still missing: the
        task only waits for the step before it (a tree stuck here is stuck there)."""
        return self.acked >= self.received and self.reports < self.expected_reports

    def describe(self) -> str:
        parts = [f"{self.reports}/{self.expected_reports} count reports"]
        if self.expected_reports:
            parts.append(f"{self.acked} of {self.reported_tuples} reported tuples acked")
        else:
            parts.append(f"{self.acked} tuples acked")
        return ", ".join(parts)


# The decisions a task's tracker makes on every tuple are ``Value`` records: a dataclass's
# generated __init__ stays interpreted in the compiled build (drpc/compiled.py), and a
# request makes over a hundred of these.


class _AboutId(Value):
    """A decision about one id and nothing else."""

    __slots__ = ("id",)
    __match_args__ = ("id",)

    def __init__(self, id: Hashable) -> None:
        self.id = id


class FinishBatch(_AboutId):
    __slots__ = ()


class SendReports(Value):
    """Tell each downstream task how many tuples of ``id`` this task sent it: ``counts``
    maps every downstream task, in order, to its count (one decision for them all: a
    step fans out to every task of the next)."""

    __slots__ = ("counts", "id")
    __match_args__ = ("id", "counts")

    def __init__(self, id: Hashable, counts: dict[int, int]) -> None:
        self.id = id
        self.counts = counts


class Completed(_AboutId):
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Failed:
    """The id failed here; ``timed_out``: its deadline passed, and this task may only be
    waiting for the step where the tree is stuck (the executor may name that step from
    ``status``, where the id stood here when it expired)."""

    id: Hashable
    failure: Failure
    timed_out: bool = False
    status: TrackStatus | None = None


class Abandoned(_AboutId):
    __slots__ = ()


class Ignored(_AboutId):
    __slots__ = ()


Decision = FinishBatch | SendReports | Completed | Failed | Abandoned | Ignored


def is_ignored(decisions: list[Decision]) -> bool:
    """True when the event concerned an id given up earlier: drop what carried it."""
    return bool(decisions) and isinstance(decisions[0], Ignored)


class _Track:
    __slots__ = (
        "acked",
        "commit_received",
        "deadline",
        "emitted",
        "expected",
        "finishing",
        "id_received",
        "received",
        "reports",
    )

    def __init__(self, deadline: float) -> None:
        self.reports = 0
        self.expected = 0
        self.received = 0
        self.acked = 0
        self.id_received = False
        self.commit_received = False
        self.finishing = False
        self.emitted: dict[int, int] = {}
        self.deadline = deadline


class CoordinationTracker:
    """The coordination state of one task. ``owns_id`` says which ids this task owns
    (needed only when ``waits_for_id``; by default every id)."""

    def __init__(
        self, config: CoordinationConfig, owns_id: Callable[[Hashable], bool] | None = None
    ) -> None:
        self.config = config
        self._owns_id = owns_id
        # A report's counts start as a copy of this (copying a dict is one step; filling
        # a new one is an insertion per downstream task)
        self._no_counts = {task: 0 for task in config.downstream_tasks}
        # Plain dicts, insertion-ordered (the compiled build's own, unlike an OrderedDict's
        # methods): the oldest entry is the first, and only expiry takes from the front.
        self._tracks: dict[Hashable, _Track] = {}
        self._tombstones: dict[Hashable, float] = {}

    # -- introspection ---------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._tracks)

    def __contains__(self, id: object) -> bool:
        return id in self._tracks

    @property
    def tombstones(self) -> int:
        return len(self._tombstones)

    def tracked_ids(self) -> Iterator[Hashable]:
        return iter(self._tracks)

    def status(self, id: Hashable) -> TrackStatus | None:
        track = self._tracks.get(id)
        if track is None:
            return None
        return TrackStatus(
            track.reports,
            self.config.expected_reports,
            track.expected,
            track.acked,
            track.id_received,
            track.commit_received,
            track.received,
        )

    def emitted_counts(self, id: Hashable) -> dict[int, int]:
        track = self._tracks.get(id)
        return dict(track.emitted) if track else {}

    # -- events ----------------------------------------------------------------------

    def tuple_received(self, id: Hashable, now: float, count: int = 1) -> list[Decision]:
        """``count`` data tuples for ``id`` arrived and are about to be executed."""
        if id in self._tombstones:
            return [Ignored(id)]
        self._track(id, now).received += count
        return []

    def tuple_acked(self, id: Hashable, now: float, count: int = 1) -> list[Decision]:
        """``count`` data tuples of ``id`` were acked."""
        track = self._tracks.get(id)
        if track is None:
            return [Ignored(id)] if id in self._tombstones else []
        track.acked += count
        return self._check(id, track, now)

    def tuple_failed(self, id: Hashable, failure: Failure, now: float) -> list[Decision]:
        if id not in self._tracks:
            return [Ignored(id)] if id in self._tombstones else []
        return self._fail(id, failure, now)

    def tuple_emitted(self, id: Hashable, task: int, count: int = 1) -> None:
        """The bolt sent ``count`` tuples of ``id`` to downstream task ``task``."""
        track = self._tracks.get(id)
        if track is not None:
            track.emitted[task] = track.emitted.get(task, 0) + count

    def report_received(
        self, id: Hashable, count: int, now: float, reports: int = 1
    ) -> list[Decision]:
        """An upstream task reports it sent ``count`` tuples of ``id`` to this task; with
        ``reports``, that many reports whose counts sum to ``count``, received with no
        other event of ``id`` between them: while they are no more than expected, the
        same as receiving them one by one, since no decision comes before the last."""
        if reports < 1:
            raise ValueError(f"reports must be >= 1, got {reports}")
        if id in self._tombstones:
            return [Ignored(id)]
        track = self._track(id, now)
        track.reports += reports
        track.expected += count
        if track.reports > self.config.expected_reports:
            return self._fail(
                id,
                self._internal(
                    f"received {track.reports} count reports for one id, expected "
                    f"{self.config.expected_reports}"
                ),
                now,
            )
        return self._check(id, track, now)

    def id_received(self, id: Hashable, now: float) -> list[Decision]:
        if id in self._tombstones:
            return [Ignored(id)]
        track = self._track(id, now)
        track.id_received = True
        return self._check(id, track, now)

    def commit_received(self, id: Hashable, now: float) -> list[Decision]:
        if id in self._tombstones:
            return [Ignored(id)]
        track = self._track(id, now)
        track.commit_received = True
        return self._check(id, track, now)

    def finish_done(self, id: Hashable) -> list[Decision]:
        """The bolt's finish for ``id`` returned: report counts downstream and forget it."""
        track = self._tracks.get(id)
        if track is None or not track.finishing:
            raise RuntimeError(f"finish_done for id {id!r} that is not finishing")
        del self._tracks[id]
        downstream = self.config.downstream_tasks
        if not downstream:  # the last step: nobody to report to
            return [Completed(id)]
        # every downstream task in their order, with what it was sent (one C-level update)
        no_counts = self._no_counts
        counts = no_counts.copy()
        emitted = track.emitted
        if emitted:
            counts.update(emitted)
            if len(counts) != len(no_counts):  # sent to a receiver that takes no reports
                for task in emitted:
                    if task not in no_counts:
                        del counts[task]
        return [SendReports(id, counts), Completed(id)]

    def finish_failed(self, id: Hashable, failure: Failure, now: float) -> list[Decision]:
        track = self._tracks.get(id)
        if track is None or not track.finishing:
            raise RuntimeError(f"finish_failed for id {id!r} that is not finishing")
        return self._fail(id, failure, now)

    def abandon(self, id: Hashable, now: float) -> list[Decision]:
        """The id failed elsewhere (its tree failed or timed out): give it up here."""
        self._bury(id, now)
        if self._tracks.pop(id, None) is None:
            return []
        return [Abandoned(id)]

    def expire(self, now: float) -> list[Decision]:
        """Fail ids tracked past their deadline; drop tombstones past theirs."""
        decisions: list[Decision] = []
        while self._tracks:
            id, track = next(iter(self._tracks.items()))
            if track.deadline > now or track.finishing:
                break
            status = self.status(id)
            del self._tracks[id]
            self._tombstones[id] = now + self.config.timeout
            decisions.append(
                Failed(
                    id,
                    Failure.tree_timed_out(
                        self.config.timeout,
                        self.config.component,
                        self.config.task,
                        f"it did not receive every tuple of the id ({self._progress(track)})",
                    ),
                    timed_out=True,
                    status=status,
                )
            )
        while self._tombstones:
            id, deadline = next(iter(self._tombstones.items()))
            if deadline > now:
                break
            del self._tombstones[id]
        return decisions

    # -- internals -------------------------------------------------------------------

    def _track(self, id: Hashable, now: float) -> _Track:
        track = self._tracks.get(id)
        if track is None:
            track = _Track(now + self.config.timeout)
            self._tracks[id] = track
        return track

    def _bury(self, id: Hashable, now: float) -> None:
        self._tombstones.pop(id, None)
        self._tombstones[id] = now + self.config.timeout

    def _fail(self, id: Hashable, failure: Failure, now: float) -> list[Decision]:
        self._tracks.pop(id, None)
        self._bury(id, now)
        return [Failed(id, failure)]

    def _where(self) -> str:
        where = f"step {self.config.component!r}" if self.config.component else "a step"
        if self.config.task is not None:
            where += f" (task {self.config.task})"
        return where

    def _internal(self, detail: str) -> Failure:
        return Failure(
            DRPCExceptionType.INTERNAL_ERROR,
            f"Internal error: {self._where()} {detail}",
            self.config.component,
            self.config.task,
        )

    def _progress(self, track: _Track) -> str:
        config = self.config
        parts = [f"{track.reports}/{config.expected_reports} reports", f"{track.acked} tuples"]
        if config.expected_reports:
            parts[-1] += f" of {track.expected} reported"
        if config.waits_for_id:
            parts.append("id tuple " + ("received" if track.id_received else "missing"))
        if config.waits_for_commit:
            parts.append("commit " + ("received" if track.commit_received else "missing"))
        return ", ".join(parts)

    def _check(self, id: Hashable, track: _Track, now: float) -> list[Decision]:
        if track.finishing:
            return []
        config = self.config
        if config.expected_reports == 0:
            needed = 1
            reports_complete = True
        else:
            needed = track.expected
            reports_complete = track.reports == config.expected_reports
        if not reports_complete:
            return []
        if track.acked > needed:
            return self._fail(
                id,
                self._internal(
                    f"received {track.acked} tuples for an id but upstream reported {needed}"
                ),
                now,
            )
        if track.acked < needed:
            return []
        if config.waits_for_id and not track.id_received:
            if self._owns_id is None or self._owns_id(id):
                return []
            if track.acked:
                return self._fail(
                    id,
                    self._internal(
                        f"received {track.acked} tuples for an id owned by another task: "
                        "the last step's input must be fields-grouped on the id"
                    ),
                    now,
                )
            del self._tracks[id]
            return [Abandoned(id)]
        if config.waits_for_commit and not track.commit_received:
            return []
        track.finishing = True
        return [FinishBatch(id)]
