"""Executors run DRPC topologies: ``"local"`` (the in-process streaming engine),
``"spark"`` (the same engine spread over long-lived resident Spark tasks) or
``"spark-batch"`` (a Spark job per batch of coalesced requests).

Contract: ``create_executor(name, topology, services=..., conf=..., **options)``
returns an unstarted ``Executor``; unknown names and unknown options raise
``ValueError``/``TypeError`` naming what was wrong. An ``Executor`` serves one
topology from ``start()`` until ``stop()``; both return once done (a Spark
session may take seconds to start). Every executor runs each bolt task through
the shared task core (``drpc.executors.task``). ``SPARK_EXECUTORS`` names the
executors that run on the process's Spark session and so take its settings
(``master``, ``spark_conf``, ``start_timeout``: ``drpc.sparkconf.session_options``).
"""

from __future__ import annotations

from typing import Any, Protocol

from drpc.executors.local import LocalExecutor
from drpc.executors.resident import ResidentExecutor
from drpc.executors.spark import SparkExecutor
from drpc.model.topology import Topology

EXECUTORS = ("local", "spark", "spark-batch")
SPARK_EXECUTORS = ("spark", "spark-batch")  # those that take a Spark session's settings


class Executor(Protocol):
    """A runtime serving one topology (what ``drpc.hosting.Host`` drives)."""

    topology: Topology

    def start(self) -> Executor: ...

    def stop(self) -> None: ...


def create_executor(
    name: str,
    topology: Topology,
    *,
    services: dict[str, Any] | None = None,
    conf: dict[str, Any] | None = None,
    **options: Any,
) -> Executor:
    if name == "local":
        return LocalExecutor(topology, services=services, conf=conf, **options)
    if name == "spark":
        return ResidentExecutor(topology, services=services, conf=conf, **options)
    if name == "spark-batch":
        return SparkExecutor(topology, services=services, conf=conf, **options)
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
