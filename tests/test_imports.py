"""Every public module imports on its own, first, in a fresh interpreter (no import cycles)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = [
    "drpc.transactional.builder",
    "drpc.transactional",
    "drpc.transactional.run",
    "drpc.transactional.spouts",
    "drpc.transactional.filelog",
    "drpc.state",
    "drpc.transactional.hosted",
    "drpc.server",
    "drpc.client",
    "drpc.runner",
]


@pytest.mark.parametrize("module", MODULES)
def test_the_module_imports_first(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
