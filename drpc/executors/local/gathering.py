"""Count reports gathered per step: one report per receiving task instead of one per sender.

Contract. A coordinated step whose every task reports each id to every task of
the next steps (a source none of them declares ``single``) sends, with n tasks
and m receivers, n x m count reports per id. Within one engine a
``ReportGatherer(senders, timeout)`` (``senders``: component -> how many of its
tasks this engine runs) takes them as each sender finishes the id (``add``):
its counts for every receiving task and the edges it anchored its reports
with, one per root of the tuple that triggered its finish. When the last
local sender of the component has reported the id, ``add`` returns what to
send: for each receiving task one ``ReportMessage`` whose count is the sum of
the senders' counts for that task and whose ``reports`` is the number of
senders, which the receiver's tracker takes as that many reports
(``CoordinationTracker.report_received``). So the receivers decide exactly
what they would have decided on the n reports one by one, from m messages.

Acking. Each report sent on carries a fresh edge per root, except the last,
whose edge makes the edges of that root XOR to the XOR of the senders' edges:
the tree stays open until every receiver acks its report, and the acks of all
of them cancel the senders' edges exactly as the n x m reports' acks did.

An id whose senders never all report (one failed, or gave the id up) is
dropped when its tree fails (``drop_root``), and reports of that root coming
later are dropped as they come until ``timeout`` seconds after (the root's
other tasks may finish before they hear of the failure); any id still
waiting at its deadline, ``timeout`` seconds after its first report, is
dropped then (``expire``, which also forgets the failed roots past theirs:
the only way out for reports sent unanchored). Not thread-safe: the engine
holds a lock around every call.

Idle tasks. A gathered task whose only count report (it expects one) says 0
has nothing to do for the id: no tuple comes, it finishes at once, and when
its bolt has no finish callback that finish only reports 0 to every task of
the next step. Its reporter does that for it (``IdleFinish``: add the task's
zero counts here, anchored to the reporter's own trigger) instead of sending
it the report; the task never hears of the id. The tree and every decision
downstream are the same; only the task's turn is saved (when spans are kept,
the reporter records the task's, as the task would have).

Idle give-ups. A gathered report of 0 to a task of a step that waits for the id
tuple, which the task does not own (``idle_giveups``), that is the task's last
(it expects as many reports as the report stands for) and whose runner does
nothing when it gives an id up (a batch bolt, or a bolt with no ``failed_id``
callback), leaves the task nothing but to give the id up silently: no tuple
of the id came to it, and its id tuple goes to the owner. ``add`` then sends it nothing (when
the engine keeps no spans: with spans the task handles the report, as its
busy time shows); the other receivers' edges cover the senders' edges as
before. The tree and every decision elsewhere are the same; only the task's
turn is saved.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping

from drpc.executors.local.messages import ReportMessage
from drpc.model.streams import COORDINATED_STREAM_ID
from drpc.model.topology import Topology
from drpc.semantics.acker import new_edge_id
from drpc.semantics.coordination import CoordinationConfig
from drpc.semantics.routing import IdOwner


def gathered_senders(topology: Topology, hosted: Collection[int] | None = None) -> dict[str, int]:
    """The components whose reports an engine running ``hosted`` (default every task)
    gathers, with how many of their tasks it runs: those every task of which reports
    to every receiving task (``_every_task_reports``), two or more of them here."""
    senders: dict[str, int] = {}
    for component_id, tasks in topology.component_task_ids.items():
        here = len(tasks) if hosted is None else sum(1 for task in tasks if task in hosted)
        if here >= 2 and _every_task_reports(topology, component_id):
            senders[component_id] = here
    return senders


def _every_task_reports(topology: Topology, component_id: str) -> bool:
    """Whether every task of ``component_id`` reports each id to every task of the next
    steps: it is coordinated, has receivers, none declares it ``single``, and it waits
    for no id tuple (which only the id's owner gets: the others never finish)."""
    coordination = topology.components[component_id].coordination
    if coordination is None or coordination.id_stream is not None:
        return False
    receivers = topology.subscribers(component_id, COORDINATED_STREAM_ID)
    for receiver, _ in receivers:
        declared = topology.components[receiver].coordination
        source = None if declared is None else declared.sources.get(component_id)
        if source is None or source.single:
            return False
    return bool(receivers)


class IdleFinish:
    """What finishing an id with no tuples at a gathered task comes to: the counts it
    reports, 0 for every task of the next step (see the module doc)."""

    __slots__ = ("component", "counts")

    def __init__(self, component: str, counts: dict[int, int]) -> None:
        self.component = component
        self.counts = counts  # shared, never changed: ``ReportGatherer.add`` copies it


def idle_finishes(
    gatherer: ReportGatherer,
    tasks: Iterable[tuple[int, str, CoordinationConfig, bool]],
) -> dict[int, IdleFinish]:
    """The tasks whose reporter may finish an id for them when it reports 0 to them, by
    task id: of ``(task id, component, coordination config, has a finish callback)``,
    those gathered here that expect one report, wait for no id or commit tuple and have
    no finish callback."""
    finishes: dict[int, IdleFinish] = {}
    for task_id, component, coordination, has_finish in tasks:
        if (
            gatherer.gathers(component)
            and coordination.expected_reports == 1
            and not coordination.waits_for_id
            and not coordination.waits_for_commit
            and not has_finish
        ):
            zeros = {task: 0 for task in coordination.downstream_tasks}
            finishes[task_id] = IdleFinish(component, zeros)
    return finishes


class IdleGiveUp:
    """A task that gives up, silently, an id it does not own once its reports are in
    (see the module doc): its ownership check and how many reports it expects."""

    __slots__ = ("expected_reports", "owner")

    def __init__(self, owner: IdOwner, expected_reports: int) -> None:
        self.owner = owner
        self.expected_reports = expected_reports


def idle_giveups(
    gatherer: ReportGatherer,
    tasks: Iterable[tuple[int, CoordinationConfig, IdOwner | None, bool]],
) -> dict[int, IdleGiveUp]:
    """The tasks a gathered report of 0 may skip, by task id: of ``(task id, coordination
    config, ownership check or None when every task owns every id, whether its runner
    does nothing when it gives an id up)``, those that wait for the id tuple and for no
    commit tuple, do nothing when giving an id up and have an ownership check. A report
    skips one only where it is the task's last (``ReportGatherer.add``)."""
    giveups: dict[int, IdleGiveUp] = {}
    if not gatherer.senders:
        return giveups
    for task_id, coordination, owner, silent in tasks:
        waits_for_id_alone = coordination.waits_for_id and not coordination.waits_for_commit
        if owner is not None and silent and waits_for_id_alone:
            giveups[task_id] = IdleGiveUp(owner, coordination.expected_reports)
    return giveups


class _Gathering:
    """One id's reports so far: the receiving tasks (the first report's, in its order) and
    their counts summed at the same positions, and the senders' edges XORed per root."""

    __slots__ = ("counts", "deadline", "edges", "reports", "tasks")

    def __init__(
        self,
        tasks: list[int],
        counts: list[int],
        edges: dict[int, int],
        deadline: float,
        reports: int,
    ) -> None:
        self.tasks = tasks
        self.counts = counts
        self.edges = edges
        self.reports = reports
        self.deadline = deadline


class ReportGatherer:
    """The count reports of the gathered components, per id (see the module doc)."""

    def __init__(self, senders: Mapping[str, int], timeout: float) -> None:
        for component, tasks in senders.items():
            if tasks < 1:
                raise ValueError(f"component {component!r} needs >= 1 sending task, got {tasks}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout:g}")
        self.senders = dict(senders)
        self.timeout = timeout
        # Plain dicts (insertion-ordered; the compiled build's own, unlike OrderedDict's
        # methods): the oldest is the first, and only expiry takes from the front.
        self._pending: dict[str, dict[Hashable, _Gathering]] = {
            component: {} for component in senders
        }
        self._failed_roots: dict[int, float] = {}  # root -> until when

    def __len__(self) -> int:
        """Ids some sender reported and the others not yet, over every component."""
        return sum(len(pending) for pending in self._pending.values())

    @property
    def failed_roots(self) -> int:
        """Failed roots whose reports to come are still dropped."""
        return len(self._failed_roots)

    def gathers(self, component: str) -> bool:
        return component in self.senders

    def add(
        self,
        component: str,
        source_task: int,
        id: Hashable,
        counts: dict[int, int],
        edges: dict[int, int],
        now: float,
        giveups: Mapping[int, IdleGiveUp] | None = None,
        senders: int = 1,
    ) -> list[tuple[int, ReportMessage]]:
        """Task ``source_task`` of ``component`` finished ``id``: it sent ``counts[task]``
        tuples to each receiving task and anchored its reports with ``edges`` (root ->
        edge; the gatherer keeps that dict). Returns ``(task, report)`` to send, or
        nothing while senders are missing. ``giveups`` (``idle_giveups``): the receiving
        tasks sent nothing when their report says 0, it is their last and they do not
        own ``id`` (see the module doc). ``senders``: the reports of that many tasks of
        ``component``, each with ``counts`` (the idle tasks their reporter finishes, whose
        counts are all 0), anchored together with ``edges``."""
        failed = self._failed_roots
        if failed and edges and all(root in failed for root in edges):
            return []
        pending = self._pending[component]
        gathering = pending.get(id)
        if gathering is None:
            totals = list(counts.values())
            if senders != 1:
                totals = [count * senders for count in totals]
            gathering = _Gathering(list(counts), totals, edges, now + self.timeout, senders)
            pending[id] = gathering
        else:
            # Every sender of a component counts every receiving task, in one order (its
            # coordination's downstream tasks): summed by position, without the items.
            gathered = gathering.counts
            values = list(counts.values())
            if len(values) != len(gathered):
                raise ValueError(
                    f"task {source_task} of {component!r} reported to {len(values)} tasks, "
                    f"its other tasks to {len(gathered)}"
                )
            for index in range(len(values)):
                count = values[index]
                if count:  # most are 0
                    gathered[index] = gathered[index] + count * senders
            gathered_edges = gathering.edges
            for root, edge in edges.items():
                before = gathered_edges.get(root)
                gathered_edges[root] = edge if before is None else before ^ edge
            gathering.reports += senders
        if gathering.reports < self.senders[component]:
            return []
        del pending[id]
        return self._send_on(component, source_task, id, gathering, giveups)

    def expire(self, now: float) -> int:
        """Drop the ids past their deadline, and forget the failed roots past theirs;
        returns how many ids it dropped."""
        failed = self._failed_roots
        while failed:
            root = next(iter(failed))
            if failed[root] > now:
                break
            del failed[root]
        dropped = 0
        for pending in self._pending.values():
            while pending:
                id = next(iter(pending))
                if pending[id].deadline > now:
                    break
                del pending[id]
                dropped += 1
        return dropped

    def drop_root(self, root: int, now: float) -> int:
        """The tree of ``root`` failed at ``now``: drop the ids whose reports it anchors, and
        its reports to come; returns how many ids it dropped (a scan: trees fail far more
        rarely than reports come)."""
        self._failed_roots.pop(root, None)
        self._failed_roots[root] = now + self.timeout
        dropped = 0
        for pending in self._pending.values():
            doomed = [id for id, gathering in pending.items() if root in gathering.edges]
            for id in doomed:
                del pending[id]
            dropped += len(doomed)
        return dropped

    def _send_on(
        self,
        component: str,
        source_task: int,
        id: Hashable,
        gathering: _Gathering,
        giveups: Mapping[int, IdleGiveUp] | None,
    ) -> list[tuple[int, ReportMessage]]:
        reports = gathering.reports
        receivers, totals = gathering.tasks, gathering.counts
        tasks = [(receivers[index], totals[index]) for index in range(len(receivers))]
        if giveups:
            kept: list[tuple[int, int]] = []
            for task, count in tasks:
                giveup = giveups.get(task) if count == 0 else None
                if giveup is None or giveup.expected_reports != reports or giveup.owner.owns(id):
                    kept.append((task, count))
            if kept:  # else every receiver gives it up here: the last carries the edges
                tasks = kept
        last = len(tasks) - 1
        # per root: what the edges given so far XOR to, with the senders' edges XORed in
        remaining = dict(gathering.edges)
        sent: list[tuple[int, ReportMessage]] = []
        for index, (task, count) in enumerate(tasks):
            message_id: dict[int, int] = {}
            for root, rest in remaining.items():
                if index == last:
                    message_id[root] = rest
                else:
                    edge = new_edge_id()
                    message_id[root] = edge
                    remaining[root] = rest ^ edge
            sent.append(
                (task, ReportMessage(component, source_task, id, count, message_id, reports))
            )
        return sent
