"""A transactional run hosted by a real server, with injected first-attempt failures: its
commits, tuples and replays reach ``/metrics`` and the dashboard, and agree with the run's
own status."""

from __future__ import annotations

from pathlib import Path

import pytest
from drpc.server import DRPCServer, ServerThread

from tests.ops.test_metrics import parse, scrape, value
from tests.server.helpers import server_options, wait_until
from tests.server.test_transactional_hosting import append_words
from tests.transactional.faults import word_count

TOPOLOGY = "fault-words"


@pytest.mark.timeout(120)
def test_commits_tuples_and_replays_of_a_hosted_run(tmp_path: Path) -> None:
    log_dir, markers = tmp_path / "log", tmp_path / "markers"
    markers.mkdir()
    words = sum(append_words(log_dir, 500, seed=3).values())
    server = DRPCServer(**server_options())
    hosted = server.register_transactional(
        word_count(str(log_dir), str(markers), take=100),
        state_dir=str(tmp_path / "state"),
        max_spout_pending=2,
        idle_interval=0.5,
    )

    def tuples_scraped() -> float | None:
        return value(scrape(server)[1], "drpc_tx_tuples_total", topology=TOPOLOGY)

    with ServerThread(server):
        wait_until(lambda: tuples_scraped() == words, 60)
    status = hosted.status()
    samples = parse(server.metrics.exposition().decode("utf-8"))
    assert status["error"] is None
    assert status["tuples"] == words
    assert value(samples, "drpc_tx_last_committed_txid", topology=TOPOLOGY) == status["last_txid"]
    assert value(samples, "drpc_tx_commits_total", topology=TOPOLOGY) == status["batches"]
    replays = {
        dict(labels)["cause"]: count
        for (name, labels), count in samples.items()
        if name == "drpc_tx_replays_total"
    }
    assert replays == status["replays"]
    assert sum(replays.values()) > 0  # the injected failures did replay
    commit_count = value(samples, "drpc_tx_commit_duration_seconds_count", topology=TOPOLOGY)
    assert commit_count == status["batches"]

    (board,) = server.dashboard.status()["transactional"]
    assert board["topology"] == TOPOLOGY
    assert board["last_committed"] == status["last_txid"]
    assert board["tuples"] == words
    assert board["replays"] == status["replays"]
    assert len(board["recent_replays"]) == min(20, sum(replays.values()))
    # every committed batch's phases: one observation per phase and batch, and the status,
    # the dashboard and the metrics agree on the slowest recent batch
    for phase in ("emit", "process", "wait", "commit"):
        count = value(samples, "drpc_tx_phase_seconds_count", topology=TOPOLOGY, phase=phase)
        assert count == status["batches"], phase
    assert set(status["last_phases"]) == {"emit", "process", "wait", "commit"}
    assert all(seconds >= 0 for seconds in status["last_phases"].values())
    slowest = status["slowest"]
    assert slowest["seconds"] == pytest.approx(
        sum(slowest[phase] for phase in ("emit", "process", "wait", "commit"))
    )
    assert board["slowest"]["txid"] == slowest["txid"]
    assert board["slowest"]["phase"] == max(
        ("emit", "process", "wait", "commit"), key=lambda phase: slowest[phase]
    )
    assert board["last_phases"] == status["last_phases"]
