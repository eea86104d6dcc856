"""Drivers SIGKILLed with their disks: every run of the command line is a driver on another
host (a new, empty state directory; the last one deleted), SIGKILLed at random points after
chosen commits, its partitions lost with it. Each new driver restores its directory and its
partitions from the checkpoint store and goes on; after twenty kills in all every word
counts once: ten on transactional maps over a ``file://`` store, seven on opaque maps over
it, and three on opaque maps over an S3 server whose network drops out again and again
during the runs."""

from __future__ import annotations

import os
import random
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from drpc.trident import run
from tests.s3 import BUCKET, Outage, S3Server
from tests.transactional.faults import kill_after_commits
from tests.transactional.test_faults import write_words

from .faults import TXID, counts_state, word_count
from .test_word_count import committed

TAKE = 100
PARTITIONS = 2
TARGETS = (2, 4, 6, 8, 10, 12, 14, 16, 18, 20)
KILLS = {"transactional-file": 10, "opaque-file": 7, "opaque-s3": 3}  # 20 in all


@pytest.fixture
def flapping(s3_server: S3Server, s3_settled: None) -> Iterator[Outage]:
    """A gate before the session's S3 server, cut for 0.2-0.6 s every 0.5-1.5 s until the
    test ends: the store vanishes and comes back, its objects kept."""
    gate = Outage(s3_server)
    stop = threading.Event()
    rng = random.Random(31)

    def flap() -> None:
        while not stop.wait(rng.uniform(0.5, 1.5)):
            gate.cut()
            stop.wait(rng.uniform(0.2, 0.6))
            gate.mend()

    thread = threading.Thread(target=flap, daemon=True)
    thread.start()
    yield gate
    stop.set()
    thread.join()
    gate.cut()


def store_of(
    request: pytest.FixtureRequest, tmp_path: Path, on_s3: bool
) -> tuple[str, dict[str, str], dict[str, str]]:
    """The checkpoint URI, the environment that reaches it from a CLI run (boto's own
    variables) and the conf that reaches it from a run in this process."""
    if not on_s3:
        return f"file://{tmp_path / 'store'}", {}, {}
    gate: Outage = request.getfixturevalue("flapping")
    server: S3Server = request.getfixturevalue("s3_server")
    conf = {**server.conf(), "drpc.checkpoint.s3.endpoint": gate.endpoint}
    environment = {
        "AWS_ENDPOINT_URL_S3": gate.endpoint,
        "AWS_DEFAULT_REGION": conf["drpc.checkpoint.s3.region"],
        "AWS_ACCESS_KEY_ID": conf["drpc.checkpoint.s3.access.key"],
        "AWS_SECRET_ACCESS_KEY": conf["drpc.checkpoint.s3.secret.key"],
    }
    return f"s3://{BUCKET}/{tmp_path.name}", environment, conf


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "opaque, on_s3",
    [(False, False), (True, False), (True, True)],
    ids=list(KILLS),
)
def test_drivers_killed_with_their_disks_count_every_word_once(
    tmp_path: Path, request: pytest.FixtureRequest, opaque: bool, on_s3: bool
) -> None:
    targets = TARGETS[: KILLS[request.node.callspec.id]]
    expected = write_words(tmp_path / "log", seed=37, count=2 * TAKE * 4 * (targets[-1] + 4))
    store, reach, conf = store_of(request, tmp_path, on_s3)
    state_dir = tmp_path / "state"
    env = {
        **os.environ,
        **reach,
        "DRPC_TEST_LOG_DIR": str(tmp_path / "log"),
        "DRPC_TEST_OPAQUE": "1" if opaque else "0",
        "DRPC_TEST_TAKE": str(TAKE),
        "DRPC_STATE_DIR": str(state_dir),
        "DRPC_TEST_PARTITIONS": str(PARTITIONS),
    }
    command = [
        sys.executable, "-m", "drpc.transactional.cli", "run", "tests.trident.faults:topology",
        "--state-dir", str(state_dir), "--max-spout-pending", "3", "--checkpoint-dir", store,
    ]  # fmt: skip
    rng = random.Random(41)
    kills = kill_after_commits(command, env, state_dir, TXID, list(targets), rng, moves=True)
    assert kills == len(targets), "a run finished before it was killed; make the input larger"
    final_dir = tmp_path / "final"
    topology = word_count(str(tmp_path / "log"), opaque, TAKE, partitions=PARTITIONS)
    final = run(
        topology, state_dir=str(final_dir), max_spout_pending=3, checkpoint_dir=store, conf=conf
    )
    assert final.commits and final.commits[0].txid > targets[-1]  # it went on after the kills
    assert committed(final_dir, counts_state(opaque)) == dict(expected)
