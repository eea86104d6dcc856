"""The examples as users run them."""

from __future__ import annotations

import subprocess
import sys

from drpc.examples.reach import EXPECTED_REACH


def test_reach_demo_prints_the_reference_results() -> None:
    # The reach demo that predates the server still prints the reference results.
    out = subprocess.run(
        [sys.executable, "-m", "drpc.examples.reach"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = out.stdout.strip().splitlines()
    assert lines == [f"Reach of {url}: {reach}" for url, reach in EXPECTED_REACH.items()]


def test_reach_demo_has_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "drpc.examples.reach", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "--executor" in out.stdout
