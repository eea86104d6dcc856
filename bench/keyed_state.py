"""Keyed state that scales out: partitioned Trident state against Structured Streaming's.

A Trident count over a 4-partition file log, ``--tuples`` tuples (2 000 000) in
``--batch``-tuple batches (100 000), up to 3 batches in flight, on the resident Spark
tasks (``local[2]``, 2 resident slots), counted exactly once into LMDB, every final
count checked against the input. Three key sets, drawn with fixed seeds:

- ``words``: a Zipf draw over a 20 000-word vocabulary (``bench/transactional.py``'s);
- ``ids``: uniform over 2 000 000 ids, about 1.26 M distinct: every batch touches about
  97 000 keys, nearly all new;
- ``ids/10``: uniform over 126 000 ids, a tenth of the distinct keys.

Runs, side by side in one session, in ``--rounds`` alternating rounds (medians reported):

- drpc, partitioned: ``persistent_aggregate(LMDBMapState.transactional(...), Count(),
  ...).parallelism_hint(2)``: two partitions, each on the local disk of the resident
  task owning it; per-key partials go task to task, the driver only records global
  commits (``drpc.transactional.partitions``);
- drpc, one partition: the same without the hint, the path before partitions (every
  key's partial reaches the driver, which commits one LMDB transaction);
- Structured Streaming, as a Spark user writes it: ``groupBy("key").count()`` in update
  mode over a file stream of one 100 000-key file per micro-batch, 2 shuffle
  partitions, its RocksDB state store with changelog checkpointing, to the ``noop``
  sink (its own state store holds the counts; the sink costs nothing). It runs in a
  process of its own with its own ``local[2]`` session (drpc's resident tasks hold both
  slots of this one), after an unmeasured warm-up run there.
- plain Python, the limit of one writer: the keys already in memory, a ``Counter`` a batch
  and one durable LMDB transaction a batch (``bench/trident.py``'s), in this process, on
  one core: what any single process committing the keys can reach.

For each drpc run: tuples/s, and the driver's share of all the CPU the run spent (the
driver's Python process, against it plus the JVM and every Spark Python process, read
from ``/proc``, ``bench/procs.py``). Ratios: ids over words (partitioned), partitioned
over Structured Streaming (ids), partitioned over the one-writer limit (each key set),
the driver's share at ``ids`` over ``ids/10``, words partitioned over words in one
partition (the path before partitions).

``--parts query`` adds: the counts over 4 partitions and over one, then a DRPC ``MapGet``
of one key and of 200 keys on the resident tasks, p50 and p99 over ``--queries`` calls
each, side by side in alternating rounds.

``--parts quota`` (needs root: cgroups, ``bench/quota.py``): the partitioned ``ids``
count with 1 and then 2 resident tasks (slots), each in a process of its own under CPU
quotas: the driver's Python process and its JVM together limited to ``--driver-cores``
(0.25), each resident task's process to ``--worker-cores`` (0.5). Two workers against
one, at high cardinality: the state grows with the workers when the driver is not the
ceiling.

Usage: ``python bench/keyed_state.py [--tuples N] [--batch N] [--rounds N]
[--warm-up-tuples N] [--parts throughput,query] [--skip-streaming] [--quick]
[--out FILE]``; prints a table and writes JSON (default
``bench/results/keyed_state.json``). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import trident as trident_bench  # noqa: E402  (bench/trident.py: the plain-Python limit)

from bench import procs, quota  # noqa: E402
from drpc import Fields, runtime  # noqa: E402
from drpc.executors.resident.executor import resident_cluster  # noqa: E402
from drpc.state import StateEnvironment  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402
from drpc.transactional.filelog import FileLogTransactionalSpout, append_lines  # noqa: E402
from drpc.trident import (  # noqa: E402
    Count,
    FilterNull,
    Function,
    LMDBMapState,
    MapGet,
    TridentTopology,
    drpc_topologies,
    run,
)

PARTITIONS = 4  # file log partitions
MASTER = "local[2]"
SLOTS = 2
MAP = "bench-keyed-counts"
KEY_SETS = ("words", "ids", "ids/10")


def draw(key_set: str, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    if key_set == "words":
        vocabulary = [f"w{n}" for n in range(20_000)]
        weights = [1 / (n + 1) for n in range(len(vocabulary))]
        return rng.choices(vocabulary, weights, k=count)
    space = 2_000_000 if key_set == "ids" else 126_000
    return [f"id{rng.randrange(space)}" for _ in range(count)]


def generate(work: Path, key_set: str, count: int, batch: int, seed: int) -> dict[str, Any]:
    """The keys as a 4-partition file log (drpc) and one file per micro-batch (streaming)."""
    keys = draw(key_set, count, seed)
    name = key_set.replace("/", "-")
    log_dir, stream_dir = work / f"log-{name}-{seed}", work / f"stream-{name}-{seed}"
    for partition in range(PARTITIONS):
        append_lines(log_dir, partition, keys[partition::PARTITIONS])
    ordered = [key for p in range(PARTITIONS) for key in keys[p::PARTITIONS]]
    stream_dir.mkdir(parents=True)
    for number, start in enumerate(range(0, len(ordered), batch)):
        path = stream_dir / f"batch-{number:05d}.txt"
        path.write_text("".join(key + "\n" for key in ordered[start : start + batch]))
    return {"log": log_dir, "stream": stream_dir, "expected": Counter(keys), "name": name}


def trident(log_dir: Path, batch: int, partitions: int) -> TridentTopology:
    spout = FileLogTransactionalSpout(log_dir, Fields("key"), batch // PARTITIONS)
    topology = TridentTopology()
    counts = (
        topology.new_stream("bench-keyed", spout, parallelism=2)
        .group_by(["key"])
        .persistent_aggregate(LMDBMapState.transactional(MAP), Count(), ["count"])
    )
    if partitions > 1:
        counts.parallelism_hint(partitions)
    topology.new_drpc_stream("count").each(["args"], SplitKeys(), ["key"]).group_by(
        ["key"]
    ).state_query(counts, ["key"], MapGet(), ["count"]).each(["count"], FilterNull()).project(
        ["key", "count"]
    )
    topology.new_drpc_stream("get").state_query(counts, ["args"], MapGet(), ["count"])
    return topology


class SplitKeys(Function):
    def execute(self, tuple: Any, collector: Any) -> None:
        for key in tuple.get_value(0).split():
            collector.emit([key])


class CpuWatch:
    """CPU seconds of this process (the driver) and of its JVM and Spark Python processes."""

    def __init__(self) -> None:
        self.jvm = procs.jvm(os.getpid())

    def sample(self) -> tuple[float, float]:
        driver = procs.cpu_seconds(os.getpid())
        others = 0.0
        if self.jvm is not None:
            python = procs.spark_python(self.jvm)
            others = procs.cpu_seconds(self.jvm) + sum(
                procs.cpu_seconds(pid) for pid in [*python.tasks, *python.daemons, *python.others]
            )
        return driver, others


def bench_drpc(
    data: dict[str, Any], state_dir: Path, batch: int, partitions: int, watch: CpuWatch
) -> dict[str, Any]:
    driver_before, others_before = watch.sample()
    started = time.perf_counter()
    result = run(
        trident(data["log"], batch, partitions),
        state_dir=str(state_dir),
        executor="spark",
        max_spout_pending=3,
    )
    elapsed = time.perf_counter() - started
    driver_after, others_after = watch.sample()
    driver, others = driver_after - driver_before, others_after - others_before
    counts = LMDBMapState.transactional(MAP).query(StateEnvironment.open(str(state_dir)))
    assert dict(counts.items()) == dict(data["expected"]), f"drpc counted {data['name']} wrongly"
    return {
        "seconds": elapsed,
        "tuples": result.tuples,
        "batches": len(result.commits),
        "tuples_per_s": result.tuples / elapsed,
        "driver_cpu_s": driver,
        "other_cpu_s": others,
        "driver_share": driver / (driver + others) if driver + others else 0.0,
    }


def structured_streaming(stream_dir: Path, warm_dir: Path, work: Path) -> dict[str, Any]:
    """Structured Streaming over ``stream_dir`` in a process of its own, after a warm-up
    over ``warm_dir`` there (see the module doc)."""
    return procs.child_result(
        "the Structured Streaming run", __file__, "--streaming-child", stream_dir, warm_dir, work
    )


def streaming_child(stream_dir: Path, warm_dir: Path, work: Path) -> None:
    session = runtime.get_session(MASTER)
    bench_structured_streaming(session, warm_dir, work / "checkpoint-warm")
    print(json.dumps(bench_structured_streaming(session, stream_dir, work / "checkpoint")))


def bench_structured_streaming(session: Any, stream_dir: Path, checkpoint: Path) -> dict[str, Any]:
    """``groupBy("key").count()`` in update mode, RocksDB with changelog checkpointing."""
    settings = {
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    }
    before = {key: session.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        session.conf.set(key, value)
    try:
        started = time.perf_counter()
        query = (
            session.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(stream_dir))
            .withColumnRenamed("value", "key")
            .groupBy("key")
            .count()
            .writeStream.outputMode("update")
            .format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        rows = sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)
        batches = len(query.recentProgress)
    finally:
        for key, value in before.items():
            if value is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, value)
    return {
        "seconds": elapsed,
        "tuples": rows,
        "batches": batches,
        "tuples_per_s": rows / elapsed,
    }


def bench_queries(work: Path, data: dict[str, Any], batch: int, queries: int) -> dict[str, Any]:
    """``MapGet`` on the resident tasks, over 4 partitions and, side by side, over one: of
    one key (``get``: the argument is the key), and of 200 keys (``count``: split, grouped
    by key), p50 and p99 in alternating rounds."""
    expected = data["expected"]
    some = sorted(expected)[:200]
    asks = {
        "MapGet, one key": ("get", some[0], [[some[0], expected[some[0]]]]),
        "200 keys, grouped by key": (
            "count",
            " ".join(some),
            sorted([k, expected[k]] for k in some),
        ),
    }
    latencies: dict[str, list[float]] = {}
    for partitions in (4, 1, 4, 1):
        topology = trident(data["log"], batch, partitions)
        state_dir = work / f"state-query-{partitions}"
        if not state_dir.exists():
            run(topology, state_dir=str(state_dir), executor="spark", max_spout_pending=3)
        with LocalDRPC(executor="spark", timeout=60.0) as drpc:
            for function in drpc_topologies(topology, str(state_dir)):
                drpc.register(function)
            for label, (function, argument, want) in asks.items():
                for _ in range(50):  # warm-up
                    drpc.execute(function, argument)
                measured = latencies.setdefault(f"{label}, {partitions} partition(s)", [])
                for _ in range(queries // 2):
                    started = time.perf_counter()
                    answer = drpc.execute(function, argument)
                    measured.append(time.perf_counter() - started)
                    assert sorted(json.loads(answer)) == want, answer
    results: dict[str, Any] = {}
    for label, measured in latencies.items():
        measured.sort()
        results[label] = {
            "p50_ms": 1000 * statistics.median(measured),
            "p99_ms": 1000 * measured[int(0.99 * (len(measured) - 1))],
            "calls": len(measured),
        }
    return results


def quota_child(log_dir: Path, warm_dir: Path, work: Path, slots: int) -> None:
    """A run with ``slots`` resident tasks in this process: warm up, say which processes
    to limit, wait for "go" on stdin, then the measured run (see the module doc)."""
    session = runtime.get_session(MASTER)
    cluster = resident_cluster(session.sparkContext, slots=slots).start()
    run(trident(warm_dir, 100_000, 2), state_dir=str(work / "warm"), executor="spark")
    tasks = [cluster.call(node, os.getpid).result() for node in cluster.workers]
    jvm = procs.jvm(os.getpid())
    print(json.dumps({"driver": [os.getpid(), jvm], "tasks": tasks}), flush=True)
    assert sys.stdin.readline().strip() == "go"
    started = time.perf_counter()
    result = run(trident(log_dir, 100_000, 2), state_dir=str(work / "state"), executor="spark")
    elapsed = time.perf_counter() - started
    print(json.dumps({"seconds": elapsed, "tuples": result.tuples}), flush=True)


def bench_quota(
    data: dict[str, Any], warm: dict[str, Any], work: Path, driver_cores: float, worker_cores: float
) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for slots in (1, 2):
        child = subprocess.Popen(
            [sys.executable, __file__, "--quota-child", str(data["log"]), str(warm["log"]),
             str(work / f"quota-{slots}"), str(slots)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        pids = json.loads(child.stdout.readline())
        with contextlib.ExitStack() as limits:
            limits.enter_context(quota.cpu_quota(driver_cores, pids["driver"], label="driver"))
            for index, pid in enumerate(pids["tasks"]):
                limits.enter_context(quota.cpu_quota(worker_cores, [pid], label=f"task{index}"))
            child.stdin.write("go\n")
            child.stdin.flush()
            measured = json.loads(child.stdout.readline())
        child.wait(timeout=120)
        measured["tuples_per_s"] = measured["tuples"] / measured["seconds"]
        found[f"{slots}_workers"] = measured
    found["ratio_2_over_1"] = (
        found["2_workers"]["tuples_per_s"] / found["1_workers"]["tuples_per_s"]
    )
    found.update(driver_cores=driver_cores, worker_cores=worker_cores)
    return found


def median_of(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (and every round's tuples/s)."""
    merged = {
        key: statistics.median(r[key] for r in rounds)
        for key in rounds[0]
        if isinstance(rounds[0][key], int | float)
    }
    merged["rounds_tuples_per_s"] = [r["tuples_per_s"] for r in rounds]
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tuples", type=int, default=2_000_000, help="keys each run counts (default 2 000 000)"
    )
    parser.add_argument("--batch", type=int, default=100_000, help="keys a batch (default 100 000)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating rounds, medians kept (default 2)"
    )
    parser.add_argument(
        "--warm-up-tuples",
        type=int,
        default=1_000_000,
        help="keys each engine counts once, unmeasured, first (default 1 000 000)",
    )
    parser.add_argument(
        "--parts",
        default="throughput,query",
        help="comma-separated: throughput, query, quota (root) (default throughput,query)",
    )
    parser.add_argument(
        "--queries", type=int, default=2000, help="calls per query kind (default 2000)"
    )
    parser.add_argument(
        "--skip-streaming", action="store_true", help="leave out Structured Streaming"
    )
    parser.add_argument("--quick", action="store_true", help="200 000 tuples, one round")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "keyed_state.json",
        help="results JSON (default bench/results/keyed_state.json)",
    )
    parser.add_argument(
        "--driver-cores", type=float, default=0.25, help="quota: driver cores (default 0.25)"
    )
    parser.add_argument(
        "--worker-cores", type=float, default=0.5, help="quota: cores a worker (default 0.5)"
    )
    parser.add_argument("--streaming-child", nargs=3, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--quota-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.streaming_child:
        streaming_child(*args.streaming_child)
        return 0
    if args.quota_child:
        log_dir, warm_dir, work_dir, slots = args.quota_child
        quota_child(Path(log_dir), Path(warm_dir), Path(work_dir), int(slots))
        return 0
    if args.quick:
        args.tuples, args.rounds, args.warm_up_tuples, args.queries = 200_000, 1, 200_000, 200
    parts = set(args.parts.split(","))
    unknown = parts - {"throughput", "query", "quota"}
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from throughput, query, quota")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="drpc-bench-keyed-"))
    results: dict[str, Any] = {}
    try:
        session = runtime.get_session(MASTER)
        resident_cluster(session.sparkContext, slots=SLOTS).start()
        results["environment"] = {
            "cpus": os.cpu_count(),
            "spark": session.version,
            "master": MASTER,
            "resident_slots": SLOTS,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        results.update(tuples=args.tuples, batch=args.batch, rounds=args.rounds)
        watch = CpuWatch()
        print(f"generating {len(KEY_SETS)} key sets of {args.tuples} tuples ...", flush=True)
        data = {
            key_set: generate(work, key_set, args.tuples, args.batch, 11) for key_set in KEY_SETS
        }
        results["distinct_keys"] = {k: len(d["expected"]) for k, d in data.items()}
        if "throughput" in parts:
            warm = {
                k: generate(work, k, args.warm_up_tuples, args.batch, 7) for k in ("words", "ids")
            }
            print("warming up ...", flush=True)
            for key_set, warm_data in warm.items():
                for partitions in (1, 2):
                    bench_drpc(
                        warm_data,
                        work / f"warm-{key_set}-{partitions}",
                        args.batch,
                        partitions,
                        watch,
                    )
            runs = [
                ("drpc_partitioned_words", "words", 2),
                ("drpc_one_partition_words", "words", 1),
                ("drpc_partitioned_ids", "ids", 2),
                ("drpc_one_partition_ids", "ids", 1),
                ("drpc_partitioned_ids_tenth", "ids/10", 2),
            ]
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in runs}
            if not args.skip_streaming:
                rounds["structured_streaming_ids"] = []
            for number in range(args.rounds):
                for name, key_set, partitions in runs:
                    print(f"round {number + 1}: {name} ...", flush=True)
                    state = work / f"state-{name}-{number}"
                    rounds[name].append(
                        bench_drpc(data[key_set], state, args.batch, partitions, watch)
                    )
                for key_set in ("words", "ids"):
                    limit = trident_bench.bench_plain_python(
                        data[key_set]["log"],
                        work / f"plain-{data[key_set]['name']}-{number}",
                        args.batch,
                        data[key_set]["expected"],
                    )
                    rounds.setdefault(f"plain_python_{data[key_set]['name']}", []).append(limit)
                if not args.skip_streaming:
                    print(f"round {number + 1}: structured streaming ...", flush=True)
                    streamed = structured_streaming(
                        data["ids"]["stream"], warm["ids"]["stream"], work / f"stream-{number}"
                    )
                    total = sum(data["ids"]["expected"].values())
                    assert streamed["tuples"] == total, f"streaming read {streamed['tuples']} rows"
                    rounds["structured_streaming_ids"].append(streamed)
            for name, measured in rounds.items():
                results[name] = median_of(measured)
            rate = {name: results[name]["tuples_per_s"] for name in rounds}
            results["ratios"] = {
                "ids_over_words_partitioned": rate["drpc_partitioned_ids"]
                / rate["drpc_partitioned_words"],
                "words_partitioned_over_one_partition": rate["drpc_partitioned_words"]
                / rate["drpc_one_partition_words"],
                "ids_partitioned_over_one_partition": rate["drpc_partitioned_ids"]
                / rate["drpc_one_partition_ids"],
                "words_partitioned_over_plain_python": rate["drpc_partitioned_words"]
                / rate["plain_python_words"],
                "ids_partitioned_over_plain_python": rate["drpc_partitioned_ids"]
                / rate["plain_python_ids"],
                "driver_share_ids_over_tenth": results["drpc_partitioned_ids"]["driver_share"]
                / results["drpc_partitioned_ids_tenth"]["driver_share"],
            }
            if not args.skip_streaming:
                results["ratios"]["ids_partitioned_over_structured_streaming"] = (
                    rate["drpc_partitioned_ids"] / rate["structured_streaming_ids"]
                )
        if "quota" in parts:
            print("under CPU quotas: 1, then 2 resident tasks ...", flush=True)
            warm_ids = generate(work, "ids", args.warm_up_tuples, args.batch, 5)
            results["quota"] = bench_quota(
                data["ids"], warm_ids, work, args.driver_cores, args.worker_cores
            )
        if "query" in parts:
            print("queries over 4 partitions and over one ...", flush=True)
            results["queries"] = bench_queries(work, data["ids/10"], args.batch, args.queries)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.write_text(json.dumps(results, indent=2))
    report(results)
    print(f"written to {args.out}")
    return 0


def report(results: dict[str, Any]) -> None:
    labels = (
        ("drpc_partitioned_words", "drpc, 2 partitions, 20 000 words"),
        ("drpc_one_partition_words", "drpc, one partition, 20 000 words"),
        ("drpc_partitioned_ids", "drpc, 2 partitions, ~1.26 M ids"),
        ("drpc_one_partition_ids", "drpc, one partition, ~1.26 M ids"),
        ("drpc_partitioned_ids_tenth", "drpc, 2 partitions, ~126 000 ids"),
        ("structured_streaming_ids", "Structured Streaming RocksDB, ~1.26 M ids"),
        ("plain_python_words", "plain Python, one writer (limit), 20 000 words"),
        ("plain_python_ids", "plain Python, one writer (limit), ~1.26 M ids"),
    )
    width = max(len(label) for _, label in labels) + 2
    print(f"{'run':<{width}}{'tuples/s':>11}{'driver CPU':>12}")
    for key, label in labels:
        if key in results:
            r = results[key]
            share = f"{100 * r['driver_share']:.0f} %" if "driver_share" in r else "-"
            print(f"{label:<{width}}{r['tuples_per_s']:>11,.0f}{share:>12}")
    for name, value in results.get("ratios", {}).items():
        print(f"{name}: {value:.2f}x")
    if "quota" in results:
        limited = results["quota"]
        print(
            f"under quotas, ~1.26 M ids: 1 worker {limited['1_workers']['tuples_per_s']:,.0f}, "
            f"2 workers {limited['2_workers']['tuples_per_s']:,.0f} tuples/s: "
            f"{limited['ratio_2_over_1']:.2f}x"
        )
    for label, figures in results.get("queries", {}).items():
        p50, p99 = figures["p50_ms"], figures["p99_ms"]
        print(f"{label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")


if __name__ == "__main__":
    raise SystemExit(main())
