"""Processes as ``/proc`` shows them: what the benchmarks read about the processes they start.

Contract. Every function reads ``/proc`` afresh (Linux only) and never raises
for a process that is gone or exits while it is read: CPU reads 0, lists leave
it out, values read 0.

- ``cpu_seconds(pid)``: user + system CPU of a whole process (every thread,
  live or exited); ``thread_cpu(pid)``: the same per live thread, with the
  thread's name (``comm``), so the sum over threads may be less than the
  process's figure once threads have come and gone.
- ``children()``: one scan of ``/proc``, parent pid to child pids;
  ``descendants(pid)``: every live process under ``pid``, nearest first.
- ``jvm(pid)``: the first Java process under ``pid`` (a PySpark driver's JVM);
  ``jvm_above(pid)``: the nearest one above it (a Python worker's executor JVM);
  ``parent(pid)``: its parent.
- ``spark_python(jvm_pid)``: the Python processes a Spark JVM runs, classified:
  ``daemons`` are the ``pyspark.daemon`` processes the JVM started, ``tasks``
  the processes they forked (each runs Spark tasks, one at a time, and stays
  for the next while worker reuse is on: a resident task keeps its process
  busy for as long as it runs), ``others`` anything else under the JVM that is
  not Java (a worker started without the daemon, a helper, a zombie).
- ``status_kib(pid, key)``: a ``/proc/PID/status`` figure in KiB (``VmRSS``,
  ``VmHWM``); ``open_fds(pid)``: how many descriptors the process holds.
- ``child_result(what, script, *args)``: run ``python script *args`` in a process of its
  own (a benchmark side that needs its own Spark session) and return the JSON object it
  printed last; ``RuntimeError`` naming ``what`` and the tail of its stderr if it failed.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def _stat_fields(path: Path) -> list[str] | None:
    """The fields of a ``stat`` file after the command name (which may hold spaces and
    parentheses, hence the split at the last ')'): state is [0], ppid [1], utime [11],
    stime [12]."""
    try:
        return path.read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _cpu(path: Path) -> float:
    fields = _stat_fields(path)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 once it is gone)."""
    return _cpu(PROC / str(pid) / "stat")


@dataclass(frozen=True)
class ThreadCpu:
    """One thread of a process: its id, its name and the CPU seconds it has used."""

    tid: int
    name: str
    seconds: float


def thread_cpu(pid: int) -> list[ThreadCpu]:
    """Every live thread of ``pid`` with its CPU seconds (empty once the process is gone)."""
    try:
        tids = [int(entry) for entry in os.listdir(PROC / str(pid) / "task")]
    except OSError:
        return []
    threads = []
    for tid in sorted(tids):
        task = PROC / str(pid) / "task" / str(tid)
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        threads.append(ThreadCpu(tid, name, _cpu(task / "stat")))
    return threads


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    fields = _stat_fields(PROC / str(pid) / "stat")
    return fields is not None and fields[0] not in ("Z", "X")


def children() -> dict[int, list[int]]:
    """Parent pid to the pids of its live children, from one scan of ``/proc``."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir(PROC):
        if entry.isdigit():
            fields = _stat_fields(PROC / entry / "stat")
            if fields is not None:
                tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def descendants(pid: int, tree: dict[int, list[int]] | None = None) -> list[int]:
    """Every process under ``pid``, children before grandchildren (``tree`` from
    ``children()``, read afresh when not given)."""
    tree = children() if tree is None else tree
    found: list[int] = []
    level = [pid]
    while level:
        level = [child for parent in level for child in sorted(tree.get(parent, []))]
        found += level
    return found


def cmdline(pid: int) -> list[str]:
    """The arguments ``pid`` was started with (empty for a zombie or a process gone)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def is_java(pid: int) -> bool:
    arguments = cmdline(pid)
    return bool(arguments) and Path(arguments[0]).name == "java"


def jvm(pid: int, tree: dict[int, list[int]] | None = None) -> int | None:
    """The first Java process under ``pid`` (a PySpark driver's JVM), or None."""
    return next((child for child in descendants(pid, tree) if is_java(child)), None)


def parent(pid: int) -> int | None:
    """The parent of ``pid`` (None once it is gone)."""
    fields = _stat_fields(PROC / str(pid) / "stat")
    return None if fields is None else int(fields[1])


def jvm_above(pid: int) -> int | None:
    """The nearest Java process ``pid`` runs under (a Spark Python worker's executor JVM),
    or None."""
    at = parent(pid)
    while at is not None and at > 1:
        if is_java(at):
            return at
        at = parent(at)
    return None


@dataclass
class SparkPython:
    """The Python processes under one Spark JVM, by what they do."""

    daemons: list[int] = field(default_factory=list)
    tasks: list[int] = field(default_factory=list)
    others: list[int] = field(default_factory=list)


def _is_daemon(pid: int) -> bool:
    arguments = cmdline(pid)
    return any(
        arg == "pyspark.daemon" and before == "-m" for before, arg in itertools.pairwise(arguments)
    )


def spark_python(jvm_pid: int, tree: dict[int, list[int]] | None = None) -> SparkPython:
    """The JVM's ``pyspark.daemon`` processes, the task processes they forked (a fork keeps
    the daemon's command line, so its parent tells it apart) and any other non-Java
    process under the JVM."""
    tree = children() if tree is None else tree
    found = SparkPython()
    for child in sorted(tree.get(jvm_pid, [])):
        if _is_daemon(child):
            found.daemons.append(child)
            found.tasks += descendants(child, tree)
        elif not is_java(child):
            found.others += [child, *descendants(child, tree)]
    return found


def status_kib(pid: int, key: str) -> int:
    """A ``/proc/PID/status`` figure in KiB (``VmRSS``, ``VmHWM``); 0 when absent."""
    try:
        text = (PROC / str(pid) / "status").read_text()
    except OSError:
        return 0
    match = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


def open_fds(pid: int) -> int:
    """How many file descriptors ``pid`` holds open (0 once it is gone)."""
    try:
        return len(os.listdir(PROC / str(pid) / "fd"))
    except OSError:
        return 0


def child_result(what: str, script: str | Path, *args: str | Path) -> dict[str, Any]:
    """The JSON object ``python script *args`` printed last (see the module doc)."""
    child = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        raise RuntimeError(f"{what} failed: {child.stderr[-3000:]}")
    return dict(json.loads(child.stdout.splitlines()[-1]))
