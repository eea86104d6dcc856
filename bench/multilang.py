"""Multilang benchmark: a Python ShellBolt against the limit of Storm's protocol, and reach
with a ShellBolt step against the all-Python reach (issue 52's targets).

Every comparison is taken side by side in one run, in alternating rounds (medians). Every
subprocess is ``bench/multilang_echo.py`` (standard library only; the same script on
both sides of a ratio): it reads each tuple message (lines up to ``end``, one
``json.loads``), writes one emit anchored to it with ``"need_task_ids": false`` and the
tuple's ack in one write, and flushes, once per tuple, as storm.py does.

(1) Throughput: ``--tuples`` tuples (20 000) through one subprocess, all in flight at
    once.

    - ``protocol limit`` (the physical limit, no drpc): this process starts the echo
      subprocess, does the handshake, then one thread writes the ``--tuples`` tuple
      messages (``{"id", "comp", "stream", "task", "tuple": [request, i]}``, framed as
      drpc frames them: compact JSON from one reused encoder, then ``end``; 256 messages
      a write) while the main thread reads the replies (``os.read`` of 64 KiB; each
      message scanned in place by the C scanner under ``json.loads``, without its
      per-call wrapping or a copy), counts the acks and checks every emit's value. Timed
      from the first write to the last ack.
    - ``ShellBolt``: a DRPC function of three steps on ``--executor``: ``FanOut`` (a
      Python bolt; the call's args ``"N"`` become N tuples ``[id, i]``, emitted in one
      turn), ``Echo``, a ``ShellBolt`` running the same script (parallelism 1: one
      subprocess), and ``CountTuples`` (a batch bolt answering the number of tuples that
      reached it, checked to be N). One ``execute`` a round, timed by the caller. So the
      ShellBolt side pays, beside the protocol, what a real DRPC step pays: the fan-out
      and count steps, the engine's per-tuple pickling between tasks, acking and the
      request's coordination.
    - ``Python step`` (attribution, not a target): the same function with ``Echo`` an
      in-process Python bolt (emit anchored, ack): the engine alone, the ceiling any
      ShellBolt step of this function can reach.

    Reported: tuples/s of each, ``ShellBolt / protocol limit`` (target >= 0.7) and
    ``ShellBolt / Python step``; beside them, where the time goes, as CPU microseconds a
    tuple (medians of the rounds): every thread of this process (the driver side: for the
    limit its writer and reader, for the DRPC sides the whole engine; not measured on
    ``spark``, where the steps run in Spark's Python workers) and the echo subprocess
    (from ``/proc``). The limit is bound by the larger of its two; a side whose own CPU a
    tuple is past the subprocess's is bound by itself.

(2) Reach, one caller: storm-starter's reach (``drpc.examples.reach``, url
    ``foo.com/blog/1``, answer 16) all in Python, against the same topology whose
    GetFollowers step is a ``ShellBolt`` running the same script with ``--followers`` (it
    emits ``[id, follower]`` for each follower of the tweeter), shuffle grouped, at the
    example's parallelism, 12 (twelve subprocesses: the topology brought unchanged), and
    at 2 (one subprocess a core of this 2-core machine). The all-Python reach and the two
    variants are hosted by one LocalDRPC, and take ``--rounds`` alternating rounds of
    ``--calls`` sequential ``execute`` calls each (after a warm-up); p50 and p99. Target:
    the ShellBolt reach's p50 within 1 ms of the all-Python reach's (judged on x12, the
    unchanged topology; x2 shows what the number of subprocesses costs).

Runs on ``--executor`` ``local`` (default) or ``spark`` (the resident tasks of one
``local[2]`` SparkSession, shared by both sides; the subprocesses then start on the
executor's Python worker). Usage: ``python bench/multilang.py [--executor local|spark]
[--tuples N] [--rounds N] [--calls N] [--parts throughput,reach] [--quick] [--out FILE]``;
prints a table and writes JSON (default ``bench/results/multilang.json``). Run it on an
otherwise idle machine: the absolute figures move with load, the ratios much less.
"""

from __future__ import annotations

import argparse
import json
import json.scanner
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench import procs  # noqa: E402
from drpc import (  # noqa: E402
    BaseBasicBolt,
    BaseBatchBolt,
    BaseRichBolt,
    BasicOutputCollector,
    BatchOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputCollector,
    OutputFieldsDeclarer,
    TopologyContext,
    Tuple,
)
from drpc.compiled import engine_build  # noqa: E402
from drpc.examples.reach import (  # noqa: E402
    EXPECTED_REACH,
    FOLLOWERS_DB,
    CountAggregator,
    GetTweeters,
    PartialUniquer,
    build_reach,
)
from drpc.multilang import ShellBolt  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402

ECHO = str(HERE / "multilang_echo.py")
URL = "foo.com/blog/1"
SPARK_MASTER = "local[2]"
WRITE_BATCH = 256
REACH_PARALLELISMS = (12, 2)  # GetFollowers' in drpc.examples.reach; one a core here
SCAN = json.scanner.make_scanner(json.JSONDecoder())
END = b"\nend\n"
"""What ends each message, its ``end`` line included."""
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode(message: Any) -> bytes:
    """A message framed as drpc frames it (compact JSON, then a line ``end``)."""
    return _ENCODER.encode(message).encode() + END


# -- the topologies ------------------------------------------------------------------------


class FanOut(BaseBasicBolt):
    """[id, "N"] -> [id, i] for i in 0 .. N-1."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        request = tuple[0]
        for i in range(int(tuple[1])):
            collector.emit([request, i])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "n"))


class ShellEcho(ShellBolt):
    """[id, n] -> [id, n] through bench/multilang_echo.py."""

    def __init__(self) -> None:
        super().__init__(sys.executable, ECHO)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "n"))


class PythonEcho(BaseRichBolt):
    """[id, n] -> [id, n] in-process: what ShellEcho's script does, as a Python bolt."""

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        self.collector.emit(tuple.values, [tuple])
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "n"))


class CountTuples(BaseBatchBolt):
    """The number of tuples of one request that reached this task."""

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector = collector
        self.id = id
        self.count = 0

    def execute(self, tuple: Tuple) -> None:
        self.count += 1

    def finish_batch(self) -> None:
        self.collector.emit([self.id, self.count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


def build_throughput(function: str, echo: Any) -> LinearDRPCTopologyBuilder:
    builder = LinearDRPCTopologyBuilder(function)
    builder.add_bolt(FanOut(), 1)
    builder.add_bolt(echo, 1).shuffle_grouping()
    builder.add_bolt(CountTuples(), 1).fields_grouping(Fields("id"))
    return builder


class ShellFollowers(ShellBolt):
    """Reach's GetFollowers, [id, tweeter] -> [id, follower], through multilang_echo.py."""

    def __init__(self) -> None:
        super().__init__(sys.executable, ECHO, "--followers", json.dumps(FOLLOWERS_DB))

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "follower"))


def build_shell_reach(function: str, followers: int) -> LinearDRPCTopologyBuilder:
    """drpc.examples.reach.build_reach with GetFollowers run by ``followers`` ShellBolt
    tasks (so as many subprocesses)."""
    builder = LinearDRPCTopologyBuilder(function)
    builder.add_bolt(GetTweeters(), 4)
    builder.add_bolt(ShellFollowers(), followers).shuffle_grouping()
    builder.add_bolt(PartialUniquer(), 6).fields_grouping(Fields("id", "follower"))
    builder.add_bolt(CountAggregator(), 3).fields_grouping(Fields("id"))
    return builder


# -- the protocol limit --------------------------------------------------------------------


class BareEcho:
    """The echo script driven directly over its pipes: no drpc engine, no ShellBolt."""

    def __init__(self) -> None:
        self.pid_dir = tempfile.mkdtemp(prefix="drpc-bench-multilang-")
        self.process = subprocess.Popen(
            [sys.executable, ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin = self.process.stdin.fileno()
        self.stdout = self.process.stdout.fileno()
        self.buffer = b""
        self.ids = 0
        setup = {"conf": {}, "pidDir": self.pid_dir, "context": {"taskid": 1}}
        os.write(self.stdin, encode(setup))
        answer = self.read_messages()
        assert answer == [{"pid": self.process.pid}], answer

    def read_messages(self) -> list[Any]:
        """At least one message: the complete ones in what has arrived, each scanned in
        place (the C scanner ``json.loads`` runs, without its per-call wrapping)."""
        while True:
            data = os.read(self.stdout, 65536)
            if not data:
                raise RuntimeError("the echo subprocess exited")
            buffer = self.buffer + data
            whole = buffer.rfind(END) + len(END)
            if whole < len(END):
                self.buffer = buffer
                continue
            text, self.buffer = buffer[:whole].decode(), buffer[whole:]
            messages = []
            start = 0
            while start < whole:
                message, end = SCAN(text, start)
                messages.append(message)
                start = end + len(END)
            return messages

    def run(self, tuples: int) -> float:
        """Seconds from the first tuple written to the last ack read."""
        first = self.ids + 1
        self.ids += tuples

        def write() -> None:
            fd = self.stdin
            for start in range(first, first + tuples, WRITE_BATCH):
                chunk = b"".join(
                    encode(
                        {
                            "id": str(n),
                            "comp": "fan-out",
                            "stream": "default",
                            "task": 1,
                            "tuple": [7, n],
                        }
                    )
                    for n in range(start, min(start + WRITE_BATCH, first + tuples))
                )
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]

        writer = threading.Thread(target=write, name="bare-echo-writer", daemon=True)
        acked = emitted = 0
        started = time.perf_counter()
        writer.start()
        while acked < tuples:
            for message in self.read_messages():
                command = message["command"]
                if command == "ack":
                    acked += 1
                elif command == "emit":
                    assert message["tuple"] == [7, int(message["anchors"][0])], message
                    emitted += 1
        elapsed = time.perf_counter() - started
        writer.join()
        assert emitted == tuples, (emitted, tuples)
        return elapsed

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.pid_dir, ignore_errors=True)


# -- the parts -----------------------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def latency(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "p50_ms": 1000 * statistics.median(samples),
        "p99_ms": 1000 * percentile(samples, 99),
        "mean_ms": 1000 * statistics.fmean(samples),
    }


def drpc_options(executor: str) -> dict[str, Any]:
    return {"executor": executor, "master": SPARK_MASTER} if executor == "spark" else {}


def echo_pids(followers: bool = False) -> list[int]:
    """The echo subprocesses under this process (ShellBolts' and the bare one)."""
    return [
        pid
        for pid in procs.descendants(os.getpid())
        if ECHO in procs.cmdline(pid) and ("--followers" in procs.cmdline(pid)) == followers
    ]


class Side:
    """One contender of the throughput part: a round runs ``tuples`` through it."""

    def __init__(self, run: Callable[[], float], subprocesses: Callable[[], list[int]]) -> None:
        self.run = run
        self.subprocesses = subprocesses
        self.seconds: list[float] = []
        self.driver_cpu: list[float] = []
        self.subprocess_cpu: list[float] = []

    def round(self) -> None:
        pids = self.subprocesses()
        cpu = time.process_time()
        before = sum(procs.cpu_seconds(pid) for pid in pids)
        self.seconds.append(self.run())
        self.driver_cpu.append(time.process_time() - cpu)
        self.subprocess_cpu.append(sum(procs.cpu_seconds(pid) for pid in pids) - before)


def bench_throughput(executor: str, tuples: int, rounds: int) -> dict[str, Any]:
    bare = BareEcho()
    try:
        with LocalDRPC(timeout=300, **drpc_options(executor)) as drpc:
            drpc.register(build_throughput("shell", ShellEcho()))
            drpc.register(build_throughput("python", PythonEcho()))

            def through(function: str) -> Callable[[], float]:
                def call() -> float:
                    started = time.perf_counter()
                    answer = drpc.execute(function, str(tuples))
                    elapsed = time.perf_counter() - started
                    assert answer == str(tuples), f"{function} answered {answer!r}"
                    return elapsed

                return call

            for function in ("shell", "python"):  # warm up: subprocess, imports, caches
                through(function)()
            bare.run(tuples)
            shells = [pid for pid in echo_pids() if pid != bare.process.pid]
            sides = {
                "protocol_limit": Side(lambda: bare.run(tuples), lambda: [bare.process.pid]),
                "shell_bolt": Side(through("shell"), lambda: shells),
                "python_step": Side(through("python"), list),
            }
            for round_ in range(rounds):
                print(f"  (1) throughput: round {round_ + 1}/{rounds}", file=sys.stderr)
                for side in sides.values():
                    side.round()
    finally:
        bare.close()
    results: dict[str, Any] = {"tuples": tuples, "rounds": rounds}
    for name, side in sides.items():
        in_process = name == "protocol_limit" or executor == "local"
        results[name] = {
            "tuples_per_s": tuples / statistics.median(side.seconds),
            "rounds_tuples_per_s": [tuples / s for s in side.seconds],
            # CPU a tuple: every thread of this process (None where the steps run in
            # Spark's workers), and the echo subprocess (None: there is none)
            "driver_cpu_us_per_tuple": 1e6 * statistics.median(side.driver_cpu) / tuples
            if in_process
            else None,
            "subprocess_cpu_us_per_tuple": 1e6 * statistics.median(side.subprocess_cpu) / tuples
            if name != "python_step"
            else None,
        }
    shell = results["shell_bolt"]["tuples_per_s"]
    results["shell_over_limit"] = shell / results["protocol_limit"]["tuples_per_s"]
    results["shell_over_python_step"] = shell / results["python_step"]["tuples_per_s"]
    return results


def bench_reach(executor: str, rounds: int, calls: int) -> dict[str, Any]:
    with LocalDRPC(timeout=60, **drpc_options(executor)) as drpc:
        sides = {"python": "reach"}
        drpc.register(build_reach("reach"))
        for followers in REACH_PARALLELISMS:
            sides[f"shell_bolt_x{followers}"] = f"reach-shell-{followers}"
            drpc.register(build_shell_reach(f"reach-shell-{followers}", followers))
        expected = EXPECTED_REACH[URL]
        for function in sides.values():
            for _ in range(max(20, calls // 5)):
                answer = drpc.execute(function, URL)
                assert answer == expected, f"{function} answered {answer!r}"
        times: dict[str, list[float]] = {name: [] for name in sides}
        for round_ in range(rounds):
            print(f"  (2) reach: round {round_ + 1}/{rounds}", file=sys.stderr)
            for name, function in sides.items():
                samples = times[name]
                for _ in range(calls):
                    started = time.perf_counter()
                    drpc.execute(function, URL)
                    samples.append(time.perf_counter() - started)
    results: dict[str, Any] = {
        "rounds": rounds,
        "calls_per_round": calls,
        "followers_parallelisms": list(REACH_PARALLELISMS),
    }
    for name, samples in times.items():
        results[name] = latency(samples)
    python = results["python"]
    for followers in REACH_PARALLELISMS:
        shell = results[f"shell_bolt_x{followers}"]
        shell["p50_difference_ms"] = shell["p50_ms"] - python["p50_ms"]
        shell["p99_difference_ms"] = shell["p99_ms"] - python["p99_ms"]
    return results


# -- the report ----------------------------------------------------------------------------


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(results: dict[str, Any]) -> str:
    lines: list[str] = []
    t = results.get("throughput")
    if t is not None:
        lines.append(
            f"(1) {t['tuples']:,} tuples through one subprocess, {t['rounds']} rounds (median)"
        )
        lines.append(f"    {'side':<34} {'tuples/s':>10} {'this process':>13} {'subprocess':>11}")
        lines.append(f"    {'':<34} {'':>10} {'CPU us/tuple':>13} {'CPU us/tup':>11}")
        for name, label in (
            ("protocol_limit", "protocol limit (bare echo loop)"),
            ("shell_bolt", "ShellBolt (DRPC step)"),
            ("python_step", "Python step (engine alone)"),
        ):
            side = t[name]
            lines.append(
                f"    {label:<34} {side['tuples_per_s']:>10,.0f} "
                f"{_us(side['driver_cpu_us_per_tuple']):>13} "
                f"{_us(side['subprocess_cpu_us_per_tuple']):>11}"
            )
        met = "met" if t["shell_over_limit"] >= 0.7 else "MISSED"
        lines.append(
            f"    ShellBolt / protocol limit: {t['shell_over_limit']:.2f}x "
            f"(target >= 0.7x: {met}); ShellBolt / Python step: "
            f"{t['shell_over_python_step']:.2f}x"
        )
    r = results.get("reach")
    if r is not None:
        lines.append(
            f"(2) reach of {URL}, one caller, {r['rounds']} rounds x {r['calls_per_round']} "
            "calls a side"
        )
        lines.append(f"    {'side':<40} {'p50 ms':>7} {'p99 ms':>7} {'mean ms':>7} {'p50 diff':>9}")
        python = r["python"]
        lines.append(
            f"    {'all-Python reach':<40} {python['p50_ms']:>7.3f} {python['p99_ms']:>7.3f} "
            f"{python['mean_ms']:>7.3f}"
        )
        for followers in r["followers_parallelisms"]:
            s = r[f"shell_bolt_x{followers}"]
            label = f"GetFollowers a ShellBolt x{followers}"
            lines.append(
                f"    {label:<40} {s['p50_ms']:>7.3f} {s['p99_ms']:>7.3f} {s['mean_ms']:>7.3f} "
                f"{s['p50_difference_ms']:>+9.3f}"
            )
        for followers in r["followers_parallelisms"]:
            s = r[f"shell_bolt_x{followers}"]
            met = "met" if s["p50_difference_ms"] <= 1.0 else "MISSED"
            lines.append(
                f"    x{followers}: p50 {s['p50_difference_ms']:+.3f} ms (target <= +1 ms: "
                f"{met}), p99 {s['p99_difference_ms']:+.3f} ms"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--executor",
        choices=("local", "spark"),
        default="local",
        help=f"drpc executor (default local; spark: resident tasks on {SPARK_MASTER})",
    )
    parser.add_argument(
        "--tuples", type=int, default=20_000, help="tuples a throughput round (default 20 000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=7, help="alternating rounds of each part (default 7)"
    )
    parser.add_argument(
        "--calls", type=int, default=300, help="reach calls a side a round (default 300)"
    )
    parser.add_argument(
        "--parts", default="throughput,reach", help="comma-separated: throughput, reach (both)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="5 000 tuples, 3 rounds, 100 calls a round"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "multilang.json",
        help="results JSON (default bench/results/multilang.json)",
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if parts - {"throughput", "reach"}:
        parser.error(f"unknown parts {sorted(parts - {'throughput', 'reach'})}")
    if args.quick:
        args.tuples, args.rounds, args.calls = 5_000, 3, 100
    results: dict[str, Any] = {
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "executor": args.executor,
            "engine": engine_build(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load_average_at_start": os.getloadavg(),
        }
    }
    if args.executor == "spark":
        from drpc import runtime

        results["environment"]["spark"] = runtime.get_session(SPARK_MASTER).version
    if "throughput" in parts:
        print("(1) throughput through one subprocess ...", file=sys.stderr, flush=True)
        results["throughput"] = bench_throughput(args.executor, args.tuples, args.rounds)
    if "reach" in parts:
        print("(2) reach with a ShellBolt step, one caller ...", file=sys.stderr, flush=True)
        results["reach"] = bench_reach(args.executor, args.rounds, args.calls)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    print(table(results))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
