"""Exactly-once word count into LMDB: drpc transactional topologies against Structured Streaming.

Both count the same words (a seeded Zipf draw over a 20 000-word vocabulary)
in batches of 10 000 into LMDB state, side by side in one run on one
SparkSession, and both final counts are checked against the input:

- drpc: a transactional topology over the file-log source (4 partition files,
  2 500 lines per partition per batch), a batch bolt counting per word and a
  committer adding the counts to a ``TransactionalMap``, up to 3 batches in
  flight: streamed through the resident Spark tasks (``spark``, the default), one
  Spark job per batch (``spark-batch``) and on the local executor;
- Structured Streaming, as a competent user writes it: a text file stream (200
  files of 10 000 lines, ``maxFilesPerTrigger=1``, ``availableNow``), counting
  per micro-batch in Spark (``groupBy``, ``spark.sql.shuffle.partitions`` as many
  as cores: 2 here) and in ``foreachBatch`` adding the counts, 8-byte integers,
  to LMDB in one raw write transaction, applied once per batch id (the last
  applied id is stored in the same transaction: a replayed micro-batch is a
  no-op).

Before the measured runs, each Spark run counts a smaller set of words once,
unmeasured (``--warm-up-words``): the JVM compiles Spark's hot paths the first
time they run, and without a warm-up that cost falls on whichever run comes
first.

Usage: ``python bench/transactional.py [--words N] [--quick] [--warm-up-words N]
[--skip-local] [--out FILE]``; prints a table and writes JSON (default
``bench/results/transactional.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc import (  # noqa: E402
    BaseBatchBolt,
    BatchOutputCollector,
    Fields,
    OutputFieldsDeclarer,
    TopologyContext,
    Tuple,
    runtime,
)
from drpc.progress import Progress  # noqa: E402
from drpc.state import StateEnvironment, TransactionalMap  # noqa: E402
from drpc.state.partitioned import group_of  # noqa: E402
from drpc.state.topology import partitioned_map  # noqa: E402
from drpc.transactional import (  # noqa: E402
    BaseTransactionalBolt,
    ICommitter,
    TransactionalTopologyBuilder,
    run,
)
from drpc.transactional.filelog import FileLogTransactionalSpout, append_lines  # noqa: E402

BATCH = 10_000
PARTITIONS = 4


class CountWords(BaseBatchBolt):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector, self.id, self.counts = collector, id, Counter()

    def execute(self, tuple: Tuple) -> None:
        self.counts[tuple[1]] += 1

    def finish_batch(self) -> None:
        for word, count in self.counts.items():
            self.collector.emit([self.id, word, count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "word", "count"))


class CommitCounts(BaseTransactionalBolt, ICommitter):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.counts: Counter[str] = Counter()
        self.map = context.state.transactional_map("bench-counts", default=0)

    def execute(self, tuple: Tuple) -> None:
        self.counts[tuple[1]] += tuple[2]

    def finish_batch(self) -> None:
        self.map.multi_update({w: (lambda v, n=n: v + n) for w, n in self.counts.items()})

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


def word_count(log_dir: Path) -> TransactionalTopologyBuilder:
    spout = FileLogTransactionalSpout(log_dir, Fields("word"), BATCH // PARTITIONS)
    builder = TransactionalTopologyBuilder("bench-words", "spout", spout, 2)
    builder.set_bolt("partial", CountWords(), 4).fields_grouping("spout", Fields("word"))
    builder.set_committer_bolt("commit", CommitCounts(), 2).fields_grouping(
        "partial", Fields("word")
    )
    return builder


def generate(directory: Path, words: int, seed: int = 2012) -> tuple[Path, Path, Counter[str]]:
    """The same words twice: 4 partition files for drpc, one file per batch for streaming."""
    rng = random.Random(seed)
    vocabulary = [f"w{n}" for n in range(20_000)]
    weights = [1 / (n + 1) for n in range(len(vocabulary))]
    drawn = rng.choices(vocabulary, weights, k=words)
    drpc_dir, stream_dir = directory / "drpc-log", directory / "stream-files"
    for partition in range(PARTITIONS):
        append_lines(drpc_dir, partition, drawn[partition::PARTITIONS])
    stream_dir.mkdir(parents=True)
    per_partition = words // PARTITIONS
    ordered = [w for p in range(PARTITIONS) for w in drawn[p::PARTITIONS][:per_partition]]
    for number, start in enumerate(range(0, len(ordered), BATCH)):
        path = stream_dir / f"batch-{number:05d}.jsonl"
        path.write_text("".join(json.dumps(w) + "\n" for w in ordered[start : start + BATCH]))
    return drpc_dir, stream_dir, Counter(drawn)


def bench_drpc(
    log_dir: Path, state_dir: Path, executor: str, expected: Counter[str]
) -> dict[str, Any]:
    progress = Progress(sys.stderr, interval=10)
    started = time.perf_counter()

    def on_commit(info: Any) -> None:
        progress.update(f"drpc on {executor}: txid {info.txid}")

    result = run(
        word_count(log_dir),
        state_dir=str(state_dir),
        executor=executor,
        max_spout_pending=3,
        on_commit=on_commit,
    )
    return checked_run(
        f"drpc on {executor}", result, started, progress, state_dir, "bench-counts", expected
    )


def checked_run(
    label: str,
    result: Any,
    started: float,
    progress: Progress,
    state_dir: Path,
    map_name: str,
    expected: Counter[str],
) -> dict[str, Any]:
    """A finished run's record, once its committed counts are checked against the input."""
    elapsed = time.perf_counter() - started
    progress.close(f"{label}: {result.tuples} words in {elapsed:.1f} s")
    env = StateEnvironment.open(str(state_dir))
    group = group_of(env, map_name)  # a committer with several tasks keeps it in partitions
    state = (
        TransactionalMap(env, map_name)
        if group is None
        else partitioned_map(env, group, TransactionalMap, map_name, None)
    )
    counts = dict(state.items())
    assert counts == dict(expected), f"{label} counted wrongly"
    return {
        "seconds": elapsed,
        "tuples": result.tuples,
        "batches": len(result.commits),
        "tuples_per_s": result.tuples / elapsed,
        "replays": dict(result.replays),
    }


def bench_structured_streaming(
    session: Any, stream_dir: Path, state_dir: Path, checkpoint: Path, expected: Counter[str]
) -> dict[str, Any]:
    """What a competent Structured Streaming user writes: the count per micro-batch in Spark
    (``groupBy``, as many shuffle partitions as cores), then in ``foreachBatch`` one raw
    LMDB write transaction of 8-byte counts, applied once per batch id (the last applied
    id is stored in the same transaction, so a replayed micro-batch changes nothing)."""
    from pyspark.sql import functions as F

    env = lmdb.open(str(state_dir), map_size=1 << 30, max_dbs=1)
    progress = Progress(sys.stderr, interval=10)
    batches = {"n": 0}
    applied_key = b"\x00applied-batch"
    count = struct.Struct("<q")

    def write_batch(frame: Any, batch_id: int) -> None:
        rows = frame.groupBy("word").count().collect()
        with env.begin(write=True) as txn:
            applied = txn.get(applied_key)
            if applied is not None and count.unpack(applied)[0] >= batch_id:
                return
            for row in rows:
                key = row[0].encode()
                stored = txn.get(key)
                total = row[1] + (count.unpack(stored)[0] if stored is not None else 0)
                txn.put(key, count.pack(total))
            txn.put(applied_key, count.pack(batch_id))
        batches["n"] += 1
        progress.update(f"structured streaming: micro-batch {batch_id}")

    partitions = session.conf.get("spark.sql.shuffle.partitions")
    session.conf.set("spark.sql.shuffle.partitions", str(session.sparkContext.defaultParallelism))
    try:
        started = time.perf_counter()
        words = (
            session.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(stream_dir))
            .select(F.expr("substring(value, 2, length(value) - 2)").alias("word"))
        )
        query = (
            words.writeStream.foreachBatch(write_batch)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
    finally:
        session.conf.set("spark.sql.shuffle.partitions", partitions)
    total = sum(expected.values())
    progress.close(f"structured streaming: {total} words in {elapsed:.1f} s")
    with env.begin() as txn:
        counts = {
            key.decode(): count.unpack(value)[0]
            for key, value in txn.cursor()
            if key != applied_key
        }
    env.close()
    assert counts == dict(expected), "structured streaming counted wrongly"
    return {
        "seconds": elapsed,
        "tuples": total,
        "batches": batches["n"],
        "tuples_per_s": total / elapsed,
    }


def warm_up(
    session: Any,
    work: Path,
    words: int,
    *,
    streaming: bool = True,
    first: Callable[[Path, Path, Counter[str]], object] | None = None,
) -> None:
    """Each Spark run once over ``words`` other words (seed 7), checked but not reported:
    ``first`` (given the log, a directory of its own and the counts), then drpc's
    transactional run, then Structured Streaming unless not ``streaming``."""
    print(f"warming up: each Spark run counts {words} words once ...", flush=True)
    log_dir, stream_dir, expected = generate(work, words, seed=7)
    if first is not None:
        first(log_dir, work / "state-first", expected)
    bench_drpc(log_dir, work / "state-transactional", "spark", expected)
    if streaming:
        bench_structured_streaming(
            session, stream_dir, work / "state-stream", work / "checkpoint", expected
        )


def spark_environment(session: Any) -> dict[str, Any]:
    """The machine and Spark session a bench measured on (its JSON's ``environment``)."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "spark": session.version,
        "master": session.sparkContext.master,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def print_table(results: dict[str, Any], rows: tuple[tuple[str, str], ...]) -> None:
    """One line per run measured: seconds, batches and words/s, labelled as ``rows`` says."""
    width = max(len(label) for _, label in rows) + 2
    print(f"{'run':<{width}}{'seconds':>9}{'batches':>9}{'words/s':>11}")
    for key, label in rows:
        if key in results:
            r = results[key]
            print(
                f"{label:<{width}}{r['seconds']:>9.1f}{r['batches']:>9}{r['tuples_per_s']:>11.0f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--words", type=int, default=2_000_000, help="words to count (default 2 000 000)"
    )
    parser.add_argument("--quick", action="store_true", help="200 000 words (a smoke run)")
    parser.add_argument("--skip-local", action="store_true", help="do not run the local executor")
    parser.add_argument(
        "--warm-up-words",
        type=int,
        default=200_000,
        help="words each Spark run counts once, unmeasured, before the measured runs "
        "(default 200 000; 0: no warm-up)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "transactional.json")
    args = parser.parse_args(argv)
    words = 200_000 if args.quick else args.words
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="drpc-bench-tx-"))
    try:
        print(f"generating {words} words ...", flush=True)
        drpc_log, stream_dir, expected = generate(work, words)
        session = runtime.get_session()
        results: dict[str, Any] = {
            "environment": spark_environment(session),
            "words": words,
            "batch": BATCH,
            "distinct_words": len(expected),
            "warm_up_words": args.warm_up_words,
        }
        if args.warm_up_words:
            warm_up(session, work / "warm-up", args.warm_up_words)
        results["drpc_spark"] = bench_drpc(drpc_log, work / "state-spark", "spark", expected)
        results["drpc_spark_batch"] = bench_drpc(
            drpc_log, work / "state-spark-batch", "spark-batch", expected
        )
        if not args.skip_local:
            results["drpc_local"] = bench_drpc(drpc_log, work / "state-local", "local", expected)
        results["structured_streaming"] = bench_structured_streaming(
            session, stream_dir, work / "state-stream", work / "checkpoint", expected
        )
        ratio = (
            results["drpc_spark"]["tuples_per_s"] / results["structured_streaming"]["tuples_per_s"]
        )
        results["ratio_drpc_spark_to_structured_streaming"] = ratio
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.write_text(json.dumps(results, indent=2))
    print_table(
        results,
        (
            ("drpc_spark", "drpc transactional, resident Spark tasks"),
            ("drpc_spark_batch", "drpc transactional, a Spark job per batch"),
            ("drpc_local", "drpc transactional, local executor"),
            ("structured_streaming", "Structured Streaming + foreachBatch"),
        ),
    )
    print(f"drpc on Spark / Structured Streaming throughput: {ratio:.2f}x")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
