"""Spark serving benchmark: drpc against bare PySpark, coalesced against one job per request.

Three measurements, each taken side by side in one run on one SparkSession:

(a) overhead: sequential storm-starter reach requests through drpc, against
    a hand-written PySpark RDD job of the same pipeline (4, 12, 6 and 3 tasks,
    the same three shuffles), interleaved; p50, p99 and their ratios;
(b) coalescing: 64 concurrent callers in a closed loop for a fixed time,
    drpc with coalescing against ``max_batch_size=1``; throughput ratio and
    p50/p99 latency of each;
(c) large graph: a seeded power-law follower graph (100 000 users, 2 000 000
    edges); the reach of its 20 most tweeted urls through drpc on Spark,
    against the best DataFrame job I could write for the same answer, and
    against the local executor. Every answer is checked against a direct
    computation;
(d) observation cost: the closed loop of (b), on Spark and on the local
    executor, without an observer against an observer that keeps every
    request's step spans (what ``?trace=1`` on every call would cost), in
    interleaved rounds; throughput and this process's CPU time per request
    (on Spark: the driver's share, where the observing happens).

Progress shows on stderr (``drpc.progress``: a live line on a terminal,
plain lines every few seconds otherwise).

Usage: ``python bench/spark_serving.py [--quick] [--out FILE]``. Prints a table
and writes JSON (default ``bench/results/spark_serving.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc import runtime  # noqa: E402
from drpc.examples.reach import EXPECTED_REACH, FOLLOWERS_DB, TWEETERS_DB, build_reach  # noqa: E402
from drpc.examples.reach_graph import (  # noqa: E402
    build_graph_reach,
    exact_reach,
    generate_graph,
    load_graph,
    top_urls,
)
from drpc.progress import Progress  # noqa: E402
from drpc.requests import LOCAL_ORIGIN, RequestTrace, TraceCollector  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402

PROGRESS = Progress(sys.stderr)


def section(title: str) -> None:
    """End the previous section's progress line and start a new one."""
    global PROGRESS
    PROGRESS.close()
    print(title, flush=True)
    PROGRESS = Progress(sys.stderr)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": 1000 * statistics.median(samples),
        "p99_ms": 1000 * percentile(samples, 99),
        "mean_ms": 1000 * statistics.fmean(samples),
    }


# -- (a) the same reach pipeline written directly against the RDD API ---------------------------


def _round_robin(index: int, items: Iterator[Any], tasks: int) -> Iterator[tuple[int, Any]]:
    for offset, item in enumerate(items):
        yield (index + offset) % tasks, item


def _key(value: str, tasks: int) -> int:
    return zlib.crc32(value.encode()) % tasks


def _tweeters(url: str) -> list[tuple[str, str]]:
    return [(url, tweeter) for tweeter in TWEETERS_DB.get(url, ())]


def _followers(pair: tuple[str, str]) -> list[tuple[str, str]]:
    return [(pair[0], follower) for follower in FOLLOWERS_DB.get(pair[1], ())]


def _distinct_count(pairs: Iterator[tuple[str, str]]) -> list[tuple[str, int]]:
    return list(Counter(url for url, _ in set(pairs)).items())


def _sum_counts(pairs: Iterator[tuple[str, int]]) -> list[tuple[str, int]]:
    totals: Counter[str] = Counter()
    for url, count in pairs:
        totals[url] += count
    return list(totals.items())


def _identity(key: int) -> int:
    return key


def handwritten_reach(sc: Any, url: str) -> str:
    tweeters = sc.parallelize([url], 4).flatMap(_tweeters)
    followers = (
        tweeters.mapPartitionsWithIndex(lambda i, it: _round_robin(i, it, 12))
        .partitionBy(12, _identity)
        .values()
        .flatMap(_followers)
    )
    partial = (
        followers.map(lambda pair: (_key(pair[0] + "\0" + pair[1], 6), pair))
        .partitionBy(6, _identity)
        .values()
        .mapPartitions(_distinct_count)
    )
    totals = (
        partial.map(lambda pair: (_key(pair[0], 3), pair))
        .partitionBy(3, _identity)
        .values()
        .mapPartitions(_sum_counts)
    )
    return str(dict(totals.collect()).get(url, 0))


def bench_overhead(sc: Any, iterations: int) -> dict[str, Any]:
    url = "foo.com/blog/1"
    with LocalDRPC(executor="spark") as drpc:
        drpc.register(build_reach())
        for _ in range(3):
            assert drpc.execute("reach", url) == EXPECTED_REACH[url]
            assert handwritten_reach(sc, url) == EXPECTED_REACH[url]
        drpc_times: list[float] = []
        bare_times: list[float] = []
        for iteration in range(iterations):
            PROGRESS.update(f"(a) overhead: {iteration}/{iterations} pairs of calls")
            started = time.perf_counter()
            drpc.execute("reach", url)
            drpc_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            handwritten_reach(sc, url)
            bare_times.append(time.perf_counter() - started)
    drpc_summary, bare_summary = summary(drpc_times), summary(bare_times)
    return {
        "drpc": drpc_summary,
        "handwritten_pyspark": bare_summary,
        "ratio_p50": drpc_summary["p50_ms"] / bare_summary["p50_ms"],
        "ratio_p99": drpc_summary["p99_ms"] / bare_summary["p99_ms"],
    }


# -- (b) coalescing ------------------------------------------------------------------------------


def closed_loop(drpc: LocalDRPC, callers: int, seconds: float, label: str) -> dict[str, Any]:
    urls = list(EXPECTED_REACH)
    latencies: list[float] = []
    wrong: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    done = threading.Event()

    def report() -> None:
        while not done.wait(0.2):
            left = max(0.0, stop_at - time.monotonic())
            PROGRESS.update(f"{label}: {len(latencies)} requests, {left:.0f} s left")

    def caller(number: int) -> None:
        n = number
        while time.monotonic() < stop_at:
            url = urls[n % len(urls)]
            n += 1
            started = time.perf_counter()
            answer = drpc.execute("reach", url)
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                if answer != EXPECTED_REACH[url]:
                    wrong.append(url)

    started = time.monotonic()
    cpu_started = time.process_time()
    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    cpu = time.process_time() - cpu_started
    done.set()
    reporter.join()
    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "throughput_rps": len(latencies) / elapsed,
        "cpu_ms_per_request": cpu * 1000 / max(1, len(latencies)),
        "wrong_answers": len(wrong),
        **summary(latencies),
    }


def bench_coalescing(callers: int, seconds: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for label, options in (("coalesced", {}), ("one_request_per_job", {"max_batch_size": 1})):
        with LocalDRPC(executor="spark", **options) as drpc:
            runtime_ = drpc.register(build_reach())
            drpc.execute("reach", "foo.com/blog/1")
            results[label] = closed_loop(drpc, callers, seconds, f"(b) {label}")
            sizes = list(runtime_.stats.batch_sizes)
            results[label]["mean_batch_size"] = statistics.fmean(sizes)
    results["callers"] = callers
    results["throughput_ratio"] = (
        results["coalesced"]["throughput_rps"] / results["one_request_per_job"]["throughput_rps"]
    )
    return results


# -- (d) observation cost ---------------------------------------------------------------------


class TraceEverything(TraceCollector):
    """Keeps the spans of every request, as if each one were called with ``?trace=1``
    (the last ``keep`` requests', as a server keeps only those in flight)."""

    def __init__(self, keep: int = 1024) -> None:
        super().__init__(LOCAL_ORIGIN)
        self.keep = keep
        self.spans = 0
        self.requests = 0

    def _trace(self, return_info: Any) -> RequestTrace | None:
        trace = self._traces.get(return_info.request_id)
        if trace is None:
            if len(self._traces) >= self.keep:
                del self._traces[next(iter(self._traces))]
            trace = self._traces[return_info.request_id] = RequestTrace("reach")
            self.requests += 1
        return trace

    def step_finished(self, return_info: Any, *args: Any) -> None:
        super().step_finished(return_info, *args)
        self.spans += 1


def bench_observation(callers: int, seconds: float, rounds: int) -> dict[str, Any]:
    """Closed loops without and with an observer, interleaved ``rounds`` times."""
    results: dict[str, Any] = {"callers": callers, "rounds": rounds}
    for executor in ("spark", "local"):
        runs: dict[str, list[dict[str, Any]]] = {"off": [], "every_request_traced": []}
        for round_ in range(rounds):
            for label in runs:
                observer = TraceEverything() if label != "off" else None
                with LocalDRPC(executor=executor, observer=observer) as drpc:
                    drpc.register(build_reach())
                    drpc.execute("reach", "foo.com/blog/1")
                    run = closed_loop(
                        drpc, callers, seconds, f"(d) {executor}, {label}, round {round_ + 1}"
                    )
                if observer is not None:
                    run["spans_per_request"] = observer.spans / max(1, observer.requests)
                runs[label].append(run)
        summary_: dict[str, Any] = {}
        for label, label_runs in runs.items():
            summary_[label] = {
                "throughput_rps": statistics.fmean(r["throughput_rps"] for r in label_runs),
                "cpu_ms_per_request": statistics.fmean(r["cpu_ms_per_request"] for r in label_runs),
                "p50_ms": statistics.fmean(r["p50_ms"] for r in label_runs),
                "p99_ms": statistics.fmean(r["p99_ms"] for r in label_runs),
                "runs": label_runs,
            }
        off, on = summary_["off"], summary_["every_request_traced"]
        summary_["throughput_ratio"] = on["throughput_rps"] / off["throughput_rps"]
        summary_["cpu_ratio"] = on["cpu_ms_per_request"] / off["cpu_ms_per_request"]
        results[executor] = summary_
    return results


# -- (c) large graph -------------------------------------------------------------------------------


def write_csvs(graph: Any, directory: Path) -> tuple[Path, Path]:
    edges_path, tweets_path = directory / "edges.csv", directory / "tweets.csv"
    if not edges_path.exists():
        with edges_path.open("w") as out:
            for user in range(graph.users):
                for block in range(graph.blocks):
                    out.writelines(f"{user},{f}\n" for f in graph.followers_of(user, block))
    if not tweets_path.exists():
        with tweets_path.open("w") as out:
            for url in range(graph.urls):
                out.writelines(f"{url},{t}\n" for t in graph.tweeters_of(url))
    return edges_path, tweets_path


def timed(function: Callable[[], Any], repeats: int) -> tuple[list[float], Any]:
    times: list[float] = []
    result = None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return times, result


def bench_large_graph(session: Any, cache: Path, repeats: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    graph_path = generate_graph(cache / "graph.bin")
    graph = load_graph(str(graph_path))
    urls = top_urls(graph, 20)
    expected = {url: str(exact_reach(graph, url)) for url in urls}
    edges_csv, tweets_csv = write_csvs(graph, cache)
    setup = {"graph_ready_s": time.perf_counter() - started}

    started = time.perf_counter()
    edges = session.read.schema("followee INT, follower INT").csv(str(edges_csv)).cache()
    tweets = session.read.schema("url INT, tweeter INT").csv(str(tweets_csv)).cache()
    edges.count(), tweets.count()
    setup["dataframes_cached_s"] = time.perf_counter() - started
    url_ids = [int(url.split("/")[1]) for url in urls]

    def dataframe_job() -> dict[str, str]:
        exposed = (
            tweets.where(F.col("url").isin(url_ids))
            .select("url", F.col("tweeter").alias("followee"))
            .distinct()
        )
        rows = (
            edges.join(F.broadcast(exposed), "followee")
            .groupBy("url")
            .agg(F.countDistinct("follower").alias("reach"))
            .collect()
        )
        return {f"url/{row['url']}": str(row["reach"]) for row in rows}

    def drpc_job(drpc: LocalDRPC) -> dict[str, str]:
        futures = {url: drpc.submit("reach-graph", url) for url in urls}
        return {url: future.result(timeout=300) for url, future in futures.items()}

    results: dict[str, Any] = {
        "urls": len(urls),
        "users": graph.users,
        "edges": len(graph.followers),
    }
    dataframe_job()
    with LocalDRPC(executor="spark", timeout=300) as on_spark, LocalDRPC(timeout=300) as local:
        on_spark.register(build_graph_reach(graph_path))
        local.register(build_graph_reach(graph_path))
        started = time.perf_counter()
        assert drpc_job(on_spark) == expected, "drpc on Spark answered wrongly"
        setup["drpc_spark_first_call_s"] = time.perf_counter() - started
        assert drpc_job(local) == expected, "the local executor answered wrongly"
        spark_times: list[float] = []
        frame_times: list[float] = []
        local_times: list[float] = []
        for repeat in range(repeats):
            PROGRESS.update(f"(c) large graph: round {repeat + 1}/{repeats}")
            times, answer = timed(lambda: drpc_job(on_spark), 1)
            assert answer == expected
            spark_times += times
            times, answer = timed(dataframe_job, 1)
            assert answer == expected, "the DataFrame job answered differently"
            frame_times += times
            times, answer = timed(lambda: drpc_job(local), 1)
            assert answer == expected
            local_times += times
    edges.unpersist()
    tweets.unpersist()
    results.update(
        {
            "drpc_spark": summary(spark_times),
            "dataframe": summary(frame_times),
            "drpc_local": summary(local_times),
            "setup": setup,
        }
    )
    results["ratio_drpc_spark_to_dataframe"] = (
        results["drpc_spark"]["p50_ms"] / results["dataframe"]["p50_ms"]
    )
    results["ratio_drpc_spark_to_local"] = (
        results["drpc_spark"]["p50_ms"] / results["drpc_local"]["p50_ms"]
    )
    return results


# -- report ------------------------------------------------------------------------------------


def table(results: dict[str, Any]) -> str:
    a, b, c = results["overhead"], results["coalescing"], results["large_graph"]
    d = results["observation"]
    coalesced, single = b["coalesced"], b["one_request_per_job"]
    rows = [
        ("(a) reach, sequential", "drpc on Spark", a["drpc"], ""),
        (
            "",
            "hand-written PySpark",
            a["handwritten_pyspark"],
            f"ratio p50 {a['ratio_p50']:.2f}, p99 {a['ratio_p99']:.2f}",
        ),
        (
            f"(b) {b['callers']} callers",
            "coalesced",
            coalesced,
            f"{coalesced['throughput_rps']:.1f} req/s, "
            f"mean batch {coalesced['mean_batch_size']:.1f}",
        ),
        (
            "",
            "max_batch_size=1",
            single,
            f"{single['throughput_rps']:.1f} req/s; ratio {b['throughput_ratio']:.1f}x",
        ),
        (
            f"(c) graph, {c['urls']} urls",
            "drpc on Spark",
            c["drpc_spark"],
            f"{c['ratio_drpc_spark_to_dataframe']:.2f}x the DataFrame job",
        ),
        ("", "DataFrame job", c["dataframe"], ""),
        (
            "",
            "drpc local executor",
            c["drpc_local"],
            f"Spark is {c['ratio_drpc_spark_to_local']:.2f}x local",
        ),
    ]
    for executor in ("spark", "local"):
        off, on = d[executor]["off"], d[executor]["every_request_traced"]
        rows += [
            (
                f"(d) {d['callers']} callers, {executor}",
                "no observer",
                off,
                f"{off['throughput_rps']:.1f} req/s, "
                f"driver CPU {off['cpu_ms_per_request']:.2f} ms/req",
            ),
            (
                "",
                "every request traced",
                on,
                f"{on['throughput_rps']:.1f} req/s, "
                f"driver CPU {on['cpu_ms_per_request']:.2f} ms/req; "
                f"ratios {d[executor]['throughput_ratio']:.2f}, {d[executor]['cpu_ratio']:.2f}",
            ),
        ]
    lines = [f"{'measurement':<24}{'run':<22}{'p50 ms':>9}{'p99 ms':>9}  notes"]
    for name, run, figures, note in rows:
        p50, p99 = figures["p50_ms"], figures["p99_ms"]
        lines.append(f"{name:<24}{run:<22}{p50:>9.1f}{p99:>9.1f}  {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument("--master", default=None, help="Spark master (default: local[*])")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "spark_serving.json")
    parser.add_argument("--cache", type=Path, default=HERE / "results" / "cache")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    session = runtime.get_session(args.master)
    sc = session.sparkContext
    results: dict[str, Any] = {
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "spark": session.version,
            "master": sc.master,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
    }
    section("(a) overhead ...")
    results["overhead"] = bench_overhead(sc, 8 if args.quick else 40)
    section("(b) coalescing ...")
    results["coalescing"] = bench_coalescing(64, 4.0 if args.quick else 12.0)
    section("(c) large graph ...")
    results["large_graph"] = bench_large_graph(session, args.cache, 2 if args.quick else 5)
    section("(d) observation cost ...")
    results["observation"] = bench_observation(
        64, 4.0 if args.quick else 10.0, 2 if args.quick else 3
    )
    PROGRESS.close()
    results["seconds"] = time.monotonic() - started
    args.out.write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"written to {args.out} in {results['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
