"""Trident's window store in LMDB: the tuples of open windows, written in each batch's commit.

Contract.

- ``LMDBWindowsStoreFactory(name=None)`` (Storm's ``WindowsStoreFactory``):
  a window's tuples and progress live in the run's state directory
  (``drpc.state.dir``), under the transactional topology's id, the window's
  name (``name``, else its place among the topology's windows: ``w0``,
  ``w1``, ...) and the window task's index. A restart must keep the
  topology's windows and their parallelism to find its windows again.
- ``WindowTaskStore(txn, topology_id, window, task)`` is one window task's
  records inside a commit's write transaction ``txn``; ``commit_window``
  applies one batch's tuples (``drpc.trident.windowing.advance``) and
  returns the outputs of the windows that fire, after writing, in the same
  transaction: the batch's tuples (one record per batch), the new progress,
  the outputs, and the deletion of what no open window needs. A commit that
  aborts leaves none of it, so a replayed batch or a restarted run fires
  every window once, with the same tuples.
- A commit of the txid the store last applied (the batch was already
  committed) changes nothing and returns the outputs that commit fired, as
  Storm's per-txid trigger records do; an older txid raises
  ``StateOrderError``.

Records in ``WINDOWS_DB``, under ``name(topology id) + name(window) + task
index (4 bytes)``: ``b"p"`` the progress (plain data, ``drpc.state.records``),
``b"o"`` the last firing txid and its outputs (pickled), ``b"c" + first tuple
number (8 bytes)`` a batch's tuples (a pickled list of value tuples).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drpc.errors import StateError, StateOrderError
from drpc.state.codec import dumps, encode_name, loads
from drpc.state.env import WINDOWS_DB
from drpc.state.records import decode_plain, encode_plain
from drpc.state.txn import StateTxn
from drpc.trident.windowing import Chunk, Progress, Window, WindowConfig, advance

Values = tuple[Any, ...]
Aggregate = Callable[[Window, list[Values]], list[Values]]

_PROGRESS = b"p"
_OUTPUTS = b"o"
_CHUNK = b"c"


@dataclass(frozen=True, slots=True)
class LMDBWindowsStoreFactory:
    """Where a window keeps its tuples: the run's LMDB state directory (see the module doc)."""

    name: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise ValueError(f"a window store's name is a non-empty str, got {self.name!r}")


class WindowTaskStore:
    """One window task's records inside a commit's write transaction (see the module doc)."""

    def __init__(self, txn: StateTxn, topology_id: str, window: str, task: int) -> None:
        self.txn = txn
        self.prefix = (
            encode_name(topology_id, "a topology id")
            + encode_name(window, "a window name")
            + task.to_bytes(4, "big")
        )
        self.what = f"window {window!r} (task {task}) of {topology_id!r}"

    def progress(self) -> Progress:
        data = self.txn.get(WINDOWS_DB, self.prefix + _PROGRESS)
        if data is None:
            return Progress()
        txid, tuples, fired_through, time, chunks = decode_plain(data, self.what)
        return Progress(txid, tuples, fired_through, time, tuple(Chunk(*chunk) for chunk in chunks))

    def outputs(self, txid: int) -> list[Values]:
        """What the commit of ``txid`` fired (nothing if it fired nothing)."""
        data = self.txn.get(WINDOWS_DB, self.prefix + _OUTPUTS)
        if data is None:
            return []
        fired_txid, outputs = loads(data)
        return list(outputs) if fired_txid == txid else []

    def tuples(self, chunk: Chunk) -> list[Values]:
        data = self.txn.get(WINDOWS_DB, self._chunk_key(chunk))
        if data is None:
            raise StateError(
                f"{self.what}: the stored tuples from number {chunk.first} are missing"
            )
        return list(loads(data))

    def write(
        self,
        progress: Progress,
        added: tuple[Chunk, list[Values]] | None,
        evicted: tuple[Chunk, ...],
        outputs: list[Values],
    ) -> None:
        items = {
            self.prefix + _PROGRESS: encode_plain(
                [
                    progress.txid,
                    progress.tuples,
                    progress.fired_through,
                    progress.time,
                    [[c.first, c.size, c.time] for c in progress.chunks],
                ],
                self.what,
            )
        }
        new = added[0] if added is not None else None
        if added is not None and new not in evicted:
            items[self._chunk_key(added[0])] = dumps(added[1], f"a tuple of {self.what}")
        if outputs:
            items[self.prefix + _OUTPUTS] = dumps(
                (progress.txid, outputs), f"an output of {self.what}"
            )
        for chunk in evicted:
            if chunk != new:
                self.txn.delete(WINDOWS_DB, self._chunk_key(chunk))
        self.txn.put_many(WINDOWS_DB, items)

    def _chunk_key(self, chunk: Chunk) -> bytes:
        return self.prefix + _CHUNK + chunk.first.to_bytes(8, "big")


def commit_window(
    store: WindowTaskStore,
    config: WindowConfig,
    txid: int,
    batch: list[Values],
    now: int,
    aggregate: Aggregate,
) -> list[Values]:
    """Apply one batch to a window task in its commit (see the module doc); the outputs of
    the windows that fire, in order."""
    progress = store.progress()
    if txid == progress.txid:
        return store.outputs(txid)
    if txid < progress.txid:
        raise StateOrderError(
            f"{store.what}: txid {txid} arrives after txid {progress.txid} was applied"
        )
    step = advance(config, progress, txid, len(batch), now)
    outputs: list[Values] = []
    loaded: dict[Chunk, list[Values]] = {}
    if step.added is not None:
        loaded[step.added] = batch
    for firing in step.firings:
        values: list[Values] = []
        for part in firing.parts:
            if part.chunk not in loaded:
                loaded[part.chunk] = store.tuples(part.chunk)
            values.extend(loaded[part.chunk][part.low : part.high])
        outputs.extend(aggregate(firing.window, values))
    added = (step.added, batch) if step.added is not None else None
    store.write(step.progress, added, step.evicted, outputs)
    return outputs
