"""Prometheus metrics of one DRPC server, served at ``GET /metrics``.

Contract. ``ServerMetrics`` is a ``drpc.observe.Observer`` on the server's bus:
the service tells it how every execute call ended (``request_*`` events) and
hosted runtimes tell it about jobs, batches, steps and transactions. Every
metric lives in the instance's own ``CollectorRegistry`` (``registry``), never
prometheus-client's global one, so many servers in one process never share or
clash; ``exposition()`` is the text format ``GET /metrics`` answers.

Metrics (``function`` labels the DRPC function, ``topology`` a transactional
topology):

- ``drpc_requests_total{function,outcome}``: execute calls by outcome: ok,
  failed (FAILED_REQUEST, "not served" included), timeout, shutdown,
  internal_error (INTERNAL_ERROR), unauthorized, busy (refused by a limit);
- ``drpc_request_duration_seconds{function}``: submission to outcome of every
  queued call (refusals never queued and are not in it);
- ``drpc_queue_wait_seconds{function}``: submission to fetch by a runtime;
- ``drpc_step_duration_seconds{function,step}``: each step's span for a request;
- ``drpc_requests_in_flight{function}``: fetched by a runtime, not settled;
- ``drpc_queue_depth{function}`` (only functions with requests waiting) and
  ``drpc_requests_outstanding``: read from the service at each scrape;
- ``drpc_late_results_total``: results and failures for unknown or settled ids;
- ``drpc_batch_size{function}``: requests coalesced into one executor job;
- ``drpc_spark_jobs_in_flight{function}``, ``drpc_spark_job_duration_seconds
  {function}``, ``drpc_spark_jobs_total{function,outcome}`` (ok / failed);
- ``drpc_tx_last_committed_txid{topology}``, ``drpc_tx_batches_in_flight
  {topology}``, ``drpc_tx_commits_total{topology}``, ``drpc_tx_replays_total
  {topology,cause}``, ``drpc_tx_commit_duration_seconds{topology}``,
  ``drpc_tx_tuples_total{topology}`` (``rate()`` of it is tuples per second);
- per state directory open in this process (``StateEnvironment.open_environments``;
  ``state_dir`` is its path), read at each scrape with one ``version_status()`` and
  one ``CoordinatorState.topologies`` each: ``drpc_state_version{state_dir}`` (its
  latest committed version), ``drpc_state_committed_txid{state_dir,topology}``
  (each topology's last committed txid there; past ``max_topologies`` left out),
  ``drpc_state_oldest_pin_age_seconds{state_dir}`` (how long ago the oldest version
  a live process still pins was pinned: how far behind the slowest DRPC request in
  flight reads; 0 with no pin), ``drpc_state_pins{state_dir}`` (pins this process
  holds) and ``drpc_state_undo_logs{state_dir}`` (undo logs kept for older
  versions). A directory that cannot be read at the scrape (closed meanwhile) is
  left out, and so is a partition's directory (it is one of the following);
- per partition of a partitioned state of the runs the server hosts
  (``watch_transactional``; at most ``max_partitions``, default 256, in topology, state
  and index order), read at each scrape from the runs' status:
  ``drpc_partition_txid{topology,state,partition}`` (the txid it applied last),
  ``drpc_partition_keys{...}``, ``drpc_partition_bytes{...}`` and
  ``drpc_partition_owner{topology,state,partition,host,task}`` (1: where it lives; task 0
  is the run's own process); with a checkpoint store, ``drpc_partition_snapshot_txid{...}``
  (the txid of its last snapshot in the store) and ``drpc_partition_store_bytes{...}``
  (the bytes it keeps there);
- per hosted run with a checkpoint store (``drpc.state.checkpoint``):
  ``drpc_checkpoint_store_bytes{topology}`` (its partitions' and driver's objects),
  ``drpc_checkpoint_waiting{topology}`` (1 while a commit waits for the store) and
  ``drpc_checkpoint_restore_seconds{topology}`` (how long its last restore of a
  partition took; absent before one); with standby replicas,
  ``drpc_standby_lag{topology,state,partition,task}`` (the global commits each standby
  copy is behind; absent while it is first built) and
  ``drpc_standby_takeover_seconds{topology}`` (how long the last takeover of a lost
  partition by its standby took; absent before one).
- per component of the plain topologies the server runs (``watch_plain``;
  ``drpc.topologies``), Storm UI's figures read at each scrape:
  ``drpc_topology_emitted_total{topology,component}``,
  ``drpc_topology_acked_total{...}``, ``drpc_topology_failed_total{...}`` and, for a
  spout, ``drpc_topology_complete_latency_seconds{...}`` (mean, over its acked trees).

Label cardinality is bounded: a function name gets a label value of its own
only if the function is served or its call was queued, and at most
``max_functions`` names do (default 1024, the server passes
``Limits.max_functions``); every other name (refused calls to names nobody
serves, names past the bound) is counted under ``function="__other__"``, so
callers sending random names add one series, not one each. Steps
(``max_steps``, default 256), topologies (``max_topologies``, default 64) and
replay causes (``max_causes``, default 32) are bounded the same way, and so are
state directories (``max_state_dirs``, default 16), except that a directory past the
bound is left out rather than counted under ``__other__`` (a version or a pin age of
several directories together means nothing): the first directories a scrape sees, in
path order, keep their label for the life of the metrics, closed or not. A label
value is at most ``max_label_length`` characters (default 128, the server
passes ``Limits.max_label_length``): a longer name is cut and ends with
``~`` and 8 hex digits of its SHA-256, so two long names keep two values. A step
span is attributed to its function through a map of the last ``max_recent``
requests fetched (default 4096), then the service's table of held requests.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from drpc.server.service import OUTCOMES, PendingRequest, outcome_of
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from drpc.errors import StateError
from drpc.observe import Observer
from drpc.state.coordinator import CoordinatorState
from drpc.state.env import StateEnvironment, VersionStatus

if TYPE_CHECKING:
    from drpc.server.service import DRPCService

log = logging.getLogger(__name__)

OTHER = "__other__"
"""The label value of every name past a label bound."""

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
"""Seconds, from a millisecond to Storm's default request timeout."""

BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)

DEFAULT_MAX_FUNCTIONS = 1024
DEFAULT_MAX_STEPS = 256
DEFAULT_MAX_TOPOLOGIES = 64
DEFAULT_MAX_CAUSES = 32
DEFAULT_MAX_STATE_DIRS = 16
DEFAULT_MAX_PARTITIONS = 256
DEFAULT_MAX_RECENT = 4096
DEFAULT_MAX_LABEL_LENGTH = 128
_DIGEST_TAG = 9  # "~" and 8 hex digits


def clip_label(name: str, length: int) -> str:
    """``name`` if at most ``length`` characters, else its start, ``~`` and 8 hex digits of
    its SHA-256 (``length`` characters in all)."""
    if len(name) <= length:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{name[: max(0, length - _DIGEST_TAG)]}~{digest}"


class BoundedLabels:
    """At most ``limit`` distinct label values, each at most ``length`` characters
    (``clip_label``; None: names kept whole); past the count every new name maps to
    ``OTHER``. Thread-safe."""

    def __init__(self, limit: int, length: int | None = DEFAULT_MAX_LABEL_LENGTH) -> None:
        if limit < 1:
            raise ValueError(f"a label bound must be >= 1, got {limit!r}")
        if length is not None and length <= _DIGEST_TAG:
            raise ValueError(f"a label length must be > {_DIGEST_TAG}, got {length!r}")
        self.limit = limit
        self.length = length
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str, admit: bool = True) -> str:
        """The label value of ``name`` if it has one already, or may get one (``admit``)
        within the bound; else ``OTHER``."""
        label = self._names.get(name)
        if label is not None:
            return label
        if not admit:
            return OTHER
        with self._lock:
            label = self._names.get(name)
            if label is not None:
                return label
            if len(self._names) >= self.limit:
                return OTHER
            label = name if self.length is None else clip_label(name, self.length)
            self._names[name] = label
            return label

    def __len__(self) -> int:
        return len(self._names)


class LabelledChildren:
    """A metric's children by label values, each looked up in the metric once:
    prometheus-client's ``labels`` checks and locks on every call, and a call's path
    asks for five."""

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *labels: str) -> Any:
        child = self._children.get(labels)
        if child is None:
            child = self._children.setdefault(labels, self._metric.labels(*labels))
        return child


class RecentRequests:
    """The function of the last ``limit`` requests (id → function), oldest dropped first.
    Thread-safe."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_recent must be >= 1, got {limit!r}")
        self.limit = limit
        self._functions: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, request_id: str, function: str) -> None:
        with self._lock:
            self._functions[request_id] = function
            while len(self._functions) > self.limit:
                self._functions.popitem(last=False)

    def get(self, request_id: str) -> str | None:
        with self._lock:
            return self._functions.get(request_id)

    def __len__(self) -> int:
        return len(self._functions)


@dataclass(frozen=True, slots=True)
class StateDirStatus:
    """One open state directory at one look (``state_dir_status``)."""

    path: str
    versions: VersionStatus
    """Where its versions stand: latest, horizon, undo logs, oldest pin, this process's pins."""
    txids: dict[str, int]
    """The last committed txid of each topology with a commit record in it."""


def state_dir_status(env: StateEnvironment) -> StateDirStatus | None:
    """``env``'s status from one ``version_status()`` and one ``CoordinatorState.topologies``
    read; None (logged at debug) when it cannot be read, as when it closed meanwhile."""
    try:
        versions = env.version_status()
        records = CoordinatorState.topologies(env)
    except (StateError, OSError) as error:  # OSError: the pins file of a directory removed
        log.debug("state directory %r left out of the status: %s", env.path, error)
        return None
    return StateDirStatus(env.path, versions, {name: r.txid for name, r in records.items()})


class ServerMetrics(Observer):
    def __init__(
        self,
        *,
        max_functions: int = DEFAULT_MAX_FUNCTIONS,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_topologies: int = DEFAULT_MAX_TOPOLOGIES,
        max_causes: int = DEFAULT_MAX_CAUSES,
        max_recent: int = DEFAULT_MAX_RECENT,
        max_label_length: int = DEFAULT_MAX_LABEL_LENGTH,
        max_state_dirs: int = DEFAULT_MAX_STATE_DIRS,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
    ) -> None:
        """
        :param max_functions: most function names with label values of their own
            (default 1024); others count under ``"__other__"``.
        :param max_steps: most step names with label values of their own (default 256).
        :param max_topologies: most transactional topologies with their own (default 64).
        :param max_causes: most replay causes with their own (default 32).
        :param max_recent: fetched requests remembered to attribute step spans to
            their function without the service's lock (default 4096).
        :param max_label_length: longest label value in characters (default 128).
        :param max_state_dirs: most state directories shown (default 16); the first a
            scrape sees, in path order, keep theirs; the rest are left out.
        :param max_partitions: most partitions shown at a scrape (default 256).
        """
        self.functions = BoundedLabels(max_functions, max_label_length)
        self.steps = BoundedLabels(max_steps, max_label_length)
        self.topologies = BoundedLabels(max_topologies, max_label_length)
        self.causes = BoundedLabels(max_causes, max_label_length)
        self.state_dirs = BoundedLabels(max_state_dirs, max_label_length)
        self.recent = RecentRequests(max_recent)
        self.max_partitions = max_partitions
        self.max_label_length = max_label_length
        self._service: DRPCService | None = None
        self._hosted: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None
        self._plain: Callable[[], Mapping[str, Any]] | None = None
        registry = self.registry = CollectorRegistry(auto_describe=True)

        self.requests = Counter(
            "drpc_requests",
            "Execute calls by function and outcome.",
            ["function", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "drpc_request_duration_seconds",
            "Seconds from submission to outcome of queued execute calls.",
            ["function"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_wait = Histogram(
            "drpc_queue_wait_seconds",
            "Seconds a request waited in its queue before a runtime fetched it.",
            ["function"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.step_duration = Histogram(
            "drpc_step_duration_seconds",
            "Seconds a step spent on one request.",
            ["function", "step"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.batch_size = Histogram(
            "drpc_batch_size",
            "Requests coalesced into one executor job.",
            ["function"],
            buckets=BATCH_SIZE_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "drpc_requests_in_flight",
            "Requests fetched by a runtime and not settled yet.",
            ["function"],
            registry=registry,
        )
        # the children a call's own path updates
        self._requests = LabelledChildren(self.requests)
        self._duration = LabelledChildren(self.duration)
        self._queue_wait = LabelledChildren(self.queue_wait)
        self._in_flight = LabelledChildren(self.in_flight)
        self.jobs_in_flight = Gauge(
            "drpc_spark_jobs_in_flight",
            "Spark jobs running now.",
            ["function"],
            registry=registry,
        )
        self.job_duration = Histogram(
            "drpc_spark_job_duration_seconds",
            "Seconds each Spark job ran.",
            ["function"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.jobs = Counter(
            "drpc_spark_jobs",
            "Spark jobs finished, by outcome (ok or failed).",
            ["function", "outcome"],
            registry=registry,
        )
        self.tx_last_committed = Gauge(
            "drpc_tx_last_committed_txid",
            "Last committed transaction id.",
            ["topology"],
            registry=registry,
        )
        self.tx_in_flight = Gauge(
            "drpc_tx_batches_in_flight",
            "Transactions started and not committed yet.",
            ["topology"],
            registry=registry,
        )
        self.tx_commits = Counter(
            "drpc_tx_commits", "Committed transactions.", ["topology"], registry=registry
        )
        self.tx_replays = Counter(
            "drpc_tx_replays",
            "Transactions replayed, by cause.",
            ["topology", "cause"],
            registry=registry,
        )
        self.tx_commit_duration = Histogram(
            "drpc_tx_commit_duration_seconds",
            "Seconds each commit took.",
            ["topology"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tx_phase_duration = Histogram(
            "drpc_tx_phase_seconds",
            "Seconds each committed batch spent in each phase (emit, process, wait, commit).",
            ["topology", "phase"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tx_tuples = Counter(
            "drpc_tx_tuples",
            "Tuples of committed transactions; rate() gives tuples per second.",
            ["topology"],
            registry=registry,
        )
        self._tx_lock = threading.Lock()
        self._tx_active: dict[str, set[int]] = {}
        registry.register(_ServiceCollector(self))
        registry.register(_StateCollector(self))
        registry.register(_PartitionCollector(self))
        registry.register(PlainTopologyCollector(self._plain_infos))

    def bind(self, service: DRPCService) -> None:
        """Read queue depths, in-flight counts and late results from ``service`` at scrape."""
        self._service = service

    def watch_transactional(self, hosted: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        """``hosted()`` maps each hosted transactional topology to its run's status, whose
        ``partitions`` the partition gauges show."""
        self._hosted = hosted

    def watch_plain(self, infos: Callable[[], Mapping[str, Any]]) -> None:
        """``infos()`` maps each plain topology the server runs to its
        ``drpc.topologies.TopologyInfo``, whose figures the topology metrics show."""
        self._plain = infos

    def _plain_infos(self) -> Mapping[str, Any]:
        return {} if self._plain is None else self._plain()

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)

    # -- requests (the server's request table) ------------------------------------------------

    def request_submitted(self, request: PendingRequest) -> None:
        self.functions(request.function)

    def request_fetched(self, request: PendingRequest, now: float) -> None:
        # Only a fetched request runs steps. Remembering a request from its fetch, not its
        # submission, keeps the map free of calls withdrawn unfetched (a burst abandoned by
        # closing): entries made one per call in a burst would outlive it, scattered over
        # the allocator's arenas, and pin them.
        self.recent.add(request.id, request.function)
        function = self.functions(request.function)
        self._queue_wait(function).observe(max(0.0, now - request.submitted))
        self._in_flight(function).inc()

    def request_settled(self, request: PendingRequest, now: float) -> None:
        function = self.functions(request.function)
        if request.fetched:
            self._in_flight(function).dec()
        self._requests(function, outcome_of(request.error)).inc()
        self._duration(function).observe(max(0.0, now - request.submitted))

    def request_refused(self, function: str, error: BaseException, known: bool, now: float) -> None:
        self._requests(self.functions(function, admit=known), outcome_of(error)).inc()

    # -- runtimes (drpc.observe.Observer) -----------------------------------------------------

    def step_finished(
        self, return_info: Any, step: str, start: float, end: float, attrs: dict[str, Any]
    ) -> None:
        request_id = getattr(return_info, "request_id", None)
        if request_id is None:
            return
        function = self._function_of(request_id)
        if function is None:
            return
        self.step_duration.labels(self.functions(function), self.steps(step)).observe(
            max(0.0, end - start)
        )

    def _function_of(self, request_id: str) -> str | None:
        function = self.recent.get(request_id)
        if function is None and self._service is not None:  # older, maybe still held
            function = self._service.function_of(request_id)
        return function

    def batch_coalesced(self, function: str, size: int) -> None:
        self.batch_size.labels(self.functions(function)).observe(size)

    def job_started(self, function: str, job: str, request_count: int, now: float) -> None:
        self.jobs_in_flight.labels(self.functions(function)).inc()

    def job_finished(self, function: str, job: str, ok: bool, seconds: float) -> None:
        label = self.functions(function)
        self.jobs_in_flight.labels(label).dec()
        self.job_duration.labels(label).observe(seconds)
        self.jobs.labels(label, "ok" if ok else "failed").inc()

    def tx_started(self, topology: str, txid: int, attempt_id: int, now: float) -> None:
        label = self.topologies(topology)
        with self._tx_lock:
            active = self._tx_active.setdefault(label, set())
            active.add(txid)
            self.tx_in_flight.labels(label).set(len(active))

    def tx_committed(self, topology: str, txid: int, commit_seconds: float, tuples: int) -> None:
        label = self.topologies(topology)
        with self._tx_lock:
            active = self._tx_active.setdefault(label, set())
            active.difference_update([t for t in active if t <= txid])
            self.tx_in_flight.labels(label).set(len(active))
            self.tx_last_committed.labels(label).set(txid)
        self.tx_commits.labels(label).inc()
        self.tx_commit_duration.labels(label).observe(commit_seconds)
        self.tx_tuples.labels(label).inc(tuples)

    def tx_phases(self, topology: str, txid: int, phases: dict[str, float]) -> None:
        label = self.topologies(topology)
        for phase, seconds in phases.items():
            self.tx_phase_duration.labels(label, phase).observe(seconds)

    def tx_replayed(self, topology: str, txid: int, cause: str) -> None:
        self.tx_replays.labels(self.topologies(topology), self.causes(cause)).inc()


class _Collector:
    """Metrics read at each scrape (prometheus-client's custom collector protocol)."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []


class _ServiceCollector(_Collector):
    """Gauges and counters read from the service at each scrape."""

    def collect(self) -> Iterator[Metric]:
        service = self._metrics._service
        if service is None:
            return
        labels = self._metrics.functions
        by_label: dict[str, int] = {}
        for function, queued in service.queue_depths().items():
            label = labels(function, admit=False)
            by_label[label] = by_label.get(label, 0) + queued
        depth = GaugeMetricFamily(
            "drpc_queue_depth", "Requests waiting to be fetched.", labels=["function"]
        )
        for label, queued in sorted(by_label.items()):
            depth.add_metric([label], queued)
        yield depth
        outstanding = GaugeMetricFamily(
            "drpc_requests_outstanding", "Requests the server holds (queued or in flight)."
        )
        outstanding.add_metric([], service.outstanding())
        yield outstanding
        late = CounterMetricFamily(
            "drpc_late_results",
            "Results and failures that arrived for unknown or already settled requests.",
        )
        late.add_metric([], service.late_results)
        yield late


class _StateCollector(_Collector):
    """Gauges of every state directory open in this process, read at each scrape."""

    def collect(self) -> Iterator[Metric]:
        state_dirs, topologies = self._metrics.state_dirs, self._metrics.topologies
        version = GaugeMetricFamily(
            "drpc_state_version",
            "Latest committed version of the state directory.",
            labels=["state_dir"],
        )
        txid = GaugeMetricFamily(
            "drpc_state_committed_txid",
            "Last committed transaction id of each topology in the state directory.",
            labels=["state_dir", "topology"],
        )
        pin_age = GaugeMetricFamily(
            "drpc_state_oldest_pin_age_seconds",
            "Seconds since the oldest version pinned by a live process was pinned (0: none).",
            labels=["state_dir"],
        )
        pins = GaugeMetricFamily(
            "drpc_state_pins",
            "Pins this process holds (DRPC requests reading the directory).",
            labels=["state_dir"],
        )
        undo_logs = GaugeMetricFamily(
            "drpc_state_undo_logs", "Undo logs kept for older versions.", labels=["state_dir"]
        )
        for env in StateEnvironment.open_environments():
            if env.is_partition:
                continue
            label = state_dirs(env.path)
            if label == OTHER:
                continue
            state = state_dir_status(env)
            if state is None:
                continue
            versions = state.versions
            version.add_metric([label], versions.latest)
            pin_age.add_metric([label], versions.oldest_pin_age or 0.0)
            pins.add_metric([label], versions.local_pins)
            undo_logs.add_metric([label], versions.undo_logs)
            for name, committed in sorted(state.txids.items()):
                topology = topologies(name)
                if topology != OTHER:  # past the bound: one txid of several means nothing
                    txid.add_metric([label, topology], committed)
        yield from (version, txid, pin_age, pins, undo_logs)


class _PartitionCollector(_Collector):
    """Gauges of the hosted runs' partitions, read from their status at each scrape."""

    def collect(self) -> Iterator[Metric]:
        hosted = self._metrics._hosted
        labels = ["topology", "state", "partition"]
        txid = GaugeMetricFamily(
            "drpc_partition_txid", "The last txid a partition applied.", labels=labels
        )
        keys = GaugeMetricFamily("drpc_partition_keys", "Records a partition holds.", labels=labels)
        size = GaugeMetricFamily(
            "drpc_partition_bytes", "Bytes of a partition's map in use.", labels=labels
        )
        owner = GaugeMetricFamily(
            "drpc_partition_owner",
            "Where a partition lives: its host and resident task (0: the run's process).",
            labels=[*labels, "host", "task"],
        )
        snapshot = GaugeMetricFamily(
            "drpc_partition_snapshot_txid",
            "The txid of a partition's last snapshot in the checkpoint store.",
            labels=labels,
        )
        stored = GaugeMetricFamily(
            "drpc_partition_store_bytes",
            "Bytes a partition keeps in the checkpoint store.",
            labels=labels,
        )
        store_bytes = GaugeMetricFamily(
            "drpc_checkpoint_store_bytes",
            "Bytes a run keeps in its checkpoint store.",
            labels=["topology"],
        )
        waiting = GaugeMetricFamily(
            "drpc_checkpoint_waiting",
            "1 while a commit of the run waits for its checkpoint store.",
            labels=["topology"],
        )
        restore = GaugeMetricFamily(
            "drpc_checkpoint_restore_seconds",
            "How long the run's last restore of a partition from the store took.",
            labels=["topology"],
        )
        lag = GaugeMetricFamily(
            "drpc_standby_lag",
            "Global commits a standby copy of a partition is behind.",
            labels=[*labels, "task"],
        )
        takeover = GaugeMetricFamily(
            "drpc_standby_takeover_seconds",
            "How long the run's last takeover of a lost partition by its standby took.",
            labels=["topology"],
        )
        shown = 0
        length = self._metrics.max_label_length
        runs = hosted() if hosted is not None else {}
        for topology, run in sorted(runs.items()):
            checkpoint = run.get("checkpoint")
            if checkpoint:
                name = [clip_label(topology, length)]
                store_bytes.add_metric(name, checkpoint.get("bytes") or 0)
                waiting.add_metric(name, 1 if checkpoint.get("waiting_since") else 0)
                if checkpoint.get("last_restore"):
                    restore.add_metric(name, checkpoint["last_restore"]["seconds"])
                standbys = checkpoint.get("standbys") or {}
                for copy in standbys.get("copies", ()):
                    if copy.get("lag") is not None:
                        lag.add_metric(
                            [
                                clip_label(topology, length),
                                clip_label(str(copy["group"]), length),
                                str(copy["index"]),
                                str(copy["task"]),
                            ],
                            copy["lag"],
                        )
                if standbys.get("last_takeover"):
                    takeover.add_metric(name, standbys["last_takeover"]["seconds"])
            for partition in run.get("partitions", ()):
                if shown == self._metrics.max_partitions:
                    break
                shown += 1
                label = [
                    clip_label(topology, length),
                    clip_label(str(partition["group"]), length),
                    str(partition["index"]),
                ]
                if partition.get("txid") is not None:
                    txid.add_metric(label, partition["txid"])
                keys.add_metric(label, partition.get("keys") or 0)
                size.add_metric(label, partition.get("bytes") or 0)
                if partition.get("snapshot") is not None:
                    snapshot.add_metric(label, partition["snapshot"])
                if "store_bytes" in partition:
                    stored.add_metric(label, partition["store_bytes"])
                host = partition.get("host")
                owner.add_metric(
                    [
                        *label,
                        clip_label(str(host), length) if host else "",
                        str(partition.get("task") or 0),
                    ],
                    1,
                )
        yield from (
            txid,
            keys,
            size,
            owner,
            snapshot,
            stored,
            store_bytes,
            waiting,
            restore,
            lag,
            takeover,
        )


__all__ = [
    "OTHER",
    "OUTCOMES",
    "BoundedLabels",
    "PlainTopologyCollector",
    "RecentRequests",
    "ServerMetrics",
    "StateDirStatus",
    "state_dir_status",
]


class PlainTopologyCollector:
    """Storm UI's figures of the plain topologies' components, read from ``infos()`` (each
    topology's ``drpc.topologies.TopologyInfo`` by name) at each scrape; a server's and a
    runner's (``drpc.runner.topology_port``)."""

    def __init__(self, infos: Callable[[], Mapping[str, Any]]) -> None:
        self._infos = infos

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        labels = ["topology", "component"]
        emitted = CounterMetricFamily(
            "drpc_topology_emitted", "Tuples a component emitted.", labels=labels
        )
        acked = CounterMetricFamily(
            "drpc_topology_acked",
            "Trees a spout saw complete; tuples a bolt acked.",
            labels=labels,
        )
        failed = CounterMetricFamily(
            "drpc_topology_failed",
            "Trees a spout saw fail (or time out); tuples a bolt failed.",
            labels=labels,
        )
        latency = GaugeMetricFamily(
            "drpc_topology_complete_latency_seconds",
            "Mean time from a spout's emit to its tree's ack.",
            labels=labels,
        )
        for name, info in sorted(self._infos().items()):
            for stats in info.components.values():
                values = [name, stats.component]
                emitted.add_metric(values, stats.emitted)
                acked.add_metric(values, stats.acked)
                failed.add_metric(values, stats.failed)
                if stats.complete_latency_ms is not None:
                    latency.add_metric(values, stats.complete_latency_ms / 1000.0)
        yield from (emitted, acked, failed, latency)
