"""Engine cost per request: N sequential reach calls through ``LocalDRPC``, for callgrind.

Run it twice under callgrind and difference the instruction counts, so start-up
and shutdown cancel out and what remains is the engine's cost per request
(deterministic, unlike timings on a loaded machine)::

    valgrind --tool=callgrind --callgrind-out-file=cg.50 python bench/engine_cost.py 50
    valgrind --tool=callgrind --callgrind-out-file=cg.250 python bench/engine_cost.py 250
    per request = (Ir at 250 - Ir at 50) / 200

``--report A B`` prints that difference from two callgrind output files. The
engine's timeout checks run every ``--tick`` seconds and an idle spout is
polled at most every ``--idle`` seconds (default an hour for both: their cost
is the clock's, not a request's, and under callgrind a call takes a hundred
times longer; the DRPC spout is woken when a request arrives). The script
also prints the wall time per call (noisy: say so).

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
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc.examples.reach import EXPECTED_REACH, build_reach  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402

URL = "foo.com/blog/1"
TUPLES_PER_REQUEST = 38
"""Data tuples one storm-starter reach of ``URL`` sends between its steps."""


def run(calls: int, tick: float = 3600.0, idle: float = 3600.0) -> float:
    """Seconds per call of ``calls`` sequential reach calls, after one warm-up call."""
    with LocalDRPC(tick_interval=tick, max_idle_wait=idle) as drpc:
        drpc.register(build_reach())
        expected = str(EXPECTED_REACH[URL])
        if drpc.execute("reach", URL) != expected:
            raise SystemExit("wrong answer on the warm-up call")
        started = time.perf_counter()
        for _ in range(calls):
            answer = drpc.execute("reach", URL)
            if answer != expected:
                raise SystemExit(f"wrong answer: {answer!r}, expected {expected!r}")
        return (time.perf_counter() - started) / calls


def counts(
    calls: int, tick: float = 3600.0, idle: float = 3600.0
) -> tuple[float, dict[tuple[str, str], float]]:
    """Turns, and messages handled by (component, message kind), per call over ``calls``
    sequential reach calls after a warm-up. Wraps the engine's classes for the run."""
    from drpc.executors.local.executor import LocalExecutor
    from drpc.executors.local.tasks import AckerTask, BoltTask, SpoutTask

    turns = 0
    handled: Counter[tuple[str, str]] = Counter()
    begin_turn = LocalExecutor.begin_turn
    handles = {kind: kind.handle for kind in (AckerTask, BoltTask, SpoutTask)}

    def counted_turn(engine: LocalExecutor) -> None:
        nonlocal turns
        turns += 1
        begin_turn(engine)

    def counted(handle: Any) -> Any:
        def handle_counted(task: Any, message: Any) -> None:
            handled[(task.name.split("[")[0], type(message).__name__)] += 1
            handle(task, message)

        return handle_counted

    LocalExecutor.begin_turn = counted_turn  # type: ignore[method-assign, assignment]
    for kind, handle in handles.items():
        kind.handle = counted(handle)  # type: ignore[method-assign]
    try:
        with LocalDRPC(tick_interval=tick, max_idle_wait=idle) as drpc:
            drpc.register(build_reach())
            for _ in range(10):
                drpc.execute("reach", URL)
            turns = 0
            handled.clear()
            for _ in range(calls):
                drpc.execute("reach", URL)
    finally:
        LocalExecutor.begin_turn = begin_turn  # type: ignore[method-assign]
        for kind, handle in handles.items():
            kind.handle = handle  # type: ignore[method-assign]
    return turns / calls, {key: count / calls for key, count in sorted(handled.items())}


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
        "--counts",
        action="store_true",
        help="count turns and messages handled per request instead of timing",
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
    if args.counts:
        per_turns, per_kind = counts(args.calls, args.tick, args.idle)
        print(f"{per_turns:.1f} turns per request")
        print(f"{sum(per_kind.values()):.1f} messages handled per request:")
        for (receiver, kind), count in per_kind.items():
            print(f"  {count:7.2f}  {kind} to {receiver}")
        return 0
    seconds = run(args.calls, args.tick, args.idle)
    print(f"{seconds * 1e3:.3f} ms per call (wall time: noisy under load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
