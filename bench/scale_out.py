"""Scale-out serving: where a DRPC call's CPU goes, process by process, and what bounds throughput.

Every deployment below serves storm-starter's reach on the resident executor
(``--executor spark``, ``local[2]``), with ``--callers`` closed-loop callers
(default 64) in a process of their own, each a ``DRPCClient`` (Thrift),
spread over the servers:

- **embedded**: one ``drpc-server`` hosting the topology, as ``make serve``;
- **split**: ``drpc-server`` processes take the calls and one ``drpc-runner``
  hosts the topology, fetching from every server's invocations port (Storm's
  usual deployment), with 1 and 2 resident slots, and with 1 and 2 servers.

For each, after a warm-up, one timed window of ``--seconds``: calls per
second, and the CPU each process spent per call, read from ``/proc`` (user +
system) over that window: the callers, each server's Python process, the
runner's driver (its Python process), the driver's JVM, and the Spark Python
workers under it (the resident tasks). In the embedded deployment the server
is the driver. Every answer is checked against storm-starter's reach.

The driver's CPU per call is what caps a deployment: every request enters, is
acked and is answered there. This is the measurement the scale-out work is
held to (its targets: at most 0.05 ms of driver CPU per call in the split
deployment, and throughput following the workers).

Usage: ``python bench/scale_out.py [--seconds 10] [--callers 64]
[--quick] [--out FILE]``. Prints a table and writes JSON (default
``bench/results/scale_out.json``). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from drpc.client import DRPCClient  # noqa: E402

from drpc.examples.reach import EXPECTED_REACH  # noqa: E402

HOST = "127.0.0.1"
MASTER = "local[2]"
TOPOLOGY = "drpc.examples.reach:topology"
START_TIMEOUT = 180.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            tree.setdefault(int(stat.rpartition(")")[2].split()[1]), []).append(int(entry))
    return tree


def _is_java(pid: int) -> bool:
    try:
        return b"java" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False


@dataclass
class Roles:
    """The processes of one deployment, by role: pids whose CPU a window adds up."""

    pids: dict[str, list[int]] = field(default_factory=dict)

    def add(self, role: str, pid: int) -> None:
        self.pids.setdefault(role, []).append(pid)

    def sample(self) -> dict[str, float]:
        return {role: sum(_cpu_seconds(pid) for pid in pids) for role, pids in self.pids.items()}


def _spark_roles(roles: Roles, driver_pid: int, driver_role: str) -> None:
    """``driver_pid`` as ``driver_role``, its JVM as "driver JVM", the JVM's Python
    processes (the daemon and the resident tasks' workers) as "workers"."""
    roles.add(driver_role, driver_pid)
    tree = _children()
    todo = list(tree.get(driver_pid, []))
    while todo:
        pid = todo.pop()
        if _is_java(pid):
            roles.add("driver JVM", pid)
            stack = list(tree.get(pid, []))
            while stack:
                worker = stack.pop()
                roles.add("workers", worker)
                stack.extend(tree.get(worker, []))
        else:
            todo.extend(tree.get(pid, []))


def _environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    env.setdefault("SPARK_LOCAL_IP", HOST)
    return env


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    invocations_port: int


def _start_server(hosting: bool, slots: int | None) -> Server:
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


@contextmanager
def _deployment(
    kind: str, slots: int, servers: int
) -> Iterator[tuple[list[Server], Roles, list[subprocess.Popen[bytes]]]]:
    started: list[Server] = []
    processes: list[subprocess.Popen[bytes]] = []
    try:
        if kind == "embedded":
            started.append(_start_server(hosting=True, slots=slots))
        else:
            started += [_start_server(hosting=False, slots=None) for _ in range(servers)]
            processes.append(_start_runner(started, slots))
        processes += [server.process for server in started]
        _wait_until_served(started, processes)
        roles = Roles()
        if kind == "embedded":
            _spark_roles(roles, started[0].process.pid, "server (driver)")
        else:
            for server in started:
                roles.add("servers", server.process.pid)
            _spark_roles(roles, processes[0].pid, "driver")
        yield started, roles, processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def measure(
    kind: str, slots: int, servers: int, callers: int, seconds: float, warmup: float
) -> dict[str, Any]:
    with _deployment(kind, slots, servers) as (started, roles, _):
        ports = [server.port for server in started]
        context = multiprocessing.get_context("spawn")
        with context.Pool(1) as pool:
            pool.apply(_caller_loop, (ports, callers, warmup))
            caller_pid = pool.apply(os.getpid)
            roles.add("callers", caller_pid)
            before, began = roles.sample(), time.monotonic()
            counts = pool.apply(_caller_loop, (ports, callers, seconds))
            after, elapsed = roles.sample(), time.monotonic() - began
    calls = counts["calls"]
    cpu_ms_per_call = {
        role: 1000 * (after[role] - before[role]) / calls if calls else float("nan")
        for role in after
    }
    return {
        "deployment": kind,
        "slots": slots,
        "servers": servers,
        "calls": calls,
        "wrong": counts["wrong"],
        "errors": counts["errors"],
        "calls_per_s": calls / elapsed,
        "cpu_ms_per_call": cpu_ms_per_call,
    }


RUNS = [
    ("embedded", 1, 1),
    ("split", 1, 1),
    ("split", 2, 1),
    ("split", 1, 2),
]
"""(deployment, resident slots, servers): the embedded server at drpc's default slot on
local[2], and the split deployment with one and two slots, and with two servers."""


def table(results: list[dict[str, Any]]) -> str:
    roles = sorted({role for run in results for role in run["cpu_ms_per_call"]})
    head = f"{'deployment':<10}{'slots':>6}{'servers':>8}{'calls/s':>9}  " + "".join(
        f"{role:>17}" for role in roles
    )
    lines = [head, " " * 35 + "CPU ms per call, by process".rjust(17 * len(roles))]
    for run in results:
        cpu = run["cpu_ms_per_call"]
        where = f"{run['deployment']:<10}{run['slots']:>6}{run['servers']:>8}"
        lines.append(
            f"{where}{run['calls_per_s']:>9.0f}  "
            + "".join(f"{cpu[role]:>17.3f}" if role in cpu else f"{'':>17}" for role in roles)
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="timed window (default 10)")
    parser.add_argument("--callers", type=int, default=64, help="closed-loop callers (default 64)")
    parser.add_argument("--quick", action="store_true", help="3 s windows (a smoke run)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "scale_out.json")
    args = parser.parse_args(argv)
    if args.callers < 1 or args.seconds <= 0:
        parser.error("--callers must be at least 1 and --seconds above 0")
    seconds = 3.0 if args.quick else args.seconds
    results = []
    for kind, slots, servers in RUNS:
        print(f"{kind}, {slots} slot(s), {servers} server(s) ...", file=sys.stderr, flush=True)
        run = measure(kind, slots, servers, args.callers, seconds, warmup=min(5.0, seconds))
        if run["wrong"] or run["errors"]:
            print(f"  {run['wrong']} wrong answers, {run['errors']} errors", file=sys.stderr)
        results.append(run)
    report = {
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "master": MASTER,
            "callers": args.callers,
            "seconds": seconds,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load_average": os.getloadavg(),
        },
        "runs": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(table(results))
    print(f"written to {args.out}")
    return 1 if any(run["wrong"] or run["errors"] for run in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
