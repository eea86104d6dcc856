"""Waiting in tests: await the condition a test needs, never time a step.

The suite runs on loaded machines (two cores running other suites: load 4 and more),
so a test polls for the event it needs with a generous deadline instead of sleeping a
fixed time and hoping it happened, and a bound that must stay (a wait that may not
hang, a deadline that may not come early) leaves ``SLACK`` seconds of room above it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

SLACK = 5.0
"""Seconds a loaded machine may add to a wait before a test calls it a hang."""


def wait_until(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout} s")
        time.sleep(0.01)


def settle_garbage(quiet: int = 2, timeout: float = 10.0) -> None:
    """Collect until ``quiet`` collections in a row, 0.1 s apart, find nothing (at most
    ``timeout`` seconds): what a test dropped is freed later on another thread at times (an
    s3fs client closes its session on fsspec's IO thread, freeing a cycle of some 30 000
    botocore objects there), and must not land in a later test's count."""
    deadline = time.monotonic() + timeout
    found_nothing = 0
    while found_nothing < quiet and time.monotonic() < deadline:
        found_nothing = found_nothing + 1 if gc.collect() == 0 else 0
        time.sleep(0.1)
