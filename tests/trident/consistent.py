"""Test hooks for the consistent-reads example (``drpc.examples.vocabulary_counts``).

Run as ``python -m tests.trident.consistent STATE_DIR BATCHES`` to commit up to BATCHES
batches (printing ``committed N`` after each, then ``done``): the writer the SIGKILL test
kills. Module-level: Spark workers import these operations.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from drpc.examples.vocabulary_counts import build_vocabulary_counts
from drpc.trident import Function, TridentCollector, TridentTuple, run


class Sleep(Function):
    """Sleeps ``seconds`` per tuple (on a query's args: once, so it outlives a retention)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        time.sleep(self.seconds)
        collector.emit([])


class RecordPid(Function):
    """Creates a file named after the pid of the process running it in ``directory`` (the
    resident worker a test kills)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        path = os.path.join(self.directory, str(os.getpid()))
        if not os.path.exists(path):
            with open(path, "w"):
                pass
        collector.emit([])


def main(state_dir: str, batches: int) -> None:
    def say(info: Any) -> None:
        sys.stdout.write(f"committed {info.txid}\n")
        sys.stdout.flush()

    run(build_vocabulary_counts(batches), state_dir=state_dir, executor="local", on_commit=say)
    sys.stdout.write("done\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
