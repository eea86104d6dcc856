"""The checkpoint store on a real S3-compatible server (moto's, on loopback): objects, a
missing bucket, an unreachable store waited for and then refused typed, and a run whose
lost partition is restored from S3."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
import time
from pathlib import Path

import pytest
from drpc.server.dashboard import Dashboard

from drpc.errors import CheckpointStoreError, TransactionalError
from drpc.state import StateEnvironment
from drpc.state.checkpoint_store import (
    ENDPOINT_CONF,
    RETRY_TIMEOUT_CONF,
    CheckpointSettings,
    CheckpointStore,
)
from drpc.state.keygroups import partition_of
from drpc.state.partition import partition_path, partition_root
from drpc.transactional import RunResult, TransactionalRunner
from drpc.trident import LMDBMapState, transactional_topology
from drpc.trident import run as run_trident
from tests.s3 import Outage, S3Server
from tests.waiting import wait_until

from ..trident.test_partitioned_state import listed
from ..trident.test_word_count import WORDS, committed

pytestmark = pytest.mark.usefixtures("s3_settled")


def test_objects_round_trip_list_in_order_and_go(s3_server: S3Server, tmp_path: Path) -> None:
    store = CheckpointStore(s3_server.settings("objects"))
    store.check()
    for txid in (3, 1, 2):
        store.put(f"p/delta-{txid:020d}", bytes([txid]) * 10)
    assert store.list("p/") == [f"p/delta-{txid:020d}" for txid in (1, 2, 3)]
    assert store.get("p/delta-00000000000000000002") == bytes([2]) * 10
    assert store.get("p/none") is None
    big = tmp_path / "big"
    big.write_bytes(bytes(range(256)) * 40_000)
    store.put_file("p/snapshot", str(big))
    assert store.get_file("p/snapshot", str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == big.read_bytes()
    assert not store.get_file("p/absent", str(tmp_path / "absent"))
    store.delete(["p/delta-00000000000000000001", "p/snapshot", "p/never-was"])
    assert store.list("p/") == [f"p/delta-{txid:020d}" for txid in (2, 3)]
    assert store.list("nothing/") == []


def test_a_missing_bucket_is_refused_at_once_naming_it(s3_server: S3Server) -> None:
    settings = s3_server.settings("x")
    missing = CheckpointSettings(
        "s3://no-such-bucket/x",
        endpoint_url=settings.endpoint_url,
        region=settings.region,
        access_key=settings.access_key,
        secret_key=settings.secret_key,
    )
    started = time.monotonic()
    with pytest.raises(CheckpointStoreError, match="bucket 'no-such-bucket' does not exist"):
        CheckpointStore(missing).check()
    assert time.monotonic() - started < missing.retry_timeout


@pytest.mark.timeout(120)
def test_an_unreachable_store_is_waited_for_then_refused_typed(
    s3_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    outage = Outage(s3_server)
    settings = dataclasses.replace(
        s3_server.settings("wait"), endpoint_url=outage.endpoint, retry_max=0.2
    )
    store = CheckpointStore(settings)
    store.put("a", b"before")
    outage.cut()
    waits: list[float | None] = []
    mended: list[float] = []

    def come_back() -> None:
        # until the put says it waits (its first try may take a while on a busy machine),
        # then a few retries more
        deadline = time.monotonic() + 30
        while store.waiting_since is None and time.monotonic() < deadline:
            time.sleep(0.01)
        waits.append(store.waiting_since)
        time.sleep(0.5)
        mended.append(time.monotonic())
        outage.mend()

    returning = threading.Thread(target=come_back)
    returning.start()
    with caplog.at_level(logging.INFO, logger="drpc.state.checkpoint_store"):
        store.put("b", b"after")  # waits, then lands once the store answers
    landed = time.monotonic()
    returning.join()
    assert waits[0] is not None  # it was waiting while the store was cut off
    assert landed > mended[0]  # and it landed only once the store was back
    assert store.waiting_since is None
    assert store.get("a") == b"before"
    assert store.get("b") == b"after"
    assert "waiting for the checkpoint store" in caplog.text
    assert "answers again" in caplog.text
    assert str(settings.secret_key) not in caplog.text
    outage.cut()
    short = CheckpointStore(dataclasses.replace(settings, retry_timeout=0.5))
    started = time.monotonic()
    with pytest.raises(CheckpointStoreError, match=r"could not write 'c' for .* s \(drpc"):
        short.put("c", b"never")
    assert time.monotonic() - started < 10
    outage.mend()


def test_a_run_restores_a_lost_partition_from_s3(s3_server: S3Server, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    topology = listed(3)
    conf = {**s3_server.conf(), "drpc.checkpoint.snapshot.deltas": 2}
    uri = s3_server.settings(f"runs/{tmp_path.name}").uri
    run_trident(topology, state_dir=str(state_dir), checkpoint_dir=uri, conf=conf, max_batches=2)
    lost = partition_of("the", 3)
    for env in StateEnvironment.open_environments():
        if env.path.startswith(str(tmp_path)):
            env.close()
    shutil.rmtree(partition_path(partition_root(str(state_dir)), "word-counts", lost))
    run_trident(topology, state_dir=str(state_dir), checkpoint_dir=uri, conf=conf)
    assert committed(state_dir, LMDBMapState.transactional("word-counts")) == dict(WORDS)


@pytest.mark.timeout(120)
def test_a_run_waiting_for_the_store_says_so_and_counts_once(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """The store's network goes down before the first commit: the commit waits (nothing is
    claimed), the run's status and the dashboard say "waiting for the checkpoint store";
    the store comes back and the run counts every word once."""
    gate = Outage(s3_server)
    conf = {**s3_server.conf(), ENDPOINT_CONF: gate.endpoint}
    state_dir = tmp_path / "state"
    settings = dataclasses.replace(
        s3_server.settings(f"runs/{tmp_path.name}"), endpoint_url=gate.endpoint
    )
    runner = TransactionalRunner(
        transactional_topology(listed(3), str(state_dir)),
        state_dir=str(state_dir),
        checkpoint_dir=settings.uri,
        conf=conf,
    )
    board = Dashboard()
    board.watch_transactional(lambda: {runner.info.id: runner.status()})
    waiting = f"waiting for the checkpoint store {settings.describe()}"
    with runner:
        gate.cut()
        result: list[RunResult] = []
        running = threading.Thread(target=lambda: result.append(runner.run()))
        running.start()
        wait_until(lambda: runner.status()["waiting"] == waiting, what="the status to wait")
        (shown,) = board.status()["transactional"]
        assert shown["waiting"] == waiting
        assert runner.status()["last_txid"] is None  # nothing claimed while it waits
        gate.mend()
        running.join(60)
        assert not running.is_alive()
        status = runner.status()
    assert status["waiting"] is None
    assert result[0].last_txid == status["last_txid"] and status["last_txid"] >= 3
    assert committed(state_dir, LMDBMapState.transactional("word-counts")) == dict(WORDS)
    checkpoint = status["checkpoint"]
    assert checkpoint["store"] == settings.describe() and checkpoint["waiting_since"] is None
    assert checkpoint["record"]["txid"] == status["last_txid"]
    assert checkpoint["bytes"] > 0
    assert str(settings.secret_key) not in repr(status)


@pytest.mark.timeout(60)
def test_a_store_away_past_its_limit_stops_the_run_typed(
    s3_server: S3Server, tmp_path: Path
) -> None:
    gate = Outage(s3_server)
    conf = {**s3_server.conf(), ENDPOINT_CONF: gate.endpoint, RETRY_TIMEOUT_CONF: 1.0}
    state_dir = tmp_path / "state"
    uri = s3_server.settings(f"runs/{tmp_path.name}").uri
    topology = transactional_topology(listed(3), str(state_dir))
    runner = TransactionalRunner(topology, state_dir=str(state_dir), checkpoint_dir=uri, conf=conf)
    with runner:
        gate.cut()
        with pytest.raises(TransactionalError, match="the run stops") as raised:
            runner.run()
    assert isinstance(raised.value.__cause__, CheckpointStoreError)
    assert "drpc.checkpoint.retry.timeout 1" in str(raised.value)
    assert runner.status()["last_txid"] is None
    assert sum(runner.status()["replays"].values()) == 0  # stopped, not replayed


@pytest.mark.timeout(60)
def test_a_store_away_at_the_check_is_waited_for_not_called_missing(
    s3_server: S3Server,
) -> None:
    """s3fs's ``exists`` answers False when the store cannot be reached; the check must
    wait for the store instead of saying the bucket does not exist."""
    gate = Outage(s3_server)
    settings = dataclasses.replace(
        s3_server.settings("check"), endpoint_url=gate.endpoint, retry_max=0.2
    )
    gate.cut()
    returning = threading.Timer(1.0, gate.mend)
    returning.start()
    started = time.monotonic()
    CheckpointStore(settings).check()  # waits, then finds the bucket
    assert time.monotonic() - started >= 0.9
    returning.join()
    gate.cut()
