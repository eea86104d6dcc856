"""Chaos: a nemesis breaks a split deployment under load; a checker reads the whole history.

The deployment, every part real and in a process of its own: a durable ``redis-server``
(AOF, ``appendfsync always``), two ``drpc-server`` processes and one ``drpc-runner``
serving them both. The runner is the Spark driver (``--executor spark``: resident tasks,
``--master``, default ``local[2]``): it runs the Trident tally of
``bench.chaos_workload`` over Redis Streams into a partitioned LMDB state (its partitions
on the resident tasks' disk, ``drpc.state.local.dir``, with a ``file://`` checkpoint
store) and serves the ``chaos`` query over it.

The load, for ``--seconds``: one producer per stream appends numbered entries
(``--rate`` per second each; an append whose outcome is unknown is retried with the same
stream id until Redis holds it or refuses it as a duplicate); 16 clients, 8 over Thrift
(``DRPCClient`` with both servers, failing over) and 8 over HTTP (failing over to the
other server themselves), ask for every tally or a few, ``--think`` seconds apart, each
call recorded with its outcome, its answer and the txid the answer names.

The nemesis, seeded (``--seed``): after a random pause (exponential, mean
``--interval`` seconds) it injects the next fault of a shuffled round of every kind, then
waits until it is repaired before the next pause; the load goes on until the round under
way at ``--seconds`` is complete, so every kind is injected. With ``--concurrent`` each
kind has a thread and a schedule of its own instead (mean ``--interval`` seconds apart
per kind), so faults overlap and a runner may be killed again while it starts. The
kinds:

- ``worker``: SIGKILL a resident task's Python process (the runner's resident job
  restarts);
- ``runner``: SIGKILL the runner's whole process group (driver, JVM, workers), start it
  again at once; with ``--standbys N`` (``--standby``: 1) N more runners wait warm
  beside it (``drpc-runner --standby``), the kill (once one of them is warm) takes the
  one that writes the state, a warm one takes over, and the killed one comes back as
  a standby;
- ``server``: SIGKILL one ``drpc-server``, start it again on its ports;
- ``redis``: SIGKILL Redis, start it again on its files;
- ``pause``: SIGSTOP a server, the runner or Redis (one not stopped already) for
  ``--pause`` seconds (past the clients' timeout), then SIGCONT; the next faults go on
  meanwhile;
- ``link``, with ``--two-hosts``: the runner runs on a second host (a network namespace
  joined to this one by a veth pair; root only) and the link between the hosts is cut
  for ``--cut`` seconds, then restored. Without it the report says the kind was not run.

Then every fault is repaired, the producers stop, and an audit reads every tally until
the state holds every appended entry (or ``--settle`` seconds pass). The checker
(``bench.chaos_history``) reads the history; afterwards each process's descriptors and
memory, and the undo logs and pins of the state directory and of every partition, are
checked against bounds.

Reported: faults by kind (with how long each took to repair), calls by outcome,
anomalies by kind (each with the smallest slice of the history that shows it, and the
seed), availability (the share of calls answered) outside and inside the windows when the
only runner or every server is down (a call counts inside when it was in flight during
one), p50/p99 of answered calls during faults and outside them. The last line reads
``chaos: F faults, C calls, A anomalies``; exit status 1 when there is an anomaly.
Usage: ``python bench/chaos.py [--seconds 600] [--seed N] [--interval 4] [--rate 100]
[--think 0.05] [--pause S] [--two-hosts] [--cut 8] [--concurrent] [--standbys N]
[--master local[2]]
[--workdir DIR] [--out bench/results/chaos.json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from drpc.client import DRPCClient, HTTPDRPCClient  # noqa: E402

from bench import procs  # noqa: E402
from bench.chaos_deployment import (  # noqa: E402
    CLIENT_TIMEOUT,
    REPAIR_TIMEOUT,
    Deployment,
    Link,
    answers,
    process_figures,
    service_figures,
    wait_for,
)
from bench.chaos_history import (  # noqa: E402
    Anomaly,
    Append,
    Call,
    Fault,
    Row,
    Window,
    check,
    down_windows,
    settle_repairs,
)
from bench.chaos_workload import (  # noqa: E402
    ALL_NAMES,
    FUNCTION,
    KEYS,
    PARTS,
    STREAMS,
    entry_fields,
    entry_id,
)
from drpc.errors import DRPCExecutionException  # noqa: E402

KINDS = ("worker", "runner", "server", "redis", "pause")
NOT_RUN = {"link": "one host: --two-hosts runs the runner on a second one"}
THRIFT_CLIENTS = 8
HTTP_CLIENTS = 8
UNDO_LOG_BOUND = 200
FD_BOUND = 512
FD_GROWTH = 32
"""Descriptors a process may hold at the end past its count when it was found ready."""
RSS_GROWTH = 1.5
"""Resident memory a process may hold at the end, times its figure when it was found
ready after its last start (plus 64 MiB): its load settles well inside it."""


class History:
    def __init__(self) -> None:
        self.appends: list[Append] = []
        self.calls: list[Call] = []
        self.lock = threading.Lock()

    def append(self, append: Append) -> None:
        with self.lock:
            self.appends.append(append)

    def call(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)


def producer(
    deployment: Deployment,
    part: int,
    rate: float,
    history: History,
    stop: threading.Event,
    seed: int,
) -> None:
    import redis

    rng = random.Random(seed * 1000 + part)
    client = deployment.redis()
    seq = 0
    started = time.monotonic()
    while not stop.is_set():
        seq += 1
        key = rng.choice(KEYS)
        while True:
            try:
                client.xadd(STREAMS.format(part), entry_fields(part, key, seq), id=entry_id(seq))
                break
            except redis.ResponseError as error:
                if "equal or smaller" in str(error):
                    break  # the earlier attempt was written
                raise
            except (redis.ConnectionError, redis.TimeoutError):
                time.sleep(0.1)
                client = deployment.redis()
        history.append(Append(part, seq, key))
        pause = started + seq / rate - time.monotonic()
        if pause > 0:
            stop.wait(pause)


def parse_rows(result: str) -> tuple[Row, ...]:
    rows = []
    for part, key, tally, txid in json.loads(result):
        count, highest = (None, None) if tally is None else tally
        rows.append(Row(int(part), str(key), count, highest, txid))
    return tuple(sorted(rows, key=lambda row: (row.part, row.key)))


def outcome_of(error: BaseException) -> str:
    if isinstance(error, DRPCExecutionException):
        return f"DRPCExecutionException:{getattr(error.type, 'name', error.type)}"
    return type(error).__name__


class Caller:
    """One client: Thrift over both servers, or HTTP failing over to the other server."""

    def __init__(self, name: str, transport: str, deployment: Deployment, first: int):
        self.name, self.transport = name, transport
        servers, host = deployment.servers, deployment.host
        order = [servers[(first + step) % len(servers)] for step in range(len(servers))]
        if transport == "thrift":
            self.thrift = DRPCClient(
                servers=[f"{host}:{ports['port']}" for ports in order], timeout=CLIENT_TIMEOUT
            )
        else:
            self.urls = [f"http://{host}:{ports['http']}" for ports in order]

    def execute(self, args: str) -> str:
        if self.transport == "thrift":
            return self.thrift.execute(FUNCTION, args)
        from drpc.client import DRPCConnectionError

        deadline = time.monotonic() + CLIENT_TIMEOUT
        failures = []
        for url in self.urls:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                return HTTPDRPCClient(url, timeout=left).execute(FUNCTION, args)
            except DRPCConnectionError as error:
                failures.append(f"{url}: {error}")
        raise DRPCConnectionError("; ".join(failures) or "no time left")

    def call(self, names: tuple[str, ...], audit: bool = False) -> Call:
        invoked = time.monotonic()
        record = functools.partial(
            Call, self.name, self.transport, names, invoked, timeout=CLIENT_TIMEOUT, audit=audit
        )
        try:
            result = self.execute(" ".join(names))
        except Exception as error:  # recorded: the checker judges every outcome
            return record(time.monotonic(), outcome_of(error), detail=str(error)[:300])
        completed = time.monotonic()
        try:
            rows = parse_rows(result)
        except (ValueError, TypeError) as error:
            return record(completed, "UnreadableAnswer", detail=f"{error}: {result[:200]}")
        return record(completed, "ok", rows=rows)


def client_loop(
    caller: Caller, history: History, stop: threading.Event, seed: int, think: float
) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        if rng.random() < 0.3:
            names = ALL_NAMES
        else:
            names = tuple(sorted(rng.sample(ALL_NAMES, rng.randint(1, 4))))
        history.call(caller.call(names))
        stop.wait(think)


class Nemesis:
    """Injects the faults (module doc). ``run`` injects one fault at a time, each repaired
    before the next pause; ``run_concurrent`` gives each kind a thread and a seeded
    schedule of its own, so that faults overlap: a worker, the runner and the link are
    then not waited for (a runner may be killed again while it starts), and their
    ``repaired`` is the first answer after the injection (``settle_repairs``)."""

    def __init__(
        self,
        deployment: Deployment,
        seed: int,
        interval: float,
        pause: float,
        link: Link | None = None,
        cut: float = 8.0,
    ) -> None:
        self.deployment = deployment
        self.link = link
        self.cut = cut
        self.kinds = KINDS + (("link",) if link is not None else ())
        self.seed = seed
        self.rng = random.Random(seed)
        self.interval = interval
        self.pause = pause
        self.faults: list[Fault] = []
        self.round: list[str] = []
        self.paused: set[str] = set()
        self.timers: list[threading.Timer] = []
        self.lock = threading.Lock()
        self.waits = True

    def run(self, until: float, stop: threading.Event) -> None:
        """Until ``until``, and then to the end of the round under way: every kind at
        least once, however slowly the faults were repaired."""
        while not stop.is_set():
            if stop.wait(self.rng.expovariate(1.0 / self.interval)):
                return
            if time.monotonic() > until and not self.round:
                return
            if not self.round:
                self.round = list(self.kinds)
                self.rng.shuffle(self.round)
            self._inject(self.round.pop(), self.rng)

    def run_concurrent(self, until: float, stop: threading.Event) -> None:
        self.waits = False
        threads = [
            threading.Thread(
                target=self._kind_loop,
                args=(kind, random.Random(self.seed * 1000 + index), until, stop),
                name=f"nemesis-{kind}",
                daemon=True,
            )
            for index, kind in enumerate(self.kinds)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _kind_loop(
        self, kind: str, rng: random.Random, until: float, stop: threading.Event
    ) -> None:
        while not stop.wait(rng.expovariate(1.0 / self.interval)) and time.monotonic() < until:
            self._inject(kind, rng)

    def _inject(self, kind: str, rng: random.Random) -> None:
        fault = getattr(self, f"_{kind}")(rng)
        if fault is None:
            return
        fault.until = fault.until or time.monotonic()
        with self.lock:
            self.faults.append(fault)
            number = len(self.faults)
        log(f"fault {number}: {kind} {fault.target} {fault.detail}".rstrip())
        self._repair(fault)

    def _repair(self, fault: Fault) -> None:
        if fault.kind == "pause":
            return
        deployment = self.deployment
        if fault.kind in ("worker", "runner", "link"):
            if not self.waits:
                return
            wait_for(
                lambda: answers(deployment.host, deployment.servers, CLIENT_TIMEOUT),
                REPAIR_TIMEOUT,
                "an answer after the fault",
            )
            if fault.kind == "runner":  # a new process: its figures now, for the end's check
                name = deployment.active_runner()
                if name is not None:
                    deployment.ready_figures[name] = service_figures(deployment.services[name])
        fault.repaired = time.monotonic()
        log(f"  {fault.kind} repaired in {fault.repaired - fault.started:.2f} s")

    def _worker(self, rng: random.Random) -> Fault | None:
        active = self.deployment.active_runner()
        if active is None:
            return None  # a standby is taking over: no resident task to kill yet
        jvm = procs.jvm(self.deployment.services[active].pid)
        tasks = procs.spark_python(jvm).tasks if jvm else []
        # A resident task runs threads of its own (its server, fetchers); a forked worker
        # waiting for reuse runs one: killing that breaks nothing.
        busy = [pid for pid in tasks if len(procs.thread_cpu(pid)) > 1]
        if not busy:
            return None  # the runner is starting: no resident task to kill yet
        pid = rng.choice(busy)
        fault = Fault("worker", f"pid {pid}", time.monotonic())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return fault

    def _runner(self, rng: random.Random) -> Fault:
        deployment = self.deployment
        if deployment.standbys:  # each kill a takeover: a runner killed before is warm again
            wait_for(deployment.standby_warm, REPAIR_TIMEOUT, "a warm standby runner")
        name = deployment.active_runner() or "runner"
        fault = Fault("runner", name, time.monotonic())
        service = self.deployment.services[name]
        outlived = service.kill()
        fault.detail = f"(its Spark workers outlived it by {outlived:.2f} s)"
        service.start()
        return fault

    def _server(self, rng: random.Random) -> Fault:
        name = rng.choice(["server0", "server1"])
        fault = Fault("server", name, time.monotonic())
        self.deployment.services[name].kill()
        time.sleep(0.5)
        self.deployment.start(name)
        return fault

    def _redis(self, rng: random.Random) -> Fault:
        fault = Fault("redis", "redis", time.monotonic())
        self.deployment.services["redis"].kill()
        time.sleep(0.5)
        self.deployment.start("redis")
        return fault

    def _link(self, rng: random.Random) -> Fault:
        """Cut the link to the runner's host for ``cut`` seconds."""
        assert self.link is not None
        fault = Fault("link", "runner", time.monotonic(), detail=f"{self.cut:g} s")
        self.link.cut()
        try:
            time.sleep(self.cut)
        finally:
            self.link.restore()
        fault.until = time.monotonic()
        return fault

    def _pause(self, rng: random.Random) -> Fault | None:
        """SIGSTOP a process that is not already stopped; a timer SIGCONTs it, so the next
        faults go on meanwhile (a kill of it first sends SIGCONT)."""
        runner = self.deployment.active_runner() or "runner"
        free = [name for name in ("server0", "server1", runner, "redis") if name not in self.paused]
        if not free:
            return None
        name = rng.choice(free)
        fault = Fault("pause", name, time.monotonic(), detail=f"{self.pause:g} s")
        service = self.deployment.services[name]
        service.signal(signal.SIGSTOP)
        self.paused.add(name)

        def resume() -> None:
            service.signal(signal.SIGCONT)
            self.paused.discard(name)
            fault.repaired = time.monotonic()

        timer = threading.Timer(self.pause, resume)
        timer.daemon = True
        timer.start()
        self.timers.append(timer)
        return fault

    def finish(self) -> None:
        """Resume every paused process now (a pause ends there)."""
        for timer in self.timers:
            timer.cancel()
        now = time.monotonic()
        for name in list(self.paused):
            self.deployment.services[name].signal(signal.SIGCONT)
            self.paused.discard(name)
        for fault in self.faults:
            if fault.kind == "pause" and fault.repaired is None:
                fault.repaired = now


def log(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def resources(
    deployment: Deployment,
) -> tuple[dict[str, Any], list[Anomaly]]:
    """Each live process's descriptors and memory, against its own figures when it was
    found ready after its last start; the state's undo logs and pins."""
    from drpc.state import StateEnvironment

    figures: dict[str, Any] = {}
    anomalies = []
    for name, now in process_figures(deployment).items():
        before = deployment.ready_figures.get(name)
        figures[name] = {**now, "when_ready": before}
        if now["fds"] > FD_BOUND:
            anomalies.append(Anomaly("resources", f"{name} holds {now['fds']} descriptors"))
        if before is not None and before["pid"] == now["pid"]:
            if now["fds"] > before["fds"] + FD_GROWTH:
                anomalies.append(
                    Anomaly(
                        "resources", f"{name}'s descriptors grew {before['fds']} -> {now['fds']}"
                    )
                )
            if now["rss_kib"] > before["rss_kib"] * RSS_GROWTH + 65536:
                anomalies.append(
                    Anomaly(
                        "resources",
                        f"{name}'s memory grew {before['rss_kib']} -> {now['rss_kib']} KiB",
                    )
                )
    directories = [deployment.workdir / "state"]
    directories += sorted(
        path
        for path in (deployment.workdir / "local").rglob("p*")
        if path.is_dir() and path.name[1:].isdigit()
    )
    for directory in directories:
        env = StateEnvironment.open(directory, create=False)
        try:
            status = env.version_status()
        finally:
            env.close()
        figures[str(directory.relative_to(deployment.workdir))] = asdict(status)
        if status.undo_logs > UNDO_LOG_BOUND:
            anomalies.append(
                Anomaly("resources", f"{directory.name} keeps {status.undo_logs} undo logs")
            )
        if status.oldest_pin_age is not None and status.oldest_pin_age > 90:
            anomalies.append(
                Anomaly(
                    "resources", f"{directory.name} has a pin {status.oldest_pin_age:.0f} s old"
                )
            )
    return figures, anomalies


def audit(deployment: Deployment, history: History, settle: float) -> Call:
    """Read every tally until the state holds every appended entry; the last read."""
    caller = Caller("audit", "thrift", deployment, 0)
    last = {part: 0 for part in range(PARTS)}
    for append in history.appends:
        last[append.part] = max(last[append.part], append.seq)
    deadline = time.monotonic() + settle
    while True:
        call = caller.call(ALL_NAMES, audit=True)
        if call.ok:
            highest = {part: 0 for part in range(PARTS)}
            for row in call.rows:
                highest[row.part] = max(highest[row.part], row.highest or 0)
            if highest == last or time.monotonic() > deadline:
                return call
        elif time.monotonic() > deadline:
            return call
        time.sleep(0.5)


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="drpc-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    link = Link().open() if args.two_hosts else None
    deployment = (
        Deployment(workdir, args.master, slots=args.slots, standbys=args.standbys)
        if link is None
        else Deployment(
            workdir,
            args.master,
            host=Link.HERE,
            runner_prefix=link.prefix,
            slots=args.slots,
            standbys=args.standbys,
        )
    )
    history = History()
    stop_load = threading.Event()
    stop_nemesis = threading.Event()
    log(f"seed {args.seed}, {args.seconds:g} s, work in {workdir}")
    try:
        for name in ("redis", "server0", "server1"):
            deployment.start(name)
        deployment.start("runner", timeout=300)
        if args.standbys:
            deployment.start_standbys(timeout=300)
        log("deployment answers")
        threads = [
            threading.Thread(
                target=producer,
                args=(deployment, part, args.rate, history, stop_load, args.seed),
                daemon=True,
            )
            for part in range(PARTS)
        ]
        callers = [
            Caller(f"thrift{index}", "thrift", deployment, index) for index in range(THRIFT_CLIENTS)
        ] + [Caller(f"http{index}", "http", deployment, index) for index in range(HTTP_CLIENTS)]
        threads += [
            threading.Thread(
                target=client_loop,
                args=(caller, history, stop_load, args.seed * 100 + index, args.think),
                daemon=True,
            )
            for index, caller in enumerate(callers)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        nemesis = Nemesis(deployment, args.seed, args.interval, args.pause, link, args.cut)
        try:
            if args.concurrent:
                nemesis.run_concurrent(started + args.seconds, stop_nemesis)
            else:
                nemesis.run(started + args.seconds, stop_nemesis)
        finally:
            nemesis.finish()
        remaining = started + args.seconds - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
        ended = time.monotonic()
        stop_load.set()
        for thread in threads:
            thread.join(CLIENT_TIMEOUT + 5)
        log(f"load stopped: {len(history.appends)} appends, {len(history.calls)} calls; auditing")
        final = audit(deployment, history, args.settle)
        figures, resource_anomalies = resources(deployment)
    finally:
        stop_load.set()
        stop_nemesis.set()
        deployment.stop()
        if link is not None:
            link.close()
    calls = [*history.calls, final]
    with (workdir / "history.jsonl").open("w") as out:
        for call in calls:
            out.write(json.dumps(asdict(call)) + "\n")
    anomalies = check(history.appends, calls) + resource_anomalies
    settle_repairs(nemesis.faults, calls, ended)
    return report(args, nemesis.faults, history, calls, anomalies, figures, started, ended)


def report(
    args: argparse.Namespace,
    faults: list[Fault],
    history: History,
    calls: list[Call],
    anomalies: list[Anomaly],
    figures: dict[str, Any],
    started: float,
    ended: float,
) -> dict[str, Any]:
    windows = down_windows(faults, ended)
    spans = [(fault.started, fault.repaired or ended) for fault in faults]

    def inside(call: Call, ranges: list[Window]) -> bool:
        """Whether the call was in flight during one of the ranges."""
        return any(call.invoked <= end and call.completed >= start for start, end in ranges)

    load = [call for call in calls if not call.audit]
    out_calls = [call for call in load if not inside(call, windows)]
    in_calls = [call for call in load if inside(call, windows)]

    def share(selected: list[Call]) -> float | None:
        return sum(call.ok for call in selected) / len(selected) if selected else None

    def latencies(selected: list[Call]) -> list[float]:
        return [1000 * (call.completed - call.invoked) for call in selected if call.ok]

    during = latencies([call for call in load if inside(call, spans)])
    calm = latencies([call for call in load if not inside(call, spans)])
    repair = {
        kind: [round(f.repaired - f.started, 2) for f in faults if f.kind == kind and f.repaired]
        for kind in (*KINDS, "link")
    }
    return {
        "seed": args.seed,
        "seconds": args.seconds,
        "master": args.master,
        "appends": len(history.appends),
        "faults": dict(Counter(fault.kind for fault in faults)),
        "faults_not_run": {} if args.two_hosts else NOT_RUN,
        "repair_seconds": {kind: statistics.median(v) if v else None for kind, v in repair.items()},
        "calls": len(load),
        "outcomes": dict(Counter(call.outcome for call in load)),
        "availability_outside_down_windows": share(out_calls),
        "availability_inside_down_windows": share(in_calls),
        "calls_inside_down_windows": len(in_calls),
        "latency_ms_during_faults": {
            "p50": percentile(during, 0.5),
            "p99": percentile(during, 0.99),
        },
        "latency_ms_outside_faults": {"p50": percentile(calm, 0.5), "p99": percentile(calm, 0.99)},
        "refusals": refusal_samples(load),
        "anomalies": dict(Counter(anomaly.kind for anomaly in anomalies)),
        "anomaly_slices": [anomaly.describe() for anomaly in anomalies[:20]],
        "fault_log": [asdict(fault) for fault in faults],
        "resources": figures,
    }


def refusal_samples(calls: list[Call], per_outcome: int = 3) -> dict[str, list[str]]:
    """The first few refusals of each kind, with what the caller was told."""
    samples: dict[str, list[str]] = {}
    for call in calls:
        if not call.ok:
            found = samples.setdefault(call.outcome, [])
            if len(found) < per_outcome:
                found.append(call.detail)
    return samples


def print_report(result: dict[str, Any]) -> None:
    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.2f} %"

    faults = sum(result["faults"].values())
    print(
        f"seed {result['seed']}, {result['seconds']:g} s on {result['master']}, "
        f"{result['appends']:,} entries appended"
    )
    print(
        "faults:", ", ".join(f"{kind} {count}" for kind, count in sorted(result["faults"].items()))
    )
    for kind, why in result["faults_not_run"].items():
        print(f"  not run: {kind} ({why})")
    print("median repair (s):", result["repair_seconds"])
    print("outcomes:", result["outcomes"])
    outside = pct(result["availability_outside_down_windows"])
    inside = pct(result["availability_inside_down_windows"])
    print(
        f"answered outside the windows when the only runner or every server was down: "
        f"{outside}; inside them ({result['calls_inside_down_windows']} calls): {inside}"
    )
    print(
        "latency during faults (ms):",
        result["latency_ms_during_faults"],
        "outside:",
        result["latency_ms_outside_faults"],
    )
    print("anomalies:", result["anomalies"] or "none")
    for text in result["anomaly_slices"]:
        print(text)
        print(
            f"  (reproduce: python bench/chaos.py --seed {result['seed']} "
            f"--seconds {result['seconds']:g})"
        )
    print(
        f"chaos: {faults} faults, {result['calls']} calls, "
        f"{sum(result['anomalies'].values())} anomalies"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/chaos.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=600.0, help="load and faults (default 600)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="the nemesis's seed (default random)"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=4.0,
        help="mean seconds between a repair and the next fault (default 4)",
    )
    parser.add_argument(
        "--pause",
        type=float,
        default=CLIENT_TIMEOUT + 2,
        help="seconds a paused process stays stopped (default past the clients' timeout)",
    )
    parser.add_argument(
        "--rate", type=float, default=100.0, help="appends/s per stream (default 100)"
    )
    parser.add_argument(
        "--think",
        type=float,
        default=0.05,
        help="seconds each client waits between two calls (default 0.05)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=120.0,
        help="seconds the audit waits for every entry to be counted (default 120)",
    )
    parser.add_argument("--master", default="local[2]", help="the runner's Spark master")
    parser.add_argument(
        "--slots",
        type=int,
        default=2,
        help="the runner's resident tasks (default 2: the state's two partitions on two "
        "tasks, so a worker kill takes one partition's owner)",
    )
    parser.add_argument(
        "--two-hosts",
        action="store_true",
        help="run the runner on a second host (a network namespace; needs root) and add the "
        "link fault: the link between the hosts cut, then restored",
    )
    parser.add_argument(
        "--cut", type=float, default=8.0, help="seconds a link stays cut (default 8)"
    )
    parser.add_argument(
        "--concurrent",
        action="store_true",
        help="each kind of fault on a schedule of its own (mean --interval apart), "
        "overlapping the others; the runner may be killed again while it starts",
    )
    parser.add_argument(
        "--standbys",
        type=int,
        default=0,
        metavar="N",
        help="run N more runners with --standby beside the first: a runner kill (once one "
        "waits warm) is repaired by a takeover, and the killed runner starts again as a "
        "standby (default 0)",
    )
    parser.add_argument(
        "--standby",
        dest="standbys",
        action="store_const",
        const=1,
        help="the same as --standbys 1",
    )
    parser.add_argument(
        "--workdir", help="where the processes keep their files (default a new temporary directory)"
    )
    parser.add_argument("--out", default=str(HERE / "results" / "chaos.json"))
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    if args.standbys < 0:
        parser.error("--standbys must be 0 or more")
    result = run(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print_report(result)
    return 1 if result["anomalies"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
