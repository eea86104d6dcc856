"""What one batch-mode task costs per tuple, and what its records cost to cross processes.

A Spark task of drpc runs a step over its partition (``drpc.executors.batch``):
the bolt runs, the coordination rules track every id, each emitted tuple
becomes a record, and the records are pickled once per receiving task, then
unpickled by that task. This measures those parts on the real code, for a
step that gets one request tuple per id and emits ``--fanout`` tuples per
request to 8 tasks by fields grouping:

- ``run``: ``TaskRun.run`` over the input (runner, routing, coordination,
  records built), per emitted tuple;
- ``pickle`` / ``unpickle``: ``TaskRun.blobs()`` and ``pickle.loads`` of every
  blob, per emitted tuple;
- the physical limit beside them: pickling the same values as bare lists
  (what must cross in any design), per tuple.

Medians over ``--repeats`` runs, microseconds per tuple. Used to check that a
change of the record types costs nothing beyond noise: run it before and after
and compare the two JSON files.

Usage: ``python bench/records.py [--requests 200] [--fanout 100] [--repeats 15]
[--out FILE]`` (default ``bench/results/records.json``).
"""

from __future__ import annotations

import argparse
import json
import pickle
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc import (  # noqa: E402
    BaseBasicBolt,
    BasicOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    Tuple,
)
from drpc.builders.linear_drpc import PREPARE_ID  # noqa: E402
from drpc.executors import batch  # noqa: E402

WORDS = [f"word{i}" for i in range(500)]


class EmitWords(BaseBasicBolt):
    """[id, n] -> n tuples [id, word]."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        id = tuple[0]
        for i in range(int(tuple[1])):
            collector.emit([id, WORDS[i % len(WORDS)]])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "word"))


class CountWords(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], 1])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


def request_input(prepare_task: int, ids: tuple[int, ...], fanout: int) -> list[Any]:
    """The step's input, one request tuple per id, in the form this version of the
    engine takes (shipments today; positional records before them), so the same script
    measures both sides of that change."""
    if hasattr(batch, "DATA"):  # the engine before typed shipments
        return [(batch.DATA, PREPARE_ID, "default", prepare_task, [id, fanout]) for id in ids]
    from drpc.executors.records import Shipment

    return [Shipment(PREPARE_ID, prepare_task, [("default", [id, fanout]) for id in ids])]


def measure(requests: int, fanout: int) -> dict[str, float]:
    builder = LinearDRPCTopologyBuilder("records")
    builder.add_bolt(EmitWords(), 1)
    builder.add_bolt(CountWords(), 8).fields_grouping(Fields("word"))
    topology = builder.create_topology()
    prepare_task = topology.component_task_ids[PREPARE_ID][0]
    ids = tuple(range(1, requests + 1))
    records = request_input(prepare_task, ids, fanout)
    tuples = requests * fanout

    started = time.perf_counter()
    run = batch.TaskRun(topology, "bolt0", 0, job_ids=ids).run(records)
    ran = time.perf_counter()
    blobs = run.blobs()
    pickled = time.perf_counter()
    received = [pickle.loads(blob) for _, blob in blobs]
    unpickled = time.perf_counter()
    assert len(received) == 8  # one blob per task of the next step

    values = [[id, WORDS[i % len(WORDS)]] for id in ids for i in range(fanout)]
    limit_started = time.perf_counter()
    bare = [pickle.dumps(values[i::8], protocol=pickle.HIGHEST_PROTOCOL) for i in range(8)]
    limit_pickled = time.perf_counter()
    for blob in bare:
        pickle.loads(blob)
    limit_unpickled = time.perf_counter()
    per = 1e6 / tuples
    return {
        "run_us": (ran - started) * per,
        "pickle_us": (pickled - ran) * per,
        "unpickle_us": (unpickled - pickled) * per,
        "limit_pickle_us": (limit_pickled - limit_started) * per,
        "limit_unpickle_us": (limit_unpickled - limit_pickled) * per,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(HERE / "results" / "records.json"))
    args = parser.parse_args()
    measure(args.requests, args.fanout)  # warm-up
    samples = [measure(args.requests, args.fanout) for _ in range(args.repeats)]
    medians = {key: statistics.median(s[key] for s in samples) for key in samples[0]}
    print(f"{args.requests} requests x {args.fanout} tuples, median of {args.repeats} runs")
    print(f"{'':24} {'us per tuple':>12}")
    for key, value in medians.items():
        print(f"{key:24} {value:12.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "requests": args.requests,
                "fanout": args.fanout,
                "repeats": args.repeats,
                "python": platform.python_version(),
                "medians_us_per_tuple": medians,
                "samples": samples,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
