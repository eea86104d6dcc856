"""A read of a partition this process does not hold goes to its owner: a resident task asks
its peer (a ``Call`` between workers), the driver asks the owner task; the answer, or the
typed error, comes back. Runs in a process of its own (two resident tasks on ``local[2]``:
the suite's shared session has one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from drpc.state.keygroups import partition_of

from .remote_reads import WORDS

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_a_partition_on_another_task_is_read_by_its_owner(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-m", "tests.spark.remote_reads", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.splitlines()[-1])
    pids = {int(node): pid for node, pid in report["pids"].items()}
    held = {index: sorted([w, 2] for w in WORDS if partition_of(w, 2) == index) for index in (0, 1)}
    task_2 = report["task 2 reads partition 0"]
    assert (task_2["asked_by"], task_2["read_by"]) == (pids[2], pids[1])
    assert task_2["items"] == held[0]
    task_1 = report["task 1 reads partition 1"]
    assert (task_1["asked_by"], task_1["read_by"]) == (pids[1], pids[2])
    assert task_1["items"] == held[1]
    own = report["task 1 reads its own"]  # never asked of itself: the reader would loop
    assert own["error"] == "PartitionLostError" and "this task owns it" in own["message"]
    driver = report["the driver reads partition 1"]
    assert driver["read_by"] == pids[2] and driver["items"] == held[1]
    # and a query grouped by the key, its tasks with the partitions they read, answers
    assert sorted(report["query"]) == sorted([word, 2] for word in WORDS)
