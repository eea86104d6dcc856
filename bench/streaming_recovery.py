"""Structured Streaming's recovery: how soon Spark's RocksDB state store counts again after an
executor JVM is SIGKILLed.

The baseline beside drpc's own recovery figure (``bench/recovery.py``, part ``streaming``,
calls ``streaming_recovery`` and reads its JSON). Structured Streaming as a Spark user writes
it (``bench/keyed_state.py``'s): ``groupBy("key").count()`` in update mode over a file
stream of one ``--batch``-line file per micro-batch (``maxFilesPerTrigger`` 1), a
processing-time trigger of 200 ms, ``--shuffle-partitions`` state partitions (4) in its
RocksDB state store (``RocksDBStateStoreProvider``) with changelog checkpointing, the
checkpoint in the work directory, to the ``noop`` sink (the state store holds the counts;
the sink costs nothing).

What it runs, in a process of its own (``streaming_recovery`` starts this file as a child):

1. The input, from a fixed seed: ``--keys`` distinct keys (``id<n>``, 1 000 000) shuffled,
   as ``--batches-before-kill`` files of ``--batch`` lines (100 000) each (by default
   enough files that every key is in the state before the kill; more files cycle through
   the keys again), then ``--batches-after`` files (5) of keys drawn from the same key
   space, so the batches after the kill update the state the first ones made. Every file
   is there from the start with its own modification time, one second apart, so the
   source takes them in order, one a micro-batch: input is always waiting.
2. A SparkSession on ``--master`` (default ``local-cluster[2,1,1024]``: two executor
   JVMs, one core each, their workers inside the driver's JVM) through
   ``drpc.runtime.get_session``; on a ``local-cluster`` master the workers write their
   ``work/`` under a ``SPARK_HOME`` of symlinks in the work directory, not into the
   installed pyspark package.
3. The query, with a ``StreamingQueryListener`` recording every micro-batch's progress.
   Once the last pre-kill micro-batch has completed (every key in the state), the
   executor JVM holding the most state-store partitions is SIGKILLed: the executors are
   the Java processes under the driver's JVM running ``CoarseGrainedExecutorBackend``
   (``/proc``, ``bench/procs.py``), and the partitions each holds are the RocksDB
   instances it has open (``StateStoreId(opId=..,partId=..)`` directories among its
   ``/proc/PID/fd``). The next micro-batch has just started then (input is waiting), so
   the kill lands at its beginning. Every 50 ms afterwards: which executor JVMs run and
   how many executors the driver counts, until the last post-kill micro-batch completes.
4. The counts: the query stopped, Spark's state data source (``format("statestore")``)
   reads the committed state, whose rows, total count and a checksum (the sum over keys of
   ``crc32(key) * count``) must equal the input's.

Measured (seconds; a micro-batch completes at its progress ``timestamp`` plus its
``batchDuration``, both on the wall clock the kill time is read from):

- ``first_batch_after_kill_s``: from the kill to the completion of the first micro-batch
  that completes after it, one with input (the headline);
- ``batch_seconds_before_kill``: the median duration of the pre-kill micro-batches, and
  ``batch_seconds_after_kill``: each post-kill micro-batch's;
- ``state_rows_before_kill`` (``numRowsTotal`` of the last pre-kill micro-batch) and at
  the end; what was killed (pid, executor id, its state partitions, why it was chosen,
  how far into the running micro-batch) and the checkpoint's changelog and snapshot files
  then; whether Spark relaunched an executor (its process seen, registered with the
  driver, and after how long) and which executors hold which state partitions at the end;
  the first post-kill micro-batch's ``durationMs``; ``spark.locality.wait`` (a state
  partition whose executor is gone waits that long before it runs elsewhere); whether the
  final counts are right; the pyspark version.

Usage: ``python bench/streaming_recovery.py --work DIR [--keys N] [--batch N]
[--batches-before-kill N] [--batches-after N] [--shuffle-partitions N] [--master M]
[--quick] [--timeout S]``; ``--quick`` is 200 000 keys in 50 000-line files. Progress goes
to stderr; the last stdout line is the JSON object. It replaces ``stream/``,
``checkpoint/`` and ``spark-home/`` under ``--work`` and leaves them there. Linux only
(``/proc``); the master must run its executors as JVMs on this machine under the driver's
(``local-cluster[...]``). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench import procs  # noqa: E402
from drpc import runtime  # noqa: E402

DEFAULT_KEYS = 1_000_000
DEFAULT_BATCH = 100_000
DEFAULT_AFTER = 5
DEFAULT_PARTITIONS = 4
DEFAULT_MASTER = "local-cluster[2,1,1024]"
DEFAULT_TIMEOUT = 900.0
QUICK_KEYS, QUICK_BATCH = 200_000, 50_000
TRIGGER = "200 milliseconds"
SEED = 13
POLL = 0.05
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_STORE_DIR = re.compile(r"StateStoreId\(opId=(\d+),partId=(\d+),")
QUERY_NAME = "bench_streaming_recovery"


# The input ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """The stream directory and what its files add up to."""

    stream: Path
    files_before: int
    files_after: int
    lines: int
    distinct_before: int
    distinct: int
    checksum: int  # sum over keys of crc32(key) * count


def write_input(
    stream: Path, keys: int, batch: int, before: int, after: int, seed: int = SEED
) -> Input:
    """``keys`` distinct keys shuffled, as ``before`` files of ``batch`` lines (cycling
    through them), then ``after`` files of keys drawn from the same space."""
    rng = random.Random(seed)
    names = [f"id{n}" for n in range(keys)]
    order = list(range(keys))
    rng.shuffle(order)
    files = [
        [order[(start + j) % keys] for j in range(batch)]
        for start in range(0, before * batch, batch)
    ]
    files += [[rng.randrange(keys) for _ in range(batch)] for _ in range(after)]
    stream.mkdir(parents=True)
    counts = [0] * keys
    distinct_before = 0
    first_mtime = time.time() - len(files) - 60  # one second apart: the source's order
    for number, chunk in enumerate(files):
        for key in chunk:
            counts[key] += 1
        if number == before - 1:
            distinct_before = sum(1 for count in counts if count)
        path = stream / f"batch-{number:05d}.txt"
        path.write_text("".join(names[key] + "\n" for key in chunk))
        os.utime(path, (first_mtime + number, first_mtime + number))
    checksum = sum(zlib.crc32(names[key].encode()) * c for key, c in enumerate(counts) if c)
    return Input(
        stream=stream,
        files_before=before,
        files_after=after,
        lines=sum(counts),
        distinct_before=distinct_before,
        distinct=sum(1 for count in counts if count),
        checksum=checksum,
    )


# What the query reports -----------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One completed micro-batch, from its progress."""

    batch_id: int
    started: float  # wall clock, the progress timestamp (the trigger's start)
    seconds: float  # batchDuration
    input_rows: int
    state_rows: int | None
    reported: float  # wall clock, when the listener here heard of it
    progress: dict[str, Any] = field(repr=False)

    @property
    def completed(self) -> float:
        return self.started + self.seconds


class Progress(StreamingQueryListener):
    """Every micro-batch of the query named ``QUERY_NAME``, as its progress arrives."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.terminated: str | None = None
        self.changed = threading.Condition()

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        reported = time.time()
        try:
            progress = json.loads(event.progress.json)
            if progress.get("name") != QUERY_NAME:
                return
            operators = progress.get("stateOperators") or []
            batch = Batch(
                batch_id=int(progress["batchId"]),
                started=datetime.fromisoformat(progress["timestamp"]).timestamp(),
                seconds=int(progress["batchDuration"]) / 1000,
                input_rows=int(progress.get("numInputRows") or 0),
                state_rows=int(operators[0]["numRowsTotal"]) if operators else None,
                reported=reported,
                progress=progress,
            )
        except Exception as error:  # a callback from the JVM: say it, never raise into it
            log(f"unreadable progress: {error!r}")
            return
        with self.changed:
            self.batches.append(batch)
            self.changed.notify_all()
        log(
            f"batch {batch.batch_id}: {batch.seconds:.2f} s, {batch.input_rows} rows in, "
            f"{batch.state_rows} in state"
        )

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        with self.changed:
            self.terminated = event.exception or "stopped"
            self.changed.notify_all()

    def completed(self, batch_id: int) -> Batch | None:
        with self.changed:
            return next((b for b in self.batches if b.batch_id == batch_id), None)

    def wait_for(self, batch_id: int, timeout: float) -> Batch:
        """The micro-batch ``batch_id`` once it has completed; RuntimeError if the query
        ends first or it has not completed within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                found = next((b for b in self.batches if b.batch_id == batch_id), None)
                if found is not None:
                    return found
                if self.terminated is not None:
                    raise RuntimeError(
                        f"the query ended before batch {batch_id}: {self.terminated}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"batch {batch_id} did not complete within {timeout:.0f} s")
                self.changed.wait(min(left, 1.0))


# The processes --------------------------------------------------------------------------


def executors(driver_jvm: int) -> dict[str, int]:
    """Executor id to pid of every executor JVM under the driver's JVM."""
    found: dict[str, int] = {}
    tree = procs.children()
    for pid in procs.descendants(driver_jvm, tree):
        arguments = procs.cmdline(pid)
        if procs.is_java(pid) and EXECUTOR_MAIN in arguments and "--executor-id" in arguments:
            found[arguments[arguments.index("--executor-id") + 1]] = pid
    return found


def state_partitions(pid: int) -> list[int]:
    """The state-store partitions whose RocksDB instance process ``pid`` has open."""
    fds = Path("/proc") / str(pid) / "fd"
    held: set[int] = set()
    try:
        entries = os.listdir(fds)
    except OSError:
        return []
    for entry in entries:
        try:
            target = os.readlink(fds / entry)
        except OSError:
            continue
        match = STATE_STORE_DIR.search(target)
        if match:
            held.add(int(match.group(2)))
    return sorted(held)


def checkpoint_files(checkpoint: Path) -> dict[str, int]:
    """The state's changelog and snapshot files in the checkpoint, counted."""
    state = checkpoint / "state"
    names = [path.name for path in state.rglob("*") if path.is_file()] if state.exists() else []
    return {
        "changelogs": sum(1 for name in names if name.endswith(".changelog")),
        "snapshots": sum(1 for name in names if name.endswith(".zip")),
    }


def spark_home_view(dest: Path) -> Path:
    """A ``SPARK_HOME`` of symlinks to the installed Spark's entries, so a local-cluster's
    workers write their ``work/`` into ``dest`` instead of the installed package."""
    import pyspark

    source = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    dest.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name not in ("work", "logs"):
            (dest / entry.name).symlink_to(entry.resolve())
    return dest


def log(message: str) -> None:
    print(f"[streaming_recovery] {message}", file=sys.stderr, flush=True)


# The run --------------------------------------------------------------------------------


@dataclass
class Watch:
    """What the processes and the driver show after the kill, polled."""

    killed_at: float
    known: set[str]
    registered_before: int
    lost_seen: float | None = None
    new_executor: dict[str, Any] | None = None
    registered_again: float | None = None

    def poll(self, driver_jvm: int, registered: Callable[[], int]) -> None:
        now = time.time()
        count = registered()
        if self.lost_seen is None and count < self.registered_before:
            self.lost_seen = now
        if self.new_executor is None:
            for executor_id, pid in executors(driver_jvm).items():
                if executor_id not in self.known:
                    self.new_executor = {"executor_id": executor_id, "pid": pid, "seen": now}
                    log(f"a new executor JVM: id {executor_id}, pid {pid}")
        if (
            self.registered_again is None
            and self.lost_seen is not None
            and count >= self.registered_before
        ):
            self.registered_again = now

    def report(self) -> dict[str, Any]:
        def after(at: float | None) -> float | None:
            return None if at is None else round(at - self.killed_at, 3)

        new = self.new_executor or {}
        return {
            "executor_relaunched": self.new_executor is not None,
            "driver_saw_loss_after_s": after(self.lost_seen),
            "relaunched_executor_id": new.get("executor_id"),
            "relaunched_process_after_s": after(new.get("seen")),
            "relaunched_registered_after_s": after(self.registered_again),
        }


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    deadline = started + args.timeout
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for name in ("stream", "checkpoint", "spark-home"):
        shutil.rmtree(work / name, ignore_errors=True)
    os.chdir(work)  # whatever Spark writes to its working directory lands here
    before = args.batches_before_kill or -(-args.keys // args.batch)
    log(f"writing {before} + {args.batches_after} files of {args.batch} keys ...")
    data = write_input(work / "stream", args.keys, args.batch, before, args.batches_after)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.master.startswith("local-cluster["):
        os.environ["SPARK_HOME"] = str(spark_home_view(work / "spark-home"))
    settings = {
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.sql.streaming.stateStore.providerClass": PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    }
    log(f"starting Spark on {args.master} ...")
    session = runtime.get_session(
        args.master, settings, app_name="bench-streaming-recovery", start_timeout=300
    )
    try:
        result = measure(session, data, work / "checkpoint", args, deadline)
    finally:
        runtime.stop_session()
    import pyspark

    return {
        "engine": "Spark Structured Streaming, RocksDB state store, changelog checkpointing",
        "pyspark": pyspark.__version__,
        "master": args.master,
        "keys": args.keys,
        "batch": args.batch,
        "batches_before_kill": before,
        "batches_after": args.batches_after,
        "shuffle_partitions": args.shuffle_partitions,
        "trigger": TRIGGER,
        **result,
        "total_seconds": round(time.monotonic() - started, 1),
    }


def measure(
    session: Any, data: Input, checkpoint: Path, args: argparse.Namespace, deadline: float
) -> dict[str, Any]:
    driver_jvm = procs.jvm(os.getpid())
    if driver_jvm is None:
        raise RuntimeError("no Java process under this one: where is the driver's JVM?")
    jsc = session.sparkContext._jsc.sc()

    def registered() -> int:
        return int(jsc.getExecutorMemoryStatus().size()) - 1  # the driver's block manager too

    progress = Progress()
    session.streams.addListener(progress)
    query = (
        session.readStream.format("text")
        .option("maxFilesPerTrigger", 1)
        .load(str(data.stream))
        .withColumnRenamed("value", "key")
        .groupBy("key")
        .count()
        .writeStream.queryName(QUERY_NAME)
        .outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=TRIGGER)
        .start()
    )
    try:
        last_before = data.files_before - 1
        last = last_before + data.files_after
        before_kill = progress.wait_for(last_before, deadline - time.monotonic())
        running = executors(driver_jvm)
        if not running:
            raise RuntimeError(
                f"no executor JVM ({EXECUTOR_MAIN}) under the driver's JVM {driver_jvm}: "
                f"--master {args.master} must start executor JVMs of its own under the "
                "driver's, on this machine (local-cluster[...])"
            )
        held = {executor_id: state_partitions(pid) for executor_id, pid in running.items()}
        victim = min(running, key=lambda eid: (-len(held[eid]), int(eid)))
        chosen_by = (
            "it holds the most state-store partitions (RocksDB instances open in /proc/PID/fd)"
            if held[victim]
            else "no executor had a RocksDB instance open (/proc/PID/fd): the first executor"
        )
        files_at_kill = checkpoint_files(checkpoint)
        registered_before = registered()
        killed_at = time.time()
        os.kill(running[victim], signal.SIGKILL)
        log(f"SIGKILLed executor {victim} (pid {running[victim]}, partitions {held[victim]})")
        watch = Watch(killed_at, set(running), registered_before)
        while progress.completed(last) is None:
            if progress.terminated is not None:
                raise RuntimeError(f"the query ended after the kill: {progress.terminated}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"batch {last} did not complete within {args.timeout:.0f} s")
            watch.poll(driver_jvm, registered)
            time.sleep(POLL)
        settle = time.monotonic() + 30  # a replacement still starting: give it a little time
        while watch.registered_again is None and time.monotonic() < min(settle, deadline):
            watch.poll(driver_jvm, registered)
            time.sleep(POLL)
        held_after = {eid: state_partitions(pid) for eid, pid in executors(driver_jvm).items()}
    finally:
        if query.isActive:
            query.stop()
        session.streams.removeListener(progress)
    with progress.changed:
        batches = sorted(progress.batches, key=lambda b: b.batch_id)
    pre = [b for b in batches if b.batch_id <= last_before]
    post = [b for b in batches if b.batch_id > last_before]
    first = next((b for b in post if b.completed > killed_at and b.input_rows > 0), None)
    if first is None:
        raise RuntimeError("no micro-batch with input completed after the kill")
    counts = check_state(session, checkpoint, data)
    final = batches[-1]
    return {
        "first_batch_after_kill_s": round(first.completed - killed_at, 3),
        "first_batch_after_kill_reported_s": round(first.reported - killed_at, 3),
        "first_batch_after_kill": {
            "batch_id": first.batch_id,
            "seconds": first.seconds,
            "input_rows": first.input_rows,
            "duration_ms": first.progress.get("durationMs", {}),
        },
        "batch_seconds_before_kill": statistics.median(b.seconds for b in pre),
        "batch_seconds_before_kill_all": [b.seconds for b in pre],
        "batch_seconds_after_kill": [b.seconds for b in post],
        "state_rows_before_kill": before_kill.state_rows,
        "expected_state_rows_before_kill": data.distinct_before,
        "killed": {
            "executor_id": victim,
            "pid": running[victim],
            "state_partitions": held[victim],
            "chosen_because": chosen_by,
            "state_partitions_by_executor": held,
            "seconds_after_last_pre_kill_batch": round(killed_at - before_kill.completed, 3),
            "batch_running": last_before + 1,
            "checkpoint_files": files_at_kill,
        },
        **watch.report(),
        "spark_locality_wait": session.sparkContext.getConf().get("spark.locality.wait", "3s"),
        "state_partitions_by_executor_at_end": held_after,
        "state_rows_end": final.state_rows,
        "input_rows": sum(b.input_rows for b in batches),
        "expected_input_rows": data.lines,
        "batches": len(batches),
        "counts": counts,
        "counts_right": counts["right"]
        and final.state_rows == data.distinct
        and sum(b.input_rows for b in batches) == data.lines,
    }


def check_state(session: Any, checkpoint: Path, data: Input) -> dict[str, Any]:
    """The committed state (Spark's ``statestore`` data source) against the input."""
    from pyspark.sql import functions as F

    row = (
        session.read.format("statestore")
        .load(str(checkpoint))
        .agg(
            F.count("*").alias("rows"),
            F.sum("value.count").alias("total"),
            F.sum(F.crc32(F.col("key.key").cast("binary")) * F.col("value.count")).alias(
                "checksum"
            ),
        )
        .first()
    )
    rows, total, checksum = int(row["rows"]), int(row["total"] or 0), int(row["checksum"] or 0)
    right = rows == data.distinct and total == data.lines and checksum == data.checksum
    if not right:
        log(
            f"WRONG COUNTS: {rows} keys, {total} in all, checksum {checksum}; expected "
            f"{data.distinct}, {data.lines}, {data.checksum}"
        )
    return {
        "rows": rows,
        "expected_rows": data.distinct,
        "total": total,
        "expected_total": data.lines,
        "checksum_matches": checksum == data.checksum,
        "right": right,
    }


# The parent's side ----------------------------------------------------------------------


def streaming_recovery(
    work: Path,
    keys: int,
    batch: int,
    *,
    batches_before_kill: int | None = None,
    batches_after: int = DEFAULT_AFTER,
    shuffle_partitions: int = DEFAULT_PARTITIONS,
    master: str = DEFAULT_MASTER,
    timeout: float = DEFAULT_TIMEOUT,
) -> dict[str, Any]:
    """Run the benchmark (see the module doc) in a child process, in ``work``, and return
    its JSON; RuntimeError with the tail of the child's stderr if it fails."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--work",
        str(work),
        "--keys",
        str(keys),
        "--batch",
        str(batch),
        "--batches-after",
        str(batches_after),
        "--shuffle-partitions",
        str(shuffle_partitions),
        "--master",
        master,
        "--timeout",
        str(timeout),
    ]
    if batches_before_kill is not None:
        command += ["--batches-before-kill", str(batches_before_kill)]
    Path(work).mkdir(parents=True, exist_ok=True)
    # Its own process group: on a timeout the child goes with its JVMs (spark-submit execs
    # java in the group; the executors are the JVM's children).
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout + 120)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        stdout, stderr = child.communicate()
        raise RuntimeError(
            f"the Structured Streaming recovery run took over {timeout + 120:.0f} s: "
            f"{stderr[-3000:]}"
        ) from None
    lines = stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        raise RuntimeError(
            f"the Structured Streaming recovery run failed (exit {child.returncode}): "
            f"{stderr[-3000:]}"
        )
    try:
        return dict(json.loads(lines[-1]))
    except ValueError:
        raise RuntimeError(
            f"the Structured Streaming recovery run printed no JSON last: {lines[-1][:300]!r}; "
            f"{stderr[-3000:]}"
        ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="work directory (kept)")
    parser.add_argument(
        "--keys", type=int, default=None, help=f"distinct keys (default {DEFAULT_KEYS:,})"
    )
    parser.add_argument(
        "--batch", type=int, default=None, help=f"keys a micro-batch (default {DEFAULT_BATCH:,})"
    )
    parser.add_argument(
        "--batches-before-kill",
        type=int,
        default=None,
        help="micro-batches before the kill (default: keys/batch, every key in the state)",
    )
    parser.add_argument(
        "--batches-after",
        type=int,
        default=DEFAULT_AFTER,
        help=f"micro-batches after the kill (default {DEFAULT_AFTER})",
    )
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        help=f"state partitions (default {DEFAULT_PARTITIONS})",
    )
    parser.add_argument(
        "--master", default=DEFAULT_MASTER, help=f"Spark master (default {DEFAULT_MASTER})"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds the run may take (default {DEFAULT_TIMEOUT:.0f})",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_KEYS:,} keys, {QUICK_BATCH:,} a batch"
    )
    args = parser.parse_args(argv)
    quick_keys, quick_batch = (QUICK_KEYS, QUICK_BATCH) if args.quick else (None, None)
    args.keys = args.keys or quick_keys or DEFAULT_KEYS
    args.batch = args.batch or quick_batch or DEFAULT_BATCH
    for name in ("keys", "batch", "batches_after", "shuffle_partitions"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.batches_before_kill is not None and args.batches_before_kill < 1:
        parser.error("--batches-before-kill must be at least 1")
    if args.master == "local" or args.master.startswith("local["):
        parser.error(
            f"--master {args.master} runs its tasks in the driver's JVM: no executor to kill"
        )
    result = run(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
