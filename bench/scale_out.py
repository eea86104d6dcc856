"""Scale-out serving: where a DRPC call's CPU goes, process by process, and what bounds throughput.

Every deployment below serves storm-starter's reach on the resident executor
(``--executor spark``, ``local[2]``), with ``--callers`` closed-loop callers
(default 64) in a process of their own, each a ``DRPCClient`` (Thrift),
spread over the servers. Two parts, both run by default (``--parts``):

- **deployments**: the embedded one, one ``drpc-server`` hosting the topology
  (as ``make serve``: the driver feeds its resident tasks), and the same server on
  its older path (``--request-path driver``: every tuple crosses between the
  driver and the tasks), labelled ``embedded-driver``; and the split one,
  ``drpc-server`` processes take the calls and one ``drpc-runner`` hosts the
  topology, fetching from every server's invocations port (Storm's usual
  deployment), with 1 and 2 resident
  slots, and with 1 and 2 servers. No process is limited.
- **quota**: the split deployment with 1 and with 2 resident slots, one
  server, under CPU quotas (``bench/quota.py``, cgroups; needs root): the
  driver, the runner's Python process and its JVM together, in a cgroup
  limited to ``--driver-cores`` (default 0.25), and each resident task's
  process in a cgroup of its own limited to ``--worker-cores`` (default 0.3).
  The resident tasks are the ``slots`` Spark task processes that spent the
  most CPU over the warm-up, whatever share of a call they run; the callers
  and the server are not limited. With the driver no longer the ceiling, two
  workers serve at least 1.8 times the calls of one (issue 40's target); the
  report gives that ratio.

For each run, after a warm-up, one timed window of ``--seconds``: calls per
second, and the CPU each process spent per call, read from ``/proc`` (user +
system, ``bench/procs.py``) over that window: the callers, each server's
Python process, the runner's driver (its Python process), the driver's JVM,
the Spark task processes its ``pyspark.daemon`` forked (the workers) and the
daemon itself. In the embedded deployment the server is the driver. Each run
also gives the total CPU per call and the physical limit it implies: the
machine's cores times one second over that total. Every answer is checked
against storm-starter's reach.

With ``--rounds N`` the deployments run N times, alternated, and the report adds
the embedded deployment's calls/s over the split one's (1 slot, 1 server) in each
round, with one caller's p50 in both.

Usage: ``python bench/scale_out.py [--parts deployments,quota] [--rounds 1]
[--seconds 10] [--callers 64] [--driver-cores 0.25] [--worker-cores 0.3] [--quick]
[--out FILE]``. Prints a table and writes JSON (default
``bench/results/scale_out.json``). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from drpc.client import DRPCClient  # noqa: E402

from bench import procs, quota  # noqa: E402
from drpc.examples.reach import EXPECTED_REACH  # noqa: E402

HOST = "127.0.0.1"
MASTER = "local[2]"
TOPOLOGY = "drpc.examples.reach:topology"
START_TIMEOUT = 180.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@dataclass
class Roles:
    """The processes of one deployment, by role: pids whose CPU a window adds up."""

    pids: dict[str, list[int]] = field(default_factory=dict)

    def add(self, role: str, pid: int) -> None:
        self.pids.setdefault(role, []).append(pid)

    def sample(self) -> dict[str, float]:
        return {
            role: sum(procs.cpu_seconds(pid) for pid in pids) for role, pids in self.pids.items()
        }


def _spark_roles(roles: Roles, driver_pid: int, driver_role: str) -> None:
    """``driver_pid`` as ``driver_role``, its JVM as "driver JVM", the task processes the
    JVM's ``pyspark.daemon`` forked (the resident tasks among them) as "workers", and the
    daemon with any other Python under the JVM as "pyspark daemon"."""
    roles.add(driver_role, driver_pid)
    tree = procs.children()
    jvm = procs.jvm(driver_pid, tree)
    if jvm is None:
        return
    roles.add("driver JVM", jvm)
    python = procs.spark_python(jvm, tree)
    for pid in python.tasks:
        roles.add("workers", pid)
    for pid in python.daemons + python.others:
        roles.add("pyspark daemon", pid)


def _environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    env.setdefault("SPARK_LOCAL_IP", HOST)
    return env


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    invocations_port: int


def _start_server(hosting: bool, slots: int | None, request_path: str | None = None) -> Server:
    port, invocations, http = _free_port(), _free_port(), _free_port()
    command = [
        sys.executable, "-m", "drpc.server", "--host", HOST, "--port", str(port),
        "--invocations-port", str(invocations), "--http-port", str(http),
        "--log-level", "WARNING",
    ]  # fmt: skip
    if hosting:
        command += ["--topology", TOPOLOGY, "--executor", "spark", "--master", MASTER]
        if slots is not None:
            command += ["--slots", str(slots)]
        if request_path is not None:
            command += ["--request-path", request_path]
    process = subprocess.Popen(
        command, cwd=ROOT, env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return Server(process, port, invocations)


def _start_runner(servers: list[Server], slots: int) -> subprocess.Popen[bytes]:
    invocations = ",".join(f"{HOST}:{server.invocations_port}" for server in servers)
    command = [
        sys.executable, "-m", "drpc.runner", "--servers", invocations, "--topology", TOPOLOGY,
        "--executor", "spark", "--master", MASTER, "--slots", str(slots),
        "--log-level", "WARNING",
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=ROOT, env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _answers(port: int) -> bool:
    try:
        with DRPCClient(HOST, port, timeout=10) as client:
            return all(client.execute("reach", url) == want for url, want in EXPECTED_REACH.items())
    except Exception:
        return False


def _wait_until_served(servers: list[Server], processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not all(_answers(server.port) for server in servers):
        if any(process.poll() is not None for process in processes):
            raise SystemExit("a server or the runner exited before serving reach")
        if time.monotonic() > deadline:
            raise SystemExit(f"reach was not served within {START_TIMEOUT:.0f} s")
        time.sleep(0.5)


def _sequential_latencies(port: int, seconds: float) -> list[float]:
    """In the callers' process: one caller, one call after another for ``seconds``; each
    call's latency in ms."""
    urls = list(EXPECTED_REACH)
    latencies = []
    stop = time.monotonic() + seconds
    with DRPCClient(HOST, port, timeout=60) as client:
        while time.monotonic() < stop:
            began = time.perf_counter()
            client.execute("reach", urls[len(latencies) % len(urls)])
            latencies.append(1000 * (time.perf_counter() - began))
    return latencies


def _caller_loop(ports: list[int], callers: int, seconds: float) -> dict[str, int]:
    """In the callers' process: ``callers`` closed-loop threads for ``seconds``."""
    urls = list(EXPECTED_REACH.items())
    stop = time.monotonic() + seconds
    counts = {"calls": 0, "wrong": 0, "errors": 0}
    lock = threading.Lock()

    def caller(index: int) -> None:
        done = wrong = errors = 0
        with DRPCClient(HOST, ports[index % len(ports)], timeout=60) as client:
            turn = index
            while time.monotonic() < stop:
                url, want = urls[turn % len(urls)]
                turn += 1
                try:
                    answer = client.execute("reach", url)
                except Exception:
                    errors += 1
                    continue
                done += 1
                wrong += answer != want
        with lock:
            counts["calls"] += done
            counts["wrong"] += wrong
            counts["errors"] += errors

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return counts


@dataclass(frozen=True)
class Quotas:
    """A run's CPU quotas, in cores: the driver's (its Python process and its JVM in one
    cgroup) and each resident task's process's (a cgroup each)."""

    driver_cores: float
    worker_cores: float


@dataclass(frozen=True)
class Setup:
    """One measured run: the deployment, its resident slots and servers, and its quotas
    (split deployment only: the driver is the runner)."""

    deployment: str
    slots: int
    servers: int
    quotas: Quotas | None = None
    request_path: str | None = None  # the embedded server's --request-path

    @property
    def label(self) -> str:
        return self.deployment + (f"-{self.request_path}" if self.request_path else "")


DEPLOYMENTS = [
    Setup("embedded", 1, 1),
    Setup("embedded", 1, 1, request_path="driver"),
    Setup("split", 1, 1),
    Setup("split", 2, 1),
    Setup("split", 1, 2),
]
"""The "deployments" part: the embedded server at drpc's default slot on local[2] (on its
default path, then on the driver path), and the split deployment with one and two slots,
and with two servers, none under a quota."""

PARTS = ("deployments", "quota")
DRIVER_CORES = 0.25
WORKER_CORES = 0.3
SCALING_TARGET = 1.8
"""Issue 40's target: under equal quotas per worker, two workers serve at least this many
times the calls of one."""


def quota_runs(quotas: Quotas) -> list[Setup]:
    """The "quota" part: the split deployment with one and two resident tasks on local[2],
    the driver and each task under ``quotas``, callers and the server unlimited."""
    return [Setup("split", 1, 1, quotas), Setup("split", 2, 1, quotas)]


@contextmanager
def _deployment(setup: Setup) -> Iterator[tuple[list[Server], list[subprocess.Popen[bytes]]]]:
    """The deployment's servers and processes (the runner first, in the split one), once
    every server answers reach."""
    started: list[Server] = []
    processes: list[subprocess.Popen[bytes]] = []
    try:
        if setup.deployment == "embedded":
            started.append(
                _start_server(hosting=True, slots=setup.slots, request_path=setup.request_path)
            )
        else:
            started += [_start_server(hosting=False, slots=None) for _ in range(setup.servers)]
            processes.append(_start_runner(started, setup.slots))
        processes += [server.process for server in started]
        _wait_until_served(started, processes)
        yield started, processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _roles(setup: Setup, started: list[Server], processes: list[subprocess.Popen[bytes]]) -> Roles:
    """The deployment's processes by role, as they are now."""
    roles = Roles()
    if setup.deployment == "embedded":
        _spark_roles(roles, started[0].process.pid, "server (driver)")
    else:
        for server in started:
            roles.add("servers", server.process.pid)
        _spark_roles(roles, processes[0].pid, "driver")
    return roles


def busiest(pids: list[int], before: dict[int, float], count: int) -> list[int]:
    """The ``count`` processes of ``pids`` that spent the most CPU since ``before`` (pid to
    CPU seconds then; a pid not in it started since): the resident tasks among the Spark
    task processes, whichever of them does the work."""
    spent = {pid: procs.cpu_seconds(pid) - before.get(pid, 0.0) for pid in pids}
    return sorted(pids, key=lambda pid: spent[pid], reverse=True)[:count]


@dataclass(frozen=True)
class Held:
    """One cgroup of a run under quotas: its name in the report, the processes put in it."""

    name: str
    pids: list[int]
    cgroup: quota.CpuCgroup

    def sample(self) -> tuple[float, quota.Throttling]:
        """The CPU seconds its processes have spent, and the cgroup's throttling so far."""
        return sum(procs.cpu_seconds(pid) for pid in self.pids), self.cgroup.throttling()


def _hold(stack: ExitStack, quotas: Quotas, roles: Roles, workers: list[int]) -> list[Held]:
    """The driver's processes into one cgroup, each of ``workers`` into one of its own,
    until ``stack`` closes."""
    driver = roles.pids["driver"] + roles.pids.get("driver JVM", [])
    wanted = [("driver", driver, quotas.driver_cores)] + [
        (f"worker{n}", [pid], quotas.worker_cores) for n, pid in enumerate(workers, 1)
    ]
    return [
        Held(name, pids, stack.enter_context(quota.cpu_quota(cores, pids, label=name)))
        for name, pids, cores in wanted
    ]


def _limits(
    quotas: Quotas,
    held: list[Held],
    start: list[tuple[float, quota.Throttling]],
    elapsed: float,
) -> dict[str, Any]:
    """What a run under quotas reports of them: each cgroup's quota as the kernel holds it,
    the cores its processes used over the window and the share of periods it was
    throttled in (near 1: that quota is the ceiling)."""
    cgroups = {}
    for group, (cpu_before, throttling_before) in zip(held, start, strict=True):
        cpu, throttling = group.sample()
        cgroups[group.name] = {
            "quota_cores": group.cgroup.quota_cores(),
            "used_cores": (cpu - cpu_before) / elapsed,
            "throttled": throttling.since(throttling_before),
        }
    return {
        "driver_cores": quotas.driver_cores,
        "worker_cores": quotas.worker_cores,
        "driver_pids": held[0].pids,
        "worker_pids": [pid for group in held[1:] for pid in group.pids],
        "cgroups": cgroups,
    }


def measure(setup: Setup, callers: int, seconds: float, warmup: float) -> dict[str, Any]:
    """One run: the deployment started and warmed up, then (under its quotas, if any) a
    window of ``seconds`` with ``callers`` closed-loop callers, and what each role spent."""
    if setup.quotas is not None and setup.deployment != "split":
        raise ValueError("quotas apply to the split deployment, whose driver is the runner")
    with _deployment(setup) as (started, processes):
        ports = [server.port for server in started]
        ready = _roles(setup, started, processes)
        ready_cpu = {pid: procs.cpu_seconds(pid) for pid in ready.pids.get("workers", [])}
        context = multiprocessing.get_context("spawn")
        with context.Pool(1) as pool, ExitStack() as stack:
            pool.apply(_caller_loop, (ports, callers, warmup))
            roles = _roles(setup, started, processes)  # with what the warm-up started
            roles.add("callers", pool.apply(os.getpid))
            held: list[Held] = []
            if setup.quotas is not None:
                workers = busiest(roles.pids.get("workers", []), ready_cpu, setup.slots)
                held = _hold(stack, setup.quotas, roles, workers)
            before, start, began = roles.sample(), [g.sample() for g in held], time.monotonic()
            counts = pool.apply(_caller_loop, (ports, callers, seconds))
            after, elapsed = roles.sample(), time.monotonic() - began
            limits = None
            latencies: list[float] = []
            if setup.quotas is not None:
                limits = _limits(setup.quotas, held, start, elapsed)
            else:  # one caller alone, after the window
                latencies = pool.apply(_sequential_latencies, (ports[0], min(3.0, seconds)))
    record = run_record(setup, counts, elapsed, before, after, limits)
    record["sequential_p50_ms"] = statistics.median(latencies) if latencies else None
    return record


def run_record(
    setup: Setup,
    counts: dict[str, int],
    elapsed: float,
    before: dict[str, float],
    after: dict[str, float],
    limits: dict[str, Any] | None,
) -> dict[str, Any]:
    """What the report keeps of one run: calls/s, each role's CPU per call (ms, from the CPU
    seconds ``before`` and ``after`` the window), their total, and the physical limit: the
    machine's cores times one second over that total CPU per call."""
    calls = counts["calls"]
    cpu_ms_per_call = {
        role: 1000 * (after[role] - before[role]) / calls if calls else float("nan")
        for role in after
    }
    total = sum(cpu_ms_per_call.values())
    return {
        "deployment": setup.label,
        "slots": setup.slots,
        "servers": setup.servers,
        "quotas": limits,
        "calls": calls,
        "wrong": counts["wrong"],
        "errors": counts["errors"],
        "calls_per_s": calls / elapsed,
        "cpu_ms_per_call": cpu_ms_per_call,
        "total_cpu_ms_per_call": total,
        "physical_limit_calls_per_s": CPUS * 1000 / total if total > 0 else float("nan"),
    }


CPUS = os.cpu_count() or 1
ROLE_ORDER = (
    "callers",
    "servers",
    "server (driver)",
    "driver",
    "driver JVM",
    "pyspark daemon",
    "workers",
)


def _quota_label(run: dict[str, Any]) -> str:
    limits = run.get("quotas")
    return f"{limits['driver_cores']:g}/{limits['worker_cores']:g}" if limits else "-"


def _p50(run: dict[str, Any]) -> str:
    p50 = run.get("sequential_p50_ms")
    return "-" if p50 is None else f"{p50:.2f}"


def table(results: list[dict[str, Any]]) -> str:
    """Each run a row: where it ran, its quotas (driver/each worker, cores), one caller's p50
    latency alone (runs without quotas), calls/s, the CPU
    ms per call of each role, their total and the physical limit in calls/s."""
    seen = {role for run in results for role in run["cpu_ms_per_call"]}
    roles = [role for role in ROLE_ORDER if role in seen] + sorted(seen - set(ROLE_ORDER))
    widths = [max(9, len(role) + 2) for role in roles]
    where = (
        f"{'deployment':<16}{'slots':>6}{'servers':>8}{'quota':>10}{'p50 ms':>8}{'calls/s':>9}  "
    )
    head = where + "".join(f"{role:>{w}}" for role, w in zip(roles, widths, strict=True))
    lines = [
        head + f"{'total':>9}{'limit/s':>9}",
        " " * len(where) + "CPU ms per call, by process".rjust(sum(widths)),
    ]
    for run in results:
        cpu = run["cpu_ms_per_call"]
        cells = "".join(
            f"{cpu[role]:>{w}.3f}" if role in cpu else f"{'':>{w}}"
            for role, w in zip(roles, widths, strict=True)
        )
        lines.append(
            f"{run['deployment']:<16}{run['slots']:>6}{run['servers']:>8}"
            f"{_quota_label(run):>10}{_p50(run):>8}{run['calls_per_s']:>9.0f}  {cells}"
            f"{run['total_cpu_ms_per_call']:>9.3f}{run['physical_limit_calls_per_s']:>9.0f}"
        )
    return "\n".join(lines)


def scaling(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The quota part's verdict: calls/s with two workers over calls/s with one, under the
    same quotas; None when the run did not measure both."""
    held = {run["slots"]: run for run in results if run.get("quotas")}
    if 1 not in held or 2 not in held:
        return None
    one, two = held[1], held[2]
    return {
        "driver_cores": one["quotas"]["driver_cores"],
        "worker_cores": one["quotas"]["worker_cores"],
        "calls_per_s": {"1 worker": one["calls_per_s"], "2 workers": two["calls_per_s"]},
        "ratio": two["calls_per_s"] / one["calls_per_s"] if one["calls_per_s"] else float("nan"),
        "target": SCALING_TARGET,
    }


def embedded_vs_split(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each round's embedded deployment (its default path) against the split one with one
    slot and one server, taken in order: calls/s ratio and both one-caller p50s."""
    unlimited = [run for run in results if not run.get("quotas")]
    embedded = [run for run in unlimited if run["deployment"] == "embedded"]
    split = [
        run
        for run in unlimited
        if run["deployment"] == "split" and run["slots"] == 1 and run["servers"] == 1
    ]
    return [
        {
            "ratio": one["calls_per_s"] / other["calls_per_s"] if other["calls_per_s"] else None,
            "calls_per_s": [one["calls_per_s"], other["calls_per_s"]],
            "p50_ms": [one.get("sequential_p50_ms"), other.get("sequential_p50_ms")],
        }
        for one, other in zip(embedded, split, strict=False)
    ]


def summary(results: list[dict[str, Any]]) -> list[str]:
    """The lines under the table: each round's embedded / split ratio, the quota part's
    scaling and its physical limits."""
    lines = [
        f"round {n}: embedded / split calls/s = {pair['ratio']:.2f}x "
        f"({pair['calls_per_s'][0]:.0f} / {pair['calls_per_s'][1]:.0f}); one caller's p50 "
        f"{_ms(pair['p50_ms'][0])} / {_ms(pair['p50_ms'][1])}"
        for n, pair in enumerate(embedded_vs_split(results), 1)
        if pair["ratio"] is not None
    ]
    verdict = scaling(results)
    if verdict is None:
        return lines
    held = [run for run in results if run.get("quotas")]
    limits = ", ".join(
        f"{run['slots']} worker(s) {run['physical_limit_calls_per_s']:.0f} calls/s "
        f"({run['total_cpu_ms_per_call']:.3f} ms per call)"
        for run in held
    )
    return [
        *lines,
        f"under quotas (driver {verdict['driver_cores']:g} core, each worker "
        f"{verdict['worker_cores']:g} core): 2 workers / 1 worker = {verdict['ratio']:.2f}x "
        f"calls/s (target: at least {verdict['target']:g}x)",
        *(held_line(run) for run in held),
        f"physical limit, {CPUS} cores x 1 s / total CPU per call: {limits}",
    ]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def held_line(run: dict[str, Any]) -> str:
    """How much of each quota a run used, and how often it hit it."""
    cgroups = run["quotas"]["cgroups"]
    return f"  {run['slots']} worker(s), cores used of the quota (periods throttled): " + ", ".join(
        f"{name} {group['used_cores']:.2f} of {group['quota_cores']:g} ({group['throttled']:.0%})"
        for name, group in cgroups.items()
    )


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[Setup]]:
    parser = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="timed window (default 10)")
    parser.add_argument("--callers", type=int, default=64, help="closed-loop callers (default 64)")
    parser.add_argument("--quick", action="store_true", help="3 s windows (a smoke run)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the deployments part this many times, alternated (default 1)",
    )
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"what to run, comma-separated, of {', '.join(PARTS)} (default: both)",
    )
    parser.add_argument(
        "--driver-cores",
        type=float,
        default=DRIVER_CORES,
        help=f"the quota part's driver quota, in cores (default {DRIVER_CORES:g})",
    )
    parser.add_argument(
        "--worker-cores",
        type=float,
        default=WORKER_CORES,
        help=f"the quota part's quota for each worker, in cores (default {WORKER_CORES:g})",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "scale_out.json")
    args = parser.parse_args(argv)
    if args.callers < 1 or args.seconds <= 0 or args.rounds < 1:
        parser.error("--callers and --rounds must be at least 1 and --seconds above 0")
    parts = [part for part in args.parts.split(",") if part]
    if not parts or set(parts) - set(PARTS):
        parser.error(f"--parts takes {' and '.join(PARTS)}, comma-separated; got {args.parts!r}")
    least = quota.MIN_QUOTA_US / quota.PERIOD_US
    for option in ("driver_cores", "worker_cores"):
        cores = getattr(args, option)
        if not least <= cores <= CPUS:
            parser.error(
                f"--{option.replace('_', '-')} must be between {least:g} and {CPUS} "
                f"(this machine's cores), got {cores:g}"
            )
    setups = DEPLOYMENTS * args.rounds if "deployments" in parts else []
    if "quota" in parts:
        try:
            quota.require_writable()
        except quota.CgroupError as error:
            parser.error(f"--parts quota: {error}")
        setups = setups + quota_runs(Quotas(args.driver_cores, args.worker_cores))
    return args, setups


def main(argv: list[str] | None = None) -> int:
    args, setups = _parse(argv)
    seconds = 3.0 if args.quick else args.seconds
    began = time.monotonic()
    results = []
    for setup in setups:
        held = (
            f", driver {setup.quotas.driver_cores:g} core, each worker "
            f"{setup.quotas.worker_cores:g} core"
            if setup.quotas
            else ""
        )
        print(
            f"{setup.label}, {setup.slots} slot(s), {setup.servers} server(s){held} ...",
            file=sys.stderr,
            flush=True,
        )
        run = measure(setup, args.callers, seconds, warmup=min(5.0, seconds))
        if run["wrong"] or run["errors"]:
            print(f"  {run['wrong']} wrong answers, {run['errors']} errors", file=sys.stderr)
        if run["quotas"] and len(run["quotas"]["worker_pids"]) < setup.slots:
            print(f"  only {len(run['quotas']['worker_pids'])} worker(s) found", file=sys.stderr)
        results.append(run)
    elapsed = round(time.monotonic() - began, 1)
    report = {
        "environment": {
            "cpus": CPUS,
            "python": platform.python_version(),
            "master": MASTER,
            "callers": args.callers,
            "seconds": seconds,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load_average": os.getloadavg(),
            "elapsed_s": elapsed,
        },
        "runs": results,
        "embedded_vs_split": embedded_vs_split(results),
        "scaling": scaling(results),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(table(results))
    for line in summary(results):
        print(line)
    print(f"written to {args.out} ({elapsed:.0f} s)")
    return 1 if any(run["wrong"] or run["errors"] for run in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
