"""Hosts on one machine for multi-host tests: network namespaces, a Spark standalone cluster,
and what the executors run.

Contract:

- ``namespaces_unavailable()`` is None where this process can create network
  namespaces, else the reason (the one allowed skip).
- ``Host(namespace, address)`` is a host: ``command(argv)`` runs ``argv`` in its
  namespace (``ip netns exec``), ``popen``/``run`` start it there with an
  environment from ``host_env`` (nothing of this process's Spark environment
  leaks in: ``SPARK_LOCAL_IP``, ``SPARK_CONF_DIR``, ``SPARK_HOME``,
  ``PYTHONPATH`` and ``PYSPARK_*`` are dropped; this virtualenv's ``bin``
  comes first on ``PATH``). ``LOOPBACK`` is this machine's loopback, no
  namespace.
- ``TwoHosts(tag, private=None)`` (tag: this process's id) first removes what a killed
  run left (``sweep_stale``), then creates two namespaces joined by one veth pair, the
  ``cluster`` host at 198.18.N.1/30 and the ``server`` host at 198.18.N.2/30
  (RFC 2544's benchmarking range, assigned only to that pair; neither
  namespace has any other interface than ``lo`` nor a default route, so no
  traffic can leave the pair). ``close()`` SIGKILLs every process still in
  either namespace and deletes both (the veth pair goes with them); it runs on
  ``__exit__`` whatever happened. With ``private`` (a directory) each host also gets a
  disk of its own: a mount namespace with an empty tmpfs over ``private``, pinned to a
  file under ``PINS`` that every process started on the host (``Host.command``) enters:
  neither host sees what the other writes there, nor does this process.
- ``SparkCluster(host, workdir, workers=2)`` is a Spark master and workers on
  ``host``, started with the commands docs/how-to/cluster.md documents (the pip wheel's
  ``spark-class ... Master``/``Worker``, in the foreground, one core and
  ``memory`` each, work directories and logs under ``workdir``, never inside
  the installed pyspark; fixed ports in a namespace of its own, ``pick_port``
  ones on a shared loopback). ``start()`` returns once every worker registered;
  ``master_url``, ``worker_pids()``, ``executor_pids()``, ``kill_worker(i)``
  (SIGKILL, returns the executor JVMs it took down), ``start_worker(i)`` and
  ``stop()``; also a context manager.
- ``pack_environment(dest, ...)`` writes a packed Python environment for
  ``spark.archives`` (a venv over this machine's base interpreter holding
  drpc and its executor-side dependencies, without pyspark, which Spark puts
  on the executors' path) and ``zip_packages(dest, ...)`` a zip for
  ``spark.submit.pyFiles``.
- ``package_listing()`` is the installed pyspark's top level (a test compares
  it before and after: nothing may be written inside it); ``spark_home_view``
  is a ``SPARK_HOME`` elsewhere for Spark modes that write under it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import venv
import zipfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pyspark

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = Path(sys.executable).parent / "spark-class"
TEST_RANGE = "198.18"  # RFC 2544: for benchmarking networks, never routed
PINS = Path("/run/drpc-test-hosts")  # where hosts' pinned mount and UTS namespaces live
LEAKY_ENVIRONMENT = ("SPARK_LOCAL_IP", "SPARK_CONF_DIR", "SPARK_HOME", "PYTHONPATH")


def namespaces_unavailable() -> str | None:
    """Why this process cannot create network namespaces, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip command is not installed"
    probe = f"drpc-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=True)
    return None


def host_env(**extra: str) -> dict[str, str]:
    """This process's environment without its Spark settings, with this virtualenv's
    ``bin`` first on ``PATH`` (as after ``activate``), plus ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in LEAKY_ENVIRONMENT and not key.startswith("PYSPARK_")
    }
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, **extra}


@dataclass(frozen=True)
class Host:
    namespace: str | None
    address: str
    pinned: Path | None = None  # a file holding its mount namespace

    def command(self, argv: Sequence[str], cwd: Path | str = ROOT) -> list[str]:
        """``argv`` run on this host, in ``cwd`` (entering a mount namespace moves a process
        to its root: ``nsenter --wd`` moves it back)."""
        prefix = [] if self.namespace is None else ["ip", "netns", "exec", self.namespace]
        if self.pinned is not None:  # a disk of its own (``TwoHosts(private=...)``)
            prefix = ["nsenter", f"--mount={self.pinned}", f"--wd={cwd}", *prefix]
        return [*prefix, *map(str, argv)]

    def popen(
        self,
        argv: Sequence[str],
        *,
        log: Path | None = None,
        env: Mapping[str, str] | None = None,
        **options: Any,
    ) -> subprocess.Popen[str]:
        """``argv`` started on this host; stdout and stderr to ``log`` when given."""
        if log is not None:
            with open(log, "a") as out:
                options.update(stdout=out, stderr=subprocess.STDOUT)
                return self.popen(argv, env=env, **options)
        cwd = options.pop("cwd", ROOT)
        return subprocess.Popen(
            self.command(argv, cwd),
            env=dict(env) if env is not None else host_env(),
            cwd=cwd,
            text=True,
            **options,
        )

    def run(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(argv),
            env=dict(env) if env is not None else host_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


LOOPBACK = Host(None, "127.0.0.1")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class TwoHosts:
    """Two network namespaces joined by a veth pair (see the module doc)."""

    def __init__(
        self, tag: str | None = None, subnet: int = 16, private: Path | None = None
    ) -> None:
        tag = tag or str(os.getpid())
        self.private = private
        pins = PINS / f"drpc-{tag}" if private is not None else None
        self._pins = pins
        self.cluster = Host(
            f"drpc-{tag}-cluster", f"{TEST_RANGE}.{subnet}.1", pins and pins / "cluster"
        )
        self.server = Host(
            f"drpc-{tag}-server", f"{TEST_RANGE}.{subnet}.2", pins and pins / "server"
        )
        self._veth = (f"dv{tag}c", f"dv{tag}s")
        self._created: list[str] = []
        self._pinned: list[Path] = []

    @property
    def hosts(self) -> tuple[Host, Host]:
        return self.cluster, self.server

    def open(self) -> TwoHosts:
        sweep_stale()
        try:
            for host in self.hosts:
                assert host.namespace is not None
                _ip("netns", "add", host.namespace)
                self._created.append(host.namespace)
            _ip("link", "add", self._veth[0], "type", "veth", "peer", "name", self._veth[1])
            for host, device in zip(self.hosts, self._veth, strict=True):
                assert host.namespace is not None
                _ip("link", "set", device, "netns", host.namespace)
                _ip("-n", host.namespace, "addr", "add", f"{host.address}/30", "dev", device)
                _ip("-n", host.namespace, "link", "set", device, "up")
                _ip("-n", host.namespace, "link", "set", "lo", "up")
            if self.private is not None:  # after the network namespaces: its copy has them
                self._pin_disks(self.private)
        except BaseException:
            self.close()
            raise
        return self

    def _pin_disks(self, private: Path) -> None:
        """Give each host a mount namespace of its own with an empty tmpfs over ``private``,
        pinned to a file under ``PINS`` that every process started on the host enters."""
        assert self._pins is not None
        self._pins.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", self._pins, self._pins], check=True)
        self._pinned.append(self._pins)
        subprocess.run(["mount", "--make-private", self._pins], check=True)
        for host in self.hosts:
            assert host.pinned is not None
            host.pinned.touch()
            subprocess.run(
                [
                    "unshare", f"--mount={host.pinned}", "--propagation", "private",
                    "mount", "-t", "tmpfs", "drpc-private", private,
                ],
                check=True,
            )  # fmt: skip
            self._pinned.append(host.pinned)

    def pids(self) -> list[int]:
        """Every process in either namespace."""
        found = []
        for namespace in self._created:
            listed = _ip("netns", "pids", namespace, check=False).stdout.split()
            found += [int(pid) for pid in listed]
        return found

    def close(self) -> None:
        deadline = time.monotonic() + 30
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                kill(pid)
            time.sleep(0.1)
        for namespace in reversed(self._created):
            _ip("netns", "del", namespace, check=False)
        _ip("link", "del", self._veth[0], check=False)  # if it never left this namespace
        self._created.clear()
        _unpin(self._pinned)
        self._pinned.clear()

    def __enter__(self) -> TwoHosts:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unpin(pinned: list[Path]) -> None:
    """Unmount pinned namespace files, then their directory's bind mount (each host's disk
    goes once nothing runs there), and remove the directory."""
    for path in reversed(pinned):
        subprocess.run(["umount", path], capture_output=True, check=False)
    for path in pinned:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def sweep_stale() -> None:
    """Delete the namespaces a killed test run left (``drpc-PID-...`` whose PID is gone),
    and SIGKILL what still runs in them: a run stopped by SIGKILL never tore down."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        ours = len(parts) == 3 and parts[0] == "drpc" and parts[1].isdigit()
        if ours and not alive(int(parts[1])):
            for pid in _ip("netns", "pids", name, check=False).stdout.split():
                kill(int(pid))
            _ip("netns", "del", name, check=False)
    for pins in PINS.glob("drpc-*") if PINS.is_dir() else ():
        tag = pins.name.split("-", 1)[1]
        if tag.isdigit() and not alive(int(tag)):
            _unpin([pins, *pins.iterdir()])


def kill(pid: int, signum: int = signal.SIGKILL) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signum)


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


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def free_port(host: str = LOOPBACK.address) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:g} s")
        time.sleep(interval)


@dataclass
class SparkCluster:
    """A Spark standalone master and workers on one host (see the module doc)."""

    host: Host
    workdir: Path
    workers: int = 2
    memory: str = "1g"
    port: int = 7077
    webui_port: int = 8080
    pick_port: Callable[[], int] | None = None  # e.g. free_port on a shared loopback
    processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    @property
    def master_url(self) -> str:
        return f"spark://{self.host.address}:{self.port}"

    def _env(self) -> dict[str, str]:
        return host_env(SPARK_LOCAL_IP=self.host.address)

    def _launch(self, name: str, *args: str) -> subprocess.Popen[str]:
        process = self.host.popen(
            [str(SPARK_CLASS), *args],
            log=self.workdir / f"{name}.log",
            env=self._env(),
            cwd=self.workdir,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def start(self, timeout: float = 90) -> SparkCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.pick_port is not None:
            self.port, self.webui_port = self.pick_port(), self.pick_port()
        try:
            self._launch(
                "master", "org.apache.spark.deploy.master.Master", "--host", self.host.address,
                "--port", str(self.port), "--webui-port", str(self.webui_port),
            )  # fmt: skip
            for index in range(self.workers):
                self.start_worker(index)
            wait_for(
                lambda: self.registered() >= self.workers or self._exited(),
                timeout,
                f"{self.workers} Spark workers did not register with {self.master_url}",
                interval=0.2,
            )
            if exited := self._exited():
                log = (self.workdir / f"{exited}.log").read_text()[-2000:]
                raise RuntimeError(f"the Spark {exited} exited:\n{log}")
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, index: int) -> subprocess.Popen[str]:
        return self._launch(
            f"worker-{index}", "org.apache.spark.deploy.worker.Worker", self.master_url,
            "--host", self.host.address, "--cores", "1", "--memory", self.memory,
            "--webui-port",
            str(self.pick_port() if self.pick_port else self.webui_port + 1 + index),
            "--work-dir", str(self.workdir / f"work-{index}"),
        )  # fmt: skip

    def _exited(self) -> str | None:
        return next((name for name, p in self.processes.items() if p.poll() is not None), None)

    def registered(self) -> int:
        """Workers the master registered so far (from its log)."""
        log = self.workdir / "master.log"
        return log.read_text().count("Registering worker") if log.exists() else 0

    def worker_pids(self) -> list[int]:
        return [
            process.pid
            for name, process in sorted(self.processes.items())
            if name.startswith("worker-") and process.poll() is None
        ]

    def executor_pids(self, worker: int | None = None) -> list[int]:
        """Executor JVMs (CoarseGrainedExecutorBackend) launched by the workers (or one)."""
        names = [f"worker-{worker}"] if worker is not None else sorted(self.processes)
        return [
            pid
            for name in names
            if name.startswith("worker-") and self.processes[name].poll() is None
            for pid in children(self.processes[name].pid)
            if "CoarseGrainedExecutorBackend" in cmdline(pid)
        ]

    def kill_worker(self, index: int) -> list[int]:
        """SIGKILL worker ``index``'s JVM; returns the executor JVMs it had launched."""
        executors = self.executor_pids(index)
        process = self.processes.pop(f"worker-{index}")
        kill(process.pid)
        process.wait(10)
        return executors

    def stop(self) -> None:
        for name in sorted(self.processes, reverse=True):  # workers before the master
            process = self.processes[name]
            for pid in children(process.pid):
                kill(pid)
            kill(process.pid)
        for process in self.processes.values():
            with suppress(subprocess.TimeoutExpired):
                process.wait(20)
        self.processes.clear()

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- what the executors run ----------------------------------------------------------------------

EXECUTOR_DEPENDENCIES = ("cloudpickle", "lmdb", "mypy_extensions", "thrift")
"""What drpc's tasks import on an executor besides pyspark (which Spark provides): thrift
for a runner's resident tasks, which reach the DRPC servers themselves."""


def _copy_package(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def pack_environment(
    dest: Path, dependencies: Sequence[str] = EXECUTOR_DEPENDENCIES, with_drpc: bool = True
) -> Path:
    """A packed environment (``.tar.gz``) for ``spark.archives``: a venv over this machine's
    base interpreter with ``dependencies`` (copied from this one) and, with ``with_drpc``,
    drpc laid out as ``pip install`` lays it out."""
    build = dest.with_suffix("").with_suffix("")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(build)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site = build / "lib" / version / "site-packages"
    for name in dependencies:
        installed = distribution(name)
        for file in installed.files or ():
            source = Path(str(installed.locate_file(file)))
            if source.is_file() and "__pycache__" not in file.parts:
                target = site / file
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    if with_drpc:
        _copy_package(ROOT / "drpc", site / "drpc")
        _copy_package(ROOT / "server", site / "drpc" / "server")
        _copy_package(ROOT / "client", site / "drpc" / "client")
    with tarfile.open(dest, "w:gz") as archive:
        archive.add(build, arcname=".")
    shutil.rmtree(build)
    return dest


def zip_packages(dest: Path, *packages: str) -> Path:
    """A zip of the repository's ``packages`` (e.g. "tests") for ``spark.submit.pyFiles``."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in packages:
            for path in sorted((ROOT / package).rglob("*.py")):
                archive.write(path, path.relative_to(ROOT).as_posix())
    return dest


def spark_home_view(dest: Path) -> Path:
    """A ``SPARK_HOME`` of symlinks to the installed pyspark's entries: Spark processes that
    write under ``SPARK_HOME`` (local-cluster's workers put ``work/`` there, and no setting
    moves it) write into ``dest`` instead of the installed package."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in SPARK_HOME.iterdir():
        (dest / entry.name).symlink_to(entry)
    return dest


def package_listing() -> list[str]:
    """The installed pyspark package's top-level entries: anything a Spark process writes
    into it (a worker's ``work/``, ``logs/``) shows here."""
    return sorted(entry.name for entry in SPARK_HOME.iterdir())
