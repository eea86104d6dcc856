"""A transactional run hosted by the DRPC server beside a DRPC function reading its state."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest
from drpc.client import DRPCClient
from drpc.server import DRPCServer, ServerThread
from prometheus_client.parser import text_string_to_metric_families

from drpc.errors import DRPCError
from drpc.state import CoordinatorState
from drpc.transactional.filelog import append_lines
from tests.server.helpers import HOST, server_options, wait_until
from tests.transactional.faults import count_query, word_count

VOCABULARY = [f"w{n}" for n in range(20)]


def append_words(log_dir: Path, count: int, seed: int) -> Counter[str]:
    rng = random.Random(seed)
    added: Counter[str] = Counter()
    for partition in range(2):
        words = [rng.choice(VOCABULARY) for _ in range(count)]
        append_lines(log_dir, partition, words)
        added.update(words)
    return added


def answers(client: DRPCClient) -> Counter[str]:
    return Counter({word: int(client.execute("count", word)) for word in VOCABULARY})


@pytest.mark.timeout(120)
def test_the_server_runs_a_transactional_topology_and_answers_from_its_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir, state_dir = tmp_path / "log", tmp_path / "state"
    monkeypatch.setenv("DRPC_STATE_DIR", str(state_dir))
    expected = append_words(log_dir, 500, seed=1)
    server = DRPCServer(**server_options(http_port=None))
    server.register(count_query())
    hosted = server.register_transactional(
        word_count(str(log_dir), take=100),
        state_dir=str(state_dir),
        max_spout_pending=2,
        idle_interval=0.5,
        checkpoint_dir=f"file://{tmp_path / 'store'}",
    )
    assert not hosted.running  # it starts with the server
    with ServerThread(server) as running, DRPCClient(HOST, running.port, timeout=30) as client:
        assert hosted.running
        wait_until(lambda: answers(client) == expected, 60)

        # Lines appended while it serves are picked up and counted once.
        expected += append_words(log_dir, 300, seed=2)
        wait_until(lambda: answers(client) == expected, 60)
        status = hosted.status()
        assert status["running"] and status["error"] is None
        assert status["tuples"] == sum(expected.values())
        # Its committer's two tasks write a partitioned state: the status, the metrics and
        # the dashboard show where each partition lives and what it holds.
        partitions = status["partitions"]
        assert [(p["group"], p["index"]) for p in partitions] == [("commit", 0), ("commit", 1)]
        assert all(p["host"] and p["task"] == 0 and p["txid"] >= 1 for p in partitions)
        assert sum(p["keys"] for p in partitions) == len(expected)
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(server.metrics.exposition().decode())
            for sample in family.samples
        }
        for partition in partitions:
            labels = {
                "topology": "fault-words",
                "state": "commit",
                "partition": str(partition["index"]),
            }
            keyed = tuple(sorted(labels.items()))
            assert samples[("drpc_partition_keys", keyed)] == partition["keys"]
            assert samples[("drpc_partition_txid", keyed)] == partition["txid"]
            owner = tuple(sorted({**labels, "host": partition["host"], "task": "0"}.items()))
            assert samples[("drpc_partition_owner", owner)] == 1
            # with a checkpoint store: its last snapshot and what it keeps there
            assert samples[("drpc_partition_snapshot_txid", keyed)] == partition["snapshot"]
            assert samples[("drpc_partition_store_bytes", keyed)] == partition["store_bytes"] > 0
        run_labels = (("topology", "fault-words"),)
        assert samples[("drpc_checkpoint_store_bytes", run_labels)] > sum(
            p["store_bytes"] for p in partitions
        )  # theirs and the driver's records
        assert samples[("drpc_checkpoint_waiting", run_labels)] == 0
        shown = server.dashboard.status(server.service)
        (topology_shown,) = shown["transactional"]
        assert topology_shown["checkpoint"]["store"] == f"file://{tmp_path / 'store'}"
        assert [p["store_bytes"] for p in shown["partitions"]] == [
            p["store_bytes"] for p in partitions
        ]
        assert [(p["state"], p["index"], p["task"]) for p in shown["partitions"]] == [
            ("commit", 0, 0),
            ("commit", 1, 0),
        ]
        assert not any("partitions" in d["state_dir"] for d in shown["state"])

        # An idle source costs one empty commit per idle_interval, not a busy loop.
        before = CoordinatorState(hosted.runner.env, "fault-words").next_txid()
        time.sleep(2.0)
        after = CoordinatorState(hosted.runner.env, "fault-words").next_txid()
        assert after - before <= 12, f"{after - before} empty commits in 2 s"
        assert answers(client) == expected
    assert not hosted.running
    assert not hosted.status()["running"]


def test_registering_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRPC_STATE_DIR", str(tmp_path))
    server = DRPCServer(**server_options(http_port=None))
    with pytest.raises(ValueError, match="not a transactional topology"):
        server.register_transactional(count_query(), state_dir=str(tmp_path))
    server.register_transactional(word_count(str(tmp_path / "log")), state_dir=str(tmp_path))
    with pytest.raises(DRPCError, match="'fault-words' is already registered"):
        server.register_transactional(word_count(str(tmp_path / "log")), state_dir=str(tmp_path))
    for hosted in server.transactional.values():
        hosted.stop()
