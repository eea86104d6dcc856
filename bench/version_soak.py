"""Consistent reads over a long run: the state file and the processes stay bounded.

A writer process commits ``--commits`` small commits (each sets the 200 words of
``drpc.examples.vocabulary_counts`` to the commit's txid and records the commit,
``sync=False``: the state layer, no Trident batch around it, so a million commits take
minutes), while this process asks the ``counts`` query (local executor, pinned reads)
without pause and checks that every answer reads one commit. Every ``--every`` commits
it prints, and at the end writes as JSON (default ``bench/results/version_soak.json``):
the run's environment (cpus, python, lmdb, date) and one sample every ``--every``
commits: commits, seconds, answers, mixed answers (must be 0), the LMDB file's size and
the pages in use, the undo logs kept, and the RSS of the writer and of the querying
process.

Usage: ``python bench/version_soak.py [--commits N] [--every N] [--out FILE]``
(``--writer STATE_DIR`` is the writer's own mode).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import lmdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc.compiled import engine_build  # noqa: E402
from drpc.examples.vocabulary_counts import (  # noqa: E402
    QUERY,
    TXID,
    VOCABULARY,
    counts_function,
    counts_of,
)
from drpc.state import CoordinatorState, StateEnvironment, StateTxn, TransactionalMap  # noqa: E402
from drpc.testing import LocalDRPC  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def writer(state: str, commits: int, every: int) -> None:
    """Commit ``commits`` times, printing a JSON sample every ``every`` commits."""
    env = StateEnvironment.open(state, sync=False, metasync=False)
    counts = TransactionalMap(env, "counts", default=0)
    coordinator = CoordinatorState(env, TXID)
    started = time.perf_counter()
    for txid in range(1, commits + 1):

        def commit(txn: StateTxn, txid: int = txid) -> None:
            counts.handle(txn, txid).multi_put(dict.fromkeys(VOCABULARY, txid))
            coordinator.record_commit(txn, txid)

        env.run_write(commit)
        if txid % every == 0:
            info, status = env._lmdb.info(), env.version_status()
            page = env._lmdb.stat()["psize"]
            sample = {
                "commits": txid,
                "seconds": round(time.perf_counter() - started, 1),
                "file_mib": round(os.path.getsize(os.path.join(state, "data.mdb")) / 2**20, 2),
                "pages_used_mib": round((info["last_pgno"] + 1) * page / 2**20, 2),
                "undo_logs": status.undo_logs,
                "writer_rss_mib": rss_mib(),
            }
            print(json.dumps(sample), flush=True)
    env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "version_soak.json")
    parser.add_argument("--writer", metavar="STATE_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        writer(args.writer, args.commits, args.every)
        return
    environment = {  # the run, for the plots' captions (bench/plots.py)
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "lmdb": ".".join(map(str, lmdb.version())),  # the C library's
        "engine": engine_build(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    state = tempfile.mkdtemp(prefix="drpc-version-soak-")
    StateEnvironment.open(state).close()  # the directory exists before either process
    process = subprocess.Popen(
        [sys.executable, __file__, "--writer", state, "--commits", str(args.commits),
         "--every", str(args.every)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    stop = threading.Event()
    tally = {"answers": 0, "mixed": 0}

    def ask() -> None:
        with LocalDRPC(executor="local", timeout=60.0) as drpc:
            drpc.register(counts_function(state))
            while not stop.is_set():
                answer = counts_of(drpc.execute("counts", QUERY))
                tally["answers"] += 1
                tally["mixed"] += len({tuple(value) for value in answer.values()}) > 1

    caller = threading.Thread(target=ask)
    caller.start()
    samples = []
    try:
        for line in process.stdout or ():
            sample = {**json.loads(line), **tally, "query_rss_mib": rss_mib()}
            samples.append(sample)
            print(json.dumps(sample), flush=True)
    finally:
        stop.set()
        caller.join()
        process.wait()
        shutil.rmtree(state, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"environment": environment, "commits": args.commits, "samples": samples}
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
