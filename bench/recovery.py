"""Durable state: what a checkpoint store costs a run, and how soon a lost partition answers
again.

A Trident count of 1 000 000 distinct ids (``--keys``) over a 4-partition file log,
``--batch``-tuple batches (100 000), up to 3 in flight, on the resident Spark tasks,
into ``LMDBMapState.transactional(...)`` with ``parallelism_hint(4)``: four partitions,
each on the local disk of the resident task owning it. The input is two passes: every id
once (in random order), then ``--keys`` more tuples drawn from the ids but the probes
(below), so the second pass updates the state the first made. Every final count is
checked against the input.

Parts (``--parts``, default all):

- ``overhead``: the count with a ``file://`` checkpoint store (each partition puts a
  delta per txid before its global commit, snapshots run in the background, the driver
  puts its records), without one, and with the store and ``standby_replicas=1``, side by
  side in alternating ``--rounds`` (medians): tuples/s, and the ratios over the run
  without a store (target for the store alone: at least 0.9).
- ``recovery``: the count with the store, run as the runs above; once the first pass is
  committed, the executor JVM of the resident task owning partition 0 is SIGKILLed (so
  are its partitions' directories: the disk goes with it). Meanwhile DRPC ``MapGet``
  calls ask the counts of 20 probe ids of each lost partition, ids the second pass never
  touches, so the right answer is known (1 each) whatever commits land. Reported: the
  seconds from the kill to the first right answer to a call made after it (target 10 s
  without a standby), the answers that were wrong (must be 0) and the typed refusals
  meanwhile, when the resident tasks were back, the seconds the restore itself took and
  what it downloaded, and the seconds to the run's next commit.
  Without a store the same kill stops the run with ``PartitionLostError``: no answer
  comes back at all.
- ``standby``: the same kill in a run with ``standby_replicas=1``, once every standby
  copy holds the last global commit: the other resident task serves on, and its standby
  copies of the lost partitions take over (target: the first right answer within 1 s).
  Reported as ``recovery``'s, with the takeover's seconds and the deltas it caught up.
- ``streaming``: beside it, Structured Streaming's RocksDB state store with changelog
  checkpointing, as a Spark user runs it, over the same number of keys, an executor
  SIGKILLed once its state holds them: the seconds to its first completed micro-batch
  after the kill (``bench/streaming_recovery.py``, in a process of its own).

Runs on ``--master`` (default ``local-cluster[2,1,1024]``: two executor JVMs, one core
each, a resident task on each). Usage: ``python bench/recovery.py [--keys N] [--batch N]
[--rounds N] [--parts overhead,recovery,streaming] [--master M] [--quick] [--out FILE]``;
prints a table and writes JSON (default ``bench/results/recovery.json``). Run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench import procs  # noqa: E402
from drpc import Fields, runtime  # noqa: E402
from drpc.errors import DRPCExecutionException  # noqa: E402
from drpc.executors.resident.executor import resident_cluster  # noqa: E402
from drpc.state import StateEnvironment  # noqa: E402
from drpc.state.keygroups import partition_of  # noqa: E402
from drpc.state.partition import partition_path, partition_root  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402
from drpc.transactional import CommitInfo, TransactionalRunner  # noqa: E402
from drpc.transactional.filelog import FileLogTransactionalSpout, append_lines  # noqa: E402
from drpc.trident import (  # noqa: E402
    Count,
    FilterNull,
    Function,
    LMDBMapState,
    MapGet,
    TridentTopology,
    drpc_topologies,
    transactional_topology,
)

LOG_PARTITIONS = 4
STATE_PARTITIONS = 4
MAP = "bench-recovery-counts"
PROBES_PER_PARTITION = 20
DEFAULT_MASTER = "local-cluster[2,1,1024]"
SLOTS = 2  # resident tasks: one on each executor of the default master
PARTS = ("overhead", "recovery", "standby", "streaming")


@dataclass(frozen=True)
class Input:
    """The file log, its expected counts, how many batches the first pass fills, and the
    probe ids (never in the second pass) of each state partition."""

    log: Path
    expected: Counter[str]
    first_pass_batches: int
    probes: dict[int, list[str]] = field(default_factory=dict)


def generate(work: Path, keys: int, batch: int, seed: int = 13) -> Input:
    rng = random.Random(seed)
    ids = [f"id{n}" for n in range(keys)]
    rng.shuffle(ids)
    probes: dict[int, list[str]] = {}
    for key in ids:
        owned = probes.setdefault(partition_of(key, STATE_PARTITIONS), [])
        if len(owned) < PROBES_PER_PARTITION:
            owned.append(key)
        if sum(map(len, probes.values())) == STATE_PARTITIONS * PROBES_PER_PARTITION:
            break
    kept = {key for owned in probes.values() for key in owned}
    others = [key for key in ids if key not in kept]
    second = [rng.choice(others) for _ in range(keys)]
    log_dir = work / "log"
    for partition in range(LOG_PARTITIONS):
        append_lines(log_dir, partition, ids[partition::LOG_PARTITIONS])
        append_lines(log_dir, partition, second[partition::LOG_PARTITIONS])
    return Input(log_dir, Counter(ids) + Counter(second), -(-keys // batch), probes)


class SplitKeys(Function):
    def execute(self, tuple: Any, collector: Any) -> None:
        for key in tuple.get_value(0).split():
            collector.emit([key])


def trident(log_dir: Path, batch: int) -> TridentTopology:
    spout = FileLogTransactionalSpout(log_dir, Fields("key"), batch // LOG_PARTITIONS)
    topology = TridentTopology()
    counts = (
        topology.new_stream("bench-recovery", spout, parallelism=2)
        .group_by(["key"])
        .persistent_aggregate(LMDBMapState.transactional(MAP), Count(), ["count"])
        .parallelism_hint(STATE_PARTITIONS)
    )
    (
        topology.new_drpc_stream("count")
        .each(["args"], SplitKeys(), ["key"])
        .group_by(["key"])
        .state_query(counts, ["key"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .project(["key", "count"])
    )
    return topology


def runner_of(
    data: Input, state_dir: Path, batch: int, store: str | None, standby_replicas: int = 0
) -> TransactionalRunner:
    return TransactionalRunner(
        transactional_topology(trident(data.log, batch), str(state_dir)),
        state_dir=str(state_dir),
        executor="spark",
        max_spout_pending=3,
        checkpoint_dir=store,
        standby_replicas=standby_replicas,
    )


def check_counts(state_dir: Path, data: Input, what: str) -> None:
    counts = LMDBMapState.transactional(MAP).query(StateEnvironment.open(str(state_dir)))
    found = dict(counts.items())
    assert found == dict(data.expected), f"{what}: {len(found)} keys, not the input's counts"


def close_state(root: Path) -> None:
    for env in StateEnvironment.open_environments():
        if env.path.startswith(str(root)):
            env.close()


# -- overhead ---------------------------------------------------------------------------------


def bench_run(
    data: Input, work: Path, batch: int, store: str | None, standby_replicas: int = 0
) -> dict[str, Any]:
    state_dir = work / "state"
    started = time.perf_counter()
    with runner_of(data, state_dir, batch, store, standby_replicas) as runner:
        result = runner.run()
    elapsed = time.perf_counter() - started
    check_counts(state_dir, data, "with a store" if store else "without a store")
    close_state(work)
    stored = sum(f.stat().st_size for f in (work / "store").rglob("*") if f.is_file())
    return {
        "seconds": elapsed,
        "tuples": result.tuples,
        "batches": len(result.commits),
        "tuples_per_s": result.tuples / elapsed,
        "store_bytes": stored,
    }


def bench_overhead(data: Input, work: Path, batch: int, rounds: int) -> dict[str, Any]:
    names = ("with_store", "without_store", "with_standby")
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for number in range(rounds):
        for name in names if number % 2 == 0 else names[::-1]:
            print(f"round {number + 1}: {name.replace('_', ' ')} ...", flush=True)
            here = work / f"overhead-{name}-{number}"
            store = None if name == "without_store" else f"file://{here / 'store'}"
            standbys = 1 if name == "with_standby" else 0
            measured[name].append(bench_run(data, here, batch, store, standbys))
            shutil.rmtree(here, ignore_errors=True)
    found: dict[str, Any] = {
        name: {
            "tuples_per_s": statistics.median(r["tuples_per_s"] for r in runs),
            "seconds": statistics.median(r["seconds"] for r in runs),
            "rounds_tuples_per_s": [r["tuples_per_s"] for r in runs],
            "store_bytes": max(r["store_bytes"] for r in runs),
        }
        for name, runs in measured.items()
    }
    found["ratio_with_over_without"] = (
        found["with_store"]["tuples_per_s"] / found["without_store"]["tuples_per_s"]
    )
    found["ratio_standby_over_without"] = (
        found["with_standby"]["tuples_per_s"] / found["without_store"]["tuples_per_s"]
    )
    return found


# -- recovery ---------------------------------------------------------------------------------


@dataclass
class Probing:
    """DRPC calls asking the probes' counts until ``stop``: when each was made and when it
    ended, and how."""

    keys: list[str]
    stop: threading.Event = field(default_factory=threading.Event)
    answers: list[tuple[float, float, bool]] = field(default_factory=list)  # made, ended, right
    refusals: Counter[str] = field(default_factory=Counter)

    def run(self, drpc: LocalDRPC) -> None:
        want = sorted([key, 1] for key in self.keys)
        argument = " ".join(self.keys)
        while not self.stop.is_set():
            made = time.monotonic()
            try:
                answer = drpc.execute("count", argument)
            except DRPCExecutionException as error:
                self.refusals[str(error.type.name)] += 1
                time.sleep(0.01)
                continue
            right = sorted(json.loads(answer)) == want
            self.answers.append((made, time.monotonic(), right))

    def first_right_after(self, moment: float) -> float | None:
        """When the first right answer to a call made after ``moment`` came (None: none)."""
        return min(
            (ended for made, ended, right in list(self.answers) if right and made > moment),
            default=None,
        )


def bench_recovery(
    data: Input, work: Path, batch: int, session: Any, standby_replicas: int = 0
) -> dict[str, Any]:
    state_dir = work / "state"
    store = f"file://{work / 'store'}"
    commits: list[tuple[float, int]] = []
    runner = runner_of(data, state_dir, batch, store, standby_replicas)
    cluster = resident_cluster(session.sparkContext)
    found: dict[str, Any] = {}
    with runner, LocalDRPC(executor="spark", timeout=60.0) as drpc:
        for function in drpc_topologies(trident(data.log, batch), str(state_dir)):
            drpc.register(function)

        def on_commit(info: CommitInfo) -> None:
            commits.append((time.monotonic(), info.txid))

        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = runner.run(on_commit=on_commit)
            except Exception as error:  # reported, and the bench fails below
                outcome["error"] = error

        running = threading.Thread(target=run, name="bench-recovery-run")
        running.start()
        while not commits or commits[-1][1] < data.first_pass_batches:
            if not running.is_alive():
                raise RuntimeError(f"the run ended before the kill: {outcome}")
            time.sleep(0.01)
        while standby_replicas and not _standbys_built(runner):
            time.sleep(0.01)  # each standby copy built once: what a kill mid-run then meets
        lags = _standby_lags(runner)
        partitions = runner.status()["partitions"]
        victim_task = next(p["task"] for p in partitions if p["index"] == 0)
        lost = [p["index"] for p in partitions if p["task"] == victim_task]
        pid = cluster.call(victim_task, os.getpid).result(timeout=30)
        jvm = procs.jvm_above(pid)
        probing = Probing([key for index in lost for key in data.probes[index]])
        prober = threading.Thread(target=probing.run, args=(drpc,), name="bench-probe")
        prober.start()
        time.sleep(0.5)  # answers before the kill
        restarts = cluster.restarts
        back_at: float | None = None
        killed_after = commits[-1][1]
        killed_at = time.monotonic()
        os.kill(jvm or pid, signal.SIGKILL)
        root = partition_root(str(state_dir))
        for index in lost:
            shutil.rmtree(partition_path(root, MAP, index), ignore_errors=True)
        deadline = killed_at + 300
        while time.monotonic() < deadline and probing.first_right_after(killed_at) is None:
            if back_at is None and cluster.restarts > restarts and cluster.wait_ready(0):
                back_at = time.monotonic()
            time.sleep(0.01)
        probing.stop.set()
        prober.join(120)
        running.join(600)
        if "error" in outcome:
            raise RuntimeError(f"the run failed after the kill: {outcome['error']}")
        status = runner.status()
    check_counts(state_dir, data, "after the kill")
    right_at = probing.first_right_after(killed_at)
    next_commit = [at for at, _ in commits if at > killed_at]
    restore = (status.get("checkpoint") or {}).get("last_restore") or {}
    takeover = ((status.get("checkpoint") or {}).get("standbys") or {}).get("last_takeover")
    found.update(
        killed="executor JVM" if jvm else "resident task process",
        lost_partitions=lost,
        state_keys=len(data.expected),
        first_right_answer_s=None if right_at is None else right_at - killed_at,
        wrong_answers=sum(1 for _, _, right in probing.answers if not right),
        right_answers=sum(1 for _, _, right in probing.answers if right),
        refusals=dict(probing.refusals),
        next_commit_s=(next_commit[0] - killed_at) if next_commit else None,
        resident_tasks_back_s=None if back_at is None else back_at - killed_at,
        restore_seconds=restore.get("seconds"),
        restore_bytes=restore.get("bytes"),
        restore_deltas=restore.get("deltas"),
        standby_replicas=standby_replicas,
        standby_lags_at_kill=lags,
        killed_after_txid=killed_after,
        takeover_seconds=None if takeover is None else takeover["seconds"],
        takeover_deltas=None if takeover is None else takeover["deltas"],
        replays=status["replays"],
    )
    close_state(work)
    return found


def _standby_lags(runner: TransactionalRunner) -> list[int | None]:
    """Each standby copy's lag in global commits (None: not built yet)."""
    standbys = (runner.status().get("checkpoint") or {}).get("standbys") or {}
    return [copy["lag"] for copy in standbys.get("copies") or []]


def _standbys_built(runner: TransactionalRunner) -> bool:
    lags = _standby_lags(runner)
    return bool(lags) and all(lag is not None for lag in lags)


# -- the run ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keys", type=int, default=1_000_000, help="distinct ids (default 1 000 000)"
    )
    parser.add_argument(
        "--batch", type=int, default=100_000, help="tuples a batch (default 100 000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating rounds of overhead (default 2)"
    )
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated: {', '.join(PARTS)} (all)"
    )
    parser.add_argument(
        "--master", default=DEFAULT_MASTER, help=f"the Spark master (default {DEFAULT_MASTER})"
    )
    parser.add_argument("--quick", action="store_true", help="200 000 ids, one round")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "recovery.json",
        help="results JSON (default bench/results/recovery.json)",
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if parts - set(PARTS):
        parser.error(f"unknown parts {sorted(parts - set(PARTS))}; choose from {', '.join(PARTS)}")
    if args.quick:
        args.keys, args.rounds, args.batch = 200_000, 1, 50_000
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="drpc-bench-recovery-"))
    results: dict[str, Any] = {}
    try:
        session = runtime.get_session(args.master)
        resident_cluster(session.sparkContext, slots=SLOTS).start()
        results["environment"] = {
            "cpus": os.cpu_count(),
            "spark": session.version,
            "master": args.master,
            "resident_slots": SLOTS,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        results.update(keys=args.keys, batch=args.batch, rounds=args.rounds)
        print(f"generating {args.keys} ids, two passes ...", flush=True)
        data = generate(work, args.keys, args.batch)
        print("warming up ...", flush=True)
        warm = generate(work / "warm", args.keys // 10, args.batch)
        bench_run(warm, work / "warm-run", args.batch, f"file://{work / 'warm-run' / 'store'}")
        if "overhead" in parts:
            results["overhead"] = bench_overhead(data, work, args.batch, args.rounds)
        if "recovery" in parts:
            print("recovery: a worker SIGKILLed with its disk ...", flush=True)
            results["recovery"] = bench_recovery(data, work / "recovery", args.batch, session)
        if "standby" in parts:
            print("recovery with a standby replica: a worker SIGKILLed with its disk ...")
            results["standby"] = bench_recovery(
                data, work / "standby", args.batch, session, standby_replicas=1
            )
        if "streaming" in parts:
            print("recovery of Structured Streaming's RocksDB state store ...", flush=True)
            from bench.streaming_recovery import streaming_recovery

            results["streaming"] = streaming_recovery(
                work / "streaming", keys=args.keys, batch=args.batch
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    report(results)
    print(f"written to {args.out}")
    return 0


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def report(results: dict[str, Any]) -> None:
    if "overhead" in results:
        overhead = results["overhead"]
        for name in ("with_store", "without_store", "with_standby"):
            print(f"{name.replace('_', ' ')}: {overhead[name]['tuples_per_s']:,.0f} tuples/s")
        print(f"with a store over without: {overhead['ratio_with_over_without']:.2f}x")
        print(
            "with a store and a standby replica over without a store: "
            f"{overhead['ratio_standby_over_without']:.2f}x"
        )
    if "recovery" in results:
        recovery = results["recovery"]
        print(
            f"worker killed ({recovery['killed']}, partitions {recovery['lost_partitions']} "
            f"lost): first right answer after {recovery['first_right_answer_s']:.2f} s, "
            f"{recovery['wrong_answers']} wrong, refusals {recovery['refusals']}; restore "
            f"{recovery['restore_seconds']:.2f} s ({recovery['restore_bytes']:,} bytes); resident "
            f"tasks back after {recovery['resident_tasks_back_s'] or float('nan'):.2f} s; next "
            f"commit after {recovery['next_commit_s']:.2f} s"
        )
    if "standby" in results:
        standby = results["standby"]
        print(
            f"with a standby replica, worker killed after txid {standby['killed_after_txid']} "
            f"(partitions {standby['lost_partitions']} lost, standby lags "
            f"{standby['standby_lags_at_kill']}): first right answer after "
            f"{_seconds(standby['first_right_answer_s'])}, {standby['wrong_answers']} wrong, "
            f"refusals {standby['refusals']}; takeover {_seconds(standby['takeover_seconds'])} "
            f"({standby['takeover_deltas']} delta(s)); next commit after "
            f"{_seconds(standby['next_commit_s'])}"
        )
    if "streaming" in results:
        streaming = results["streaming"]
        print(
            "Structured Streaming RocksDB, executor killed: first batch after "
            f"{streaming.get('first_batch_after_kill_s')} s"
        )


if __name__ == "__main__":
    raise SystemExit(main())
