"""Standby copies of partitions: kept warm from the checkpoint store, promoted on a loss.

Contract. ``StandbyCopies(partitions, task)`` keeps, beside the partitions a host owns
(``LocalPartitions``), resident task ``task``'s warm copies of partitions other tasks
own, each at ``standby_path(root, group, index, task)`` (apart from the owner's path and
from other tasks' copies, which other tasks of the same host may use):

- ``keep(layout, index, target, keep_from)`` brings the copy to ``target`` (a global
  commit, so every delta up to it is in the store) with ``drpc.state.checkpoint.
  restore``: the first time from the newest snapshot and the deltas after it, then from
  the copy itself, reading only the deltas after what it holds; the versions from
  ``keep_from`` on stay readable, as on the owner. It returns the ``Restored`` (a
  catch-up once the copy is there: nothing downloaded but deltas). A missing or corrupt
  object raises ``CheckpointCorruptError`` naming it.
- ``held(layouts)`` gives what each copy here holds, by (state, index): for a copy this
  object keeps, what its last ``keep`` left, without waiting for one under way.
- ``promote(layout, index)`` makes the copy the partition this host owns: it moves to
  the owner's path (whatever was there, a lost owner's leftovers, goes; this process
  closes what it had open of it), with nothing downloaded, and returns the txid it
  holds (None: no copy here). The partition then opens as any other
  (``LocalPartitions.partition``); the run catches it up to its global commit, if it
  lags, from the deltas (``LocalPartitions.restore``).
- ``drop(layout, index)`` deletes the copy (this host keeps it no more).

One lock per partition orders ``keep``, ``promote`` and ``drop``: a copy being caught
up is never moved or deleted under it.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Iterable

from drpc.errors import StateError
from drpc.state.checkpoint import Restored, restore
from drpc.state.env import StateEnvironment
from drpc.state.partition import PartitionLayout, held_txid, partition_path, standby_path
from drpc.state.partitioned import LocalPartitions

log = logging.getLogger(__name__)


class StandbyCopies:
    """This host's standby copies beside its partitions (see the module doc)."""

    def __init__(self, partitions: LocalPartitions, task: int = 0) -> None:
        self.partitions = partitions
        self.task = task
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._held: dict[tuple[str, int], int] = {}  # what each copy kept here holds

    def _lock(self, layout: PartitionLayout, index: int) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault((layout.group, index), threading.Lock())

    def path(self, layout: PartitionLayout, index: int) -> str:
        return standby_path(self.partitions.root, layout.group, index, self.task)

    def held(self, layouts: Iterable[PartitionLayout]) -> dict[tuple[str, int], int]:
        found = {}
        for layout in layouts:
            for index in range(layout.partitions):
                key = (layout.group, index)
                with self._locks_lock:
                    known = self._held.get(key)
                if known is not None:  # never waits for a catch-up under way
                    found[key] = known
                    continue
                path = self.path(layout, index)
                if not os.path.exists(os.path.join(path, "data.mdb")):
                    continue
                with self._lock(layout, index):  # one left by an earlier process
                    txid = _held_closed(path)
                if txid is not None:
                    found[key] = txid
        return found

    def _know(self, layout: PartitionLayout, index: int, txid: int | None) -> None:
        with self._locks_lock:
            if txid is None:
                self._held.pop((layout.group, index), None)
            else:
                self._held[(layout.group, index)] = txid

    def keep(
        self, layout: PartitionLayout, index: int, target: int, keep_from: int | None
    ) -> Restored:
        store = self.partitions.store
        if store is None:
            raise StateError("a standby copy is kept from the checkpoint store: the run has none")
        with self._lock(layout, index):
            restored = restore(
                store,
                layout,
                index,
                self.path(layout, index),
                target,
                keep_from=keep_from,
                options=self.partitions.options,
            )
            self._know(layout, index, restored.txid)
            return restored

    def promote(self, layout: PartitionLayout, index: int) -> int | None:
        with self._lock(layout, index):
            path = self.path(layout, index)
            txid = _held_closed(path)
            self._know(layout, index, None)
            if txid is None:
                return None
            owner = partition_path(self.partitions.root, layout.group, index)
            self.partitions.close_partition(layout, index)
            if os.path.exists(owner):
                shutil.rmtree(owner)
            os.makedirs(os.path.dirname(owner), exist_ok=True)
            os.replace(path, owner)
            log.warning(
                "partition %d of %r: the standby copy here holding txid %d is its owner now",
                index,
                layout.group,
                txid,
            )
            return txid

    def drop(self, layout: PartitionLayout, index: int) -> None:
        with self._lock(layout, index):
            self._know(layout, index, None)
            shutil.rmtree(self.path(layout, index), ignore_errors=True)


def _held_closed(path: str) -> int | None:
    """The txid the copy at ``path`` holds (None: none, or damaged: ``keep`` rebuilds it),
    its environment closed again: a restore or a move needs it closed."""
    if not os.path.exists(os.path.join(path, "data.mdb")):
        return None
    try:
        return held_txid(path)
    except Exception as error:
        log.warning("the standby copy at %s does not open: %s", path, error)
        return None
    finally:
        env = StateEnvironment.opened(path)
        if env is not None and not env.closed:
            env.close()
