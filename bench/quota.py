"""CPU quotas for the processes a benchmark starts: a cgroup with a CPU bandwidth limit.

Contract. ``cpu_quota(cores, pids, label=...)`` is a context manager: it makes
a cgroup of its own in the cpu controller's hierarchy, limits it to ``cores``
CPUs (a float: 0.3 is 30 ms of CPU in every 100 ms period, shared by every
thread of every process in it), moves each of ``pids`` into it and yields it
(a ``CpuCgroup``: its directory, the quota read back from the kernel, the
processes in it, how often it was throttled). Moving a pid moves the whole
process, every thread, in both cgroup versions; what those processes fork
afterwards starts inside the cgroup too. On exit every process still in the
cgroup goes back to the cgroup it came from (a process that appeared inside
goes to the hierarchy's root), and the cgroup is removed. Processes that
exited meanwhile are skipped.

The hierarchy is chosen by what is mounted (``find_cpu_hierarchy``): cgroup v1
when a v1 hierarchy carries the cpu controller (``cpu.cfs_quota_us`` and
``cpu.cfs_period_us``), else the cgroup v2 unified hierarchy when its root
offers ``cpu`` (``cpu.max``; ``+cpu`` is written to the root's
``cgroup.subtree_control`` when not yet enabled there, and left enabled).
New cgroups go directly under the hierarchy's mount point. ``CgroupError``
says what failed and where: no hierarchy with the cpu controller, or one this
process may not write (CPU quotas need root, or a cgroup delegated to the
user).
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

PERIOD_US = 100_000
"""The bandwidth period: the quota is ``cores`` times this much CPU time in every period."""
MIN_QUOTA_US = 1_000
"""The kernel's smallest quota per period (1 ms)."""
MOUNTINFO = Path("/proc/self/mountinfo")
REMOVE_TIMEOUT = 2.0
"""Seconds to wait for an exiting process to leave the cgroup before removing it."""

_LABEL = re.compile(r"[A-Za-z0-9_.-]+")
_serial = itertools.count(1)


class CgroupError(Exception):
    """No CPU quota can be set here: what is missing or refused, and where."""


@dataclass(frozen=True)
class CpuHierarchy:
    """The cgroup hierarchy that carries the cpu controller, as this process sees it."""

    version: int
    """1 (a v1 hierarchy with ``cpu``) or 2 (the unified hierarchy)."""
    mount: Path
    """Where the hierarchy is mounted."""
    root: str = "/"
    """The hierarchy path shown at ``mount`` ("/" unless a subtree is mounted there)."""

    def directory(self, cgroup: str) -> Path:
        """The directory of ``cgroup`` (a path as ``/proc/PID/cgroup`` names it)."""
        try:
            return self.mount / PurePosixPath(cgroup).relative_to(self.root)
        except ValueError:  # outside the mounted subtree: the nearest place we can see
            return self.mount

    def cgroup_of(self, pid: int) -> str | None:
        """The cgroup ``pid`` is in within this hierarchy, or None once it is gone."""
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            number, controllers, path = line.split(":", 2)
            if (self.version == 2 and number == "0") or (
                self.version == 1 and "cpu" in controllers.split(",")
            ):
                return path
        return None


def find_cpu_hierarchy(mountinfo: str | None = None) -> CpuHierarchy:
    """The hierarchy to set CPU quotas in, from ``mountinfo`` (this process's, by default):
    a v1 hierarchy with the cpu controller first, else a v2 one whose root offers ``cpu``."""
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    unified: list[CpuHierarchy] = []
    for line in text.splitlines():
        mount_fields, _, fs_fields = line.partition(" - ")
        before, after = mount_fields.split(), fs_fields.split()
        if len(before) < 5 or len(after) < 3:
            continue
        root, mount = before[3], Path(before[4])
        fstype, options = after[0], after[2].split(",")
        if fstype == "cgroup" and "cpu" in options:
            return CpuHierarchy(1, mount, root)
        if fstype == "cgroup2":
            unified.append(CpuHierarchy(2, mount, root))
    for hierarchy in unified:
        try:
            offered = (hierarchy.mount / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "cpu" in offered:
            return hierarchy
    raise CgroupError(
        "no cgroup hierarchy with the cpu controller is mounted (looked for cgroup v1 'cpu' "
        "and cgroup v2 'cpu' in cgroup.controllers)"
    )


def require_writable(hierarchy: CpuHierarchy | None = None) -> CpuHierarchy:
    """The cpu hierarchy, once it is known that this process may make cgroups in it."""
    hierarchy = find_cpu_hierarchy() if hierarchy is None else hierarchy
    if not os.access(hierarchy.mount, os.W_OK):
        raise CgroupError(_not_writable(hierarchy.mount, "permission denied"))
    return hierarchy


def _not_writable(where: Path, why: str) -> str:
    return (
        f"cannot make a cgroup in {where}: {why} (CPU quotas need root, or a cgroup "
        "delegated to this user)"
    )


def _write(path: Path, value: str) -> None:
    """One value, in one write: cgroup files take a single value per write."""
    try:
        with path.open("w") as file:
            file.write(value)
    except PermissionError as error:
        why = error.strerror or "permission denied"
        raise CgroupError(_not_writable(path.parent, why)) from error
    except OSError as error:
        if error.errno == errno.ESRCH:
            raise ProcessLookupError(value) from error
        raise CgroupError(f"writing {value!r} to {path} failed: {error.strerror}") from error


@dataclass(frozen=True)
class Throttling:
    """A cgroup's bandwidth periods so far, and those in which it was throttled."""

    periods: int
    throttled: int

    def since(self, before: Throttling) -> float:
        """The share of the periods since ``before`` in which the cgroup was throttled."""
        periods = self.periods - before.periods
        return (self.throttled - before.throttled) / periods if periods else 0.0


@dataclass(frozen=True)
class CpuCgroup:
    """A cgroup with a CPU quota, made by ``cpu_quota``."""

    hierarchy: CpuHierarchy
    path: Path

    def quota_cores(self) -> float:
        """The quota the kernel holds for this cgroup, in cores (``inf`` when unlimited)."""
        if self.hierarchy.version == 1:
            quota = int((self.path / "cpu.cfs_quota_us").read_text())
            period = int((self.path / "cpu.cfs_period_us").read_text())
        else:
            limit, period_text = (self.path / "cpu.max").read_text().split()
            quota, period = (-1 if limit == "max" else int(limit)), int(period_text)
        return float("inf") if quota < 0 else quota / period

    def throttling(self) -> Throttling:
        """How many bandwidth periods this cgroup has run in, and in how many of them it
        used up its quota and had to wait (``cpu.stat``, both versions)."""
        stat = dict(
            line.split()[:2] for line in (self.path / "cpu.stat").read_text().splitlines() if line
        )
        return Throttling(int(stat.get("nr_periods", 0)), int(stat.get("nr_throttled", 0)))

    def pids(self) -> list[int]:
        """The processes in this cgroup now."""
        return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]

    def add(self, pid: int) -> None:
        """Move process ``pid``, every thread of it, into this cgroup."""
        _write(self.path / "cgroup.procs", str(pid))


def _limit(cgroup: CpuCgroup, cores: float) -> None:
    quota = round(cores * PERIOD_US)
    if cgroup.hierarchy.version == 1:
        _write(cgroup.path / "cpu.cfs_period_us", str(PERIOD_US))
        _write(cgroup.path / "cpu.cfs_quota_us", str(quota))
    else:
        _write(cgroup.path / "cpu.max", f"{quota} {PERIOD_US}")


def _enable_cpu_below(directory: Path) -> None:
    """cgroup v2: a cgroup's ``cpu.max`` exists once its parent enables ``cpu`` for its
    children."""
    control = directory / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        _write(control, "+cpu")


def _make(hierarchy: CpuHierarchy, label: str) -> CpuCgroup:
    path = hierarchy.mount / f"drpc-bench-{os.getpid()}-{next(_serial)}-{label}"
    if hierarchy.version == 2:
        _enable_cpu_below(hierarchy.mount)
    try:
        path.mkdir()
    except PermissionError as error:
        why = error.strerror or "permission denied"
        raise CgroupError(_not_writable(hierarchy.mount, why)) from error
    except OSError as error:
        raise CgroupError(f"cannot make the cgroup {path}: {error.strerror}") from error
    return CpuCgroup(hierarchy, path)


def _give_back(cgroup: CpuCgroup, origins: dict[int, str]) -> None:
    """Every process in ``cgroup`` back where it came from, then the cgroup removed."""
    deadline = time.monotonic() + REMOVE_TIMEOUT
    while True:
        for pid in cgroup.pids():
            home = cgroup.hierarchy.directory(origins.get(pid, cgroup.hierarchy.root))
            if not home.is_dir():
                home = cgroup.hierarchy.mount
            with suppress(ProcessLookupError):  # exited meanwhile
                _write(home / "cgroup.procs", str(pid))
        try:
            cgroup.path.rmdir()
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                raise CgroupError(
                    f"cannot remove the cgroup {cgroup.path}: {error.strerror} "
                    f"(processes still in it: {cgroup.pids()})"
                ) from error
        time.sleep(0.05)


@contextmanager
def cpu_quota(
    cores: float,
    pids: Iterable[int],
    *,
    label: str = "quota",
    hierarchy: CpuHierarchy | None = None,
) -> Iterator[CpuCgroup]:
    """A cgroup limited to ``cores`` CPUs holding ``pids`` for the ``with`` block; ``label``
    (letters, digits, ``_.-``) ends its name so a listing shows what it is for."""
    if not cores * PERIOD_US >= MIN_QUOTA_US:
        raise ValueError(
            f"a CPU quota must be at least {MIN_QUOTA_US / PERIOD_US} core, got {cores}"
        )
    if not _LABEL.fullmatch(label):
        raise ValueError(f"a cgroup label is letters, digits and '_.-', got {label!r}")
    hierarchy = find_cpu_hierarchy() if hierarchy is None else hierarchy
    cgroup = _make(hierarchy, label)
    origins: dict[int, str] = {}
    try:
        _limit(cgroup, cores)
        for pid in pids:
            origin = hierarchy.cgroup_of(pid)
            if origin is None:
                raise ProcessLookupError(f"no process {pid} to put under a CPU quota")
            origins[pid] = origin
            cgroup.add(pid)
        yield cgroup
    finally:
        _give_back(cgroup, origins)
