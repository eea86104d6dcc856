"""The chaos run's deployment: Redis, two servers and a runner, each a process of its own.

Contract.

- ``Service(name, argv, env, log)``: one process, started in a session of its own so
  that ``kill()`` (SIGCONT, then SIGKILL to the whole group, then wait) takes its
  children (a runner's JVM); it returns once every process under it has ended, those
  outside the group too (a runner's Spark Python workers, which follow their JVM);
  ``signal(signum)`` reaches the group,
  ``stop()`` sends SIGTERM to the main process only (it stops its children in order),
  then kills what is left after 30 s.
- ``Deployment(workdir, master, host=, runner_prefix=, slots=, standbys=)``: durable Redis (AOF,
  ``appendfsync always``) and two ``drpc-server`` processes listening on ``host``, and a
  ``drpc-runner`` (``--executor spark`` on ``master``, ``--slots``) hosting the Trident tally of
  ``bench.chaos_workload`` and serving its query to both servers; the runner starts
  with ``runner_prefix`` (``ip netns exec NS`` on a second host). ``start(name)``
  starts one service and waits until it is ready (Redis answers ``PING``, a server's
  port accepts, the runner answers a call) and keeps its figures then
  (``ready_figures``); ``stop()`` stops them all. With ``standbys`` N more runners,
  ``standby``, ``standby2``, ..., run beside ``runner``, all with ``drpc-runner
  --standby``: the one that writes the state directory serves, the others wait warm to
  take over (``drpc.runner.standby``); ``active_runner()`` names the one that writes,
  and ``standby_warm()`` says whether another one waits warm.
- ``Link``: a second host for the runner, a network namespace joined to this one by a
  veth pair, whose link ``cut()`` takes down and ``restore()`` brings back (root only).
- ``answers(host, servers, timeout)``: whether a call through the servers is answered;
  ``service_figures(service)``: its pid, descriptors, memory and starts;
  ``process_figures(deployment)``: every service's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drpc.client import DRPCClient

from bench import procs
from bench.chaos_workload import ALL_NAMES, FUNCTION
from drpc.state.writer import WRITER_LOCK_FILE

ROOT = Path(__file__).resolve().parents[1]
CLIENT_TIMEOUT = 10.0
"""Seconds a client waits for a call before DRPCTimeoutError."""
SERVER_TIMEOUT = 8.0
"""The servers' --timeout: a request nobody answers fails with SERVER_TIMEOUT first."""
REPAIR_TIMEOUT = 120.0
"""Seconds a restarted service has to be ready again."""
ORPHAN_TIMEOUT = 30.0
"""Seconds a killed service's processes outside its group (Spark workers) have to end."""
WAITING = b"taking over when it stops"
"""What a standby runner logs once it is warm and waits (``drpc.runner.standby``)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready within {timeout:g} s")


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class Service:
    """One process of the deployment, in a session of its own (a kill takes its children)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log_offset = 0  # where its log stood when it last started

    def start(self) -> None:
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def kill(self) -> float:
        """SIGKILL its session, and wait until every process it started has ended too;
        returns the seconds those outside the session outlived it.

        A runner's Spark Python workers leave its process group (PySpark's daemon makes
        one of its own) and end when they see the JVM gone; until then a resident task
        may still answer a call, and a restart's readiness must not be judged on that."""
        assert self.process is not None
        started = procs.descendants(self.process.pid)
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.process.wait()
        dead = time.monotonic()
        wait_for(
            lambda: not any(procs.alive(pid) for pid in started),
            ORPHAN_TIMEOUT,
            f"the end of {self.name}'s child processes",
        )
        return time.monotonic() - dead

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        # The main process only: it stops its children in order (a runner's JVM told to
        # stop at the same time would shut its SparkContext under the stopping runner).
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()


class Link:
    """A second host for the runner: a network namespace joined to this one by a veth pair
    (``198.18.77.0/30``, RFC 2544's benchmarking range: never routed). ``cut()`` takes this
    side of the pair down, ``restore()`` brings it back; ``close()`` kills what still runs
    in the namespace and deletes it (the pair goes with it). Needs root."""

    HERE = "198.18.77.1"
    THERE = "198.18.77.2"

    def __init__(self) -> None:
        tag = os.getpid()
        self.namespace = f"drpc-chaos-{tag}"
        self.device, self.peer = f"dch{tag}h", f"dch{tag}r"

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]

    def open(self) -> Link:
        try:
            ip("netns", "add", self.namespace)
            ip("link", "add", self.device, "type", "veth", "peer", "name", self.peer)
            ip("link", "set", self.peer, "netns", self.namespace)
            ip("addr", "add", f"{self.HERE}/30", "dev", self.device)
            ip("link", "set", self.device, "up")
            ip("-n", self.namespace, "addr", "add", f"{self.THERE}/30", "dev", self.peer)
            ip("-n", self.namespace, "link", "set", self.peer, "up")
            ip("-n", self.namespace, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def cut(self) -> None:
        ip("link", "set", self.device, "down")

    def restore(self) -> None:
        ip("link", "set", self.device, "up")

    def close(self) -> None:
        listed = ip("netns", "pids", self.namespace, check=False).stdout.split()
        for pid in listed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        ip("netns", "del", self.namespace, check=False)
        ip("link", "del", self.device, check=False)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@dataclass
class Deployment:
    """Redis and the servers listen on ``host``; the runner starts with ``runner_prefix``
    (``ip netns exec NS`` on a second host)."""

    workdir: Path
    master: str
    host: str = "127.0.0.1"
    slots: int | None = None
    runner_prefix: list[str] = field(default_factory=list)
    standbys: int = 0
    redis_port: int = field(default_factory=free_port)
    servers: list[dict[str, int]] = field(default_factory=list)
    services: dict[str, Service] = field(default_factory=dict)
    ready_figures: dict[str, dict[str, int]] = field(default_factory=dict)
    """Each service's ``service_figures`` when it was last found ready after a start."""

    def __post_init__(self) -> None:
        self.servers = [
            {"port": free_port(), "invocations": free_port(), "http": free_port()} for _ in range(2)
        ]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "CHAOS_REDIS_URL": self.redis_url,
            "DRPC_STATE_DIR": str(self.workdir / "state"),
            "CHAOS_LOCAL_DIR": str(self.workdir / "local"),
        }
        (self.workdir / "redis").mkdir(parents=True, exist_ok=True)
        redis = shutil.which("redis-server") or "redis-server"
        self.services["redis"] = Service(
            "redis",
            [
                redis,
                "--port",
                str(self.redis_port),
                "--bind",
                self.host,
                "--protected-mode",  # it listens on a test address only; no password
                "no",
                "--dir",
                str(self.workdir / "redis"),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ],
            env,
            self.workdir / "redis.log",
        )
        for index, ports in enumerate(self.servers):
            self.services[f"server{index}"] = Service(
                f"server{index}",
                [
                    sys.executable,
                    "-m",
                    "drpc.server",
                    "--host",
                    self.host,
                    "--port",
                    str(ports["port"]),
                    "--invocations-port",
                    str(ports["invocations"]),
                    "--http-port",
                    str(ports["http"]),
                    "--executor",
                    "local",
                    "--timeout",
                    str(SERVER_TIMEOUT),
                    "--runner-liveness",
                    "5",
                    "--startup-grace",  # a restarted server waits for the runner
                    "3",
                ],
                env,
                self.workdir / f"server{index}.log",
            )
        invocations = ",".join(f"{self.host}:{ports['invocations']}" for ports in self.servers)
        runner = [
            *self.runner_prefix,
            sys.executable,
            "-m",
            "drpc.runner",
            "--servers",
            invocations,
            "--topology",
            "bench.chaos_workload:query",
            "--transactional",
            "bench.chaos_workload:counting",
            "--state-dir",
            str(self.workdir / "state"),
            "--executor",
            "spark",
            "--master",
            self.master,
            *([] if self.slots is None else ["--slots", str(self.slots)]),
            "--reconnect-interval",
            "0.2",
            "--checkpoint-dir",
            (self.workdir / "store").as_uri(),
            *(["--standby", "--log-level", "INFO"] if self.standbys else []),
        ]
        for name in self.runners():
            self.services[name] = Service(name, runner, env, self.workdir / f"{name}.log")

    def runners(self) -> list[str]:
        standbys = [f"standby{index + 1 if index else ''}" for index in range(self.standbys)]
        return ["runner", *standbys]

    def active_runner(self) -> str | None:
        """The runner that writes the state directory (the writer lock names its pid)."""
        if not self.standbys:
            return "runner"
        try:
            pid = json.loads((self.workdir / "state" / WRITER_LOCK_FILE).read_text())["pid"]
        except (OSError, ValueError, KeyError):
            return None
        for name in self.runners():
            process = self.services[name].process
            if process is not None and process.poll() is None and process.pid == pid:
                return name
        return None

    def warm(self, name: str) -> bool:
        """Whether runner ``name`` runs and waits warm to take over (its log says so since
        its last start)."""
        service = self.services[name]
        if service.process is None or service.process.poll() is not None:
            return False
        return WAITING in service.log.read_bytes()[service.log_offset :]

    def standby_warm(self) -> bool:
        """Whether a runner other than the active one waits warm to take over."""
        active = self.active_runner()
        return any(self.warm(name) for name in self.runners() if name != active)

    def start_standbys(self, timeout: float = REPAIR_TIMEOUT) -> None:
        """Start the standby runners and wait until each is warm and waiting."""
        standbys = self.runners()[1:]
        for name in standbys:
            self.services[name].start()
        wait_for(lambda: all(map(self.warm, standbys)), timeout, "the standby runners")

    @property
    def redis_url(self) -> str:
        return f"redis://{self.host}:{self.redis_port}"

    def redis(self) -> Any:
        import redis

        return redis.Redis(
            host=self.host, port=self.redis_port, socket_timeout=2, socket_connect_timeout=2
        )

    def ready(self, name: str) -> bool:
        if name == "redis":
            return bool(self.redis().ping())
        if name.startswith("server"):
            return port_open(self.host, self.servers[int(name[-1])]["port"])
        return answers(self.host, self.servers, timeout=CLIENT_TIMEOUT)

    def start(self, name: str, timeout: float = REPAIR_TIMEOUT) -> None:
        self.services[name].start()
        wait_for(lambda: self.ready(name), timeout, name)
        self.ready_figures[name] = service_figures(self.services[name])

    def stop(self) -> None:
        for name in (*reversed(self.runners()), "server0", "server1", "redis"):
            self.services[name].stop()


def answers(host: str, servers: list[dict[str, int]], timeout: float) -> bool:
    """Whether a call through the first server that takes it is answered."""
    client = DRPCClient(servers=[f"{host}:{ports['port']}" for ports in servers], timeout=timeout)
    with client:
        client.execute(FUNCTION, ALL_NAMES[0])
    return True


def service_figures(service: Service) -> dict[str, int]:
    """A service's process now: pid, open descriptors, resident memory, starts."""
    return {
        "pid": service.pid,
        "fds": procs.open_fds(service.pid),
        "rss_kib": procs.status_kib(service.pid, "VmRSS"),
        "starts": service.starts,
    }


def process_figures(deployment: Deployment) -> dict[str, dict[str, int]]:
    """Each service's ``service_figures``."""
    return {name: service_figures(service) for name, service in deployment.services.items()}
