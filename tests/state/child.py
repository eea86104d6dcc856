"""A separate process acting on a state directory, for the multi-process state tests.

Usage: ``python child.py MODE STATE_DIR [ARG]``. Modes:

- ``big-commit KEYS``: commit txid 1 (keys 0..99 -> 1), print ``committed 1``,
  then start commit 2 updating KEYS keys; halfway print ``writing`` and block
  inside the open write transaction until killed.
- ``commit-then-wait KEYS``: commit txid 1 updating KEYS keys, print
  ``committed 1`` and block until killed.
- ``commit-then-hold KEYS``: commit txid 1 updating KEYS keys, begin another write
  transaction (holding LMDB's write lock), print ``holding`` and block until killed.
- ``trident-then-hold LOG_DIR``: commit txid 1 of the Trident word count of
  ``tests/trident/faults.py`` over the file log LOG_DIR (100 lines a partition a
  batch), then hold LMDB's write lock as ``commit-then-hold`` does.
- ``commit-forever KEYS``: from the stored next txid on, commit forever; each
  commit adds 1 to keys 0..KEYS-1 and records the commit. Prints ``started``.
- ``grow BYTES``: write about BYTES bytes of map values (growing the map), print ``done``.
- ``read-pickled``: unpickle a ``TransactionalMap`` from stdin, print its items.
- ``read-and-wait``: open a read transaction, print ``reading`` and block inside it
  until killed (a reader that dies mid-read).
- ``claim HOLDER``: claim the directory for writes as HOLDER, print ``claimed``, block.
- ``read KEY``: read map key KEY of ``MAP`` in a new read transaction, print ``read <value>``.
- ``pin-and-hold``: pin the latest committed version, print ``pinned <version>``, block.
- ``read-at VERSION``: read every key of ``MAP`` at VERSION, print ``read <sorted items>``,
  or ``reclaimed`` if that version is gone.
"""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

from drpc.errors import VersionReclaimedError
from drpc.state import CoordinatorState, StateEnvironment, StateTxn, TransactionalMap
from drpc.state.env import MAPS_DB

TOPOLOGY = "crash-test"
MAP = "counts"


def add_one(value: int) -> int:
    return value + 1


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def commit(env: StateEnvironment, txid: int, keys: int, pause_at: int | None = None) -> None:
    counts = TransactionalMap(env, MAP, default=0)
    coordinator = CoordinatorState(env, TOPOLOGY)

    def body(txn: StateTxn) -> None:
        handle = counts.handle(txn, txid)
        for key in range(keys):
            if key == pause_at:
                say("writing")
                while True:
                    time.sleep(1)
            handle.update(key, add_one)
        coordinator.record_commit(txn, txid)

    env.run_write(body)


def fill(txn: StateTxn, size: int, chunk: bytes = b"x" * 1000) -> None:
    for i in range(size // len(chunk)):
        txn.put(MAPS_DB, b"g%08d" % i, chunk)


def hold_write_lock(env: StateEnvironment) -> None:
    held = env._lmdb.begin(write=True)  # noqa: F841  (kept: an unreferenced txn aborts)
    say("holding")
    while True:
        time.sleep(1)


def main(mode: str, state_dir: str, arg: str = "0") -> None:
    if mode == "read-pickled":
        counts = pickle.loads(sys.stdin.buffer.read())
        say(repr(sorted(counts.items())))
        return
    env = StateEnvironment.open(state_dir)
    if mode == "big-commit":
        commit(env, 1, 100)
        say("committed 1")
        commit(env, 2, int(arg), pause_at=int(arg) // 2)
    elif mode == "commit-then-wait":
        commit(env, 1, int(arg))
        say("committed 1")
        while True:
            time.sleep(1)
    elif mode == "commit-then-hold":
        commit(env, 1, int(arg))
        hold_write_lock(env)
    elif mode == "trident-then-hold":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from drpc.trident import run
        from tests.trident.faults import word_count

        run(word_count(arg, False, 100), state_dir=state_dir, executor="local", max_batches=1)
        hold_write_lock(env)
    elif mode == "commit-forever":
        coordinator = CoordinatorState(env, TOPOLOGY)
        say("started")
        while True:
            commit(env, coordinator.next_txid(), int(arg))
    elif mode == "read-and-wait":
        with env.read():
            say("reading")
            while True:
                time.sleep(1)
    elif mode == "claim":
        env.claim_writer(arg)
        say("claimed")
        while True:
            time.sleep(1)
    elif mode == "read":
        say(f"read {TransactionalMap(env, MAP).get(int(arg))}")
    elif mode == "pin-and-hold":
        pin = env.pin()
        say(f"pinned {pin.version}")
        while True:
            time.sleep(1)
    elif mode == "read-at":
        try:
            with env.read(version=int(arg)) as txn:
                say(f"read {sorted(TransactionalMap(env, MAP).items(txn=txn))}")
        except VersionReclaimedError:
            say("reclaimed")
    elif mode == "grow":
        env.run_write(lambda txn: fill(txn, int(arg)))
        say("done")
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
