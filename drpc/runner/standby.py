"""A standby runner: started and warm, waiting to take over another runner's state.

Contract. A runner started with ``--standby`` hosts the same ``--transactional`` runs as
an active runner, over the same state directory. One process writes a state directory at
a time (``drpc.state.writer``), so the standby waits:

- ``warm(executor, options)`` first starts what a runner's start spends its seconds on:
  the Spark session, and on ``spark`` the resident tasks (``options`` are the executor's,
  ``master``, ``spark_conf``, ``start_timeout``, ``slots``). Nothing for ``local``.
- ``wait_for_state(state_dir, state_options, stop)`` then claims the directory's writer
  lock as ``STANDBY_HOLDER``. While the active runner holds it, the standby logs once
  who holds it and tries again every ``CLAIM_POLL`` seconds. The kernel drops a dead
  process's lock, so a SIGKILLed active runner is replaced at the next try. Returns the
  claim, or None when ``stop`` was set first.

The runner then registers its runs, each claiming the directory as its topology, and
releases the standby's claim: the directory is never free in between, so a second
standby cannot slip in. From there it starts as any runner does: it resumes after the
last global commit, deploys its functions, and fetches from its servers.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from drpc import runtime
from drpc.errors import StateInUseError
from drpc.executors.resident.executor import resident_cluster_of
from drpc.sparkconf import DEFAULT_START_TIMEOUT
from drpc.state import StateEnvironment
from drpc.state.writer import CLAIM_POLL, WriterClaim

log = logging.getLogger("drpc.runner")

STANDBY_HOLDER = "drpc-runner standby"
"""The holder a standby claims a state directory as, until its runs claim it."""


def warm(executor: str, options: dict[str, Any]) -> None:
    if executor == "local":
        return
    master, spark_conf = options.get("master"), options.get("spark_conf")
    timeout = float(options.get("start_timeout", DEFAULT_START_TIMEOUT))
    started = time.monotonic()
    if executor == "spark":
        resident_cluster_of(master, spark_conf, timeout, options.get("slots"))
    else:
        runtime.get_session(master, spark_conf, start_timeout=timeout)
    log.info("standby: %s executor warm in %.1f s", executor, time.monotonic() - started)


def wait_for_state(
    state_dir: str,
    state_options: dict[str, Any],
    stop: threading.Event,
    *,
    poll: float = CLAIM_POLL,
) -> WriterClaim | None:
    env = StateEnvironment.open(state_dir, **state_options)

    def busy(error: StateInUseError) -> None:
        holders = ", ".join(error.holders) or "unknown runs"
        log.info(
            "standby: state directory %s is written by process %s (%s); taking over when it stops",
            state_dir,
            error.pid,
            holders,
        )

    waited = time.monotonic()
    claim = env.claim_writer_when_free(STANDBY_HOLDER, stop, poll=poll, on_busy=busy)
    if claim is not None:
        log.info(
            "standby: taking over state directory %s (waited %.1f s)",
            state_dir,
            time.monotonic() - waited,
        )
    return claim
