"""Redis Streams and JetStream spouts against real servers: exactly once through replays, a
partition added mid-run, trimmed entries, a broker restarted mid-run and runs SIGKILLed."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from drpc.server.dashboard import Dashboard

from drpc.errors import RangeTrimmedError, TransactionalError
from drpc.observe import Observer
from drpc.state import CoordinatorState, StateEnvironment
from drpc.state.topology import TopologyState
from drpc.transactional import run
from drpc.transactional.brokers import TLS
from drpc.transactional.ranges import reads_on_executors
from drpc.transactional.run import CommitInfo, TransactionalRunner
from tests.brokers import Broker, NatsServer, RedisServer, make_broker

from .broker_faults import TOPOLOGY_ID, word_count
from .faults import kill_after_commits
from .running import running_forever

VOCABULARY = [f"word{n}" for n in range(40)]


def words(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(VOCABULARY) for _ in range(count)]


def committed(state_dir: Path, opaque: bool) -> Counter[str]:
    state = TopologyState.at(str(state_dir))
    counts = state.opaque_map("counts") if opaque else state.transactional_map("counts")
    return Counter(dict(counts.items()))


def fill(broker: Broker, partitions: int, per_partition: int, seed: int) -> Counter[str]:
    expected: Counter[str] = Counter()
    for partition in range(partitions):
        batch = words(seed + partition, per_partition)
        broker.create(partition)
        broker.append(partition, batch)
        expected.update(batch)
    return expected


def count_through_replays_and_a_partition_added(
    broker: Broker, executor: str, opaque: bool, tmp_path: Path
) -> None:
    expected = fill(broker, 2, 150, seed=1)
    markers = tmp_path / "markers"
    markers.mkdir()
    spout = broker.spout(40, opaque)
    assert reads_on_executors(spout) is not opaque
    added = words(9, 120)

    def add_a_partition(info: CommitInfo) -> None:
        if info.txid == 2:
            broker.create(2)
            broker.append(2, added)
            broker.append(0, added[:30])

    result = run(
        word_count(spout, str(markers), opaque),
        state_dir=str(tmp_path / "state"),
        executor=executor,
        max_spout_pending=3,
        on_commit=add_a_partition,
    )
    expected.update(added)
    expected.update(added[:30])
    assert committed(tmp_path / "state", opaque) == expected
    assert result.tuples == sum(expected.values())
    assert result.replays["processing"] > 0 and result.replays["commit"] > 0
    env = StateEnvironment.open(tmp_path / "state")
    assert CoordinatorState(env, TOPOLOGY_ID).partition_state(2).get_last_state() is not None


def test_exactly_once_through_replays_and_a_partition_added_mid_run(
    broker: Broker, tx_executor: str, tmp_path: Path
) -> None:
    """The transactional spouts: on Spark the executors read the ranges the driver decided."""
    count_through_replays_and_a_partition_added(broker, tx_executor, False, tmp_path)


def test_opaque_exactly_once_through_replays_and_a_partition_added_mid_run(
    broker: Broker, tmp_path: Path
) -> None:
    """The opaque spouts emit on the driver whatever the executor: the local run covers them."""
    count_through_replays_and_a_partition_added(broker, "local", True, tmp_path)


class TrimOnReplay(Observer):
    """Removes every entry of partition 0 when batch ``txid`` first fails, then appends
    ``later``: the batch's replay can no longer read what it first read."""

    def __init__(self, broker: Broker, txid: int, later: list[str]) -> None:
        self.broker, self.txid, self.later = broker, txid, later
        self.done = False

    def tx_replayed(self, topology: str, txid: int, cause: str) -> None:
        if txid == self.txid and not self.done:
            self.done = True
            self.broker.trim(0)
            self.broker.append(0, self.later)


@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_trimmed_entries_fail_a_transactional_replay_and_an_opaque_one_goes_on(
    broker: Broker, opaque: bool, tmp_path: Path
) -> None:
    first = words(3, 100)
    broker.create(0)
    broker.append(0, first)
    later = words(4, 30)
    markers = tmp_path / "markers"
    markers.mkdir()
    # every first processing attempt fails: each batch replays at least once
    topology = word_count(broker.spout(40, opaque), str(markers), opaque, percent=100)
    trim = TrimOnReplay(broker, 2, later)
    state_dir = tmp_path / "state"
    if not opaque:
        with pytest.raises(TransactionalError) as caught:
            run(topology, state_dir=str(state_dir), max_attempts=3, observer=trim)
        env = StateEnvironment.open(state_dir)
        stored = CoordinatorState(env, TOPOLOGY_ID).partition_state(0)
        meta = stored.get_state(2, lambda *_: pytest.fail("batch 2's range was not stored"))
        message = str(caught.value)
        assert f"stream {broker.name(0)!r}" in message
        assert f"entries {meta.first}..{meta.last} can no longer be replayed" in message
        assert committed(state_dir, opaque) == Counter(first[:40])  # batch 1 only
        return
    result = run(topology, state_dir=str(state_dir), observer=trim)
    assert committed(state_dir, opaque) == Counter(first[:40]) + Counter(later)
    assert result.tuples == 40 + len(later)


def test_a_replay_of_a_trimmed_range_raises_a_typed_error_naming_it(broker: Broker) -> None:
    broker.create(0)
    broker.append(0, words(5, 10))
    spout = broker.spout(4)
    coordinator = spout.get_coordinator({}, None)
    emitter = spout.get_emitter({}, None)
    try:
        meta = coordinator.next_range(0, None)
        assert meta.tuples == 4
        assert [values for values in emitter.values_in(0, meta)] == [[w] for w in words(5, 4)]
        broker.trim(0)
        with pytest.raises(RangeTrimmedError) as caught:
            list(emitter.values_in(0, meta))
        assert (caught.value.first, caught.value.last) == (str(meta.first), str(meta.last))
        assert broker.name(0) in caught.value.source
    finally:
        coordinator.close()
        emitter.close()


def wait_until(condition: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)
    return value


@pytest.mark.parametrize("kind", ["redis", "nats"])
def test_a_broker_restarted_mid_run_is_waited_for_and_counted_exactly_once(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server: RedisServer | NatsServer = (
        RedisServer(tmp_path / "redis", durable=True)
        if kind == "redis"
        else NatsServer(tmp_path / "nats")
    )
    server.start()
    try:
        broker = make_broker(kind, server)
        expected = fill(broker, 2, 200, seed=6)
        board = Dashboard()
        state_dir = tmp_path / "state"
        runner = TransactionalRunner(
            word_count(broker.spout(50)), state_dir=str(state_dir), max_spout_pending=2
        )
        board.watch_transactional(lambda: {TOPOLOGY_ID: runner.status()})
        with runner, running_forever(runner, idle_interval=0.05):
            wait_until(lambda: committed(state_dir, False) == expected)
            server.stop(kill=kind == "redis")
            waiting = f"waiting for {kind} at 127.0.0.1:{server.port}"
            wait_until(lambda: runner.status()["waiting"] == waiting)
            (shown,) = board.status()["transactional"]
            assert shown["waiting"] == waiting and shown["running"]
            server.start()
            later = words(7, 100)
            broker.append(1, later)
            expected.update(later)
            wait_until(lambda: committed(state_dir, False) == expected)
            wait_until(lambda: runner.status()["waiting"] is None)  # at its next probe
        assert f"waiting for {kind} at 127.0.0.1:{server.port}" in caplog.text
        assert server.password not in caplog.text  # nor in any log line of the outage
    finally:
        server.stop()


@pytest.mark.slow
def test_runs_sigkilled_at_random_points_then_restarted_count_exactly_once(
    broker: Broker, tmp_path: Path
) -> None:
    expected = fill(broker, 2, 1_500, seed=8)
    state_dir = tmp_path / "state"
    env = {**os.environ, **broker.environment(), "DRPC_TEST_TAKE": "25", "DRPC_TEST_OPAQUE": "0"}
    command = [
        sys.executable, "-m", "drpc.transactional.cli", "run",
        "tests.transactional.broker_faults:topology",
        "--state-dir", str(state_dir), "--max-spout-pending", "3",
    ]  # fmt: skip
    kills = kill_after_commits(command, env, state_dir, TOPOLOGY_ID, [4, 15], random.Random(2))
    assert kills == 2, "a run finished before it was killed; make the input larger"
    final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr[-2000:]
    assert committed(state_dir, False) == expected


def test_redis_over_tls_verified_with_a_ca_file(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", tls=True)
    server.start()
    try:
        broker = make_broker("redis", server)
        expected = fill(broker, 1, 50, seed=12)
        assert server.certificate is not None
        spout = broker.spout(20, tls=TLS(ca_file=str(server.certificate)))
        assert spout.options.settings.tls == TLS(ca_file=str(server.certificate))
        result = run(word_count(spout), state_dir=str(tmp_path / "state"))
        assert committed(tmp_path / "state", False) == expected and result.tuples == 50
    finally:
        server.stop()


def test_an_idle_redis_stream_wakes_its_run_when_an_entry_is_added(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Idle, the run looks again only after an hour (idle_interval): what counts each added
    entry is the coordinator's XREAD watch waking it."""
    broker = make_broker("redis", redis_server)
    broker.create(0)
    runner = TransactionalRunner(
        word_count(broker.spout(100), None, False), state_dir=str(tmp_path / "state")
    )
    with runner, running_forever(runner, idle_interval=3600.0) as commits:
        assert runner.metadata.watching  # idle, it waits to be woken: an hour at most
        for round in range(1, 4):
            wait_until(lambda: bool(commits) and commits[-1].tuples == 0, 60)  # idle
            broker.append(0, ["cat"] * round)
            wait_until(
                lambda round=round: (
                    committed(tmp_path / "state", False)["cat"] == round * (round + 1) // 2
                ),
                60,
            )


def test_the_redis_coordinator_wakes_its_run_for_each_entry_added_not_each_read(
    redis_server: RedisServer,
) -> None:
    broker = make_broker("redis", redis_server)
    broker.create(0)
    coordinator = broker.spout(100).get_coordinator({}, None)
    assert coordinator.number_of_partitions() == 1
    wakes: list[float] = []
    stop = coordinator.watch(lambda: wakes.append(time.monotonic()))
    try:
        time.sleep(0.2)  # the watcher is blocked in XREAD, from the newest entry on
        assert wakes == []
        broker.append(0, ["cat"])
        wait_until(lambda: len(wakes) == 1, 10)
        broker.append(0, ["dog"] * 500)  # a flood: a few wakeups, not one per entry
        wait_until(lambda: len(wakes) >= 2, 10)
        time.sleep(0.2)
        assert len(wakes) < 50
    finally:
        stop()
        coordinator.close()
