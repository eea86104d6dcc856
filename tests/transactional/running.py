"""A transactional run that goes on until a block ends, on a thread of the test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from drpc.transactional import CommitInfo, TransactionalRunner


@contextmanager
def running_forever(
    runner: TransactionalRunner, idle_interval: float
) -> Iterator[list[CommitInfo]]:
    """``runner.run(until_idle=False)`` on a thread until the block ends, then stopped and
    joined (asserted ended); yields its commits as they land. The runner is closed by the
    caller (``with runner:``), after this block."""
    commits: list[CommitInfo] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=runner.run,
        kwargs={
            "until_idle": False,
            "stop": stop,
            "on_commit": commits.append,
            "idle_interval": idle_interval,
        },
    )
    thread.start()
    try:
        yield commits
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not thread.is_alive()
