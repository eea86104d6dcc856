"""Waiting in tests: await the condition a test needs, never time a step.

The suite runs on loaded machines (two cores running other suites: load 4 and more),
so a test polls for the event it needs with a generous deadline instead of sleeping a
fixed time and hoping it happened, and a bound that must stay (a wait that may not
hang, a deadline that may not come early) leaves ``SLACK`` seconds of room above it.
"""

from __future__ import annotations

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
