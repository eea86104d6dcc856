"""The commit of one txid across a partitioned state's partitions, as a state machine.

Events in, decisions out; no threads, no clock, no I/O. The run (``drpc.transactional.
partitions``) carries the decisions out and feeds back what happened.

Rules:

- ``recover(global_txid, held)``, once before the first commit: ``held`` is what each
  partition holds (its last applied txid; None: found nowhere). A partition holding the
  global commit or the txid after it (applied, but its global commit never happened) is
  in place; one found nowhere while nothing was ever committed is made (``Create``);
  anything else is a ``Lost`` decision: found nowhere after a commit, or behind the
  global commit (an old copy). A partition ahead by more than one txid cannot happen
  (the global commit of t is recorded before any partition is sent t + 1) and is
  ``Lost`` too, saying so.
- ``begin(txid)`` opens the commit of ``txid`` (the next after the global commit) and
  decides ``Apply(txid, partition)`` for every partition: every partition takes part in
  every txid, with input or without, so each knows where the global commit stands and
  the work is O(partitions) per batch.
- ``applied(partition, txid)`` records that a partition holds ``txid``; once every
  partition does, ``RecordGlobal(txid)``: only then may the global record claim it.
- ``failed(partition, txid, reason)`` decides ``Replay(txid, reason)`` once per commit:
  the global record stays where it was, and the replay applies ``txid`` again to every
  partition (a partition that already holds it reverts it first,
  ``drpc.state.partition``).
- ``committed(txid)``: the global record of ``txid`` is durable; the next commit may
  begin. ``abandon(txid)``: writing it failed (the rest of the commit phase failed after
  every partition held it), so ``Replay(txid, ...)``.
- ``lost(partition, host, reason)`` decides ``Lost``: the run stops (a lost partition
  cannot be rebuilt)...
- ...unless the partitions are durable (``GlobalCommit(partitions, durable=True)``: the
  run has a checkpoint store, ``drpc.state.checkpoint``). Then a partition found nowhere
  or behind the global commit, in ``recover`` or ``lost``, is ``Restore(partition,
  global_txid)``: rebuilt holding the global commit. In a commit, ``lost`` decides
  ``Restore`` then ``Replay`` of the open txid, once per commit. A partition ahead by
  more than one txid is ``Lost`` still: it belongs to another run, and no restore
  could make it this run's.
- Events about a txid other than the open one, or after the commit ended, are ignored
  (a late answer from an attempt already given up).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, order=True)
class PartitionRef:
    """Partition ``index`` of partitioned state ``group``."""

    group: str
    index: int


@dataclass(frozen=True, slots=True)
class Create:
    partition: PartitionRef
    start_txid: int


@dataclass(frozen=True, slots=True)
class Apply:
    txid: int
    partition: PartitionRef


@dataclass(frozen=True, slots=True)
class RecordGlobal:
    txid: int


@dataclass(frozen=True, slots=True)
class Replay:
    txid: int
    reason: str


@dataclass(frozen=True, slots=True)
class Restore:
    partition: PartitionRef
    txid: int


@dataclass(frozen=True, slots=True)
class Lost:
    partition: PartitionRef
    host: str | None
    reason: str


Decision = Create | Apply | RecordGlobal | Replay | Restore | Lost


@dataclass
class GlobalCommit:
    """The commits of one transactional topology's partitioned states (see module doc)."""

    partitions: tuple[PartitionRef, ...]
    global_txid: int = 0
    durable: bool = False
    _open: int | None = None  # the txid whose partitions are applying it
    _recording: int | None = None  # the txid whose global record is being written
    _pending: set[PartitionRef] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.partitions = tuple(sorted(self.partitions))

    @property
    def open_txid(self) -> int | None:
        return self._open

    def recover(
        self,
        global_txid: int,
        held: Mapping[PartitionRef, int | None],
        hosts: Mapping[PartitionRef, str | None] | None = None,
    ) -> list[Decision]:
        self.global_txid = global_txid
        self._end()
        hosts = hosts or {}
        decisions: list[Decision] = []
        for partition in self.partitions:
            found = held.get(partition)
            if found is None and global_txid == 0:
                decisions.append(Create(partition, 0))
                continue
            reason = _out_of_place(found, global_txid)
            if reason is None:
                continue
            if self.durable and (found is None or found < global_txid):
                decisions.append(Restore(partition, global_txid))
            else:
                decisions.append(Lost(partition, hosts.get(partition), reason))
        return decisions

    def begin(self, txid: int) -> list[Decision]:
        if txid != self.global_txid + 1 or self._recording is not None:
            raise ValueError(
                f"the commit of txid {txid} cannot begin: the global record is at txid "
                f"{self.global_txid}"
                + ("" if self._recording is None else f", recording txid {self._recording}")
            )
        self._open = txid
        self._pending = set(self.partitions)
        decisions: list[Decision] = [Apply(txid, partition) for partition in self.partitions]
        if not self.partitions:
            decisions.extend(self._close())
        return decisions

    def applied(self, partition: PartitionRef, txid: int) -> list[Decision]:
        if txid != self._open or partition not in self._pending:
            return []
        self._pending.discard(partition)
        return self._close() if not self._pending else []

    def failed(self, partition: PartitionRef, txid: int, reason: str) -> list[Decision]:
        if txid != self._open or partition not in self.partitions:
            return []
        self._end()
        return [Replay(txid, f"partition {partition.index} of {partition.group!r}: {reason}")]

    def lost(self, partition: PartitionRef, host: str | None, reason: str) -> list[Decision]:
        if partition not in self.partitions:
            return []
        txid = self._open
        self._end()
        if not self.durable:
            return [Lost(partition, host, reason)]
        decisions: list[Decision] = [Restore(partition, self.global_txid)]
        if txid is not None:
            where = f" (last on host {host})" if host else ""
            decisions.append(
                Replay(
                    txid,
                    f"partition {partition.index} of {partition.group!r}{where} is lost "
                    f"({reason}); restored from the checkpoint store at txid {self.global_txid}",
                )
            )
        return decisions

    def committed(self, txid: int) -> list[Decision]:
        if txid != self._recording:
            return []
        self._recording = None
        self.global_txid = txid
        return []

    def abandon(self, txid: int, reason: str) -> list[Decision]:
        if txid not in (self._open, self._recording):
            return []
        self._end()
        return [Replay(txid, reason)]

    def _close(self) -> list[Decision]:
        assert self._open is not None
        txid, self._open = self._open, None
        self._recording = txid
        return [RecordGlobal(txid)]

    def _end(self) -> None:
        self._open = None  # what is pending then matters no more: begin sets it anew
        self._recording = None


def _out_of_place(found: int | None, global_txid: int) -> str | None:
    """Why a partition holding ``found`` cannot take part after global commit
    ``global_txid`` (None: it can)."""
    if found is None:
        return f"no process holds it, and the global record is at txid {global_txid}"
    if found < global_txid:
        return f"it holds txid {found}, behind the global record's txid {global_txid} (an old copy)"
    if found > global_txid + 1:
        return (
            f"it holds txid {found}, more than one txid ahead of the global "
            f"record's txid {global_txid} (it belongs to another run)"
        )
    return None


def every_partition(groups: Iterable[tuple[str, int]]) -> tuple[PartitionRef, ...]:
    """Every partition of groups given as (name, partitions)."""
    return tuple(PartitionRef(group, index) for group, count in groups for index in range(count))
