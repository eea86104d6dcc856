"""The live dashboard of one DRPC server: ``GET /`` (a page) and ``GET /api/status`` (JSON).

Contract. ``Dashboard`` is a ``drpc.observe.Observer`` on the server's bus
(request events from the service, step and transaction events from hosted
runtimes); it keeps, in memory and bounded:

- per function, slots of ``resolution`` seconds (default 5) over the last
  ``window`` seconds (default 600): calls by outcome and a latency histogram
  (log-spaced bins 10 % apart, so p50/p99 are within 10 %); at most
  ``max_functions`` functions (default 64) get their own, the rest share
  ``"__other__"``; totals per function and outcome since the server started;
- the requests the server holds (queued, or fetched and running a step), at
  most ``max_tracked`` (default 16384, the server passes
  ``Limits.max_outstanding``; past it requests go untracked and counted);
  the oldest ``max_in_flight_shown`` (default 50) are shown with their age and
  current step: the step that started last (``step_started``), except
  ``join-result``, which starts with the request and waits for its result;
  "queued" before a runtime fetched it;
- the last ``max_failures`` (default 50) calls that got no result: when, the
  function, outcome, typed reason (DRPCExceptionType name, or
  AuthorizationException, and message, cut to ``max_message`` characters,
  default 500) and the step that failed (``request_failed_in``; for a timeout
  the step it was in or "queued"; a refused call "refused"; else "unknown");
- per transactional topology (at most ``max_topologies``, default 16):
  last committed txid, commits, tuples, commit latency, the last batch's phase
  times (``tx_phases``: emit, process, wait, commit) and the slowest of the last
  ``SLOWEST_OF`` batches with its longest phase, batches in flight (at
  most ``max_tx_in_flight`` listed, default 256), replays by cause (at most
  ``max_causes``, default 32) and the last ``max_replays_shown`` replays
  (default 20); with ``watch_transactional(hosted)``, whether each hosted run
  is running, its last error, and what it waits for (``waiting``: "waiting for
  redis at HOST:PORT" while its broker is away);
- ``partitions``: each partition of the hosted runs' partitioned states (at most
  ``max_partitions``, default 256; ``partitions_total`` counts them all): its topology,
  state and index, its owner (host, resident task), the txid it holds, its keys and
  bytes (``drpc.transactional.partitions``); with a checkpoint store, the txid of its
  last snapshot there (``snapshot``; ``snapshot_error``: why the last one failed) and
  the bytes it keeps there (``store_bytes``); a hosted run with a store says so on its
  topology (``checkpoint``: the store, the bytes the run keeps there, since when a commit
  waits for it, the last restore's duration and time, each standby copy's task and lag
  in global commits, and the last takeover by a standby's duration and time);
- ``topologies``: with ``watch_plain(infos)``, each plain topology the server runs
  (``drpc.topologies``) and Storm UI's figures of each of its components: kind, tasks,
  emitted, acked, failed, and a spout's complete latency (names cut to ``max_name``);
- per state directory open in this process (``state``; at most
  ``max_state_dirs``, default 16, the first by path; ``state_total`` counts them
  all; a partition's directory is shown as a partition, not here), read at each
  ``status()`` (``drpc.server.metrics.state_dir_status``): its
  latest committed version, the oldest version still readable (``horizon``), the
  last committed txid of each topology with a commit record there (at most
  ``max_topologies``, by name), the oldest version a live process pins and how
  long ago it was pinned (how far behind the slowest DRPC request in flight
  reads), the pins this process holds and the undo logs kept. A directory that
  cannot be read (closed meanwhile) is left out.

Names shown (functions, steps, topologies, state directories) are cut to
``max_name`` characters (default 200); the served functions listed are at most
the server's ``Limits.max_listed_functions`` (``served_total`` counts them all). With
``watch_spark_ui(url)`` the page links the Spark UI of the server's session
(``spark_ui`` in the JSON; only an http(s) URL is shown).

``status(service)`` is the JSON the page polls every second (``/api/status``
builds it in a worker thread: it reads state directories); the page
(``static/index.html``, ``dashboard.js``, ``dashboard.css``: plain files, no
build step, nothing fetched from elsewhere, charts drawn as inline SVG) is
served with a Content-Security-Policy that allows only this origin, and it
writes every server-supplied string as text, never as markup.
``add_routes(app, dashboard, service)`` mounts ``/``, ``/api/status`` and
``/ui/{file}``.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import threading
import time
from array import array
from collections import Counter, deque
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web
from drpc.server.metrics import OTHER, BoundedLabels, StateDirStatus, state_dir_status
from drpc.server.service import TIMEOUT, PendingRequest, outcome_of

from drpc.builders.linear_drpc import JOIN_ID
from drpc.errors import AuthorizationException, DRPCExecutionException
from drpc.observe import Observer
from drpc.state.env import StateEnvironment
from drpc.transactional.run import SLOWEST_OF

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from drpc.server.service import DRPCService

DEFAULT_WINDOW = 600.0
DEFAULT_RESOLUTION = 5.0
DEFAULT_SUMMARY = 60.0
DEFAULT_MAX_FUNCTIONS = 64
DEFAULT_MAX_TRACKED = 16384
DEFAULT_MAX_IN_FLIGHT_SHOWN = 50
DEFAULT_MAX_FAILURES = 50
DEFAULT_MAX_MESSAGE = 500
DEFAULT_MAX_TOPOLOGIES = 16
DEFAULT_MAX_TX_IN_FLIGHT = 256
DEFAULT_MAX_REPLAYS_SHOWN = 20
DEFAULT_MAX_CAUSES = 32
DEFAULT_MAX_NAME = 200
DEFAULT_MAX_STATE_DIRS = 16
DEFAULT_MAX_PARTITIONS = 256

LATENCY_BASE = 1e-4
LATENCY_RATIO = 1.1
LATENCY_BINS = 1 + math.ceil(math.log(3600 / LATENCY_BASE) / math.log(LATENCY_RATIO))
"""Bin 0 holds latencies up to 0.1 ms, bin i up to 0.1 ms * 1.1**i; the last bin an hour
and everything slower."""


def latency_bin(seconds: float) -> int:
    if seconds <= LATENCY_BASE:
        return 0
    index = math.ceil(math.log(seconds / LATENCY_BASE) / math.log(LATENCY_RATIO) - 1e-9)
    return min(index, LATENCY_BINS - 1)


def bin_upper(index: int) -> float:
    return LATENCY_BASE * LATENCY_RATIO**index


def percentile(bins: array[int] | None, q: float) -> float | None:
    """The upper bound of the bin holding the ``q`` quantile, None when there is no data."""
    return percentiles(bins, (q,))[0]


def percentiles(bins: array[int] | None, qs: tuple[float, ...]) -> list[float | None]:
    """``percentile`` for each of ``qs``, from one pass over the bins."""
    if bins is None:
        return [None] * len(qs)
    cumulative = list(itertools.accumulate(bins))
    total = cumulative[-1]
    if total == 0:
        return [None] * len(qs)
    return [bin_upper(bisect.bisect_left(cumulative, max(1e-9, q * total))) for q in qs]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Slot:
    index: int
    outcomes: Counter[str] = field(default_factory=Counter)
    latency: array[int] | None = None

    def add_latency(self, seconds: float) -> None:
        if self.latency is None:
            self.latency = array("I", bytes(4 * LATENCY_BINS))
        self.latency[latency_bin(seconds)] += 1


class _Series:
    """Slots of ``resolution`` seconds over the last ``count`` slots, oldest first."""

    def __init__(self, resolution: float, count: int) -> None:
        self.resolution = resolution
        self.count = count
        self.slots: deque[_Slot] = deque()

    def slot(self, now: float) -> _Slot:
        index = int(now // self.resolution)
        slots = self.slots
        if slots and slots[-1].index >= index:
            if slots[-1].index == index:
                return slots[-1]
            for slot in reversed(slots):  # an event reported a little late
                if slot.index == index:
                    return slot
            return slots[-1]
        slots.append(_Slot(index))
        while slots and slots[0].index <= index - self.count:
            slots.popleft()
        return slots[-1]

    def aligned(self, now: float) -> list[_Slot | None]:
        """``count`` entries, one per slot up to now's, None where nothing happened."""
        last = int(now // self.resolution)
        by_index = {slot.index: slot for slot in self.slots}
        return [by_index.get(index) for index in range(last - self.count + 1, last + 1)]


@dataclass
class _Function:
    series: _Series
    totals: Counter[str] = field(default_factory=Counter)


@dataclass
class _Tracked:
    id: str
    function: str
    submitted: float
    fetched: bool = False
    step: str | None = None
    step_since: float | None = None
    failed_step: str | None = None


@dataclass
class _Topology:
    series: _Series
    last_committed: int | None = None
    commits: int = 0
    tuples: int = 0
    last_commit_seconds: float | None = None
    last_phases: dict[str, float] | None = None
    recent_phases: deque[tuple[float, int, dict[str, float]]] = field(
        default_factory=lambda: deque(maxlen=SLOWEST_OF)
    )
    active: dict[int, tuple[int, float]] = field(default_factory=dict)
    replays: Counter[str] = field(default_factory=Counter)
    recent_replays: deque[dict[str, Any]] = field(default_factory=deque)


class Dashboard(Observer):
    def __init__(
        self,
        *,
        window: float = DEFAULT_WINDOW,
        resolution: float = DEFAULT_RESOLUTION,
        summary: float = DEFAULT_SUMMARY,
        max_functions: int = DEFAULT_MAX_FUNCTIONS,
        max_tracked: int = DEFAULT_MAX_TRACKED,
        max_in_flight_shown: int = DEFAULT_MAX_IN_FLIGHT_SHOWN,
        max_failures: int = DEFAULT_MAX_FAILURES,
        max_message: int = DEFAULT_MAX_MESSAGE,
        max_topologies: int = DEFAULT_MAX_TOPOLOGIES,
        max_tx_in_flight: int = DEFAULT_MAX_TX_IN_FLIGHT,
        max_replays_shown: int = DEFAULT_MAX_REPLAYS_SHOWN,
        max_causes: int = DEFAULT_MAX_CAUSES,
        max_name: int = DEFAULT_MAX_NAME,
        max_state_dirs: int = DEFAULT_MAX_STATE_DIRS,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """
        :param window: seconds of history kept for the charts (default 600).
        :param resolution: seconds per chart slot (default 5).
        :param summary: seconds the rate, p50 and p99 columns cover (default 60).
        :param max_functions: functions with history of their own (default 64).
        :param max_tracked: requests tracked for the in-flight table (default 16384).
        :param max_in_flight_shown: oldest in-flight requests listed (default 50).
        :param max_failures: failures kept, newest first (default 50).
        :param max_message: characters of a failure message kept (default 500).
        :param max_topologies: transactional topologies with their own (default 16).
        :param max_tx_in_flight: in-flight transactions listed per topology (default 256).
        :param max_replays_shown: recent replays kept per topology (default 20).
        :param max_causes: replay causes counted apart per topology (default 32); the
            rest count as ``"__other__"``.
        :param max_name: characters of a function, step or topology name shown (default
            200: names can be as long as a Thrift string).
        :param max_state_dirs: open state directories shown, the first by path (default 16).
        :param max_partitions: partitions of hosted runs shown (default 256).
        :param clock: monotonic seconds (tests pass a fake one).
        """
        for name, value in {
            "window": window,
            "resolution": resolution,
            "summary": summary,
            "max_tracked": max_tracked,
            "max_in_flight_shown": max_in_flight_shown,
            "max_failures": max_failures,
            "max_message": max_message,
            "max_tx_in_flight": max_tx_in_flight,
            "max_replays_shown": max_replays_shown,
            "max_name": max_name,
            "max_state_dirs": max_state_dirs,
            "max_partitions": max_partitions,
        }.items():
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        self.window = window
        self.resolution = resolution
        self.summary = min(summary, window)
        self.slot_count = max(1, math.ceil(window / resolution))
        self.max_tracked = max_tracked
        self.max_in_flight_shown = max_in_flight_shown
        self.max_message = max_message
        self.max_tx_in_flight = max_tx_in_flight
        self.max_replays_shown = max_replays_shown
        self.max_name = max_name
        self.max_topologies = max_topologies
        self.max_state_dirs = max_state_dirs
        self.max_partitions = max_partitions
        self.clock = clock
        self.started = clock()
        self.untracked = 0
        """Requests not tracked because ``max_tracked`` were."""
        # Names are kept whole (at most max_functions of them) and cut where shown.
        self._labels = BoundedLabels(max_functions, None)
        self._topology_labels = BoundedLabels(max_topologies, None)
        self._causes = BoundedLabels(max_causes, None)
        self._functions: dict[str, _Function] = {}
        self._tracked: dict[str, _Tracked] = {}
        self._failures: deque[dict[str, Any]] = deque(maxlen=max_failures)
        self._topologies: dict[str, _Topology] = {}
        self._hosted: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None
        self._spark_ui: Callable[[], str | None] | None = None
        self._plain: Callable[[], Mapping[str, Any]] | None = None
        self._lock = threading.Lock()

    def watch_transactional(self, hosted: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        """``hosted()`` maps each transactional topology the server hosts to its run's
        status (``running``, ``error``, ``executor``, ``last_txid``…); the page shows
        whether each run is up, and runs that have not committed yet."""
        self._hosted = hosted

    def watch_plain(self, infos: Callable[[], Mapping[str, Any]]) -> None:
        """``infos()`` maps each plain topology the server runs to its
        ``drpc.topologies.TopologyInfo``; the page lists their components' figures."""
        self._plain = infos

    def plain_status(self) -> list[dict[str, Any]]:
        """The plain topologies' figures, by name."""
        shown = []
        for name, info in sorted(({} if self._plain is None else self._plain()).items()):
            figures = info.as_dict()
            figures["name"] = _clip(name, self.max_name)
            for component in figures["components"]:
                component["component"] = _clip(component["component"], self.max_name)
            shown.append(figures)
        return shown

    def watch_spark_ui(self, url: Callable[[], str | None]) -> None:
        """``url()`` is the Spark UI's address (None while there is none); the page links it."""
        self._spark_ui = url

    def spark_ui(self) -> str | None:
        url = self._spark_ui() if self._spark_ui is not None else None
        return url if url and url.startswith(("http://", "https://")) else None

    # -- requests (the server's request table) ------------------------------------------------

    def request_submitted(self, request: PendingRequest) -> None:
        with self._lock:
            self._function(request.function, admit=True)
            if len(self._tracked) >= self.max_tracked:
                self.untracked += 1
                return
            self._tracked[request.id] = _Tracked(request.id, request.function, request.submitted)

    def request_fetched(self, request: PendingRequest, now: float) -> None:
        with self._lock:
            tracked = self._tracked.get(request.id)
            if tracked is not None:
                tracked.fetched = True

    def request_settled(self, request: PendingRequest, now: float) -> None:
        outcome = outcome_of(request.error)
        with self._lock:
            tracked = self._tracked.pop(request.id, None)
            function = self._function(request.function, admit=True)
            function.totals[outcome] += 1
            slot = function.series.slot(now)
            slot.outcomes[outcome] += 1
            slot.add_latency(max(0.0, now - request.submitted))
            if request.error is None:
                return
            if tracked is None:
                step = "unknown"
            elif tracked.failed_step is not None:
                step = tracked.failed_step
            elif outcome == TIMEOUT:
                step = f"in {tracked.step}" if tracked.step else "queued"
                if tracked.step is None and tracked.fetched:
                    step = "fetched, no step started"
            else:
                step = "unknown"
            self._add_failure(request.id, request.function, outcome, request.error, step)

    def request_refused(self, function: str, error: BaseException, known: bool, now: float) -> None:
        outcome = outcome_of(error)
        with self._lock:
            entry = self._function(function, admit=known)
            entry.totals[outcome] += 1
            entry.series.slot(now).outcomes[outcome] += 1
            self._add_failure(None, function, outcome, error, "refused")

    def _function(self, name: str, admit: bool) -> _Function:
        label = self._labels(name, admit)
        entry = self._functions.get(label)
        if entry is None:
            entry = self._functions[label] = _Function(_Series(self.resolution, self.slot_count))
        return entry

    def _add_failure(
        self, request_id: str | None, function: str, outcome: str, error: BaseException, step: str
    ) -> None:
        if isinstance(error, DRPCExecutionException):
            kind, message = error.type.name, error.msg
        elif isinstance(error, AuthorizationException):
            kind, message = "AuthorizationException", error.msg
        else:
            kind, message = type(error).__name__, str(error)
        self._failures.appendleft(
            {
                "time": time.time(),
                "id": request_id,
                "function": _clip(function, self.max_name),
                "outcome": outcome,
                "type": kind,
                "message": _clip(message, self.max_message),
                "step": _clip(step, self.max_name),
            }
        )

    # -- runtimes (drpc.observe.Observer) -----------------------------------------------------

    def step_started(self, return_info: Any, step: str, now: float) -> None:
        with self._lock:
            tracked = self._tracked.get(getattr(return_info, "request_id", None) or "")
            if tracked is None:
                return
            tracked.fetched = True
            if step != JOIN_ID or tracked.step is None:
                tracked.step, tracked.step_since = step, now

    def request_failed_in(self, return_info: Any, step: str, reason: str) -> None:
        request_id = getattr(return_info, "request_id", None)
        if request_id is None:
            return
        with self._lock:
            tracked = self._tracked.get(request_id)
            if tracked is not None:
                tracked.failed_step = step
                return
            for failure in self._failures:  # the failure settled before this event came
                if failure["id"] == request_id:
                    if failure["step"] == "unknown":
                        failure["step"] = _clip(step, self.max_name)
                    return

    def tx_started(self, topology: str, txid: int, attempt_id: int, now: float) -> None:
        with self._lock:
            entry = self._topology(topology)
            entry.active[txid] = (attempt_id, self.clock())
            while len(entry.active) > self.max_tx_in_flight:
                del entry.active[min(entry.active)]

    def tx_committed(self, topology: str, txid: int, commit_seconds: float, tuples: int) -> None:
        with self._lock:
            entry = self._topology(topology)
            for done in [t for t in entry.active if t <= txid]:
                del entry.active[done]
            entry.last_committed = txid
            entry.commits += 1
            entry.tuples += tuples
            entry.last_commit_seconds = commit_seconds
            slot = entry.series.slot(self.clock())
            slot.outcomes["commits"] += 1
            slot.outcomes["tuples"] += tuples
            slot.add_latency(commit_seconds)

    def tx_phases(self, topology: str, txid: int, phases: dict[str, float]) -> None:
        with self._lock:
            entry = self._topology(topology)
            entry.last_phases = dict(phases)
            entry.recent_phases.append((sum(phases.values()), txid, entry.last_phases))

    def tx_replayed(self, topology: str, txid: int, cause: str) -> None:
        with self._lock:
            entry = self._topology(topology)
            cause = self._causes(cause)
            entry.replays[cause] += 1
            entry.series.slot(self.clock()).outcomes["replays"] += 1
            entry.recent_replays.appendleft({"time": time.time(), "txid": txid, "cause": cause})
            while len(entry.recent_replays) > self.max_replays_shown:
                entry.recent_replays.pop()

    def _topology(self, topology: str) -> _Topology:
        label = self._topology_labels(topology)
        entry = self._topologies.get(label)
        if entry is None:
            series = _Series(self.resolution, self.slot_count)
            entry = self._topologies[label] = _Topology(series)
        return entry

    # -- the JSON the page polls --------------------------------------------------------------

    def status(self, service: DRPCService | None = None) -> dict[str, Any]:
        """Everything the page shows. ``service`` adds the served functions and counts."""
        served = service.served_functions() if service is not None else []
        now = self.clock()
        with self._lock:
            served_labels = set()
            for name in served:
                self._function(name, admit=True)
                served_labels.add(self._labels(name, admit=False))
            in_flight = sorted(self._tracked.values(), key=lambda t: t.submitted)
            held: dict[str, Counter[str]] = {}
            for tracked in in_flight:
                label = self._labels(tracked.function, admit=False)
                held.setdefault(label, Counter())["running" if tracked.fetched else "queued"] += 1
            functions = [
                self._function_status(name, entry, now, name in served_labels, held.get(name))
                for name, entry in sorted(self._functions.items())
            ]
            shown = [
                {
                    "id": t.id,
                    "function": _clip(t.function, self.max_name),
                    "age": now - t.submitted,
                    "state": "running" if t.fetched else "queued",
                    "step": _clip(t.step, self.max_name) if t.step else None,
                    "step_age": None if t.step_since is None else now - t.step_since,
                }
                for t in in_flight[: self.max_in_flight_shown]
            ]
            status: dict[str, Any] = {
                "time": time.time(),
                "uptime": now - self.started,
                "window": self.slot_count * self.resolution,
                "resolution": self.resolution,
                "summary": self.summary,
                "functions": functions,
                "in_flight": shown,
                "in_flight_total": len(in_flight),
                "untracked": self.untracked,
                "failures": [dict(failure) for failure in self._failures],
                "transactional": [
                    self._topology_status(name, entry, now)
                    for name, entry in sorted(self._topologies.items())
                ],
            }
        status["partitions"], status["partitions_total"] = self._add_hosted(status["transactional"])
        status["state"], status["state_total"] = self.state_status()
        status["topologies"] = self.plain_status()
        status["spark_ui"] = self.spark_ui()
        if service is not None:
            listed, total = service.served_summary()
            status["server"] = {
                "served": [_clip(name, self.max_name) for name in listed],
                "served_total": total,
                "outstanding": service.outstanding(),
                "late_results": service.late_results,
                "refused_busy": service.refused_busy,
                "shutting_down": service.closed,
            }
        return status

    def _add_hosted(self, topologies: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """Add what the hosted runs say to their topologies; return their partitions (the
        first ``max_partitions``) and how many there are."""
        hosted = self._hosted() if self._hosted is not None else {}
        by_name = {entry["topology"]: entry for entry in topologies}
        partitions: list[dict[str, Any]] = []
        total = 0
        for name, run in sorted(hosted.items()):
            for partition in run.get("partitions", ()):
                total += 1
                if len(partitions) < self.max_partitions:
                    partitions.append(self._partition_status(name, partition))
            entry = by_name.get(_clip(name, self.max_name))
            if entry is None:  # hosted, no event yet: what its run says
                empty = _Topology(_Series(self.resolution, self.slot_count))
                empty.last_committed = run.get("last_txid")
                entry = self._topology_status(name, empty, self.clock())
                topologies.append(entry)
            entry["running"] = bool(run.get("running"))
            entry["executor"] = run.get("executor")
            error = run.get("error")
            entry["error"] = None if error is None else _clip(str(error), self.max_message)
            waiting = run.get("waiting")
            entry["waiting"] = None if waiting is None else _clip(str(waiting), self.max_message)
            entry["checkpoint"] = self._checkpoint_status(run.get("checkpoint"))
        topologies.sort(key=lambda entry: entry["topology"])
        return partitions, total

    def _partition_status(self, topology: str, partition: Mapping[str, Any]) -> dict[str, Any]:
        host = partition.get("host")
        error = partition.get("snapshot_error")
        return {
            "topology": _clip(topology, self.max_name),
            "state": _clip(str(partition["group"]), self.max_name),
            "index": partition["index"],
            "host": None if host is None else _clip(str(host), self.max_name),
            "task": partition.get("task"),
            "txid": partition.get("txid"),
            "keys": partition.get("keys"),
            "bytes": partition.get("bytes"),
            "snapshot": partition.get("snapshot"),
            "snapshot_error": None if error is None else _clip(str(error), self.max_message),
            "store_bytes": partition.get("store_bytes"),
        }

    def _checkpoint_status(self, checkpoint: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if not checkpoint:
            return None
        restore = checkpoint.get("last_restore")
        standbys = checkpoint.get("standbys") or {}
        takeover = standbys.get("last_takeover")
        return {
            "store": _clip(str(checkpoint.get("store")), self.max_name),
            "bytes": checkpoint.get("bytes"),
            "waiting_since": checkpoint.get("waiting_since"),
            "last_restore_seconds": None if restore is None else restore.get("seconds"),
            "last_restore_at": None if restore is None else restore.get("at"),
            "standbys": [
                {
                    "state": _clip(str(copy["group"]), self.max_name),
                    "index": copy["index"],
                    "task": copy["task"],
                    "lag": copy.get("lag"),
                }
                for copy in standbys.get("copies", ())[: self.max_partitions]
            ],
            "last_takeover_seconds": None if takeover is None else takeover.get("seconds"),
            "last_takeover_at": None if takeover is None else takeover.get("at"),
        }

    def state_status(self) -> tuple[list[dict[str, Any]], int]:
        """The first ``max_state_dirs`` readable state directories open in this process, by
        path, and how many are open."""
        envs = [env for env in StateEnvironment.open_environments() if not env.is_partition]
        shown: list[dict[str, Any]] = []
        for env in envs:
            if len(shown) == self.max_state_dirs:
                break
            state = state_dir_status(env)
            if state is not None:
                shown.append(self._state_dir_status(state))
        return shown, len(envs)

    def _state_dir_status(self, state: StateDirStatus) -> dict[str, Any]:
        versions = state.versions
        txids = sorted(state.txids.items())[: self.max_topologies]
        return {
            "state_dir": _clip(state.path, self.max_name),
            "version": versions.latest,
            "horizon": versions.horizon,
            "txids": {_clip(name, self.max_name): txid for name, txid in txids},
            "oldest_pinned": versions.oldest_pinned,
            "oldest_pin_age": versions.oldest_pin_age,
            "pins": versions.local_pins,
            "undo_logs": versions.undo_logs,
        }

    def _summary_span(self, now: float) -> float:
        """Seconds the summary columns cover: ``summary``, or less just after start."""
        return max(self.resolution, min(self.summary, now - self.started))

    def _summary_slots(self, series: _Series, now: float) -> list[_Slot]:
        first = int((now - self.summary) // self.resolution) + 1
        return [slot for slot in series.slots if slot.index >= first]

    def _function_status(
        self, name: str, entry: _Function, now: float, served: bool, held: Counter[str] | None
    ) -> dict[str, Any]:
        recent = self._summary_slots(entry.series, now)
        merged = _merge(recent)
        count = sum(merged[0].values())
        return {
            "name": _clip(name, self.max_name),
            "served": served,
            "other": name == OTHER,
            "totals": dict(entry.totals),
            "total": sum(entry.totals.values()),
            "recent": dict(merged[0]),
            "queued": held["queued"] if held else 0,
            "running": held["running"] if held else 0,
            "rate": count / self._summary_span(now),
            "p50": percentile(merged[1], 0.5),
            "p99": percentile(merged[1], 0.99),
            "series": [
                None if slot is None else _slot_status(slot) for slot in entry.series.aligned(now)
            ],
        }

    def _topology_status(self, name: str, entry: _Topology, now: float) -> dict[str, Any]:
        recent = self._summary_slots(entry.series, now)
        merged = _merge(recent)
        return {
            "topology": _clip(name, self.max_name),
            "last_committed": entry.last_committed,
            "commits": entry.commits,
            "tuples": entry.tuples,
            "tuples_per_second": merged[0]["tuples"] / self._summary_span(now),
            "commit_p50": percentile(merged[1], 0.5),
            "commit_p99": percentile(merged[1], 0.99),
            "last_commit_seconds": entry.last_commit_seconds,
            "last_phases": entry.last_phases,
            "slowest": _slowest(entry.recent_phases),
            "in_flight": [
                {"txid": txid, "attempt": attempt, "age": now - since}
                for txid, (attempt, since) in sorted(entry.active.items())
            ],
            "replays": dict(entry.replays),
            "recent_replays": [dict(replay) for replay in entry.recent_replays],
            "series": [
                None if slot is None else dict(slot.outcomes) for slot in entry.series.aligned(now)
            ],
        }


def _slowest(recent: deque[tuple[float, int, dict[str, float]]]) -> dict[str, Any] | None:
    """The slowest of the recent batches: its txid, seconds, phases and the longest phase."""
    if not recent:
        return None
    seconds, txid, phases = max(recent, key=lambda batch: batch[0])
    return {
        "txid": txid,
        "seconds": seconds,
        "phases": phases,
        "phase": max(phases, key=lambda phase: phases[phase]),
    }


def _slot_status(slot: _Slot) -> dict[str, Any]:
    p50, p99 = percentiles(slot.latency, (0.5, 0.99))
    return {"outcomes": dict(slot.outcomes), "p50": p50, "p99": p99}


def _merge(slots: list[_Slot]) -> tuple[Counter[str], array[int] | None]:
    outcomes: Counter[str] = Counter()
    latency: array[int] | None = None
    for slot in slots:
        outcomes.update(slot.outcomes)
        if slot.latency is not None:
            if latency is None:
                latency = array("I", slot.latency)
            else:
                for index, count in enumerate(slot.latency):
                    if count:
                        latency[index] += count
    return outcomes, latency


# -- HTTP ---------------------------------------------------------------------------------------

STATIC_FILES = {
    "index.html": "text/html",
    "dashboard.css": "text/css",
    "dashboard.js": "text/javascript",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

_DASHBOARD = web.AppKey("drpc_dashboard", Dashboard)
_STATIC = web.AppKey("drpc_dashboard_static", dict)


def _static_files() -> dict[str, bytes]:
    folder = resources.files(__package__).joinpath("static")
    return {name: folder.joinpath(name).read_bytes() for name in STATIC_FILES}


def add_routes(app: web.Application, dashboard: Dashboard, service: DRPCService) -> None:
    """Serve the page at ``/``, its files at ``/ui/{file}`` and the JSON at ``/api/status``."""
    app[_DASHBOARD] = dashboard
    app[_STATIC] = _static_files()

    async def page(request: web.Request) -> web.Response:
        return _file(request, "index.html")

    async def ui_file(request: web.Request) -> web.Response:
        name = request.match_info["file"]
        if name not in STATIC_FILES or name == "index.html":
            raise web.HTTPNotFound()
        return _file(request, name)

    async def api_status(request: web.Request) -> web.Response:
        # Off the event loop: reading a state directory can wait for a map resize.
        status = await asyncio.to_thread(request.app[_DASHBOARD].status, service)
        response = web.json_response(status)
        response.headers["Cache-Control"] = "no-store"
        return response

    app.router.add_get("/", page)
    app.router.add_get("/ui/{file}", ui_file)
    app.router.add_get("/api/status", api_status)


def _file(request: web.Request, name: str) -> web.Response:
    response = web.Response(
        body=request.app[_STATIC][name], content_type=STATIC_FILES[name], charset="utf-8"
    )
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-cache"
    return response


__all__ = ["Dashboard", "add_routes", "latency_bin", "percentile"]
