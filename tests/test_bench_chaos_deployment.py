"""The chaos run's deployment (bench/chaos_deployment.py): its runners, before any starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos_deployment import Deployment


@pytest.mark.parametrize(
    ("standbys", "runners"),
    [(0, ["runner"]), (1, ["runner", "standby"]), (2, ["runner", "standby", "standby2"])],
)
def test_each_standby_is_a_runner_of_its_own_started_with_standby(
    tmp_path: Path, standbys: int, runners: list[str]
) -> None:
    deployment = Deployment(tmp_path, "local[2]", standbys=standbys)
    assert deployment.runners() == runners
    for name in runners:
        argv = deployment.services[name].argv
        assert argv[argv.index("-m") + 1] == "drpc.runner"
        assert ("--standby" in argv) == bool(standbys)
    assert deployment.active_runner() == (None if standbys else "runner")  # none writes yet
    assert not deployment.standby_warm()
