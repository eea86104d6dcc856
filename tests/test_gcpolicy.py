"""The longer young generation: raised inside the blocks and spans (an in-process engine's
life among them), the process's own restored after."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading

import pytest

from drpc.examples.exclamation import build_exclamation
from drpc.gcpolicy import (
    YOUNG_THRESHOLD,
    collected_less_often,
    enter_less_often,
    leave_less_often,
)
from drpc.testing import LocalDRPC


def test_a_block_runs_with_the_longer_young_generation_and_restores_the_one_it_found() -> None:
    before = gc.get_threshold()
    with collected_less_often():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError, match="a bolt failed"), collected_less_often():
        raise RuntimeError("a bolt failed")
    assert gc.get_threshold() == before


def test_the_last_of_overlapping_blocks_restores_the_processs_threshold() -> None:
    before = gc.get_threshold()
    with collected_less_often():
        with collected_less_often():
            pass
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the outer block is still running
    assert gc.get_threshold() == before

    # On two threads, the first to enter leaves first: the second must not restore the
    # raised threshold it found when it entered.
    entered, first_left = threading.Event(), threading.Event()
    seen: list[tuple[int, ...]] = []

    def second() -> None:
        with collected_less_often():
            entered.set()
            first_left.wait(5)
            seen.append(gc.get_threshold())

    with collected_less_often():
        thread = threading.Thread(target=second)
        thread.start()
        assert entered.wait(5)
    first_left.set()
    thread.join(5)
    assert seen == [(YOUNG_THRESHOLD, *before[1:])]
    assert gc.get_threshold() == before


def test_a_span_entered_and_left_restores_the_threshold() -> None:
    before = gc.get_threshold()
    enter_less_often()
    try:
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
    finally:
        leave_less_often()
    assert gc.get_threshold() == before


def test_a_leave_without_an_enter_is_an_error() -> None:
    # in a process of its own: here, an engine of another test may hold a span open
    left = subprocess.run(
        [sys.executable, "-c", "from drpc.gcpolicy import leave_less_often; leave_less_often()"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert left.returncode == 1
    assert left.stderr.splitlines()[-1] == (
        "RuntimeError: leave_less_often without enter_less_often"
    )


def test_an_in_process_engine_runs_with_the_longer_young_generation_until_it_stops() -> None:
    before = gc.get_threshold()
    with LocalDRPC() as drpc:
        drpc.register(build_exclamation())
        assert drpc.execute("exclamation", "hi") == "hi!"
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
    assert gc.get_threshold() == before
