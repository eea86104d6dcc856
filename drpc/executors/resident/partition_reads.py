"""Reading a partition that lives on another resident task: ask its owner.

Contract. A partitioned state's partitions live on the local disks of the resident
tasks that own them (``drpc.transactional.resident_partitions``). A read of one this
host does not hold goes to its owner:

- ``PLACEMENTS`` maps ``(partition root, state)`` to the owner node of each partition,
  by index. The driver fills it when it places partitions (``place``) and sends it to
  every worker (the ``Placed`` control item, ``drpc.executors.resident.control``), each
  of which keeps it in its own ``PLACEMENTS``.
- ``worker_reader(worker)`` (set as the state layer's remote reader on every resident
  task, ``drpc.state.partitioned.set_remote_reader``) and ``driver_reader(call)`` (set
  on the driver once its partitions are placed) call the owner's ``read_here`` (``Call``
  from a worker to its peer, or from the driver) and return what it read, or raise the
  ``StateError`` it raised there, typed. A partition no placement names, or one whose
  owner is this very node, raises ``PartitionLostError`` naming it; a call that does not
  come back within ``READ_TIMEOUT`` seconds raises ``StateError``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from drpc.errors import PartitionLostError, StateError
from drpc.state.partition import PartitionLayout
from drpc.state.partitioned import read_here

READ_TIMEOUT = 30.0
"""Seconds a read waits for the owner of a partition to answer."""

PLACEMENTS: dict[tuple[str, str], tuple[int, ...]] = {}
_lock = threading.Lock()


def place(root: str, group: str, owners: tuple[int, ...]) -> None:
    """Record where the partitions of ``group`` under ``root`` live (owner node by index)."""
    with _lock:
        PLACEMENTS[(root, group)] = owners


def owner_of(root: str, layout: PartitionLayout, index: int) -> int:
    with _lock:
        owners = PLACEMENTS.get((root, layout.group))
    if owners is None or index >= len(owners):
        raise PartitionLostError(
            layout.group, index, None, f"it is not under {root!r} here and no task owns it"
        )
    return owners[index]


def _answer(future: Future[Any], layout: PartitionLayout, index: int) -> Any:
    try:
        found, value = future.result(timeout=READ_TIMEOUT)
    except TimeoutError:
        raise StateError(
            f"partition {index} of {layout.group!r}: its owner did not answer a read within "
            f"{READ_TIMEOUT:g} s"
        ) from None
    if not found:
        raise value
    return value


class Caller(Protocol):
    """A resident task as its remote reader sees it (``ResidentWorker``)."""

    index: int
    host: str

    def call(self, node: int, function: Callable[..., Any], *args: Any) -> Future[Any]: ...


def worker_reader(worker: Caller) -> Callable[..., Any]:
    """The remote reader of resident task ``worker``: ask the partition's owner, a peer."""

    def read(
        root: str, layout: PartitionLayout, index: int, txid: int | None, fn: Callable[..., Any]
    ) -> Any:
        owner = owner_of(root, layout, index)
        if owner == worker.index:
            raise PartitionLostError(
                layout.group,
                index,
                worker.host,
                f"this task owns it and has nothing under {root!r}",
            )
        future = worker.call(owner, read_here, root, layout, index, txid, fn)
        return _answer(future, layout, index)

    return read


def driver_reader(call: Callable[..., Future[Any]]) -> Callable[..., Any]:
    """The remote reader of the driver, asking owners through ``call(node, fn, *args)``
    (the resident cluster's)."""

    def read(
        root: str, layout: PartitionLayout, index: int, txid: int | None, fn: Callable[..., Any]
    ) -> Any:
        owner = owner_of(root, layout, index)
        return _answer(call(owner, read_here, root, layout, index, txid, fn), layout, index)

    return read
