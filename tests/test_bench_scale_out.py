"""bench/scale_out.py's bookkeeping: CPU read per process from /proc, the table, its CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from bench import procs
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


def _run(
    slots: int,
    calls: int,
    cpu_before: dict[str, float],
    cpu_after: dict[str, float],
    quotas: dict[str, Any] | None = None,
    deployment: str = "split",
) -> dict[str, Any]:
    setup = scale_out.Setup(deployment, slots, 1)
    counts = {"calls": calls, "wrong": 0, "errors": 0}
    return scale_out.run_record(setup, counts, 10.0, cpu_before, cpu_after, quotas)


def _quotas(used: dict[str, float]) -> dict[str, Any]:
    return {
        "driver_cores": 0.25, "worker_cores": 0.3, "driver_pids": [11, 12],
        "worker_pids": [20 + n for n in range(len(used) - 1)],
        "cgroups": {
            name: {"quota_cores": 0.25 if name == "driver" else 0.3, "used_cores": cores,
                   "throttled": 0.5}
            for name, cores in used.items()
        },
    }  # fmt: skip


def test_a_run_s_record_has_cpu_per_call_by_role_its_total_and_the_physical_limit() -> None:
    run = _run(2, 4000, {"driver": 1.0, "workers": 3.0}, {"driver": 3.0, "workers": 7.0})
    assert run["calls_per_s"] == 400.0
    assert run["cpu_ms_per_call"] == {"driver": 0.5, "workers": 1.0}
    assert run["total_cpu_ms_per_call"] == 1.5
    assert run["physical_limit_calls_per_s"] == pytest.approx(scale_out.CPUS * 1000 / 1.5)
    assert run["quotas"] is None


def test_the_table_shows_each_run_s_quota_cpu_per_call_by_process_total_and_limit() -> None:
    runs = [
        _run(2, 8472, {"driver": 0.0, "workers": 0.0}, {"driver": 4.134, "workers": 6.608}),
        _run(1, 8700, {"server (driver)": 0.0}, {"server (driver)": 6.2205}, deployment="embedded"),
        _run(1, 4610, {"driver": 0.0, "workers": 0.0}, {"driver": 2.0284, "workers": 3.0288},
             _quotas({"driver": 0.2, "worker1": 0.3})),
    ]  # fmt: skip
    runs[0]["sequential_p50_ms"] = 1.234
    lines = scale_out.table(runs).splitlines()
    assert lines[0].split()[:7] == [
        "deployment",
        "slots",
        "servers",
        "quota",
        "p50",
        "ms",
        "calls/s",
    ]
    assert lines[0].split()[-2:] == ["total", "limit/s"]
    limit = round(scale_out.CPUS * 1000 / 1.268)
    assert lines[2].split() == [
        "split",
        "2",
        "1",
        "-",
        "1.23",
        "847",
        "0.488",
        "0.780",
        "1.268",
        str(limit),
    ]
    limit = round(scale_out.CPUS * 1000 / 0.715)
    assert lines[3].split() == ["embedded", "1", "1", "-", "-", "870", "0.715", "0.715", str(limit)]
    assert lines[4].split()[:8] == ["split", "1", "1", "0.25/0.3", "-", "461", "0.440", "0.657"]


def test_the_quota_part_reports_two_workers_over_one_and_each_quota_s_use() -> None:
    one = _run(1, 4610, {"driver": 0.0}, {"driver": 2.0}, _quotas({"driver": 0.24, "worker1": 0.3}))
    two = _run(2, 5100, {"driver": 0.0}, {"driver": 2.5},
               _quotas({"driver": 0.25, "worker1": 0.2, "worker2": 0.21}))  # fmt: skip
    unlimited = _run(2, 9000, {"driver": 0.0}, {"driver": 4.0})
    assert scale_out.scaling([unlimited, one]) is None
    verdict = scale_out.scaling([unlimited, one, two])
    assert verdict is not None
    assert verdict["ratio"] == pytest.approx(510 / 461)
    assert verdict["target"] == 1.8
    assert verdict["calls_per_s"] == {"1 worker": 461.0, "2 workers": 510.0}
    lines = scale_out.summary([unlimited, one, two])
    assert "2 workers / 1 worker = 1.11x calls/s (target: at least 1.8x)" in lines[0]
    assert lines[2].endswith("driver 0.25 of 0.25 (50%), worker1 0.20 of 0.3 (50%), "
                             "worker2 0.21 of 0.3 (50%)")  # fmt: skip
    assert lines[3].startswith(f"physical limit, {scale_out.CPUS} cores x 1 s")
    assert "1 worker(s) " + f"{scale_out.CPUS * 1000 / (2000 / 4610):.0f} calls/s" in lines[3]
    assert scale_out.summary([unlimited]) == []


def test_the_resident_tasks_are_the_busiest_task_processes() -> None:
    me = os.getpid()
    gone = 2**22 + 12345
    busy_since = {me: procs.cpu_seconds(me) - 5.0, gone: 0.0}
    assert scale_out.busiest([gone, me], busy_since, 1) == [me]
    assert scale_out.busiest([gone, me], busy_since, 3) == [me, gone]


@pytest.mark.parametrize("argument", ["--callers", "--rounds"])
def test_a_bad_argument_is_one_line_and_exit_2(argument: str) -> None:
    ran = subprocess.run(
        [sys.executable, "bench/scale_out.py", argument, "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 2
    assert ran.stdout == ""
    assert ran.stderr.strip().splitlines()[-1] == (
        "scale_out.py: error: --callers and --rounds must be at least 1 and --seconds above 0"
    )


def test_each_round_sets_the_embedded_deployment_against_the_split_one() -> None:
    """Rounds alternate the deployments: the embedded run of each round (its default path,
    not the driver path's) against that round's split run with one slot and one server."""
    cpu = ({"driver": 0.0}, {"driver": 1.0})
    rounds = []
    for embedded, driver_path, split in ((900, 400, 1000), (1100, 500, 1000)):
        rounds += [
            _run(1, embedded * 10, *cpu, deployment="embedded"),
            scale_out.run_record(
                scale_out.Setup("embedded", 1, 1, request_path="driver"),
                {"calls": driver_path * 10, "wrong": 0, "errors": 0}, 10.0, *cpu, None,
            ),
            _run(1, split * 10, *cpu),
            _run(2, 5000, *cpu),
        ]  # fmt: skip
    for run, p50 in zip(rounds, [1.2, 2.3, 2.0, 2.5, 1.1, 2.4, 2.1, 2.6], strict=True):
        run["sequential_p50_ms"] = p50
    assert [run["deployment"] for run in rounds[:3]] == ["embedded", "embedded-driver", "split"]
    pairs = scale_out.embedded_vs_split(rounds)
    assert [round(pair["ratio"], 2) for pair in pairs] == [0.9, 1.1]
    assert pairs[1]["p50_ms"] == [1.1, 2.1]
    assert scale_out.summary(rounds) == [
        "round 1: embedded / split calls/s = 0.90x (900 / 1000); one caller's p50 1.20 ms / "
        "2.00 ms",
        "round 2: embedded / split calls/s = 1.10x (1100 / 1000); one caller's p50 1.10 ms / "
        "2.10 ms",
    ]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (["--parts", "quota,fast"], "--parts takes deployments and quota, comma-separated; "
                                    "got 'quota,fast'"),
        (["--parts", ","], "--parts takes deployments and quota"),
        (["--worker-cores", "0.001"], "--worker-cores must be between 0.01 and"),
        (["--driver-cores", "99"], "(this machine's cores), got 99"),
    ],
)  # fmt: skip
def test_bad_parts_and_quotas_are_one_line_and_exit_2(
    arguments: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        scale_out.main(arguments)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("scale_out.py: error: ")
    assert error in last
