"""What consistent reads cost: query latency and commit throughput, pinned against unpinned.

The issue's scenario (``drpc.examples.vocabulary_counts``): a writer commits batches that
each count every word of a 200-word vocabulary once (a Trident run on the local executor,
in a process of its own, as ``drpc-transactional run`` would be), while one caller asks
the ``counts`` DRPC query for all 200 counts, over 4 tasks, again and again. Side by side,
in alternating rounds on fresh state directories:

- **unpinned**: the code without consistent reads, what a user had before: the query
  with ``drpc.state.pinned.reads`` False (each task reads the latest commit, key by key,
  as Storm's Trident does), and the writer keeping no undo logs
  (``VersionStore.capture`` made a no-op in its process);
- **pinned**: drpc as it ships: every request reads the version it entered with, and
  the writer keeps and reclaims undo logs.

Reported per executor (``local``, ``spark``: resident tasks): query p50/p99 over every
round, the writer's commits per second while the queries ran, answers that mixed two
commits, and the ratio pinned/unpinned of each. The floor beside them: the 200 keys read
in one LMDB read transaction in this process (no DRPC at all).

With ``--partitions N`` the counts are a partitioned state of N partitions (each its own
LMDB directory, ``drpc.transactional.partitions``): every answer then reads N
partitions, each at the global commit its request pinned.

Usage: ``python bench/consistent_reads.py [--rounds N] [--seconds S] [--executors
local,spark] [--partitions N] [--out FILE]``; prints a table and writes JSON (default
``bench/results/consistent_reads.json``). ``--writer STATE_DIR --undo on|off --seconds
S --partitions N`` is the writer's own mode.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc.examples.vocabulary_counts import (  # noqa: E402
    QUERY,
    VOCABULARY,
    build_vocabulary_counts,
    counts_function,
    counts_of,
)
from drpc.state import StateEnvironment, TransactionalMap  # noqa: E402
from drpc.state.topology import PINNED_READS_CONF  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402
from drpc.trident import run  # noqa: E402

MODES = ("unpinned", "pinned")


def writer(state_dir: str, undo: bool, seconds: float, partitions: int) -> None:
    """Commit batches for ``seconds``, printing ``commit <time.time()>`` after each."""
    if not undo:
        from drpc.state.versions import VersionStore

        VersionStore.capture = lambda *args, **kwargs: None  # type: ignore[method-assign]
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()

    def say(info: Any) -> None:
        sys.stdout.write(f"commit {time.time()}\n")
        sys.stdout.flush()

    run(
        build_vocabulary_counts(10**7, partitions=partitions),
        state_dir=state_dir,
        executor="local",
        stop=stop,
        on_commit=say,
        state_options={"sync": False},
    )


def one_round(
    executor: str, mode: str, seconds: float, warm_up: float, partitions: int
) -> dict[str, Any]:
    state = tempfile.mkdtemp(prefix="drpc-bench-consistent-")
    process = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--writer",
            state,
            "--undo",
            "on" if mode == "pinned" else "off",
            "--seconds",
            str(seconds + warm_up + 1),
            "--partitions",
            str(partitions),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    commits: list[float] = []
    reader = threading.Thread(
        target=lambda: commits.extend(
            float(line.split()[1]) for line in process.stdout or () if line.startswith("commit")
        )
    )
    reader.start()
    latencies: list[float] = []
    mixed = 0
    try:
        while not os.path.exists(os.path.join(state, "data.mdb")):
            time.sleep(0.01)
        conf = {PINNED_READS_CONF: mode == "pinned"}
        with LocalDRPC(executor=executor, timeout=120.0) as drpc:
            drpc.register(counts_function(state, conf))
            warm_until = time.monotonic() + warm_up
            while time.monotonic() < warm_until:
                drpc.execute("counts", QUERY)
            started_at = time.time()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                began = time.perf_counter()
                answer = drpc.execute("counts", QUERY)
                latencies.append(time.perf_counter() - began)
                if len({tuple(value) for value in counts_of(answer).values()}) > 1:
                    mixed += 1
            ended_at = time.time()
    finally:
        process.wait(timeout=seconds + warm_up + 120)
        reader.join()
        shutil.rmtree(state, ignore_errors=True)
    window = [t for t in commits if started_at <= t <= ended_at]
    return {
        "latencies": latencies,
        "commits_per_second": len(window) / (ended_at - started_at),
        "answers": len(latencies),
        "mixed": mixed,
    }


def floor() -> dict[str, float]:
    """The 200 keys read in one LMDB read transaction, in this process: p50 and p99."""
    state = tempfile.mkdtemp(prefix="drpc-bench-floor-")
    try:
        run(build_vocabulary_counts(3), state_dir=state, executor="local")
        env = StateEnvironment.open(state)
        counts = TransactionalMap(env, "counts")
        times = []
        for _ in range(2000):
            began = time.perf_counter()
            counts.multi_get(VOCABULARY)
            times.append(time.perf_counter() - began)
        env.close()
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return percentiles(times)


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="measured per round")
    parser.add_argument("--warm-up", type=float, default=2.0, help="unmeasured per round")
    parser.add_argument("--executors", default="local,spark")
    parser.add_argument("--partitions", type=int, default=1, help="of the counts (default 1)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "consistent_reads.json")
    parser.add_argument("--writer", metavar="STATE_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--undo", choices=("on", "off"), default="on", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        writer(args.writer, args.undo == "on", args.seconds, args.partitions)
        return
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rounds": args.rounds,
        "seconds": args.seconds,
        "partitions": args.partitions,
        "floor": floor(),
        "executors": {},
    }
    for executor in args.executors.split(","):
        rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        for index in range(args.rounds):
            for mode in MODES if index % 2 == 0 else reversed(MODES):
                outcome = one_round(executor, mode, args.seconds, args.warm_up, args.partitions)
                rounds[mode].append(outcome)
                print(
                    f"{executor} {mode} round {index + 1}: {outcome['answers']} answers, "
                    f"{outcome['commits_per_second']:.1f} commits/s, {outcome['mixed']} mixed",
                    file=sys.stderr,
                )
        summary: dict[str, Any] = {}
        for mode, outcomes in rounds.items():
            summary[mode] = {
                **percentiles([t for o in outcomes for t in o["latencies"]]),
                "commits_per_second": round(
                    statistics.median(o["commits_per_second"] for o in outcomes), 1
                ),
                "answers": sum(o["answers"] for o in outcomes),
                "mixed": sum(o["mixed"] for o in outcomes),
            }
        pinned, unpinned = summary["pinned"], summary["unpinned"]
        summary["ratio"] = {
            "p50": round(pinned["p50_ms"] / unpinned["p50_ms"], 3),
            "p99": round(pinned["p99_ms"] / unpinned["p99_ms"], 3),
            "commits_per_second": round(
                pinned["commits_per_second"] / unpinned["commits_per_second"], 3
            ),
        }
        results["executors"][executor] = summary
    print(
        f"{'executor':<10}{'mode':<10}{'p50 ms':>9}{'p99 ms':>9}{'commits/s':>11}"
        f"{'answers':>9}{'mixed':>7}"
    )
    for executor, summary in results["executors"].items():
        for mode in MODES:
            row = summary[mode]
            print(
                f"{executor:<10}{mode:<10}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}"
                f"{row['commits_per_second']:>11.1f}{row['answers']:>9}{row['mixed']:>7}"
            )
        ratio = summary["ratio"]
        print(
            f"{executor:<10}{'ratio':<10}{ratio['p50']:>9.3f}{ratio['p99']:>9.3f}"
            f"{ratio['commits_per_second']:>11.3f}"
        )
    print(f"floor: 200 keys in one LMDB read, p50 {results['floor']['p50_ms']} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
