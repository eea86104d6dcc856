"""bench/quota.py on the machine's real cgroups: a quota made, held, enforced and removed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import procs, quota


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def test_a_process_moved_under_a_quota_and_back_and_the_cgroup_removed(
    sleeper: subprocess.Popen[bytes],
) -> None:
    hierarchy = quota.require_writable()
    home = hierarchy.cgroup_of(sleeper.pid)
    with quota.cpu_quota(0.3, [sleeper.pid], label="test") as cgroup:
        assert cgroup.path.is_dir() and cgroup.path.name.endswith("-test")
        assert cgroup.pids() == [sleeper.pid]
        inside = hierarchy.cgroup_of(sleeper.pid)
        assert inside is not None and hierarchy.directory(inside) == cgroup.path
        assert cgroup.quota_cores() == pytest.approx(0.3)
        if hierarchy.version == 1:
            assert (cgroup.path / "cpu.cfs_quota_us").read_text().strip() == "30000"
            assert (cgroup.path / "cpu.cfs_period_us").read_text().strip() == "100000"
        else:
            assert (cgroup.path / "cpu.max").read_text().split() == ["30000", "100000"]
    assert not cgroup.path.exists()
    assert hierarchy.cgroup_of(sleeper.pid) == home


def test_the_quota_holds_a_busy_process_to_its_share() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with quota.cpu_quota(0.1, [spinner.pid], label="spin") as cgroup:
            start = cgroup.throttling()
            before, began = procs.cpu_seconds(spinner.pid), time.monotonic()
            time.sleep(0.6)
            spent = procs.cpu_seconds(spinner.pid) - before
            elapsed = time.monotonic() - began
            throttling = cgroup.throttling()
    finally:
        spinner.kill()
        spinner.wait()
    # 0.1 core over the window, plus one period's quota and a clock tick of slack
    assert spent <= 0.1 * elapsed + 0.01 + 0.02
    assert throttling.periods - start.periods >= 3
    assert throttling.throttled > start.throttled
    assert 0 < throttling.since(start) <= 1


def test_a_process_that_exits_inside_is_skipped_and_a_bad_pid_is_refused(
    sleeper: subprocess.Popen[bytes],
) -> None:
    with quota.cpu_quota(0.2, [sleeper.pid], label="exits") as cgroup:
        sleeper.kill()
        sleeper.wait()
    assert not cgroup.path.exists()
    with pytest.raises(ProcessLookupError), quota.cpu_quota(0.2, [2**22 + 12345]):
        pass
    mount = quota.find_cpu_hierarchy().mount
    assert not [p for p in mount.iterdir() if p.name.startswith(f"drpc-bench-{os.getpid()}-")]
    with pytest.raises(ValueError, match=r"at least 0\.01 core"), quota.cpu_quota(0.001, []):
        pass
    with pytest.raises(ValueError, match="label"), quota.cpu_quota(0.2, [], label="a/b"):
        pass


def test_the_hierarchy_is_chosen_by_what_is_mounted(tmp_path: Path) -> None:
    v1 = (
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
    assert quota.find_cpu_hierarchy(v1) == quota.CpuHierarchy(1, Path("/sys/fs/cgroup/cpu"))
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    v2 = f"29 23 0:26 / {tmp_path} rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
    assert quota.find_cpu_hierarchy(v2) == quota.CpuHierarchy(2, tmp_path)
    (tmp_path / "cgroup.controllers").write_text("io memory pids\n")
    with pytest.raises(quota.CgroupError, match="no cgroup hierarchy with the cpu controller"):
        quota.find_cpu_hierarchy(v2)
    subtree = quota.CpuHierarchy(2, Path("/sys/fs/cgroup"), "/machine/box")
    assert subtree.directory("/machine/box/a") == Path("/sys/fs/cgroup/a")
    assert subtree.directory("/machine/box") == Path("/sys/fs/cgroup")
    assert subtree.directory("/elsewhere") == Path("/sys/fs/cgroup")


def test_without_root_the_quota_is_refused_naming_why() -> None:
    readable, writable = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                with quota.cpu_quota(0.3, [], label="refused"):
                    message = "a cgroup was made"
            except quota.CgroupError as error:
                message = str(error)
            os.write(writable, message.encode())
        finally:
            os._exit(0)
    os.close(writable)
    with os.fdopen(readable) as pipe:
        message = pipe.read()
    os.waitpid(child, 0)
    assert "cannot make a cgroup in" in message
    assert "CPU quotas need root" in message
