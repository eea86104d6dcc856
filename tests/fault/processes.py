"""Processes the fault tests start and kill: a Spark standalone cluster from the pip
wheel's ``spark-class``, and helpers to find and SIGKILL only our own descendants."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

HOST = "127.0.0.1"


def spark_home() -> str:
    return os.path.dirname(pyspark.__file__)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class Cluster:
    master_url: str
    master: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def executor_pids(self) -> list[int]:
        """Executor JVMs launched by our workers (CoarseGrainedExecutorBackend)."""
        return [
            pid
            for worker in self.workers
            for pid in children(worker.pid)
            if "CoarseGrainedExecutorBackend" in cmdline(pid)
        ]


def _wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listened on {HOST}:{port} within {timeout} s")


@contextmanager
def standalone_cluster(workdir: Path, workers: int = 2, memory: str = "1g") -> Iterator[Cluster]:
    """A Spark master and ``workers`` workers (one core each) on 127.0.0.1."""
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP=HOST, SPARK_NO_DAEMONIZE="1")
    port = free_port()
    started: list[subprocess.Popen[bytes]] = []

    def launch(*args: str, name: str) -> subprocess.Popen[bytes]:
        log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(
            [spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir
        )
        log.close()
        started.append(process)
        return process

    try:
        master = launch(
            "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(port),
            "--webui-port", str(free_port()), name="master",
        )  # fmt: skip
        _wait_for_port(port, 60)
        cluster = Cluster(f"spark://{HOST}:{port}", master)
        for index in range(workers):
            worker = launch(
                "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", HOST,
                "--cores", "1", "--memory", memory, "--webui-port", str(free_port()),
                "--work-dir", str(workdir / f"work-{index}"), name=f"worker-{index}",
            )  # fmt: skip
            cluster.workers.append(worker)
        yield cluster
    finally:
        for process in reversed(started):
            for pid in children(process.pid):
                kill(pid)
            process.terminate()
        for process in started:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def kill(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
