"""Topologies the fault tests serve from other processes (importable by module:attr)."""

from __future__ import annotations

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from tests.spark.workload import SlowFor


def slow() -> LinearDRPCTopologyBuilder:
    """Function "slow": sleeps its argument's number of seconds, then answers "done"."""
    builder = LinearDRPCTopologyBuilder("slow")
    builder.add_bolt(SlowFor())
    return builder
