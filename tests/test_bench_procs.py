"""bench/procs.py: CPU of processes and threads, the process tree, a Spark JVM's Python, and a
benchmark side run in a process of its own."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench import procs

GONE = 2**22 + 12345  # above the default pid_max: no such process


def _spin(seconds: float) -> None:
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


def test_a_process_s_cpu_counts_its_threads_and_a_named_thread_shows_its_own() -> None:
    done = threading.Event()
    release = threading.Event()

    def busy() -> None:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text("b40-busy")
        _spin(0.05)
        done.set()
        release.wait()  # alive while its CPU is read

    before = procs.cpu_seconds(os.getpid())
    thread = threading.Thread(target=busy)
    thread.start()
    done.wait()
    threads = {t.name: t for t in procs.thread_cpu(os.getpid())}
    release.set()
    thread.join()
    assert 0.03 <= threads["b40-busy"].seconds <= 1.0
    assert procs.cpu_seconds(os.getpid()) - before >= 0.03
    assert procs.cpu_seconds(GONE) == 0.0
    assert procs.thread_cpu(GONE) == []


def test_descendants_come_nearest_first_and_a_process_gone_reads_empty() -> None:
    # a shell whose child is a sleep: two levels under this process
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(procs.descendants(shell.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        (sleep,) = procs.descendants(shell.pid)
        assert procs.cmdline(sleep) == ["sleep", "30"]
        mine = procs.descendants(os.getpid())
        assert mine.index(shell.pid) < mine.index(sleep)
        assert procs.jvm(shell.pid) is None
        assert procs.status_kib(sleep, "VmRSS") > 0
        assert procs.open_fds(sleep) >= 3
    finally:
        shell.kill()
        shell.wait()
    assert procs.cmdline(GONE) == []
    assert procs.status_kib(GONE, "VmRSS") == 0
    assert procs.open_fds(GONE) == 0


def test_a_spark_jvm_s_daemon_and_the_task_processes_it_forked(spark_session: Any) -> None:
    sc = spark_session.sparkContext
    ran_in = set(sc.parallelize(range(2), 2).map(lambda _: os.getpid()).collect())
    jvm = procs.jvm(os.getpid())
    assert jvm is not None and procs.is_java(jvm)
    python = procs.spark_python(jvm)
    assert python.daemons
    assert ran_in <= set(python.tasks)
    assert not set(python.daemons) & set(python.tasks)
    assert jvm not in python.daemons + python.tasks + python.others
    daemon_commands = [procs.cmdline(daemon) for daemon in python.daemons]
    assert all(procs.cmdline(task) in daemon_commands for task in python.tasks)  # forked


def test_a_child_result_is_the_json_it_printed_last_and_a_failure_names_it(
    tmp_path: Path,
) -> None:
    script = tmp_path / "side.py"
    script.write_text(
        "import json, sys\n"
        "if sys.argv[1] == 'fail':\n"
        "    sys.exit('the side broke')\n"
        "print('warming up')\n"
        "print(json.dumps({'rate': float(sys.argv[1])}))\n"
    )
    assert procs.child_result("the side", script, "2.5") == {"rate": 2.5}
    with pytest.raises(RuntimeError, match="the side failed: the side broke"):
        procs.child_result("the side", script, "fail")


def test_a_zombie_is_not_alive_and_neither_is_a_process_gone() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert procs.alive(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        while procs.alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not procs.alive(child.pid)  # ended, not yet reaped: a zombie
        assert procs.cmdline(child.pid) == []
    finally:
        child.kill()
        child.wait()
    assert not procs.alive(child.pid)
    assert not procs.alive(GONE)
