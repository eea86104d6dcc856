"""bench/scale_out.py's bookkeeping: CPU read per process from /proc, the table, its CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.loading import ROOT, load_script

scale_out = load_script("drpc_bench_scale_out", "bench/scale_out.py")


def test_a_role_adds_up_the_cpu_of_its_processes() -> None:
    roles = scale_out.Roles()
    roles.add("me", os.getpid())
    roles.add("me", 2**22 + 12345)  # no such process: counts 0
    before = roles.sample()["me"]
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    spent = roles.sample()["me"] - before
    assert 0.03 <= spent <= 1.0


def test_the_table_shows_each_run_s_cpu_per_call_by_process() -> None:
    runs = [
        {"deployment": "split", "slots": 2, "servers": 1, "calls_per_s": 847.2,
         "cpu_ms_per_call": {"driver": 0.488, "workers": 0.78}},
        {"deployment": "embedded", "slots": 1, "servers": 1, "calls_per_s": 870.0,
         "cpu_ms_per_call": {"server (driver)": 0.715}},
    ]  # fmt: skip
    lines = scale_out.table(runs).splitlines()
    assert lines[0].split()[:4] == ["deployment", "slots", "servers", "calls/s"]
    assert lines[2].split() == ["split", "2", "1", "847", "0.488", "0.780"]
    assert lines[3].split() == ["embedded", "1", "1", "870", "0.715"]


def test_a_bad_argument_is_one_line_and_exit_2() -> None:
    ran = subprocess.run(
        [sys.executable, "bench/scale_out.py", "--callers", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 2
    assert (
        ran.stderr.strip()
        .splitlines()[-1]
        .endswith("--callers must be at least 1 and --seconds above 0")
    )
