"""Fixtures of the multi-host tests: two hosts, a Spark cluster on one, and what its executors
run. Module-scoped: a test module shares one cluster (a test that kills a worker runs last)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cluster.harness import (
    SparkCluster,
    TwoHosts,
    namespaces_unavailable,
    pack_environment,
    zip_packages,
)


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoHosts]:
    """The two hosts, each with a private disk over the same path (``two_hosts.private``)."""
    reason = namespaces_unavailable()
    if reason is not None:
        pytest.skip(f"two hosts on one machine need network namespaces: {reason}")
    with TwoHosts(private=tmp_path_factory.mktemp("private-disk")) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def _packing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[dict[str, Path]]]:
    """``shipped``, packed on a thread of its own while the cluster's JVMs start."""
    folder = tmp_path_factory.mktemp("shipped")
    with ThreadPoolExecutor(1, thread_name_prefix="packing") as pool:
        yield pool.submit(
            lambda: {
                "environment": pack_environment(folder / "drpc-env.tar.gz"),
                "code": zip_packages(folder / "tests.zip", "tests"),
            }
        )


@pytest.fixture(scope="module")
def spark_cluster(
    two_hosts: TwoHosts,
    tmp_path_factory: pytest.TempPathFactory,
    _packing: Future[dict[str, Path]],
) -> Iterator[SparkCluster]:
    """A Spark master and two one-core workers on ``two_hosts.cluster``."""
    with SparkCluster(two_hosts.cluster, tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def shipped(_packing: Future[dict[str, Path]]) -> dict[str, Path]:
    """What reaches the executors: ``environment``, a packed environment with drpc and its
    executor-side dependencies (``spark.archives``), and ``code``, the repository's tests
    package as a zip (``spark.submit.pyFiles``: the test topologies' modules)."""
    return _packing.result()
