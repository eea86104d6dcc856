"""Engine cost per request: N sequential reach calls through ``LocalDRPC``, for callgrind.

Run it twice under callgrind and difference the instruction counts, so start-up
and shutdown cancel out and what remains is the engine's cost per request
(deterministic, unlike timings on a loaded machine)::

    valgrind --tool=callgrind --callgrind-out-file=cg.50 python bench/engine_cost.py 50
    valgrind --tool=callgrind --callgrind-out-file=cg.250 python bench/engine_cost.py 250
    per request = (Ir at 250 - Ir at 50) / 200

``--report A B`` prints that difference from two callgrind output files. The
engine's timeout checks run every ``--tick`` seconds, an idle spout is
polled at most every ``--idle`` seconds and the watchdog wakes a worker for
queued turns no thread took in ``--handoff`` seconds (default an hour for all
three: their cost is the clock's, not a request's, and under callgrind a call
takes a hundred times longer, so a 2 ms hand-off would wake workers a real
run never wakes; the DRPC spout is woken when a request arrives). The script
also prints the wall and CPU time per call (noisy: say so); ``--callers K``
makes the calls from K closed-loop threads instead of one. It names the
engine build it ran (compiled, or pure Python with ``DRPC_PURE_PYTHON=1``;
see ``drpc/compiled.py``).

``--counts`` instead counts, over N calls after a warm-up, the engine's turns
and the messages its tasks handle per request, by receiver and kind (data
tuples, count reports, acker messages, spout polls and outcomes): the work
the instruction count pays for. Sequential calls through one engine keep
these nearly the same from run to run (the order the ready tasks run in
varies a little with the threads).
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc.compiled import engine_build  # noqa: E402
from drpc.examples.reach import EXPECTED_REACH, build_reach  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402

URL = "foo.com/blog/1"


class Timing(NamedTuple):
    wall_per_call: float
    cpu_per_call: float  # the whole process's CPU time, every thread
    calls_per_second: float


TUPLES_PER_REQUEST = 38
"""Data tuples one storm-starter reach of ``URL`` sends between its steps."""


def run(
    calls: int,
    tick: float = 3600.0,
    idle: float = 3600.0,
    callers: int = 1,
    handoff: float = 3600.0,
) -> Timing:
    """Wall and CPU seconds per call of ``calls`` reach calls, after a warm-up, made by
    ``callers`` closed-loop threads (each calls again as soon as its answer is in)."""
    expected = str(EXPECTED_REACH[URL])

    def call_many(drpc: LocalDRPC, count: int) -> None:
        for _ in range(count):
            answer = drpc.execute("reach", URL)
            if answer != expected:
                raise SystemExit(f"wrong answer: {answer!r}, expected {expected!r}")

    with LocalDRPC(tick_interval=tick, max_idle_wait=idle, handoff=handoff) as drpc:
        drpc.register(build_reach())
        call_many(drpc, 10)
        shares = [calls // callers + (i < calls % callers) for i in range(callers)]
        threads = [threading.Thread(target=call_many, args=(drpc, n)) for n in shares]
        started, cpu_started = time.perf_counter(), time.process_time()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return Timing(wall / calls, cpu / calls, calls / wall)


def counts(
    calls: int, tick: float = 3600.0, idle: float = 3600.0, handoff: float = 3600.0
) -> tuple[float, dict[tuple[str, str], float]]:
    """Turns, and messages handled by (component, message kind), per call over ``calls``
    sequential reach calls after a warm-up, from the engine's own counters (``Actor.turns_taken``,
    ``Actor.messages_handled``), so the compiled build is counted as it runs."""
    with LocalDRPC(tick_interval=tick, max_idle_wait=idle, handoff=handoff) as drpc:
        engine = drpc.register(build_reach())
        actors = [*engine.tasks.values(), *engine.ackers]
        for _ in range(10):
            drpc.execute("reach", URL)
        turns_before = sum(actor.turns_taken for actor in actors)
        handled_before = tally(actors)
        for _ in range(calls):
            drpc.execute("reach", URL)
        turns = sum(actor.turns_taken for actor in actors) - turns_before
        handled = tally(actors) - handled_before
    return turns / calls, {key: count / calls for key, count in sorted(handled.items())}


def tally(actors: list[Any]) -> Counter[tuple[str, str]]:
    """Messages the actors have handled so far, by (component, message kind)."""
    handled: Counter[tuple[str, str]] = Counter()
    for actor in actors:
        for kind, count in actor.messages_handled.items():
            handled[(actor.name.split("[")[0], kind)] += count
    return handled


def instructions(path: Path) -> int:
    """The total instruction count (``Ir``) of a callgrind output file."""
    match = re.search(r"^(?:summary|totals): (\d+)", path.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"{path}: no instruction total")
    return int(match.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calls", type=int, nargs="?", default=50)
    parser.add_argument(
        "--report",
        nargs=2,
        type=Path,
        metavar=("FEW", "MANY"),
        help="callgrind outputs of two runs: print the instructions per request",
    )
    parser.add_argument("--tick", type=float, default=3600.0, help="seconds between timeout checks")
    parser.add_argument(
        "--idle", type=float, default=3600.0, help="longest pause between idle spout polls"
    )
    parser.add_argument(
        "--handoff",
        type=float,
        default=3600.0,
        help="seconds queued turns wait for a thread before a worker is woken",
    )
    parser.add_argument(
        "--counts",
        action="store_true",
        help="count turns and messages handled per request instead of timing",
    )
    parser.add_argument(
        "--callers",
        type=int,
        default=1,
        help="closed-loop threads making the calls (timed run only; default 1: sequential)",
    )
    parser.add_argument("--few", type=int, default=50, help="calls of the FEW run")
    parser.add_argument("--many", type=int, default=250, help="calls of the MANY run")
    args = parser.parse_args(argv)
    if args.report:
        few, many = (instructions(path) for path in args.report)
        per_request = (many - few) / (args.many - args.few)
        print(f"{per_request / 1e6:.2f} M instructions per request")
        print(f"{per_request / TUPLES_PER_REQUEST / 1e3:.0f} k per data tuple")
        return 0
    if args.calls < 1:
        parser.error("calls must be at least 1")
    if not 1 <= args.callers <= args.calls:
        parser.error("--callers must be between 1 and the number of calls")
    print(f"{engine_build()} engine")
    if args.counts:
        per_turns, per_kind = counts(args.calls, args.tick, args.idle, args.handoff)
        print(f"{per_turns:.1f} turns per request")
        print(f"{sum(per_kind.values()):.1f} messages handled per request:")
        for (receiver, kind), count in per_kind.items():
            print(f"  {count:7.2f}  {kind} to {receiver}")
        return 0
    timing = run(args.calls, args.tick, args.idle, args.callers, args.handoff)
    print(
        f"{args.callers} caller(s): {timing.wall_per_call * 1e3:.3f} ms per call, "
        f"{timing.cpu_per_call * 1e3:.3f} ms CPU per call, {timing.calls_per_second:.0f} calls/s "
        "(wall and CPU time: noisy under load)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
