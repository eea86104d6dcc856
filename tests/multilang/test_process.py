"""ShellProcess over real pipes: writes keep their order whichever thread sends them, and
never block on a subprocess that stops reading."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from drpc.multilang.process import QUIET, ShellProcess

pytestmark = pytest.mark.timeout(30)

CAT = (
    sys.executable,
    "-c",
    "import shutil, sys; shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer, 1)",
)


class Collected:
    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = threading.Event()

    def output(self, data: bytes) -> None:
        self.data += data

    def ended(self) -> None:
        self.closed.set()


def started(command: tuple[str, ...], collected: Collected) -> ShellProcess:
    process = ShellProcess(
        command,
        on_output=collected.output,
        on_closed=collected.ended,
        on_stderr=lambda line: None,
    )
    process.start()
    return process


def test_writes_far_apart_and_close_together_arrive_in_order() -> None:
    """Both sides of ``QUIET``: a write after a pause goes out from the caller's thread, a
    burst queues for the writer thread; the bytes arrive as they were written."""
    collected = Collected()
    process = started(CAT, collected)
    sent = bytearray()
    for round in range(20):
        for n in range(50):  # a burst: each write within QUIET of the last
            chunk = b"%d.%d;" % (round, n)
            process.write(chunk)
            sent += chunk
        time.sleep(QUIET * 3)  # a pause: the next write is a quiet one
    assert process.stop(grace=5.0) == 0
    assert collected.closed.wait(5.0)
    assert bytes(collected.data) == bytes(sent)


def test_a_subprocess_that_stops_reading_never_blocks_a_write() -> None:
    collected = Collected()
    process = started((sys.executable, "-c", "import time; time.sleep(60)"), collected)
    chunk = b"x" * 65536
    began = time.monotonic()
    for _ in range(64):  # 4 MiB, far past a pipe's buffer
        process.write(chunk)
        time.sleep(QUIET * 2)  # each one a quiet write, tried from this thread first
    assert time.monotonic() - began < 10.0
    status = process.kill()
    assert status is not None and status < 0  # killed by a signal
    assert collected.closed.wait(5.0)
