"""A transactional run keeps drpc's own records (commit record, batch metadata) out of
pickle: it writes explicit bytes, resumes a directory an earlier drpc wrote with pickles,
and neither a run nor ``drpc-transactional status`` runs a crafted record's code."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from drpc.errors import StateFormatError
from drpc.examples.transactional_global_count import GLOBAL_COUNT_MAP, build_global_count
from drpc.state import StateEnvironment, TransactionalMap
from drpc.state.env import COORDINATOR_DB, ROTATING_DB
from drpc.state.records import decode_commit, decode_plain
from drpc.transactional import run
from tests.state.test_records import crafted

ROOT = Path(__file__).resolve().parents[2]


def own_records(env: StateEnvironment) -> dict[tuple[str, bytes], bytes]:
    """Every commit record and batch-metadata record, by database and key."""
    with env.read() as txn:
        found = {(COORDINATOR_DB, key): value for key, value in txn.scan(COORDINATOR_DB, b"")}
        found |= {
            (ROTATING_DB, key): value
            for key, value in txn.scan(ROTATING_DB, b"")
            if b"\x04meta" in key
        }
    return found


def test_own_records_are_explicit_earlier_pickles_resume_and_crafted_ones_run_nothing(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    first = run(build_global_count(), state_dir=str(state_dir), max_batches=2)
    assert [commit.txid for commit in first.commits] == [1, 2]
    env = StateEnvironment.open(str(state_dir))
    records = own_records(env)
    assert {db for db, _ in records} == {COORDINATOR_DB, ROTATING_DB}
    assert all(value[:2] in (b"c1", b"j1") for value in records.values())
    # Rewrite them as drpc wrote them before (pickles): the run resumes after txid 2.
    for (db, key), value in records.items():
        old = decode_commit(value) if db == COORDINATOR_DB else decode_plain(value, "meta")
        env.run_write(lambda txn, db=db, key=key, old=old: txn.put(db, key, pickle.dumps(old)))
    env.close()
    rest = run(build_global_count(), state_dir=str(state_dir))
    assert rest.commits[0].txid == 3
    env = StateEnvironment.open(str(state_dir))
    assert TransactionalMap(env, GLOBAL_COUNT_MAP).get("count") == 19  # nothing twice
    # A crafted commit record: refused by the status command and by a run, never run.
    marker = tmp_path / "ran"
    [(db, key)] = [entry for entry in own_records(env) if entry[0] == COORDINATOR_DB]
    env.run_write(lambda txn: txn.put(db, key, crafted(marker)[1]))
    env.close()
    status = subprocess.run(
        [sys.executable, "-m", "drpc.transactional.cli", "status", "--state-dir", str(state_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 1
    assert status.stderr.startswith("drpc-transactional: a commit record was refused: it names ")
    assert len(status.stderr.splitlines()) == 1
    with pytest.raises(StateFormatError):
        run(build_global_count(), state_dir=str(state_dir))
    assert not marker.exists()
