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


def test_the_runner_package_imports_without_the_server_s_dependencies() -> None:
    # a resident task on a worker imports drpc.runner to fetch requests, and a worker's
    # Python need not have aiohttp: only the command line and its topology port use it
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, drpc.runner, drpc.runner.remote_runner\n"
            "print(sorted(m for m in sys.modules\n"
            "             if m == 'aiohttp' or m.startswith('drpc.server')))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
