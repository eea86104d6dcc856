"""The acker: Storm's XOR ledger of tuple trees, as a pure state machine.

Events in (``init``, ``ack``, ``fail``, ``expire``), decisions out
(``RootCompleted``, ``RootFailed``). No threads, no clock: callers pass ``now``.

Protocol (every id is a random non-zero 64-bit integer, see ``new_edge_id``):

- a spout emits a root tuple to k tasks with edge ids e1..ek and sends
  ``init(root, e1 ^ ... ^ ek, owner)``;
- a task that processed a tuple with edge id e, emitting children anchored to
  it with edge ids c1..cm, sends ``ack(root, e ^ c1 ^ ... ^ cm)``;
- the ledger XORs everything in; once initialised and zero, every emitted
  tuple has been acked: ``RootCompleted``. Order does not matter (an ack may
  arrive before the init).
- ``fail(root)`` or the deadline passing yields ``RootFailed`` and forgets the
  root; a deadline gives FAILED_REQUEST "the tuple tree did not complete within
  T s" with ``timed_out`` set (Storm's DRPC spout fails a timed-out tree so).
  A lost or duplicated ack leaves the value non-zero, so the root times out
  instead of completing.
- a failed root is remembered until its deadline: acks still in flight for it
  are ignored instead of re-creating an entry, and a fail that overtook the
  root's init fails the root as soon as the init arrives.

Memory is one fixed-size entry per pending or recently failed root (value,
owner, deadline, initialised flag), whatever the size of the tree. The timeout
is the same for every root, so entries expire in creation order.
"""

from __future__ import annotations

import array
import os
import random
import sys
from collections.abc import Hashable
from typing import Final

from drpc.errors import Failure
from drpc.semantics.values import Value

_MASK64: Final = (1 << 64) - 1  # Final: inlined by the compiled build
_ids = random.Random()
ID_BATCH: Final = 1024
"""Edge ids drawn from the generator at once: a call per id cost more than the id's use."""
_drawn: Final[list[int]] = []


def new_edge_id() -> int:
    """A random non-zero 64-bit id for a root or an edge of a tuple tree."""
    while True:
        try:
            value = _drawn.pop()
        except IndexError:  # also when another thread took the last one since
            _drawn.extend(array.array("Q", _ids.randbytes(8 * ID_BATCH)).tolist())
            continue
        if value:
            return value


def new_root_id(modulus: int, residue: int) -> int:
    """A random non-zero 64-bit root id congruent to ``residue`` modulo ``modulus``: the
    acker tracking it is found from the id alone (a share of a deployment whose ackers
    track its own spouts' roots)."""
    root = new_edge_id()
    root += residue - root % modulus
    if root > _MASK64:
        root -= modulus
    return root if root else modulus


def _reseed_after_fork() -> None:
    # A forked child (a Spark Python worker forked from its daemon) must not draw the
    # parent's ids: the same edge id twice in a tree cancels out in the XOR.
    _ids.seed()
    _drawn.clear()


os.register_at_fork(after_in_child=_reseed_after_fork)


# The decisions are ``Value`` records, as the coordination decisions are (see there): a
# dataclass's generated __init__ stays interpreted in the compiled build.


class RootCompleted(Value):
    __slots__ = ("owner", "root")
    __match_args__ = ("root", "owner")

    def __init__(self, root: int, owner: Hashable) -> None:
        self.root = root
        self.owner = owner


class RootFailed(Value):
    """The tree failed: explicitly, or (``timed_out``) it passed its deadline, in which
    case ``failure`` does not know where it was stuck and the executor may say."""

    __slots__ = ("failure", "owner", "root", "timed_out")
    __match_args__ = ("root", "owner", "failure", "timed_out")

    def __init__(
        self, root: int, owner: Hashable, failure: Failure, timed_out: bool = False
    ) -> None:
        self.root = root
        self.owner = owner
        self.failure = failure
        self.timed_out = timed_out


AckerDecision = RootCompleted | RootFailed


class _Entry:
    __slots__ = ("deadline", "initialized", "owner", "value")

    def __init__(self, deadline: float) -> None:
        self.value = 0
        self.owner: Hashable = None
        self.deadline = deadline
        self.initialized = False


class Acker:
    """Tracks tuple trees by root id. ``timeout`` seconds from a root's first event."""

    def __init__(self, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"acker timeout must be positive, got {timeout:g}")
        self.timeout = timeout
        # Plain dicts, insertion-ordered (the compiled build's own, unlike an OrderedDict's
        # methods): the oldest entry is the first, and only expiry takes from the front.
        self._pending: dict[int, _Entry] = {}
        # Failed roots until their deadline, with the failure if the init has not come yet.
        self._failed: dict[int, tuple[float, Failure | None]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def failed_roots(self) -> int:
        return len(self._failed)

    def __contains__(self, root: object) -> bool:
        return root in self._pending

    def value(self, root: int) -> int | None:
        """The current XOR value of a pending root (for tests and debugging)."""
        entry = self._pending.get(root)
        return None if entry is None else entry.value

    def entry_size(self, root: int) -> tuple[int, ...]:
        """The sizes of a root's stored fields: constant however large the tree grows."""
        entry = self._pending[root]
        return (
            sys.getsizeof(entry),
            sys.getsizeof(entry.value) if entry.value else 0,
        )

    def _entry(self, root: int, now: float) -> _Entry:
        entry = self._pending.get(root)
        if entry is None:
            entry = _Entry(now + self.timeout)
            self._pending[root] = entry
        return entry

    def _settle(self, root: int, entry: _Entry) -> list[AckerDecision]:
        if entry.initialized and entry.value == 0:
            del self._pending[root]
            return [RootCompleted(root, entry.owner)]
        return []

    def init(self, root: int, ack_val: int, owner: Hashable, now: float) -> list[AckerDecision]:
        """A spout emitted root ``root``; ``ack_val`` is the XOR of its edge ids."""
        if root in self._failed:
            deadline, failure = self._failed[root]
            if failure is None:
                return []
            self._failed[root] = (deadline, None)
            return [RootFailed(root, owner, failure)]
        entry = self._entry(root, now)
        entry.value ^= ack_val & _MASK64
        entry.owner = owner
        entry.initialized = True
        return self._settle(root, entry)

    def ack(self, root: int, ack_val: int, now: float) -> list[AckerDecision]:
        """A task acked a tuple of ``root``'s tree (its edge id XOR its children's)."""
        if root in self._failed:
            return []
        entry = self._entry(root, now)
        entry.value ^= ack_val & _MASK64
        return self._settle(root, entry)

    def fail(self, root: int, failure: Failure, now: float) -> list[AckerDecision]:
        """A tuple of the tree failed: the whole tree fails now (or at its init)."""
        if root in self._failed:
            return []
        entry = self._pending.pop(root, None)
        if entry is None or not entry.initialized:
            self._failed[root] = (now + self.timeout, failure)
            return []
        self._failed[root] = (now + self.timeout, None)
        return [RootFailed(root, entry.owner, failure)]

    def expire(self, now: float) -> list[AckerDecision]:
        """Fail every root whose deadline has passed; forget uninitialised strays."""
        decisions: list[AckerDecision] = []
        pending = self._pending
        while pending:
            root = next(iter(pending))
            entry = pending[root]
            if entry.deadline > now:
                break
            del pending[root]
            if entry.initialized:
                self._failed[root] = (now + self.timeout, None)
                decisions.append(
                    RootFailed(
                        root, entry.owner, Failure.tree_timed_out(self.timeout), timed_out=True
                    )
                )
        failed = self._failed
        while failed:
            root = next(iter(failed))
            if failed[root][0] > now:
                break
            del failed[root]
        return decisions
