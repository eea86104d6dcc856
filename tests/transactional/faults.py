"""The word count used by the fault tests; configured by environment for subprocess runs.

``DRPC_TEST_LOG_DIR``: the file-log directory; ``DRPC_TEST_MARKERS``: where
injected first-attempt failures leave their markers (unset: no failures);
``DRPC_TEST_OPAQUE``: "1" for the opaque spout and map; ``DRPC_TEST_TAKE``:
lines per partition per batch; ``DRPC_STATE_DIR``: the state directory
``count_query`` answers from. ``kill_after_commits`` SIGKILLs runs of a
command at chosen points (the SIGKILL tests of transactional and Trident
topologies).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from drpc import (
    BaseBasicBolt,
    BasicOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    Topology,
    TopologyContext,
    Tuple,
)
from drpc.state import CoordinatorState
from drpc.state.topology import STATE_DIR_CONF, TopologyState
from drpc.transactional import TransactionalTopologyBuilder
from drpc.transactional.filelog import FileLogTransactionalSpout, OpaqueFileLogTransactionalSpout

from . import bolts

TAKE_PER_BATCH = 1000


def word_count(
    log_dir: str, markers: str | None = None, opaque: bool = False, take: int = TAKE_PER_BATCH
) -> TransactionalTopologyBuilder:
    kind = OpaqueFileLogTransactionalSpout if opaque else FileLogTransactionalSpout
    return count_words(kind(log_dir, Fields("word"), take), "fault-words", markers, opaque)


def count_words(
    spout: Any, topology_id: str, markers: str | None, opaque: bool, percent: int = 20
) -> TransactionalTopologyBuilder:
    """The fault word count over any spout of a ``word`` field; ``percent`` of the first
    processing and commit attempts fail where ``markers`` says."""
    builder = TransactionalTopologyBuilder(topology_id, "spout", spout, 2)
    builder.set_bolt("partial", bolts.PartialWordCount(markers, percent), 3).fields_grouping(
        "spout", Fields("word")
    )
    builder.set_bolt(
        "commit", bolts.CommitWordCounts(opaque=opaque, marker_dir=markers), 2
    ).fields_grouping("partial", Fields("word"))
    return builder


def topology() -> TransactionalTopologyBuilder:
    return word_count(
        os.environ["DRPC_TEST_LOG_DIR"],
        os.environ.get("DRPC_TEST_MARKERS"),
        os.environ.get("DRPC_TEST_OPAQUE") == "1",
        int(os.environ.get("DRPC_TEST_TAKE", TAKE_PER_BATCH)),
    )


class CommittedCount(BaseBasicBolt):
    """[id, word] -> [id, the word's committed count in the fault word count's state]."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        opaque = os.environ.get("DRPC_TEST_OPAQUE") == "1"
        kind = context.state.opaque_map if opaque else context.state.transactional_map
        self.counts = kind("counts", default=0)

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], str(self.counts.get(tuple[1]))])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


def count_query() -> Topology:
    """DRPC function ``count``: a word's committed count, from ``DRPC_STATE_DIR``."""
    builder = LinearDRPCTopologyBuilder("count")
    builder.add_bolt(CommittedCount(), 2)
    return builder.create_topology({STATE_DIR_CONF: os.environ["DRPC_STATE_DIR"]})


def kill_after_commits(
    command: list[str],
    env: dict[str, str],
    state_dir: Path,
    topology_id: str,
    targets: list[int],
    rng: random.Random,
    *,
    moves: bool = False,
) -> int:
    """Run ``command`` once per target txid, SIGKILLed soon after its run commits past the
    target: mid-processing, mid-emit or mid-commit, wherever the next instructions happen to
    be. Stops early when a run finishes first (a run that fails instead fails the caller,
    with its stderr); returns how many runs it killed.

    With ``moves`` each run is a driver on another host: its state directory is a new one,
    ``state_dir`` with the run's number after it (``state-1``, ...), put for ``state_dir``
    in ``command`` and ``env``, and the directory of the run before is deleted."""
    kills = 0
    previous: Path | None = None
    for number, target in enumerate(targets, 1):
        here = state_dir.with_name(f"{state_dir.name}-{number}") if moves else state_dir
        run_command = [part.replace(str(state_dir), str(here)) for part in command]
        run_env = {name: value.replace(str(state_dir), str(here)) for name, value in env.items()}
        if previous is not None:
            shutil.rmtree(previous)
        previous = here if moves else None
        env_state = None
        process = subprocess.Popen(run_command, env=run_env, stderr=subprocess.PIPE, text=True)
        while process.poll() is None:
            if (here / "data.mdb").exists():
                env_state = env_state or TopologyState.at(str(here)).env
                if CoordinatorState(env_state, topology_id).next_txid() > target:
                    time.sleep(rng.uniform(0, 0.03))
                    break
            time.sleep(0.005)
        if process.poll() is not None:
            _, stderr = process.communicate()
            assert process.returncode == 0, (
                f"run {number} exited with {process.returncode} before it was killed: "
                f"{stderr[-3000:]}"
            )
            break
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        kills += 1
        if moves and env_state is not None:
            env_state.close()  # its directory goes with the host
    return kills
