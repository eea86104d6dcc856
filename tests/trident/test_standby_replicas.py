"""Standby replicas: a resident task SIGKILLed with its disk in the middle of a commit, in a
run with ``standby_replicas=1``, on transactional maps and on opaque ones. The other task
serves on (its process is the same one before and after), its standby copy of the lost
partition takes over with nothing downloaded, DRPC calls are answered right through the
failover, and every word counts once. The runs need two resident tasks, so a session of
their own: they start ahead (``tests/ahead.py``) and go on beside the other tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from drpc.transactional import TransactionalRunner
from drpc.trident import transactional_topology
from tests import ahead

from . import standby_failover
from .standby_failover import KILLED_TXID, KINDS, PARTITIONS


def _failover_run(workdir: Path) -> ahead.Command:
    return ahead.Command([sys.executable, "-m", "tests.trident.standby_failover", str(workdir)])


FAILOVER_RUN = ahead.register("standby-failover", _failover_run, timeout=300)


@pytest.fixture(scope="module")
def failovers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    finished = FAILOVER_RUN.finish(tmp_path_factory)
    assert finished.returncode == 0, finished.stderr[-4000:]
    outcome: dict[str, dict[str, object]] = json.loads(finished.stdout.strip().splitlines()[-1])
    return outcome


@pytest.fixture(params=KINDS)
def failover(
    request: pytest.FixtureRequest, failovers: dict[str, dict[str, object]]
) -> dict[str, object]:
    """One failover's outcome: on transactional maps, then on opaque ones."""
    return failovers[request.param]


def lost_and_survivor(failover: dict[str, object]) -> tuple[int, int]:
    """The resident task the kill took (its pid before was the killed one), and the other."""
    before = failover["pids_before"]
    assert isinstance(before, dict)
    lost = next(int(node) for node, pid in before.items() if pid == failover["killed_pid"])
    survivor = next(int(node) for node in before if int(node) != lost)
    return lost, survivor


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.ahead("standby-failover")
def test_the_survivor_serves_on_and_only_the_lost_task_starts_again(
    failover: dict[str, object],
) -> None:
    before, after = failover["pids_before"], failover["pids_after"]
    assert isinstance(before, dict) and isinstance(after, dict)
    lost, survivor = lost_and_survivor(failover)
    assert after[str(survivor)] == before[str(survivor)]  # never restarted
    assert after[str(lost)] != failover["killed_pid"]  # started again, alone


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.ahead("standby-failover")
def test_the_standby_copy_takes_over_and_every_word_counts_once(
    failover: dict[str, object],
) -> None:
    standbys = failover["standbys"]
    assert isinstance(standbys, dict)
    takeover = standbys["last_takeover"]
    assert takeover is not None
    _, survivor = lost_and_survivor(failover)
    assert (takeover["group"], takeover["index"], takeover["task"]) == ("counts", 1, survivor)
    # the copy held the global commit before the killed txid: no delta to catch up
    assert (takeover["txid"], takeover["deltas"]) == (KILLED_TXID - 1, 0)
    assert failover["right_counts"] is True
    commits = failover["commits"]
    assert isinstance(commits, list) and KILLED_TXID in commits
    replays = failover["replays"]
    assert isinstance(replays, dict) and replays.get("commit", 0) >= 1


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.ahead("standby-failover")
def test_the_task_back_keeps_standby_copies_again_and_says_so_everywhere(
    failover: dict[str, object],
) -> None:
    """Back, the lost task keeps a standby copy of every partition (it owns none now), each
    caught up with the last commit; the status, /metrics and the dashboard say so."""
    standbys = failover["standbys"]
    assert isinstance(standbys, dict)
    copies = standbys["copies"]
    lost, _ = lost_and_survivor(failover)
    assert [(c["index"], c["task"], c["lag"]) for c in copies] == [
        (index, lost, 0) for index in range(PARTITIONS)
    ]
    metrics = failover["metrics"]
    assert isinstance(metrics, list)
    for index in range(PARTITIONS):
        labels = f'partition="{index}",state="counts",task="{lost}",topology="standby-words"'
        assert f"drpc_standby_lag{{{labels}}} 0.0" in metrics
    takeover = standbys["last_takeover"]
    assert f'drpc_standby_takeover_seconds{{topology="standby-words"}} {takeover["seconds"]}' in (
        metrics
    )
    shown = failover["dashboard"]
    assert isinstance(shown, dict)
    assert [(c["index"], c["task"], c["lag"]) for c in shown["standbys"]] == [
        (index, lost, 0) for index in range(PARTITIONS)
    ]
    assert shown["last_takeover_seconds"] == takeover["seconds"]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.ahead("standby-failover")
def test_drpc_calls_are_answered_right_through_the_failover(failover: dict[str, object]) -> None:
    assert failover["wrong_answers"] == 0
    answered = failover["answers_after_kill"]
    assert isinstance(answered, int) and answered > 0


def test_standby_replicas_need_the_resident_tasks_and_a_checkpoint_store(tmp_path: Path) -> None:
    topology = transactional_topology(
        standby_failover.topology(str(tmp_path / "log"), str(tmp_path)), str(tmp_path / "state")
    )
    with pytest.raises(ValueError, match="executor='spark', not 'local'"):
        TransactionalRunner(topology, state_dir=str(tmp_path / "state"), standby_replicas=1)
    with pytest.raises(ValueError, match="standby_replicas must be >= 0"):
        TransactionalRunner(topology, state_dir=str(tmp_path / "state"), standby_replicas=-1)
    with pytest.raises(ValueError, match="set checkpoint_dir"):
        TransactionalRunner(
            topology, state_dir=str(tmp_path / "state"), executor="spark", standby_replicas=1
        )
