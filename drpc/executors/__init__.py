"""Executors run topologies: ``"local"`` (in-process engine) or ``"spark"``.

Contract: ``create_executor(name, topology, services=..., conf=..., **options)``
returns an unstarted executor with ``start()``/``stop()``; unknown names and
unknown options raise ``ValueError``/``TypeError`` naming what was wrong.
"""

from __future__ import annotations

from typing import Any

from drpc.model.topology import Topology

EXECUTORS = ("local", "spark")


def create_executor(
    name: str,
    topology: Topology,
    *,
    services: dict[str, Any] | None = None,
    conf: dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    if name == "local":
        from drpc.executors.local import LocalExecutor

        return LocalExecutor(topology, services=services, conf=conf, **options)
    if name == "spark":
        from drpc.executors.spark import SparkExecutor

        return SparkExecutor(topology, services=services, conf=conf, **options)
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
