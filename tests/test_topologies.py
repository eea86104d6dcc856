"""Plain topologies (``drpc.topologies.LocalCluster``) on each executor: Storm's guaranteed
message processing, max spout pending, timeouts, the figures of Storm's UI, and the
cluster's own rules (names, kills, what it refuses)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drpc import InvalidTopologyError, LinearDRPCTopologyBuilder, TopologyBuilder
from drpc.config import (
    TOPOLOGY_MAX_SPOUT_PENDING,
    TOPOLOGY_MESSAGE_TIMEOUT_SECS,
    TOPOLOGY_TICK_TUPLE_FREQ_SECS,
)
from drpc.errors import AlreadyAliveError, NotAliveError
from drpc.executors.local import LocalExecutor
from drpc.executors.resident import current_cluster
from drpc.topologies import LocalCluster

from .plain_topology import (
    EmitsOnTick,
    HoldsOnce,
    ReplayingSpout,
    WordCount,
    events,
    word_count,
)
from .topologies import bolts
from .topologies.bolts import CountPerRequest
from .waiting import wait_until

_tokens = itertools.count()

SENTENCES = [f"the cow {word} over the moon" for word in ("jumped", "fails", "flew")] * 40
WORDS = sum(len(sentence.split()) for sentence in SENTENCES)


def token() -> str:
    return f"plain-{os.getpid()}-{next(_tokens)}"


def all_acked(name: str, count: int) -> bool:
    return sorted(set(events(name)["acked"])) == list(range(count))


@pytest.mark.timeout(120)
def test_each_tree_is_acked_once_complete_and_a_failed_one_is_replayed(
    plain_executor: str, tmp_path: Path
) -> None:
    run = token()
    counter = WordCount(str(tmp_path), fail_word="fails")
    with LocalCluster(plain_executor) as cluster:
        cluster.submit_topology("words", None, word_count(run, SENTENCES, counter))
        wait_until(lambda: all_acked(run, len(SENTENCES)), what="every sentence acked")
        seen = events(run)
        info = cluster.get_topology_info("words")
    failed = seen["failed"]
    assert len(failed) == 1 and SENTENCES[failed[0]].split()[2] == "fails"
    assert sorted(seen["acked"]) == list(range(len(SENTENCES)))  # each acked once
    stats = info.components
    assert set(stats) == {"sentences", "split", "count"}
    spout, split, count = stats["sentences"], stats["split"], stats["count"]
    assert (spout.kind, spout.tasks, split.tasks, count.tasks) == ("spout", 1, 2, 2)
    assert (spout.emitted, spout.acked, spout.failed) == (len(SENTENCES) + 1, len(SENTENCES), 1)
    assert spout.complete_latency_ms is not None and spout.complete_latency_ms > 0
    assert (split.emitted, split.acked, split.failed) == (WORDS + 6, len(SENTENCES) + 1, 0)
    assert (count.emitted, count.acked, count.failed) == (WORDS + 5, WORDS + 5, 1)
    assert count.complete_latency_ms is None  # a bolt has no trees of its own
    assert info.executor == plain_executor and info.uptime_secs > 0
    assert seen["closed"] == 1  # shutdown killed it: the spout was closed


@pytest.mark.timeout(120)
def test_max_spout_pending_bounds_the_trees_in_flight(plain_executor: str, tmp_path: Path) -> None:
    run = token()
    conf = {TOPOLOGY_MAX_SPOUT_PENDING: 3}
    counter = WordCount(str(tmp_path), delay=0.002)
    with LocalCluster(plain_executor) as cluster:
        cluster.submit_topology("bounded", conf, word_count(run, SENTENCES[:30], counter))
        wait_until(lambda: all_acked(run, 30), what="every sentence acked")
    assert events(run)["max_in_flight"] == 3


@pytest.mark.timeout(120)
def test_a_tree_past_the_message_timeout_fails_and_is_replayed(
    plain_executor: str, tmp_path: Path
) -> None:
    run = token()
    conf = {TOPOLOGY_MESSAGE_TIMEOUT_SECS: 1}
    with LocalCluster(plain_executor) as cluster:
        cluster.submit_topology(
            "held", conf, word_count(run, SENTENCES[:12], HoldsOnce(str(tmp_path), "flew"))
        )
        wait_until(lambda: all_acked(run, 12), what="every sentence acked")
        assert cluster.get_topology_info("held").components["sentences"].failed == 1
    (failed,) = events(run)["failed"]  # one tree timed out, once
    assert SENTENCES[failed].split()[2] == "flew"


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_a_resident_task_killed_fails_its_trees_to_the_spout_which_replays_them(
    spark_session: object, tmp_path: Path
) -> None:
    run = token()
    counter = WordCount(str(tmp_path), kill_word="flew", delay=0.001)
    with LocalCluster("spark") as cluster:
        cluster.submit_topology("survives", None, word_count(run, SENTENCES, counter))
        wait_until(lambda: all_acked(run, len(SENTENCES)), 120, what="every sentence acked")
        seen = events(run)
        assert seen["opened"] == 1  # the spout lived through the restart, on the driver
        assert int((tmp_path / "killed").read_text()) != os.getpid()
        assert seen["failed"]  # the trees in flight on the dead task failed to the spout
        spout = cluster.get_topology_info("survives").components["sentences"]
        assert (spout.acked, spout.failed) == (len(SENTENCES), len(seen["failed"]))


@pytest.mark.timeout(120)
def test_deactivate_waits_out_the_spouts_turn_and_calls_deactivate_then_activate(
    plain_executor: str,
) -> None:
    """Storm's deactivate and activate: once ``deactivate`` returns, the spout emits
    nothing more, even when it was inside ``next_tuple`` (it works 30 ms in each), and
    its ``deactivate``/``activate`` run once each; ``close`` deactivates it again."""
    run = token()
    builder = word_count(run, SENTENCES, WordCount(""), spout_pause=0.03)
    with LocalCluster(plain_executor) as cluster:
        cluster.submit_topology("paused", None, builder)
        wait_until(lambda: len(events(run)["acked"]) >= 3, 60, what="three sentences acked")
        assert (events(run)["activated"], events(run)["deactivated"]) == (1, 0)

        def emitted() -> int:
            return cluster.get_topology_info("paused").components["sentences"].emitted

        cluster.deactivate("paused")
        held = emitted()
        assert events(run)["deactivated"] == 1
        time.sleep(0.3)  # ten turns' worth: a spout still polled would emit
        assert emitted() == held < len(SENTENCES)
        cluster.activate("paused")
        wait_until(lambda: all_acked(run, len(SENTENCES)), 120, what="every sentence acked")
        assert (events(run)["activated"], events(run)["deactivated"]) == (2, 1)
    assert (events(run)["deactivated"], events(run)["closed"]) == (2, 1)


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_a_deactivated_topology_stays_so_through_a_resident_restart(
    spark_session: object, tmp_path: Path
) -> None:
    run = token()
    counter = WordCount(str(tmp_path), delay=0.002)
    conf = {TOPOLOGY_MAX_SPOUT_PENDING: 4}
    with LocalCluster("spark") as cluster:
        cluster.submit_topology("paused", conf, word_count(run, SENTENCES, counter))
        wait_until(lambda: len(events(run)["acked"]) >= 10, 60, what="ten sentences acked")
        cluster.deactivate("paused")
        resident = current_cluster()
        assert resident is not None
        restarts = resident.restarts
        os.kill(resident.call(1, os.getpid).result(timeout=30), signal.SIGKILL)
        wait_until(lambda: resident.restarts > restarts, 60, what="the resident job restarted")
        assert resident.wait_ready(60)
        emitted = cluster.get_topology_info("paused").components["sentences"].emitted
        time.sleep(0.5)  # a released spout would emit at once
        assert cluster.get_topology_info("paused").components["sentences"].emitted == emitted
        cluster.activate("paused")
        wait_until(lambda: all_acked(run, len(SENTENCES)), 120, what="every sentence acked")


@pytest.mark.timeout(120)
def test_a_bolt_configured_for_tick_tuples_gets_them_untracked(plain_executor: str) -> None:
    run = token()
    builder = word_count(run, SENTENCES[:6], WordCount(""))
    builder.set_bolt("ticks", EmitsOnTick(), 2).shuffle_grouping("split").add_configuration(
        TOPOLOGY_TICK_TUPLE_FREQ_SECS, 0.05
    )
    with LocalCluster(plain_executor) as cluster:
        cluster.submit_topology("ticking", None, builder)
        wait_until(lambda: all_acked(run, 6), what="every sentence acked")

        def ticks() -> int:
            return cluster.get_topology_info("ticking").components["ticks"].emitted

        wait_until(lambda: ticks() >= 10, 60, what="ten tick tuples")
        figures = cluster.get_topology_info("ticking").components
    assert figures["ticks"].acked == 36  # the words; a tick is never acked or counted
    assert figures["count"].emitted == 36  # a bolt without the setting gets no tick
    assert events(run)["failed"] == []  # nothing waits on a tick: no tree timed out


def test_tick_tuples_reach_no_batch_bolt_and_the_setting_is_checked() -> None:
    builder = TopologyBuilder()
    builder.set_spout("sentences", ReplayingSpout(token(), []))
    builder.set_bolt("batch", CountPerRequest(), 1).shuffle_grouping("sentences")
    builder.set_bolt("rich", EmitsOnTick(), 1).shuffle_grouping("sentences")
    topology = builder.create_topology("ticks", {TOPOLOGY_TICK_TUPLE_FREQ_SECS: 1})
    engine = LocalExecutor(topology)
    every = {task.component_id: task.tick_every for task in engine.bolt_tasks}
    assert every == {"batch": None, "rich": 1}
    for wrong in (0, -1, True, "1"):
        with pytest.raises(ValueError, match=r"topology\.tick\.tuple\.freq\.secs must be"):
            LocalExecutor(builder.create_topology("ticks", {TOPOLOGY_TICK_TUPLE_FREQ_SECS: wrong}))


def test_a_name_runs_once_and_only_a_running_one_can_be_killed(tmp_path: Path) -> None:
    run = token()
    with LocalCluster() as cluster:
        counter = WordCount(str(tmp_path))
        cluster.submit_topology("once", {}, word_count(run, SENTENCES[:3], counter))
        with pytest.raises(AlreadyAliveError, match="'once' is already running"):
            cluster.submit_topology("once", {}, word_count(run, [], counter))
        assert cluster.get_topology_names() == ["once"]
        wait_until(lambda: all_acked(run, 3), what="every sentence acked")
        cluster.kill_topology("once", wait_secs=0.05)
        assert cluster.get_topology_names() == []
        assert events(run)["closed"] == 1
        with pytest.raises(NotAliveError, match="no topology named 'once'"):
            cluster.kill_topology("once")
        with pytest.raises(NotAliveError, match="no topology named 'gone'"):
            cluster.get_topology_info("gone")
        with pytest.raises(ValueError, match="wait_secs must be >= 0"):
            cluster.kill_topology("once", wait_secs=-1)


def test_what_a_local_cluster_refuses() -> None:
    with pytest.raises(ValueError, match="not 'spark-batch' \\(it runs DRPC requests"):
        LocalCluster("spark-batch")
    with pytest.raises(ValueError, match="threads must be >= 1"):
        LocalCluster(threads=0)
    with LocalCluster() as cluster:
        drpc_topology = LinearDRPCTopologyBuilder("exclaim")
        drpc_topology.add_bolt(bolts.Identity(), 1)
        with pytest.raises(InvalidTopologyError, match="serves DRPC function 'exclaim'"):
            cluster.submit_topology("exclaim", None, drpc_topology.create_topology())
        with pytest.raises(TypeError, match="needs a Topology or a TopologyBuilder, got str"):
            cluster.submit_topology("text", None, "not a topology")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="non-empty string"):
            cluster.submit_topology("", None, word_count(token(), [], WordCount("")))
        with pytest.raises(ValueError, match=r"topology\.max\.spout\.pending must be None"):
            cluster.submit_topology(
                "bad", {TOPOLOGY_MAX_SPOUT_PENDING: 0}, word_count(token(), [], WordCount(""))
            )
        assert cluster.get_topology_names() == []


@pytest.mark.timeout(120)
def test_drpc_topology_runs_storm_starters_word_count_and_prints_its_figures() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "drpc.topology_cli", "run",
         "drpc.examples.word_count_topology:topology", "--seconds", "2", "--stats-every", "0.5",
         "--json"],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    info = json.loads(ran.stdout)
    assert (info["name"], info["executor"]) == ("word-count", "local")
    stats = {component["component"]: component for component in info["components"]}
    assert [(stats[c]["kind"], stats[c]["tasks"]) for c in ("spout", "split", "count")] == [
        ("spout", 1),
        ("bolt", 8),
        ("bolt", 12),
    ]
    spout, split, count = stats["spout"], stats["split"], stats["count"]
    assert spout["acked"] > 100 and spout["failed"] == 0 and spout["complete_latency_ms"] > 0
    assert split["acked"] >= spout["acked"]  # it acks each sentence before its tree completes
    assert count["acked"] == count["emitted"] > split["acked"]  # several words a sentence
    assert "word-count on local, up" in ran.stderr  # the figures while it ran
