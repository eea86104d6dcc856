"""storm-starter's word count as a plain topology, against what a Spark user would run.

The work: ``--sentences`` sentences (100 000) drawn round-robin from storm-starter's five
(``drpc.examples.word_count_topology.SENTENCES``, 6.6 words each), split into words and
counted per word. Runs, side by side in one invocation, ``--rounds`` alternating rounds
(medians reported):

- drpc, ``local``: ``LocalCluster().submit_topology`` of storm-starter's shape (a
  reliable spout emitting each sentence with a message id, 8 split tasks on a shuffle
  grouping, 12 count tasks on a fields grouping, ``topology.max.spout.pending`` 1 000,
  every tuple anchored and acked: at least once), timed from the submit to the last
  sentence's tree acked (the spout's figures);
- drpc, ``spark``: the same on ``LocalCluster("spark")`` (``local[2]``, 2 resident
  tasks): the spout and ackers on the driver, the bolts on the resident tasks, every
  tuple over the resident link;
- Structured Streaming, as a Spark user writes the same pipeline:
  ``explode(split(value, " "))``, ``groupBy("word").count()`` in update mode over a
  file stream of ``--file-sentences`` (50 000) sentences a file, one file a trigger,
  ``availableNow``, 2 shuffle partitions, to the ``noop`` sink; in a process of its
  own with its own ``local[2]`` session (the resident tasks hold this one's slots),
  after an unmeasured warm-up run there;
- plain Python, the physical limit of the work on one core: the sentences in memory,
  ``str.split`` and a ``dict`` count in one loop (no tracking, no delivery).

Reported: sentences/s and words/s of each; ratios spark/Structured Streaming,
spark/local and local/plain Python. The engines differ in what they promise: drpc's
topology tracks every tuple's tree and replays a failed one (at least once, counts in
the bolts' memory); Structured Streaming commits each micro-batch's counts to its state
store exactly once. Usage: ``python bench/plain_topology.py [--sentences N]
[--rounds N] [--file-sentences N] [--skip-streaming] [--out FILE]``; prints a table and
writes JSON (default ``bench/results/plain_topology.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bench import procs  # noqa: E402
from drpc import (  # noqa: E402
    BaseRichSpout,
    Fields,
    OutputFieldsDeclarer,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
)
from drpc.compiled import engine_build  # noqa: E402
from drpc.config import TOPOLOGY_MAX_SPOUT_PENDING  # noqa: E402
from drpc.examples.word_count_topology import SENTENCES, SplitSentence, WordCount  # noqa: E402
from drpc.topologies import LocalCluster  # noqa: E402

MASTER = "local[2]"
MAX_SPOUT_PENDING = 1000


class FiniteSentences(BaseRichSpout):
    """Emits ``count`` sentences, each with its number as message id; replays a failed one."""

    def __init__(self, count: int) -> None:
        self.count = count

    def open(
        self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        self.collector = collector
        self.next = 0
        self.failed: list[int] = []

    def next_tuple(self) -> None:
        if self.failed:
            number = self.failed.pop()
        elif self.next < self.count:
            number, self.next = self.next, self.next + 1
        else:
            return
        self.collector.emit([SENTENCES[number % len(SENTENCES)]], msg_id=number)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("sentence"))


def words_of(sentences: int) -> int:
    per_round = [len(sentence.split()) for sentence in SENTENCES]
    whole, rest = divmod(sentences, len(SENTENCES))
    return whole * sum(per_round) + sum(per_round[:rest])


def bench_drpc(executor: str, sentences: int) -> dict[str, Any]:
    builder = TopologyBuilder()
    builder.set_spout("spout", FiniteSentences(sentences))
    builder.set_bolt("split", SplitSentence(), 8).shuffle_grouping("spout")
    builder.set_bolt("count", WordCount(), 12).fields_grouping("split", Fields("word"))
    conf = {TOPOLOGY_MAX_SPOUT_PENDING: MAX_SPOUT_PENDING}
    topology = builder.create_topology("word-count", conf)
    options: dict[str, Any] = {"master": MASTER} if executor == "spark" else {}
    with LocalCluster(executor, **options) as cluster:
        started = time.perf_counter()
        cluster.submit_topology("word-count", None, topology)
        while True:
            spout = cluster.get_topology_info("word-count").components["spout"]
            if spout.acked >= sentences:
                break
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        counted = cluster.get_topology_info("word-count").components["count"].acked
    return {
        "seconds": seconds,
        "sentences_per_s": sentences / seconds,
        "words_per_s": words_of(sentences) / seconds,
        "replayed": spout.failed,
        "complete_latency_ms": spout.complete_latency_ms,
        "words_counted": counted,
    }


def bench_plain_python(sentences: int) -> dict[str, Any]:
    lines = [SENTENCES[number % len(SENTENCES)] for number in range(sentences)]
    started = time.perf_counter()
    counts: dict[str, int] = {}
    for line in lines:
        for word in line.split():
            counts[word] = counts.get(word, 0) + 1
    seconds = time.perf_counter() - started
    assert sum(counts.values()) == words_of(sentences)
    return {
        "seconds": seconds,
        "sentences_per_s": sentences / seconds,
        "words_per_s": words_of(sentences) / seconds,
    }


def write_stream(directory: Path, sentences: int, per_file: int) -> None:
    directory.mkdir(parents=True)
    for start in range(0, sentences, per_file):
        end = min(sentences, start + per_file)
        lines = (SENTENCES[number % len(SENTENCES)] for number in range(start, end))
        (directory / f"part-{start:012d}.txt").write_text("\n".join(lines) + "\n")


def streaming_child(stream_dir: Path, warm_dir: Path, work: Path) -> None:
    from drpc import runtime

    session = runtime.get_session(MASTER)
    bench_structured_streaming(session, warm_dir, work / "checkpoint-warm")
    print(json.dumps(bench_structured_streaming(session, stream_dir, work / "checkpoint")))


def bench_structured_streaming(session: Any, stream_dir: Path, checkpoint: Path) -> dict[str, Any]:
    from pyspark.sql import functions

    session.conf.set("spark.sql.shuffle.partitions", "2")
    started = time.perf_counter()
    query = (
        session.readStream.format("text")
        .option("maxFilesPerTrigger", 1)
        .load(str(stream_dir))
        .select(functions.explode(functions.split("value", " ")).alias("word"))
        .groupBy("word")
        .count()
        .writeStream.outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    sentences = sum(int(progress.get("numInputRows", 0)) for progress in query.recentProgress)
    return {
        "seconds": seconds,
        "sentences": sentences,
        "batches": len(query.recentProgress),
        "sentences_per_s": sentences / seconds,
    }


def structured_streaming(work: Path, sentences: int, per_file: int) -> dict[str, Any]:
    stream_dir, warm_dir = work / "stream", work / "warm"
    write_stream(stream_dir, sentences, per_file)
    write_stream(warm_dir, min(sentences, 2 * per_file), per_file)
    result = procs.child_result(
        "the Structured Streaming run", __file__, "--streaming-child", stream_dir, warm_dir, work
    )
    if result["sentences"] != sentences:
        raise RuntimeError(f"Structured Streaming read {result['sentences']} of {sentences}")
    result["words_per_s"] = words_of(sentences) / result["seconds"]
    return result


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "sentences_per_s": statistics.median(run["sentences_per_s"] for run in runs),
        "words_per_s": statistics.median(run["words_per_s"] for run in runs),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--file-sentences", type=int, default=50_000)
    parser.add_argument("--skip-streaming", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "plain_topology.json")
    parser.add_argument("--streaming-child", nargs=3, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.streaming_child:
        streaming_child(*args.streaming_child)
        return 0
    for flag in ("sentences", "rounds", "file_sentences"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "spark": [], "python": []}
    bench_drpc("local", min(args.sentences, 5_000))  # warm-up: imports, the session
    bench_drpc("spark", min(args.sentences, 5_000))
    for _ in range(args.rounds):
        runs["local"].append(bench_drpc("local", args.sentences))
        runs["spark"].append(bench_drpc("spark", args.sentences))
        runs["python"].append(bench_plain_python(args.sentences))
    results = {name: median_of(found) for name, found in runs.items()}
    if not args.skip_streaming:
        from drpc import runtime

        runtime.stop_session()  # the streaming child gets both cores' slots
        with tempfile.TemporaryDirectory(prefix="drpc-bench-ss-") as work:
            results["structured_streaming"] = median_of(
                [structured_streaming(Path(work), args.sentences, args.file_sentences)]
            )
    ratios = {
        "spark_vs_local": results["spark"]["words_per_s"] / results["local"]["words_per_s"],
        "local_vs_plain_python": results["local"]["words_per_s"] / results["python"]["words_per_s"],
    }
    if "structured_streaming" in results:
        ratios["spark_vs_structured_streaming"] = (
            results["spark"]["words_per_s"] / results["structured_streaming"]["words_per_s"]
        )
        ratios["local_vs_structured_streaming"] = (
            results["local"]["words_per_s"] / results["structured_streaming"]["words_per_s"]
        )
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "engine": engine_build(),
        "sentences": args.sentences,
        "words": words_of(args.sentences),
        "master": MASTER,
        "results": results,
        "ratios": ratios,
    }
    print(f"{'run':<22} {'sentences/s':>12} {'words/s':>12}")
    for name, result in results.items():
        print(f"{name:<22} {result['sentences_per_s']:>12,.0f} {result['words_per_s']:>12,.0f}")
    for name, ratio in ratios.items():
        print(f"{name:<32} {ratio:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
