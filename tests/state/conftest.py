"""Fixtures for the LMDB state layer: a real environment in a fresh directory per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from drpc.state import StateEnvironment


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def env(state_dir: Path) -> Iterator[StateEnvironment]:
    environment = StateEnvironment.open(state_dir)
    yield environment
    environment.close()
