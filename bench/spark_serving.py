"""Serving benchmark: drpc's executors against what a user would write instead.

Every comparison is taken side by side in one run, on one SparkSession:

(a) sequential reach (storm-starter's data), one caller, interleaved rounds:
    drpc on the resident executor (``spark``), on ``spark-batch`` and on the
    local executor, against a one-task Python RDD job (the floor of any design
    that launches a Spark job per call), the reach pipeline written directly as
    a Spark job (a job per call: 4, 12, 6 and 3 tasks, three shuffles) and plain
    Python (the limit). Targets: resident p50 <= 0.2 x and p99 <= 0.5 x the
    one-task job's; local p50 <= 0.25 ms.
(b) 64 callers in a closed loop, one after another for a fixed time: drpc
    local, resident (at the default ``slots``, half of Spark's default
    parallelism, and at all of it, as a deployment serving nothing else would
    run it: in a process of its own, since a process runs one resident job) and
    spark-batch (coalesced), against a hand-rolled
    micro-batcher (a queue feeding at most two Spark jobs, each answering every
    call waiting when it starts) and a Spark job per call. Targets: resident
    >= 2 000 req/s and >= 10 x spark-batch; local >= 3 000 req/s.
(c) large graph: a seeded power-law follower graph (100 000 users, 2 000 000
    edges); the reach of its 20 most tweeted urls, submitted at once, through
    drpc resident (at the default slots and at all of them, as in (b)) and
    local, against what a competent user writes instead: the graph in a
    broadcast variable and one 2-task RDD job (in a process and SparkSession of
    its own, so no resident job holds one of its cores), and plain Python in one and in
    two processes (the limit), each reading a tweeter's followers as one slice
    of the CSR arrays (``sliced_reach``) with the urls dealt to the tasks or
    processes by their cost (``deal_by_cost``). Targets: resident <= 1.0 x the
    broadcast job and <= 1.5 x plain Python in one process. Every answer is
    checked against a direct computation.
(d) observation cost (``--observation``): the closed loop of (b) on the
    resident and local executors without an observer and with one keeping
    every request's spans (what ``?trace=1`` on every call would cost).

Progress shows on stderr (a live line on a terminal, plain lines every few
seconds otherwise). Run it on an otherwise idle machine: the absolute figures
move with load, the ratios much less.

(e) callers sweep (``--callers-sweep 1,4,16,64``): the closed loop of (b) on each drpc
    executor at each number of callers.

Every latency summary also keeps its percentiles at 1 ... 99 % and 99.9 %
(``quantiles_ms``), from which bench/plots.py draws the latency CDFs.

Usage: ``python bench/spark_serving.py [--quick] [--observation]
[--callers-sweep N,N,...] [--master M] [--out FILE]``. Prints a table and writes JSON
(default ``bench/results/spark_serving.json``).
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import platform
import queue
import statistics
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc import runtime  # noqa: E402
from drpc.compiled import engine_build  # noqa: E402
from drpc.examples.reach import EXPECTED_REACH, FOLLOWERS_DB, TWEETERS_DB, build_reach  # noqa: E402
from drpc.examples.reach_graph import (  # noqa: E402
    Graph,
    build_graph_reach,
    deal_by_cost,
    exact_reach,
    generate_graph,
    load_graph,
    sliced_reach,
    top_urls,
)
from drpc.progress import Progress  # noqa: E402
from drpc.requests import LOCAL_ORIGIN, RequestTrace, TraceCollector  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402

PROGRESS = Progress(sys.stderr)
URL = "foo.com/blog/1"


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


QUANTILE_LEVELS: list[float] = [*range(1, 100), 99.9]
"""The percentiles every summary keeps (``quantiles_ms``): what a CDF plot needs."""


def summary(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "p50_ms": 1000 * statistics.median(samples),
        "p99_ms": 1000 * percentile(samples, 99),
        "mean_ms": 1000 * statistics.fmean(samples),
        # [percent, ms] pairs at QUANTILE_LEVELS (bench/plots.py draws them as a CDF)
        "quantiles_ms": [[q, 1000 * percentile(samples, q)] for q in QUANTILE_LEVELS],
    }


# -- baselines: reach written directly ---------------------------------------------------------


def plain_reach(url: str) -> str:
    """Reach in plain Python, in the caller's thread: the limit."""
    seen: set[str] = set()
    for tweeter in TWEETERS_DB.get(url, ()):
        seen.update(FOLLOWERS_DB.get(tweeter, ()))
    return str(len(seen))


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


def reach_job(sc: Any, urls: list[str]) -> dict[str, str]:
    """One Spark job answering ``urls``: the reach pipeline with its three shuffles."""
    tweeters = sc.parallelize(urls, 4).flatMap(_tweeters)
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
    counts = dict(totals.collect())
    return {url: str(counts.get(url, 0)) for url in urls}


def one_task_job(sc: Any) -> int:
    """The cheapest Python job there is: the floor under a job per call."""
    return int(sc.parallelize([1], 1).map(lambda x: x + 1).collect()[0])


class MicroBatcher:
    """A queue of calls feeding at most ``jobs`` Spark jobs at once; each job
    answers every call waiting when it starts (up to ``max_batch``)."""

    def __init__(self, sc: Any, jobs: int = 2, max_batch: int = 1024) -> None:
        self.sc = sc
        self.max_batch = max_batch
        self.calls: queue.SimpleQueue[tuple[str, Future[str]] | None] = queue.SimpleQueue()
        self.batch_sizes: list[int] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(jobs)]
        for thread in self.threads:
            thread.start()

    def call(self, url: str) -> str:
        future: Future[str] = Future()
        self.calls.put((url, future))
        return future.result()

    def close(self) -> None:
        for _ in self.threads:
            self.calls.put(None)
        for thread in self.threads:
            thread.join()

    def _run(self) -> None:
        while True:
            first = self.calls.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    waiting = self.calls.get_nowait()
                except queue.Empty:
                    break
                if waiting is None:
                    self.calls.put(None)
                    break
                batch.append(waiting)
            self.batch_sizes.append(len(batch))
            try:
                answers = reach_job(self.sc, sorted({url for url, _ in batch}))
            except Exception as error:  # a benchmark baseline: hand the error to each caller
                for _, future in batch:
                    future.set_exception(error)
                continue
            for url, future in batch:
                future.set_result(answers[url])


# -- (a) sequential ------------------------------------------------------------------------------


def bench_sequential(sc: Any, rounds: int, per_round: int) -> dict[str, Any]:
    """Interleaved rounds of ``per_round`` calls of each contender."""
    with (
        LocalDRPC(executor="spark") as resident,
        LocalDRPC(executor="spark-batch") as batch,
        LocalDRPC() as local,
    ):
        for drpc in (resident, batch, local):
            drpc.register(build_reach())
        contenders: dict[str, Callable[[], Any]] = {
            "resident": lambda: resident.execute("reach", URL),
            "spark_batch": lambda: batch.execute("reach", URL),
            "local": lambda: local.execute("reach", URL),
            "one_task_job": lambda: one_task_job(sc),
            "job_per_call": lambda: reach_job(sc, [URL])[URL],
            "plain_python": lambda: plain_reach(URL),
        }
        expected = EXPECTED_REACH[URL]
        for name, call in contenders.items():
            for _ in range(3):
                answer = call()
                if name != "one_task_job":
                    assert answer == expected, f"{name} answered {answer!r}"
        # The slow ones take fewer calls per round so the round stays short.
        calls = {
            "resident": per_round,
            "spark_batch": max(1, per_round // 20),
            "local": per_round,
            "one_task_job": max(1, per_round // 5),
            "job_per_call": max(1, per_round // 20),
            "plain_python": per_round,
        }
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for round_ in range(rounds):
            PROGRESS.update(f"(a) sequential: round {round_ + 1}/{rounds}")
            for name, call in contenders.items():
                samples = times[name]
                for _ in range(calls[name]):
                    started = time.perf_counter()
                    call()
                    samples.append(time.perf_counter() - started)
    results: dict[str, Any] = {name: summary(samples) for name, samples in times.items()}
    floor = results["one_task_job"]
    results["resident_to_one_task_job_p50"] = results["resident"]["p50_ms"] / floor["p50_ms"]
    results["resident_to_one_task_job_p99"] = results["resident"]["p99_ms"] / floor["p99_ms"]
    results["resident_to_job_per_call_p50"] = (
        results["resident"]["p50_ms"] / results["job_per_call"]["p50_ms"]
    )
    return results


# -- (b) closed loop -------------------------------------------------------------------------------


def closed_loop(
    call: Callable[[str], str], callers: int, seconds: float, label: str
) -> dict[str, Any]:
    """``callers`` threads calling reach back to back for ``seconds``; every answer checked."""
    urls = list(EXPECTED_REACH)
    latencies: list[float] = []
    wrong: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    done = threading.Event()

    def report() -> None:
        while not done.wait(0.2):
            left = max(0.0, stop_at - time.monotonic())
            PROGRESS.update(f"{label}: {len(latencies)} calls, {left:.0f} s left")

    def caller(number: int) -> None:
        n = number
        while time.monotonic() < stop_at:
            url = urls[n % len(urls)]
            n += 1
            started = time.perf_counter()
            answer = call(url)
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
    if wrong:
        raise AssertionError(f"{label}: {len(wrong)} wrong answers, e.g. for {wrong[0]}")
    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "throughput_rps": len(latencies) / elapsed,
        "cpu_ms_per_request": cpu * 1000 / max(1, len(latencies)),
        **summary(latencies),
    }


def drpc_closed_loop(
    options: dict[str, Any], callers: int, seconds: float, label: str
) -> dict[str, Any]:
    """The closed loop through a ``LocalDRPC(**options)`` serving reach, with the mean size of
    the batches its runtime coalesced when it counts them (``spark-batch``). Module-level, so
    a pool process can run it: a process runs one resident job at one slot count."""
    with LocalDRPC(**options) as drpc:
        runtime_ = drpc.register(build_reach())
        drpc.execute("reach", URL)
        result = closed_loop(lambda url: drpc.execute("reach", url), callers, seconds, label)
        stats = getattr(runtime_, "stats", None)
        sizes = list(stats.batch_sizes) if stats is not None else []
        if sizes:
            result["mean_batch_size"] = statistics.fmean(sizes)
    return result


def bench_throughput(sc: Any, callers: int, seconds: float) -> dict[str, Any]:
    all_slots = int(sc.defaultParallelism)
    results: dict[str, Any] = {"callers": callers, "seconds_each": seconds, "all_slots": all_slots}
    for name, executor in (
        ("local", "local"),
        ("resident", "spark"),
        ("spark_batch", "spark-batch"),
    ):
        results[name] = drpc_closed_loop({"executor": executor}, callers, seconds, f"(b) {name}")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        all_slots_options = {"executor": "spark", "master": str(sc.master), "slots": all_slots}
        results["resident_all_slots"] = pool.apply(
            drpc_closed_loop,
            (all_slots_options, callers, seconds, f"(b) resident, {all_slots} slots"),
        )
    batcher = MicroBatcher(sc)
    try:
        batcher.call(URL)
        results["micro_batcher"] = closed_loop(batcher.call, callers, seconds, "(b) micro-batcher")
        results["micro_batcher"]["mean_batch_size"] = statistics.fmean(batcher.batch_sizes)
    finally:
        batcher.close()
    results["job_per_call"] = closed_loop(
        lambda url: reach_job(sc, [url])[url], callers, seconds, "(b) job per call"
    )
    for resident in ("resident", "resident_all_slots"):
        for baseline in ("spark_batch", "micro_batcher", "job_per_call"):
            results[f"{resident}_to_{baseline}"] = (
                results[resident]["throughput_rps"] / results[baseline]["throughput_rps"]
            )
    return results


SWEEP_EXECUTORS = (("local", "local"), ("resident", "spark"), ("spark_batch", "spark-batch"))


def bench_callers_sweep(counts: list[int], seconds: float) -> dict[str, Any]:
    """(e) The closed loop of (b) on each drpc executor at each number of callers in
    ``counts``: throughput (and latency) against concurrency."""
    results: dict[str, Any] = {"callers": counts, "seconds_each": seconds}
    for name, executor in SWEEP_EXECUTORS:
        results[name] = [
            drpc_closed_loop({"executor": executor}, n, seconds, f"(e) {name}, {n} callers")
            for n in counts
        ]
    return results


# -- (c) large graph -------------------------------------------------------------------------------

_GRAPH: Graph | None = None


def _load_in_process(path: str) -> None:
    global _GRAPH
    _GRAPH = load_graph(path)


def _reach_hand_in_process(urls: list[str]) -> list[tuple[str, str]]:
    assert _GRAPH is not None
    return [(url, str(sliced_reach(_GRAPH, url))) for url in urls]


_CHILD_DRPC: LocalDRPC | None = None


def _start_child_resident(master: str, slots: int, graph_path: str) -> None:
    """A pool process's own session and resident job of ``slots`` slots serving the graph."""
    global _CHILD_DRPC
    _CHILD_DRPC = LocalDRPC(executor="spark", master=master, slots=slots, timeout=300)
    _CHILD_DRPC.register(build_graph_reach(Path(graph_path)))


_CHILD_BROADCAST: tuple[Any, Any] | None = None


def _start_child_broadcast(master: str, graph_path: str) -> None:
    """A pool process's own session with the graph broadcast: the baseline gets every slot of
    the machine, not those the parent's resident job leaves."""
    global _CHILD_BROADCAST
    sc = runtime.get_session(master).sparkContext
    _CHILD_BROADCAST = (sc, sc.broadcast(load_graph(graph_path)))


def _child_broadcast_job(hands: list[list[str]]) -> dict[str, str]:
    """One 2-task job: each task the reach of its hand of urls, from the broadcast graph."""
    assert _CHILD_BROADCAST is not None
    sc, shared = _CHILD_BROADCAST

    def reach_of(hand: list[str]) -> list[tuple[str, str]]:
        return [(url, str(sliced_reach(shared.value, url))) for url in hand]

    return dict(sc.parallelize(hands, len(hands)).flatMap(reach_of).collect())


def _submit_all(drpc: LocalDRPC, urls: list[str]) -> dict[str, str]:
    """Every url's graph reach, submitted at once."""
    futures = {url: drpc.submit("reach-graph", url) for url in urls}
    return {url: future.result(timeout=300) for url, future in futures.items()}


def _child_submit_all(urls: list[str]) -> dict[str, str]:
    assert _CHILD_DRPC is not None
    return _submit_all(_CHILD_DRPC, urls)


def _stop_child_resident() -> None:
    if _CHILD_DRPC is not None:
        _CHILD_DRPC.shutdown()


def bench_large_graph(sc: Any, cache: Path, repeats: int) -> dict[str, Any]:
    started = time.perf_counter()
    graph_path = generate_graph(cache / "graph.bin")
    graph = load_graph(str(graph_path))
    urls = top_urls(graph, 20)
    expected = {url: str(exact_reach(graph, url)) for url in urls}
    setup: dict[str, float] = {"graph_ready_s": time.perf_counter() - started}

    # The baselines as a competent user writes them: each tweeter's followers read as one
    # slice (sliced_reach), the urls dealt to the two tasks or processes by their cost.
    hands = deal_by_cost(graph, urls, 2)
    started = time.perf_counter()
    broadcaster = multiprocessing.get_context("spawn").Pool(
        1, initializer=_start_child_broadcast, initargs=(str(sc.master), str(graph_path))
    )

    def broadcast_job() -> dict[str, str]:
        answers: dict[str, str] = broadcaster.apply(_child_broadcast_job, (hands,))
        return answers

    assert broadcast_job() == expected, "the broadcast job answered wrongly"
    setup["broadcast_first_job_s"] = time.perf_counter() - started

    def plain_one() -> dict[str, str]:
        return {url: str(sliced_reach(graph, url)) for url in urls}

    pool = multiprocessing.get_context("fork").Pool(
        2, initializer=_load_in_process, initargs=(str(graph_path),)
    )

    def plain_two() -> dict[str, str]:
        return dict(pair for hand in pool.map(_reach_hand_in_process, hands) for pair in hand)

    all_slots = int(sc.defaultParallelism)
    child = multiprocessing.get_context("spawn").Pool(
        1, initializer=_start_child_resident, initargs=(str(sc.master), all_slots, str(graph_path))
    )

    def resident_all_slots() -> dict[str, str]:
        answers: dict[str, str] = child.apply(_child_submit_all, (urls,))
        return answers

    try:
        with (
            LocalDRPC(executor="spark", timeout=300) as resident,
            LocalDRPC(timeout=300) as local,
        ):
            contenders: dict[str, Callable[[], dict[str, str]]] = {}
            for name, drpc in (("resident", resident), ("local", local)):
                drpc.register(build_graph_reach(graph_path))

                contenders[name] = functools.partial(_submit_all, drpc, urls)
            contenders["resident_all_slots"] = resident_all_slots
            contenders["broadcast_job"] = broadcast_job
            contenders["plain_python_1"] = plain_one
            contenders["plain_python_2"] = plain_two
            for name, run in contenders.items():
                started = time.perf_counter()
                assert run() == expected, f"{name} answered wrongly"
                setup[f"{name}_first_s"] = time.perf_counter() - started
            times: dict[str, list[float]] = {name: [] for name in contenders}
            for repeat in range(repeats):
                PROGRESS.update(f"(c) large graph: round {repeat + 1}/{repeats}")
                for name, run in contenders.items():
                    started = time.perf_counter()
                    answer = run()
                    times[name].append(time.perf_counter() - started)
                    assert answer == expected, f"{name} answered wrongly"
    finally:
        child.apply(_stop_child_resident)
        for process_pool in (pool, child, broadcaster):
            process_pool.close()
            process_pool.join()
    results: dict[str, Any] = {
        "all_slots": all_slots,
        "urls": len(urls),
        "users": graph.users,
        "edges": len(graph.followers),
        "setup": setup,
    }
    results.update({name: summary(samples) for name, samples in times.items()})
    for served_by in ("resident", "resident_all_slots"):
        results[f"{served_by}_to_broadcast_job"] = (
            results[served_by]["p50_ms"] / results["broadcast_job"]["p50_ms"]
        )
    return results


# -- (d) observation cost ------------------------------------------------------------------------


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
                    drpc.execute("reach", URL)

                    def via_drpc(url: str, drpc: LocalDRPC = drpc) -> str:
                        return drpc.execute("reach", url)

                    run = closed_loop(
                        via_drpc, callers, seconds, f"(d) {executor}, {label}, round {round_ + 1}"
                    )
                if observer is not None:
                    run["spans_per_request"] = observer.spans / max(1, observer.requests)
                runs[label].append(run)
        by_label: dict[str, Any] = {}
        for label, label_runs in runs.items():
            by_label[label] = {
                "throughput_rps": statistics.fmean(r["throughput_rps"] for r in label_runs),
                "cpu_ms_per_request": statistics.fmean(r["cpu_ms_per_request"] for r in label_runs),
                "p50_ms": statistics.fmean(r["p50_ms"] for r in label_runs),
                "p99_ms": statistics.fmean(r["p99_ms"] for r in label_runs),
                "runs": label_runs,
            }
        off, on = by_label["off"], by_label["every_request_traced"]
        by_label["throughput_ratio"] = on["throughput_rps"] / off["throughput_rps"]
        by_label["cpu_ratio"] = on["cpu_ms_per_request"] / off["cpu_ms_per_request"]
        results[executor] = by_label
    return results


# -- report ------------------------------------------------------------------------------------


def _rows_sequential(a: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, float], str]]:
    yield (
        "(a) reach, 1 caller",
        "drpc resident",
        a["resident"],
        f"{a['resident_to_one_task_job_p50']:.3f}x / {a['resident_to_one_task_job_p99']:.3f}x "
        "the one-task job (p50 / p99)",
    )
    yield "", "drpc spark-batch", a["spark_batch"], ""
    yield "", "drpc local", a["local"], ""
    yield "", "one-task RDD job", a["one_task_job"], ""
    yield (
        "",
        "Spark job per call",
        a["job_per_call"],
        f"resident is {a['resident_to_job_per_call_p50']:.3f}x (p50)",
    )
    yield "", "plain Python", a["plain_python"], ""


def _rows_throughput(b: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, float], str]]:
    labels = {
        "local": "drpc local",
        "resident": "drpc resident",
        "resident_all_slots": f"drpc resident, {b['all_slots']} slots",
        "spark_batch": "drpc spark-batch",
        "micro_batcher": "micro-batcher (2 jobs)",
        "job_per_call": "Spark job per call",
    }
    for index, (name, label) in enumerate(labels.items()):
        run = b[name]
        note = f"{run['throughput_rps']:.1f} req/s"
        if "mean_batch_size" in run:
            note += f", mean batch {run['mean_batch_size']:.1f}"
        if f"resident_to_{name}" in b:
            note += (
                f"; resident {b[f'resident_to_{name}']:.1f}x, "
                f"{b['all_slots']} slots {b[f'resident_all_slots_to_{name}']:.1f}x"
            )
        yield (f"(b) {b['callers']} callers" if index == 0 else "", label, run, note)


def _rows_graph(c: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, float], str]]:
    yield (
        f"(c) graph, {c['urls']} urls",
        "drpc resident",
        c["resident"],
        f"{c['resident_to_broadcast_job']:.2f}x the broadcast job",
    )
    yield (
        "",
        f"drpc resident, {c['all_slots']} slots",
        c["resident_all_slots"],
        f"{c['resident_all_slots_to_broadcast_job']:.2f}x the broadcast job",
    )
    yield "", "drpc local", c["local"], ""
    yield "", "broadcast + RDD job", c["broadcast_job"], ""
    yield "", "plain Python, 1 proc", c["plain_python_1"], ""
    yield "", "plain Python, 2 procs", c["plain_python_2"], ""


def _rows_observation(d: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, float], str]]:
    for executor in ("spark", "local"):
        off, on = d[executor]["off"], d[executor]["every_request_traced"]
        yield (
            f"(d) {d['callers']} callers, {executor}",
            "no observer",
            off,
            f"{off['throughput_rps']:.1f} req/s, CPU {off['cpu_ms_per_request']:.2f} ms/req",
        )
        yield (
            "",
            "every request traced",
            on,
            f"{on['throughput_rps']:.1f} req/s, CPU {on['cpu_ms_per_request']:.2f} ms/req; "
            f"ratios {d[executor]['throughput_ratio']:.2f}, {d[executor]['cpu_ratio']:.2f}",
        )


def table(results: dict[str, Any]) -> str:
    rows = [
        *_rows_sequential(results["sequential"]),
        *_rows_throughput(results["throughput"]),
        *_rows_graph(results["large_graph"]),
    ]
    if "observation" in results:
        rows += _rows_observation(results["observation"])
    lines = [f"{'measurement':<22}{'run':<24}{'p50 ms':>10}{'p99 ms':>10}  notes"]
    for name, run, figures, note in rows:
        p50, p99 = figures["p50_ms"], figures["p99_ms"]
        lines.append(f"{name:<22}{run:<24}{p50:>10.3f}{p99:>10.3f}  {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument(
        "--observation", action="store_true", help="also measure what tracing every call costs"
    )
    parser.add_argument(
        "--callers-sweep",
        metavar="N,N,...",
        default=None,
        help="also run (b)'s closed loop on each drpc executor at each of these numbers of "
        "callers, e.g. 1,4,16,64 (the throughput-against-callers plot of bench/plots.py)",
    )
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
            "engine": engine_build(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load_average_at_start": os.getloadavg(),
        }
    }
    section("(a) sequential ...")
    results["sequential"] = bench_sequential(sc, 4 if args.quick else 10, 50 if args.quick else 200)
    section("(b) closed loop ...")
    results["throughput"] = bench_throughput(sc, 64, 3.0 if args.quick else 10.0)
    section("(c) large graph ...")
    results["large_graph"] = bench_large_graph(sc, args.cache, 3 if args.quick else 10)
    if args.observation:
        section("(d) observation cost ...")
        results["observation"] = bench_observation(
            64, 3.0 if args.quick else 10.0, 2 if args.quick else 3
        )
    if args.callers_sweep:
        section("(e) callers sweep ...")
        counts = [int(n) for n in args.callers_sweep.split(",") if n]
        results["callers_sweep"] = bench_callers_sweep(counts, 3.0 if args.quick else 10.0)
    PROGRESS.close()
    results["seconds"] = time.monotonic() - started
    results["environment"]["load_average_at_end"] = os.getloadavg()
    args.out.write_text(json.dumps(results, indent=2))
    print(table(results))
    start, end = (
        ", ".join(f"{load:.1f}" for load in results["environment"][key])
        for key in ("load_average_at_start", "load_average_at_end")
    )
    print(f"load average (1, 5, 15 min) at start {start}, at end {end}")
    print(f"{results['environment']['engine']} engine (drpc/compiled.py)")
    print(f"written to {args.out} in {results['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
