"""streamparse's quickstart word count on drpc: its components as multilang subprocesses
(as on Storm) against the same components in the tasks (``drpc-sparse --in-process``).

The project is the one ``sparse quickstart wordcount`` makes (made here with
streamparse's own quickstart into a temporary directory): an unreliable spout cycling
four words, and a count bolt (2 tasks, fields grouping on the word) that emits every
word with its count. Each run lasts ``--seconds`` (5) on ``--executor`` (local), in
``--rounds`` (2) alternating rounds; the figure is the words the count bolt processed
(acked) per second, median of the rounds. Reported: each way's words/s and
in-process over subprocess (the subprocess run is what the project does on Storm, and
what a streamparse user has without ``--in-process``), and each against the physical limit
of the work: plain Python cycling the same four words into a ``dict`` count, one word at a
time, for as long. Usage: ``python bench/sparse.py [--seconds S] [--rounds N]
[--executor local|spark] [--out FILE]`` (default ``bench/results/sparse.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from drpc.compiled import engine_build  # noqa: E402
from drpc.sparse import SparseProject  # noqa: E402
from drpc.topologies import LocalCluster  # noqa: E402


def quickstart(where: Path) -> Path:
    """The project ``sparse quickstart wordcount`` makes, in ``where``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # streamparse's own deprecation warnings
        from streamparse.bootstrap import quickstart as make

    here = Path.cwd()
    os.chdir(where)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            make("wordcount")
    finally:
        os.chdir(here)
    return where / "wordcount"


def words_per_second(project: Path, in_process: bool, executor: str, seconds: float) -> float:
    builder = SparseProject(project).builder("wordcount", in_process=in_process)
    options: dict[str, Any] = {"master": "local[2]"} if executor == "spark" else {}
    with LocalCluster(executor, **options) as cluster:
        cluster.submit_topology("wordcount", None, builder)

        def counted() -> int:
            return cluster.get_topology_info("wordcount").components["count_bolt"].acked

        while counted() == 0:  # the subprocesses start, the spout emits its first word
            time.sleep(0.01)
        before, started = counted(), time.perf_counter()
        time.sleep(seconds)
        return (counted() - before) / (time.perf_counter() - started)


def plain_python_words_per_second(seconds: float) -> float:
    """The work itself on one core: the spout's four words in turn, each counted (by 10 for
    "dog", as the quickstart bolt does) and its [word, count] made, no engine at all."""
    words = itertools.cycle(["dog", "cat", "zebra", "elephant"])
    counts: dict[str, int] = {}
    done = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for _ in range(10_000):
            word = next(words)
            counts[word] = counts.get(word, 0) + (10 if word == "dog" else 1)
            _ = [word, counts[word]]
        done += 10_000
    return done / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--executor", choices=("local", "spark"), default="local")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "sparse.json")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1:
        parser.error("--seconds must be positive and --rounds at least 1")
    runs: dict[str, list[float]] = {"subprocess": [], "in_process": [], "plain_python": []}
    with tempfile.TemporaryDirectory(prefix="drpc-bench-sparse-") as work:
        project = quickstart(Path(work))
        for _ in range(args.rounds):
            for way in ("subprocess", "in_process"):
                rate = words_per_second(project, way == "in_process", args.executor, args.seconds)
                runs[way].append(rate)
            runs["plain_python"].append(plain_python_words_per_second(args.seconds))
    medians = {way: statistics.median(rates) for way, rates in runs.items()}
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "engine": engine_build(),
        "executor": args.executor,
        "seconds": args.seconds,
        "words_per_s": medians,
        "runs": runs,
        "in_process_vs_subprocess": medians["in_process"] / medians["subprocess"],
        "in_process_vs_plain_python": medians["in_process"] / medians["plain_python"],
        "subprocess_vs_plain_python": medians["subprocess"] / medians["plain_python"],
    }
    for way, rate in medians.items():
        print(f"{way:<12} {rate:>12,.0f} words/s")
    print(f"in-process / subprocess: {report['in_process_vs_subprocess']:.1f}x")
    print(f"in-process / plain Python: {report['in_process_vs_plain_python']:.3f}x")
    print(f"subprocess / plain Python: {report['subprocess_vs_plain_python']:.4f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
