"""The partitioners the grouping specs (``drpc.model.grouping``) make: which target task
indexes receive each tuple.

Contract: ``choose(values)`` returns target task *indexes* (0-based positions in the
subscriber's task list) as a tuple, and ``choose_many(many)`` the choices of a batch of
tuples, in order, as ``choose`` would have made them one by one; every process makes the
same choices:

- ``RoundRobin(num_tasks, start)``: one task after another, from ``start``;
- ``Fixed(targets)``: always ``targets``;
- ``ByFields(positions, num_tasks)``: ``stable_hash(values at positions) % num_tasks``
  (never Python's salted ``hash``), short strings' hashes remembered process-wide;
- ``ByBatch(num_tasks)``: ``stable_hash(field 0) % num_tasks``, as ``ByFields((0,), ...)``,
  remembering the last field 0 it hashed (the tuples of a batch share their batch id);
- ``ByKeyGroup(positions, num_tasks, key_groups)``: the partition of ``num_tasks`` whose
  key groups hold the state key of the values at positions (``drpc.state.keygroups``):
  the task that owns that key's partition of a partitioned state;
- ``Direct()``: never asked, as a direct stream's emitter names the task.

A module of its own so the compiled build (``drpc/compiled.py``) can compile it: a
partitioner runs for every tuple a step emits, while the grouping specs are dataclasses
the build leaves alone (they are pickled with the topology). The one-task choices are
made once and typed ``tuple[int, ...]``: compiled, a ``tuple[int]`` would be kept unboxed
and boxed into a new tuple at every choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drpc.model.hashing import stable_hash, stable_hash_at
from drpc.state.keygroups import partition_of


class Partitioner:
    """Chooses target task indexes for a tuple's values."""

    __slots__ = ()

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        raise NotImplementedError

    def choose_many(self, many: Sequence[Sequence[Any]]) -> list[tuple[int, ...]]:
        choose = self.choose
        return [choose(values) for values in many]


class RoundRobin(Partitioner):
    __slots__ = ("_next", "_num_tasks", "_singletons")

    def __init__(self, num_tasks: int, start: int) -> None:
        self._num_tasks = num_tasks
        self._singletons: list[tuple[int, ...]] = [(i,) for i in range(num_tasks)]
        self._next = start % num_tasks

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        chosen = self._singletons[self._next]
        self._next = (self._next + 1) % self._num_tasks
        return chosen


class Fixed(Partitioner):
    __slots__ = ("_targets",)

    def __init__(self, targets: tuple[int, ...]) -> None:
        self._targets = targets

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        return self._targets

    def choose_many(self, many: Sequence[Sequence[Any]]) -> list[tuple[int, ...]]:
        return [self._targets] * len(many)


MEMO_ENTRIES = 32768
"""Most short strings whose ``stable_hash`` the process remembers (then it starts over)."""
MEMO_KEY_LENGTH = 64
"""Longest string remembered: a full memo holds about 6 MB (string, hash and slot)."""
_hashes: dict[str, int] = {}


def string_hash(value: str) -> int:
    """``stable_hash([value])``, remembered for short strings across every partitioner of the
    process (a Spark worker runs many tasks: a batch of words hashes each word once)."""
    known = _hashes.get(value)
    if known is None:
        known = stable_hash([value])
        if len(value) <= MEMO_KEY_LENGTH:
            if len(_hashes) >= MEMO_ENTRIES:
                _hashes.clear()
            _hashes[value] = known
    return known


class ByFields(Partitioner):
    """``stable_hash`` of the selected values (see ``string_hash`` for one string)."""

    __slots__ = ("_num_tasks", "_positions", "_single", "_singletons")

    def __init__(self, positions: tuple[int, ...], num_tasks: int) -> None:
        self._positions = positions
        self._single = positions[0] if len(positions) == 1 else None
        self._num_tasks = num_tasks
        self._singletons: list[tuple[int, ...]] = [(i,) for i in range(num_tasks)]

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        single = self._single
        if single is not None:
            # compiled, the list branch (most emits) indexes the list directly
            if isinstance(values, list):  # noqa: SIM108
                value = values[single]
            else:
                value = values[single]
            if type(value) is str:
                return self._singletons[string_hash(value) % self._num_tasks]
        return self._singletons[stable_hash_at(values, self._positions) % self._num_tasks]

    def choose_many(self, many: Sequence[Sequence[Any]]) -> list[tuple[int, ...]]:
        single = self._single
        if single is None:
            return super().choose_many(many)
        # choose's rule, with the memo consulted inline: one dict look-up a remembered word.
        remembered, singletons, tasks = _hashes.get, self._singletons, self._num_tasks
        choose = self.choose
        chosen: list[tuple[int, ...]] = []
        append = chosen.append
        for values in many:
            value = values[single]
            known = remembered(value) if type(value) is str else None
            append(choose(values) if known is None else singletons[known % tasks])
        return chosen


_NO_BATCH: Any = object()  # no batch seen yet


class ByBatch(Partitioner):
    """``ByFields((0,), num_tasks)``'s choice, computed once per run of tuples of one batch."""

    __slots__ = ("_chosen", "_last", "_num_tasks", "_singletons")

    def __init__(self, num_tasks: int) -> None:
        self._num_tasks = num_tasks
        self._singletons: list[tuple[int, ...]] = [(i,) for i in range(num_tasks)]
        self._last: Any = _NO_BATCH
        self._chosen: tuple[int, ...] = ()

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        batch = values[0]
        if batch is not self._last and batch != self._last:
            self._chosen = self._singletons[stable_hash((batch,)) % self._num_tasks]
            self._last = batch
        return self._chosen


class ByKeyGroup(Partitioner):
    """The task owning the partition of the selected values' state key (see the module doc)."""

    __slots__ = ("_key_groups", "_num_tasks", "_positions", "_single", "_singletons")

    def __init__(self, positions: tuple[int, ...], num_tasks: int, key_groups: int) -> None:
        self._positions = positions
        self._single = positions[0] if len(positions) == 1 else None
        self._num_tasks = num_tasks
        self._key_groups = key_groups
        self._singletons: list[tuple[int, ...]] = [(i,) for i in range(num_tasks)]

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        single = self._single
        key: Any = (
            values[single]
            if single is not None
            else tuple([values[position] for position in self._positions])
        )
        return self._singletons[partition_of(key, self._num_tasks, self._key_groups)]


class Direct(Partitioner):
    __slots__ = ()

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        raise AssertionError("direct streams are routed by emit_direct, never by choose")
