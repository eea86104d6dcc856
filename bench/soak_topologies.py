"""Topologies of the soak (``bench/soak.py``), importable by the server it starts and by
Spark's Python workers (the soak puts the repository on their PYTHONPATH)."""

from __future__ import annotations

from drpc import BaseBasicBolt, BasicOutputCollector, Fields, OutputFieldsDeclarer, Tuple
from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder


class AlwaysFails(BaseBasicBolt):
    """Raises for every input: its requests fail with FAILED_REQUEST."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        raise ValueError(f"soak failure for {tuple[1]!r}")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


def failing() -> LinearDRPCTopologyBuilder:
    builder = LinearDRPCTopologyBuilder("soakfail")
    builder.add_bolt(AlwaysFails(), 2)
    return builder
