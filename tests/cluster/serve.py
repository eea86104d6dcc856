"""A DRPC server script for ``spark-submit``, as docs/how-to/spark-submit.md shows:
its bolt is defined here, in ``__main__``, so it travels to the executors by value.

    spark-submit --master spark://HOST:7077 serve.py --topology __main__:shout [drpc-server flags]
"""

from __future__ import annotations

from drpc.server.cli import main

from drpc import BaseBasicBolt, BasicOutputCollector, Fields, LinearDRPCTopologyBuilder, Tuple
from drpc.model.streams import OutputFieldsDeclarer


class Shout(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], tuple[1].upper() + "!"])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


def shout() -> LinearDRPCTopologyBuilder:
    """Function "shout": "hi" -> "HI!"."""
    builder = LinearDRPCTopologyBuilder("shout")
    builder.add_bolt(Shout(), 2)
    return builder


if __name__ == "__main__":
    raise SystemExit(main())
