"""Running ``child.py`` in a separate interpreter and talking to it line by line."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

from drpc.state import StateEnvironment

CHILD = Path(__file__).with_name("child.py")


def spawn(mode: str, state_dir: Path, arg: str = "0") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(state_dir), arg],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def expect_line(process: subprocess.Popen[str], expected: str) -> None:
    """Wait for the child's next line and check it is ``expected``; fail with its stderr if not.

    A child that dies gives an empty line; one that hangs is stopped by pytest's timeout.
    """
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != expected:
        kill(process)
        stderr = process.stderr.read() if process.stderr else ""
        raise AssertionError(f"child printed {line!r}, expected {expected!r}; stderr:\n{stderr}")


def kill(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=20)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def kill_writer_mid_publish(env: StateEnvironment, state_dir: Path, mode: str, arg: str) -> None:
    """A child commits (``child.py`` MODE ARG, a ``...-then-hold`` mode) and is SIGKILLed
    holding LMDB's write lock, its last commit written but not yet published: as a
    writer killed between LMDB's two publishing steps leaves it, the lock file's current
    txnid is set back by one. ``env`` is this process's, open before the child dies (so the
    lock file is not rebuilt); the txnid's place in the lock file is found by watching it
    change over the child's commit."""
    lock = state_dir / "lock.mdb"
    before_id, before = env._lmdb.info()["last_txnid"], lock.read_bytes()[:_LOCK_HEADER]
    child = spawn(mode, state_dir, arg)
    try:
        expect_line(child, "holding")
        after_id, after = env._lmdb.info()["last_txnid"], lock.read_bytes()[:_LOCK_HEADER]
        [offset] = [
            offset
            for offset in range(0, _LOCK_HEADER, 8)
            if struct.unpack_from("<Q", before, offset)[0] == before_id
            and struct.unpack_from("<Q", after, offset)[0] == after_id
        ]
        with lock.open("r+b") as raw:
            raw.seek(offset)
            raw.write(struct.pack("<Q", after_id - 1))
    finally:
        kill(child)


_LOCK_HEADER = 256  # LMDB's lock file header, which holds the current txnid
