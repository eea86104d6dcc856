"""Processes the fault tests start and kill: a Spark standalone cluster on 127.0.0.1 (the
multi-host harness's ``SparkCluster`` on this machine's loopback, every port picked free)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.cluster.harness import LOOPBACK, SparkCluster, free_port, kill

HOST = LOOPBACK.address
__all__ = ["HOST", "free_port", "kill", "standalone_cluster"]


@contextmanager
def standalone_cluster(
    workdir: Path, workers: int = 2, memory: str = "1g"
) -> Iterator[SparkCluster]:
    """A Spark master and ``workers`` workers (one core each) on 127.0.0.1."""
    with SparkCluster(LOOPBACK, workdir, workers, memory, pick_port=free_port) as cluster:
        yield cluster
