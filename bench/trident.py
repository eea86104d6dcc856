"""Exactly-once word count into LMDB: drpc Trident against Structured Streaming and plain Python.

The same words as ``bench/transactional.py`` (a seeded Zipf draw over a
20 000-word vocabulary, 4 file-log partitions), counted exactly once into
LMDB state, side by side in one run on one SparkSession, every final count
checked against the input:

- drpc Trident: ``new_stream(file log).group_by(word).persistent_aggregate(
  LMDBMapState.transactional, Count())``: a per-partition partial count, then
  only per-word partials reach the commit (Trident's compiled path,
  ``drpc.trident.fused``: the file log read where the batch is processed, up to
  3 batches in flight); on the resident Spark tasks (``spark``, the default: a
  call per emitter task and batch, no Spark job), as one Spark job per batch
  (``spark-batch``) and on the local executor;
- Structured Streaming: ``bench/transactional.py``'s baseline at the same
  batch size, as a competent user writes it (the counts per micro-batch in
  Spark with as many shuffle partitions as cores, one raw LMDB transaction of
  8-byte counts per micro-batch, applied once per batch id);
- drpc transactional: ``bench/transactional.py``'s hand-written batch bolt
  and committer over the same file log and batch size, on the resident tasks;
- plain Python: ``Counter`` per batch and one durable LMDB transaction per
  batch written straight on py-lmdb (one ``getmulti``, one ``putmulti`` of 8-byte
  counts), no exactly-once bookkeeping: the limit of the work on one core.

Before the measured runs, each Spark run (Trident, transactional, Structured
Streaming) counts other words once, unmeasured (2 000 000 by default): the
JVM compiles Spark's hot paths as they run (about 4 CPU-seconds on two
cores), and without a warm-up that cost falls on whichever run comes first.

Usage: ``python bench/trident.py [--words N] [--batch N] [--warm-up-words N]
[--skip-local] [--out FILE]``; prints a table and writes JSON (default
``bench/results/trident.json``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import cloudpickle  # noqa: E402
import lmdb  # noqa: E402
import transactional as baseline  # noqa: E402  (bench/transactional.py)

from drpc import Fields, runtime  # noqa: E402
from drpc.progress import Progress  # noqa: E402
from drpc.transactional.filelog import FileLogTransactionalSpout  # noqa: E402
from drpc.trident import Count, LMDBMapState, TridentTopology, run  # noqa: E402

MAP = "bench-trident-counts"

# Spark workers cannot import bench/transactional.py: its bolts travel by value.
cloudpickle.register_pickle_by_value(baseline)


def word_count(log_dir: Path, batch: int) -> TridentTopology:
    spout = FileLogTransactionalSpout(log_dir, Fields("word"), batch // baseline.PARTITIONS)
    topology = TridentTopology()
    topology.new_stream("bench-trident", spout, parallelism=2).group_by(
        ["word"]
    ).persistent_aggregate(LMDBMapState.transactional(MAP), Count(), ["count"])
    return topology


def bench_trident(
    log_dir: Path, state_dir: Path, executor: str, batch: int, expected: Counter[str]
) -> dict[str, Any]:
    progress = Progress(sys.stderr, interval=10)
    started = time.perf_counter()
    result = run(
        word_count(log_dir, batch),
        state_dir=str(state_dir),
        executor=executor,
        max_spout_pending=3,
        on_commit=lambda info: progress.update(f"trident on {executor}: txid {info.txid}"),
    )
    return baseline.checked_run(
        f"trident on {executor}", result, started, progress, state_dir, MAP, expected
    )


def bench_plain_python(
    log_dir: Path, state_dir: Path, batch: int, expected: Counter[str]
) -> dict[str, Any]:
    """The limit of the work on one core, written straight on py-lmdb: the words already in
    memory, a ``Counter`` a batch, then one durable LMDB write transaction that reads every
    key of the batch in one ``getmulti`` over the sorted keys and writes the 8-byte sums
    back in one ``putmulti``. No exactly-once bookkeeping, no versions: nothing drpc adds."""
    env = lmdb.open(str(state_dir), map_size=4 << 30)
    count = struct.Struct("<q")
    words = [json.loads(line) for path in sorted(log_dir.glob("*.jsonl")) for line in path.open()]
    started = time.perf_counter()  # the words are in memory: the limit, not a reader
    batches = 0
    for start in range(0, len(words), batch):
        batches += 1
        batch_counts = Counter(words[start : start + batch])
        keys = sorted(word.encode() for word in batch_counts)
        with env.begin(write=True) as txn:
            cursor = txn.cursor()
            stored = dict(cursor.getmulti(keys))
            cursor.putmulti(
                [
                    (
                        key,
                        count.pack(
                            batch_counts[key.decode()]
                            + (count.unpack(stored[key])[0] if key in stored else 0)
                        ),
                    )
                    for key in keys
                ]
            )
    elapsed = time.perf_counter() - started
    with env.begin() as txn:
        counts = {key.decode(): count.unpack(value)[0] for key, value in txn.cursor()}
    env.close()
    assert counts == dict(expected), "plain Python counted wrongly"
    return {
        "seconds": elapsed,
        "tuples": len(words),
        "batches": batches,
        "tuples_per_s": len(words) / elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument(
        "--warm-up-words",
        type=int,
        default=2_000_000,
        help="words each Spark run counts once, unmeasured, before the measured runs "
        "(default 2 000 000: with 400 000 the JIT still compiled for 1-2 CPU-seconds in "
        "the first measured run; 0: no warm-up)",
    )
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-streaming", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "trident.json")
    args = parser.parse_args(argv)
    baseline.BATCH = args.batch
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="drpc-bench-trident-"))
    results: dict[str, Any] = {}
    try:
        print(f"generating {args.words} words ...", flush=True)
        log_dir, stream_dir, expected = baseline.generate(work, args.words)
        session = runtime.get_session()
        results["environment"] = baseline.spark_environment(session)
        results.update(
            words=args.words,
            batch=args.batch,
            distinct_words=len(expected),
            warm_up_words=args.warm_up_words,
        )
        if args.warm_up_words:
            baseline.warm_up(
                session,
                work / "warm-up",
                args.warm_up_words,
                streaming=not args.skip_streaming,
                first=lambda log, state, counts: [
                    bench_trident(log, state / executor, executor, args.batch, counts)
                    for executor in ("spark", "spark-batch")
                ],
            )
        results["trident_spark"] = bench_trident(
            log_dir, work / "state-spark", "spark", args.batch, expected
        )
        results["trident_spark_batch"] = bench_trident(
            log_dir, work / "state-spark-batch", "spark-batch", args.batch, expected
        )
        if not args.skip_local:
            results["trident_local"] = bench_trident(
                log_dir, work / "state-local", "local", args.batch, expected
            )
        results["transactional_spark"] = baseline.bench_drpc(
            log_dir, work / "state-transactional", "spark", expected
        )
        if not args.skip_streaming:
            results["structured_streaming"] = baseline.bench_structured_streaming(
                session, stream_dir, work / "state-stream", work / "checkpoint", expected
            )
        results["plain_python"] = bench_plain_python(
            log_dir, work / "state-plain", args.batch, expected
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.write_text(json.dumps(results, indent=2))
    baseline.print_table(
        results,
        (
            ("trident_spark", "drpc Trident, resident Spark tasks (default)"),
            ("trident_spark_batch", "drpc Trident, a Spark job per batch"),
            ("trident_local", "drpc Trident, local executor"),
            ("transactional_spark", "drpc transactional bolts, resident Spark tasks"),
            ("structured_streaming", "Structured Streaming + foreachBatch"),
            ("plain_python", "plain Python Counter + LMDB txn a batch"),
        ),
    )
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
