"""Exclamation: one basic bolt appends "!" to the argument ("hello" -> "hello!")."""

from __future__ import annotations

from drpc import (
    BaseBasicBolt,
    BasicOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    Tuple,
)


class ExclaimBolt(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], tuple[1] + "!"])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


def build_exclamation(
    function: str = "exclamation", parallelism: int = 3
) -> LinearDRPCTopologyBuilder:
    builder = LinearDRPCTopologyBuilder(function)
    builder.add_bolt(ExclaimBolt(), parallelism)
    return builder


topology = build_exclamation()
"""The exclamation function's builder, for ``--topology drpc.examples.exclamation:topology``."""
