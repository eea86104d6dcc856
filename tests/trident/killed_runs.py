"""The first half of the Trident SIGKILL test (tests/trident/test_exactly_once.py): the word
count's input written, then runs of the command line SIGKILLed after chosen commits.

``KilledRuns(...).run(workdir)`` writes the words to ``workdir/log`` (seed 19), runs
``drpc-transactional run`` on them with its state in ``workdir/state``, SIGKILLed soon
after each target txid commits, and returns how many runs it killed and the input's
counts. The test calls it for the local cases; a Spark case (a JVM to start per run) runs
it early in the session as ``python -m tests.trident.killed_runs WORKDIR CASE_JSON``
(tests/ahead.py), which prints ``{"kills": n, "expected": {word: count}}``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.transactional.faults import kill_after_commits
from tests.transactional.test_faults import write_words

from .faults import TXID

TAKE = 100  # lines per partition per batch: 400 words a batch over the 4 partitions


@dataclass(frozen=True)
class KilledRuns:
    executor: str
    master: str | None  # the Spark master of the killed runs (None: the local executor)
    opaque: bool
    words: int
    targets: tuple[int, ...]
    flaky: bool  # fail the first attempt of every Spark task (tests/trident/faults.py)

    def run(self, workdir: Path) -> tuple[int, Counter[str]]:
        expected = write_words(workdir / "log", seed=19, count=self.words)
        state_dir = workdir / "state"
        env = {
            **os.environ,
            "DRPC_TEST_LOG_DIR": str(workdir / "log"),
            "DRPC_TEST_OPAQUE": "1" if self.opaque else "0",
            "DRPC_TEST_TAKE": str(TAKE),
            "DRPC_STATE_DIR": str(state_dir),
            "DRPC_TEST_FLAKY": "1" if self.flaky else "0",
        }
        command = [
            sys.executable, "-m", "drpc.transactional.cli", "run", "tests.trident.faults:topology",
            "--state-dir", str(state_dir), "--max-spout-pending", "3", "--executor", self.executor,
        ]  # fmt: skip
        if self.master is not None:
            command += ["--master", self.master]
        rng = random.Random(5)
        kills = kill_after_commits(command, env, state_dir, TXID, list(self.targets), rng)
        return kills, expected

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> KilledRuns:
        fields = json.loads(text)
        return cls(**{**fields, "targets": tuple(fields["targets"])})


if __name__ == "__main__":
    kills, expected = KilledRuns.from_json(sys.argv[2]).run(Path(sys.argv[1]))
    print(json.dumps({"kills": kills, "expected": dict(expected)}))
