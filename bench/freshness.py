"""Freshness: how long an appended line takes to show in a DRPC query over committed state.

A Trident word count runs forever over a file log (4 partitions, the spout's parallelism
2, 100 000 lines a partition a batch at most), hosted in this process as a server would
host it, on ``--executors`` (``spark``: the resident Spark tasks, continuous; ``spark-batch``:
a Spark job per batch). Beside it a writer appends background words at ``--rates`` lines
per second (in 10 ms chunks over the partitions), and every ``--probe-every`` seconds
(0.05) the probe appends a word no line had before and asks the ``count`` DRPC query for it
(the in-process executor, every millisecond) until it reads 1: that wait is the line's
freshness. After ``--warm-up`` seconds (5) the probes of ``--seconds`` (20) are measured:
p50, p90, p99, max and the first in milliseconds, with the batches committed meanwhile and
the driver's CPU. With ``--warm-up 0`` the first probe is the first line appended after
the run started (issue 53's case: ``--rates 0 --probe-every 1 --seconds 40 --warm-up 0``,
40 lines at one a second, the first included).

Usage: ``python bench/freshness.py [--executors spark,spark-batch] [--rates 1,1000,50000]
[--seconds 20] [--warm-up 5] [--probe-every 0.05] [--out FILE]``; prints a table and
writes JSON (default ``bench/results/freshness.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc import Fields, runtime  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402
from drpc.transactional.filelog import FileLogTransactionalSpout, append_lines  # noqa: E402
from drpc.trident import (  # noqa: E402
    Count,
    LMDBMapState,
    MapGet,
    TridentTopology,
    drpc_topologies,
    runner,
)

PARTITIONS = 4
VOCABULARY = [f"word{i}" for i in range(2000)]
PROBE_EVERY = 0.05
QUERY_EVERY = 0.001
GIVE_UP = 60.0


def word_count(log_dir: Path) -> TridentTopology:
    topology = TridentTopology()
    counts = (
        topology.new_stream(
            "freshness", FileLogTransactionalSpout(log_dir, Fields("word"), 100_000), 2
        )
        .group_by(["word"])
        .persistent_aggregate(LMDBMapState.transactional("counts"), Count(), ["count"])
    )
    topology.new_drpc_stream("count").state_query(counts, ["args"], MapGet(), ["count"])
    return topology


def background(log_dir: Path, rate: float, stop: threading.Event) -> None:
    """Append ``rate`` lines a second over the partitions, in 10 ms chunks."""
    rng = random.Random(7)
    owed = 0.0
    last = time.monotonic()
    partitions = itertools.cycle(range(PARTITIONS))
    while not stop.wait(0.01):
        now = time.monotonic()
        owed += rate * (now - last)
        last = now
        lines = int(owed)
        if lines:
            owed -= lines
            append_lines(log_dir, next(partitions), rng.choices(VOCABULARY, k=lines))


def scenario(
    executor: str,
    rate: float,
    seconds: float,
    warm_up: float,
    query_executor: str = "local",
    probe_every: float = PROBE_EVERY,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="drpc-freshness-"))
    log_dir, state_dir = work / "log", work / "state"
    for partition in range(PARTITIONS):
        append_lines(log_dir, partition, [])
    topology = word_count(log_dir)
    stop = threading.Event()
    commits: list[float] = []
    run = runner(topology, state_dir=str(state_dir), executor=executor)
    hosted = threading.Thread(
        target=lambda: run.run(
            until_idle=False, stop=stop, on_commit=lambda info: commits.append(time.monotonic())
        )
    )
    writer = threading.Thread(target=background, args=(log_dir, rate, stop))
    freshness: list[float] = []
    try:
        with run, LocalDRPC(executor=query_executor, timeout=60.0) as drpc:
            [query] = drpc_topologies(topology, str(state_dir))
            drpc.register(query)
            hosted.start()
            writer.start()
            started = time.monotonic()
            cpu_at = None
            for probe in itertools.count():
                now = time.monotonic()
                if now - started > warm_up + seconds:
                    break
                if cpu_at is None and now - started > warm_up:
                    cpu_at, commits_at, measured_at = time.process_time(), len(commits), now
                word = f"probe-{executor}-{rate}-{probe}"
                appended = time.monotonic()
                append_lines(log_dir, probe % PARTITIONS, [word])
                while json.loads(drpc.execute("count", word)) != [[word, 1]]:
                    if time.monotonic() - appended > GIVE_UP:
                        raise RuntimeError(f"{word} never showed within {GIVE_UP:g} s")
                    time.sleep(QUERY_EVERY)
                seen = time.monotonic() - appended
                if now - started > warm_up:
                    freshness.append(seen)
                time.sleep(max(0.0, probe_every - seen))
            assert cpu_at is not None
            cpu = time.process_time() - cpu_at
            elapsed = time.monotonic() - measured_at
            batches = len(commits) - commits_at
            stop.set()  # the run ends before its runner closes
            hosted.join(timeout=120)
    finally:
        stop.set()
        if writer.is_alive():
            writer.join()
        shutil.rmtree(work, ignore_errors=True)
    first = freshness[0]
    ordered = sorted(freshness)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000, 1)

    return {
        "executor": executor,
        "rate": rate,
        "probes": len(ordered),
        "p50_ms": at(0.5),
        "p90_ms": at(0.9),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1] * 1000, 1),
        "first_ms": round(first * 1000, 1),
        "batches_per_second": round(batches / elapsed, 1),
        "driver_cpu_percent": round(100 * cpu / elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executors", default="spark,spark-batch")
    parser.add_argument("--rates", default="1,1000,50000")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warm-up", type=float, default=5.0)
    parser.add_argument(
        "--probe-every", type=float, default=PROBE_EVERY, help="seconds between probes (0.05)"
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--query-executor", default="local", help="where the count query runs (default local)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "freshness.json")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    runtime.get_session(args.master)
    rows = []
    try:
        for rate in (float(r) for r in args.rates.split(",")):
            for executor in args.executors.split(","):
                row = scenario(
                    executor,
                    rate,
                    args.seconds,
                    args.warm_up,
                    args.query_executor,
                    args.probe_every,
                )
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        runtime.stop_session()
    print(
        f"{'executor':<12}{'lines/s':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        f"{'first ms':>9}{'batches/s':>11}{'cpu %':>7}"
    )
    for row in rows:
        print(
            f"{row['executor']:<12}{row['rate']:>9g}{row['p50_ms']:>9}{row['p90_ms']:>9}"
            f"{row['p99_ms']:>9}{row['max_ms']:>9}{row['first_ms']:>9}"
            f"{row['batches_per_second']:>11}"
            f"{row['driver_cpu_percent']:>7}"
        )
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "master": args.master,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
