"""Stream groupings: which task(s) of a subscriber receive each tuple.

Contract: a ``Grouping`` is an immutable spec stored in the topology. Every
executor turns it into a ``Partitioner`` per (source task, subscription) whose
``choose(values)`` returns target task *indexes* (0-based positions in the
subscriber's task list) as a tuple, and ``choose_many(many)`` the choices of
a batch of tuples, in order, as ``choose`` would have made them one by one.
The same spec yields the same choices on every executor, so a tuple lands on
the same task index locally and on Spark:

- shuffle / none: round robin, starting at the source task's index (balanced
  and deterministic);
- fields: ``stable_hash(selected values) % tasks`` (never Python's ``hash``);
- global: task index 0 (the lowest task id);
- all: every task;
- direct: chosen by the emitter with ``emit_direct``; ``choose`` is never called;
- local-or-shuffle: the task with the same index when both components have
  the same number of tasks (no repartitioning: executors fuse such steps),
  otherwise shuffle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from drpc.errors import InvalidTopologyError
from drpc.model.fields import Fields
from drpc.model.hashing import stable_hash


class Partitioner:
    """Chooses target task indexes for a tuple's values."""

    __slots__ = ()

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        raise NotImplementedError

    def choose_many(self, many: Sequence[Sequence[Any]]) -> list[tuple[int, ...]]:
        choose = self.choose
        return [choose(values) for values in many]


class _RoundRobin(Partitioner):
    __slots__ = ("_next", "_num_tasks", "_singletons")

    def __init__(self, num_tasks: int, start: int) -> None:
        self._num_tasks = num_tasks
        self._singletons = [(i,) for i in range(num_tasks)]
        self._next = start % num_tasks

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        chosen = self._singletons[self._next]
        self._next = (self._next + 1) % self._num_tasks
        return chosen


class _Fixed(Partitioner):
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


def _string_hash(value: str) -> int:
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


class _ByFields(Partitioner):
    """``stable_hash`` of the selected values (see ``_string_hash`` for one string)."""

    __slots__ = ("_num_tasks", "_positions", "_single", "_singletons")

    def __init__(self, positions: tuple[int, ...], num_tasks: int) -> None:
        self._positions = positions
        self._single = positions[0] if len(positions) == 1 else None
        self._num_tasks = num_tasks
        self._singletons = [(i,) for i in range(num_tasks)]

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        if self._single is not None:
            value = values[self._single]
            if type(value) is str:
                return self._singletons[_string_hash(value) % self._num_tasks]
        selected = [values[p] for p in self._positions]
        return self._singletons[stable_hash(selected) % self._num_tasks]

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


class _Direct(Partitioner):
    __slots__ = ()

    def choose(self, values: Sequence[Any]) -> tuple[int, ...]:
        raise AssertionError("direct streams are routed by emit_direct, never by choose")


@dataclass(frozen=True)
class Grouping:
    """Base of every grouping spec."""

    kind: ClassVar[str] = "abstract"
    needs_direct_stream: ClassVar[bool] = False

    def validate(self, source_fields: Fields, subscriber: str, stream: str) -> None:
        """Raise ``InvalidTopologyError`` if this grouping cannot apply to the stream."""

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        raise NotImplementedError

    def keeps_task_index(self, source_tasks: int, target_tasks: int) -> bool:
        """True when task i always sends to task i: executors may fuse the two steps."""
        return source_tasks == 1 and target_tasks == 1

    def describe(self) -> str:
        return self.kind


@dataclass(frozen=True)
class ShuffleGrouping(Grouping):
    kind: ClassVar[str] = "shuffle"

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        return _RoundRobin(target_tasks, source_index)


@dataclass(frozen=True)
class NoneGrouping(ShuffleGrouping):
    """ "Don't care": drpc treats it as shuffle, as Storm does."""

    kind: ClassVar[str] = "none"


@dataclass(frozen=True)
class LocalOrShuffleGrouping(ShuffleGrouping):
    kind: ClassVar[str] = "local_or_shuffle"

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        if source_tasks == target_tasks:
            return _Fixed((source_index,))
        return _RoundRobin(target_tasks, source_index)

    def keeps_task_index(self, source_tasks: int, target_tasks: int) -> bool:
        return source_tasks == target_tasks


@dataclass(frozen=True)
class FieldsGrouping(Grouping):
    fields: Fields
    kind: ClassVar[str] = "fields"

    def __post_init__(self) -> None:
        if not isinstance(self.fields, Fields):
            object.__setattr__(self, "fields", Fields.of(self.fields))

    def validate(self, source_fields: Fields, subscriber: str, stream: str) -> None:
        if not len(self.fields):
            raise InvalidTopologyError(f"fields grouping on {stream} selects no fields", subscriber)
        for name in self.fields:
            if name not in source_fields:
                raise InvalidTopologyError(
                    f"fields grouping on undeclared field {name!r} of {stream} "
                    f"(declared fields: {source_fields.to_list()})",
                    subscriber,
                )

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        positions = tuple(source_fields.field_index(name) for name in self.fields)
        return _ByFields(positions, target_tasks)

    def describe(self) -> str:
        return f"fields({', '.join(self.fields)})"


@dataclass(frozen=True)
class GlobalGrouping(Grouping):
    kind: ClassVar[str] = "global"

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        return _Fixed((0,))

    def keeps_task_index(self, source_tasks: int, target_tasks: int) -> bool:
        return source_tasks == 1 and target_tasks >= 1


@dataclass(frozen=True)
class AllGrouping(Grouping):
    kind: ClassVar[str] = "all"

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        return _Fixed(tuple(range(target_tasks)))


@dataclass(frozen=True)
class DirectGrouping(Grouping):
    kind: ClassVar[str] = "direct"
    needs_direct_stream: ClassVar[bool] = True

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        return _Direct()

    def keeps_task_index(self, source_tasks: int, target_tasks: int) -> bool:
        return False


def fields_grouping(fields: Fields | Iterable[str] | str) -> FieldsGrouping:
    return FieldsGrouping(Fields.of(fields))
