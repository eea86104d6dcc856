"""``drpc.redis_spout.RedisStreamsSpout`` in plain topologies on a real Redis: every entry
leaves the group's pending list only once its tree completed, a failed tree is emitted
again, entries a dead consumer held are claimed, and on Spark a resident task SIGKILLed
mid-stream loses nothing."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from drpc.topologies import LocalCluster

from .brokers import RedisServer
from .plain_topology import WordCount, redis_word_count
from .waiting import wait_until

pytestmark = pytest.mark.timeout(180)

_streams = itertools.count()
SENTENCES = [f"the cow {word} over the moon" for word in ("jumped", "fails", "flew")] * 100


def fill(redis_server: RedisServer) -> tuple[Any, str]:
    client = redis_server.client()
    stream = f"sentences-{os.getpid()}-{next(_streams)}"
    for sentence in SENTENCES:
        client.xadd(stream, {"sentence": sentence})
    return client, stream


def settled(client: Any, stream: str) -> bool:
    """Every entry delivered to the group and acknowledged."""
    groups = client.xinfo_groups(stream)
    if not groups:
        return False  # the spout has not made its group yet
    (group,) = groups
    last = client.xinfo_stream(stream)["last-generated-id"]
    return group["pending"] == 0 and group["last-delivered-id"] == last


def test_every_entry_is_acknowledged_once_its_tree_completes(
    plain_executor: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    client, stream = fill(redis_server)
    counter = WordCount(str(tmp_path), fail_word="fails")
    topology = redis_word_count(redis_server.url, redis_server.password, stream, counter)
    with LocalCluster(plain_executor) as cluster:
        cluster.submit_topology("entries", None, topology)
        wait_until(lambda: settled(client, stream), 120, what="every entry acknowledged")
        spout = cluster.get_topology_info("entries").components["entries"]
    assert (spout.acked, spout.failed, spout.emitted) == (300, 1, 301)


def test_entries_a_dead_consumer_held_are_claimed_and_emitted_again(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    client, stream = fill(redis_server)
    client.xgroup_create(stream, "words", id="0")
    held = client.xreadgroup("words", "a-dead-spout", {stream: ">"}, count=10)
    assert len(held[0][1]) == 10  # delivered to a consumer that will never acknowledge them
    topology = redis_word_count(
        redis_server.url, redis_server.password, stream, WordCount(str(tmp_path)), claim_idle=0.5
    )
    with LocalCluster() as cluster:
        cluster.submit_topology("claims", None, topology)
        wait_until(lambda: settled(client, stream), 60, what="every entry acknowledged")
        assert cluster.get_topology_info("claims").components["entries"].acked == 300


@pytest.mark.spark
def test_a_resident_task_killed_mid_stream_loses_no_entry(
    spark_session: object, redis_server: RedisServer, tmp_path: Path
) -> None:
    client, stream = fill(redis_server)
    counter = WordCount(str(tmp_path), kill_word="flew", delay=0.001)
    topology = redis_word_count(redis_server.url, redis_server.password, stream, counter)
    with LocalCluster("spark") as cluster:
        cluster.submit_topology("survives", None, topology)
        wait_until(lambda: settled(client, stream), 150, what="every entry acknowledged")
        spout = cluster.get_topology_info("survives").components["entries"]
    assert int((tmp_path / "killed").read_text()) != os.getpid()
    assert spout.acked == 300 and spout.failed >= 1  # what the dead task held, replayed
