"""The chaos run in the suite: ``bench/chaos.py`` for 70 s with a fixed seed, every kind of
fault at least once, and the checker finding nothing.

The run is a split deployment of its own (Redis, two ``drpc-server`` processes, a
``drpc-runner`` on ``local[2]`` running the Trident tally over partitioned state and
serving its query), 16 clients and the nemesis (``bench/chaos.py``'s docstring). Where
this process can create network namespaces (root), the runner runs on a second host and
the link between the hosts is cut too. It starts ahead (``tests/ahead.py``) and goes on
beside the other tests; this test reads its report.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import ahead
from tests.cluster.harness import namespaces_unavailable

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.spark]  # the runner's driver

SEED = 20261128
SECONDS = 70
TWO_HOSTS = namespaces_unavailable() is None
KINDS = ("worker", "runner", "server", "redis", "pause") + (("link",) if TWO_HOSTS else ())


def _chaos_run(workdir: Path) -> ahead.Command:
    return ahead.Command(
        [
            sys.executable,
            "bench/chaos.py",
            "--seconds",
            str(SECONDS),
            "--seed",
            str(SEED),
            "--interval",
            "1",
            "--pause",
            "11",
            "--rate",  # a lighter load than the bench's: the other tests run beside it
            "25",
            "--think",
            "0.2",
            "--workdir",
            str(workdir / "deployment"),
            "--out",
            str(workdir / "chaos.json"),
            *(["--two-hosts", "--cut", "4"] if TWO_HOSTS else []),
        ]
    )


CHAOS_RUN = ahead.register("chaos", _chaos_run, timeout=420)


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run = CHAOS_RUN.finish(tmp_path_factory)
    report_path = run.workdir / "chaos.json"
    assert report_path.exists(), run.stderr[-4000:]
    report = json.loads(report_path.read_text())
    report["stdout"] = run.stdout
    report["returncode"] = run.returncode
    return report


@pytest.mark.timeout(480)
@pytest.mark.ahead(CHAOS_RUN.name)
def test_no_anomaly_under_every_kind_of_fault(chaos: dict[str, Any]) -> None:
    assert chaos["anomalies"] == {}, "\n".join(chaos["anomaly_slices"])
    assert chaos["returncode"] == 0, chaos["stdout"][-4000:]
    assert all(chaos["faults"].get(kind, 0) >= 1 for kind in KINDS), chaos["faults"]
    last = chaos["stdout"].strip().splitlines()[-1]
    faults = sum(chaos["faults"].values())
    assert last == f"chaos: {faults} faults, {chaos['calls']} calls, 0 anomalies"


@pytest.mark.timeout(480)
@pytest.mark.ahead(CHAOS_RUN.name)
def test_every_refusal_is_typed_and_the_state_counts_every_append(chaos: dict[str, Any]) -> None:
    assert chaos["calls"] > 1000
    assert chaos["appends"] > 1000
    refused = {outcome for outcome in chaos["outcomes"] if outcome != "ok"}
    assert refused <= {
        "DRPCExecutionException:FAILED_REQUEST",  # not served while the runner is away
        "DRPCExecutionException:SERVER_TIMEOUT",  # held by a stopped runner
        "DRPCExecutionException:INTERNAL_ERROR",  # in flight when a runner or worker died
        "DRPCConnectionError",  # every server down
        "DRPCTimeoutError",  # a stopped server
    }, chaos["refusals"]
    for detail in chaos["refusals"].get("DRPCExecutionException:INTERNAL_ERROR", []):
        assert "went away" in detail or "in flight" in detail, detail
    # Outside the windows when the only runner or every server is down, calls are answered.
    assert chaos["availability_outside_down_windows"] >= 0.99, chaos["refusals"]
    for name, figures in chaos["resources"].items():
        if "undo_logs" in figures:
            assert figures["undo_logs"] <= 200, (name, figures)
