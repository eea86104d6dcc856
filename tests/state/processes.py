"""Running ``child.py`` in a separate interpreter and talking to it line by line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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
