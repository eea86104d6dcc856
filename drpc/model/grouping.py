"""Stream groupings: which task(s) of a subscriber receive each tuple.

Contract: a ``Grouping`` is an immutable spec stored in the topology. Every
executor turns it into a ``Partitioner`` (``drpc.model.partitioners``) per
(source task, subscription), which chooses the target task indexes of each
tuple. The same spec yields the same choices on every executor, so a tuple
lands on the same task index locally and on Spark:

- shuffle / none: round robin, starting at the source task's index (balanced
  and deterministic);
- fields: ``stable_hash(selected values) % tasks`` (never Python's ``hash``);
- global: task index 0 (the lowest task id);
- batch-global: every tuple of a batch to one task, ``stable_hash(field 0) %
  tasks`` (field 0 is the batch id of every tuple of a transactional or
  Trident topology; so batches spread over the tasks), as a fields grouping
  on field 0 chooses, but hashed once per batch;
- all: every task;
- direct: chosen by the emitter with ``emit_direct``; ``choose`` is never called;
- local-or-shuffle: the task with the same index when both components have
  the same number of tasks (no repartitioning: executors fuse such steps),
  otherwise shuffle;
- key group (``KeyGroupGrouping(fields, key_groups)``): what a fields grouping into a
  partitioned state's committer becomes: the task owning the partition whose key
  groups hold the selected values' state key (``drpc.state.keygroups``), so each key
  is written where it is read. Equal values still meet in one task.

``NamedGroupings`` gives a declarer Storm's named grouping methods
(``shuffle_grouping(component_id, stream_id)``, ...), each a call of the
declarer's own ``grouping(component_id, grouping, stream_id)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Self

from drpc.errors import InvalidTopologyError
from drpc.model.fields import Fields
from drpc.model.partitioners import (
    ByBatch,
    ByFields,
    ByKeyGroup,
    Direct,
    Fixed,
    Partitioner,
    RoundRobin,
)
from drpc.model.streams import DEFAULT_STREAM_ID
from drpc.state.keygroups import DEFAULT_KEY_GROUPS


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
        return RoundRobin(target_tasks, source_index)


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
            return Fixed((source_index,))
        return RoundRobin(target_tasks, source_index)

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
        return ByFields(positions, target_tasks)

    def describe(self) -> str:
        return f"fields({', '.join(self.fields)})"


@dataclass(frozen=True)
class KeyGroupGrouping(FieldsGrouping):
    key_groups: int = DEFAULT_KEY_GROUPS
    kind: ClassVar[str] = "key_group"

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        positions = tuple(source_fields.field_index(name) for name in self.fields)
        return ByKeyGroup(positions, target_tasks, self.key_groups)

    def describe(self) -> str:
        return f"key groups({', '.join(self.fields)})"


@dataclass(frozen=True)
class GlobalGrouping(Grouping):
    kind: ClassVar[str] = "global"

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        return Fixed((0,))

    def keeps_task_index(self, source_tasks: int, target_tasks: int) -> bool:
        return source_tasks == 1 and target_tasks >= 1


@dataclass(frozen=True)
class BatchGlobalGrouping(Grouping):
    kind: ClassVar[str] = "batch_global"

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        return ByBatch(target_tasks)


@dataclass(frozen=True)
class AllGrouping(Grouping):
    kind: ClassVar[str] = "all"

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        return Fixed(tuple(range(target_tasks)))


@dataclass(frozen=True)
class DirectGrouping(Grouping):
    kind: ClassVar[str] = "direct"
    needs_direct_stream: ClassVar[bool] = True

    def partitioner(
        self, source_fields: Fields, source_index: int, source_tasks: int, target_tasks: int
    ) -> Partitioner:
        return Direct()

    def keeps_task_index(self, source_tasks: int, target_tasks: int) -> bool:
        return False


def fields_grouping(fields: Fields | Iterable[str] | str) -> FieldsGrouping:
    return FieldsGrouping(Fields.of(fields))


class NamedGroupings:
    """Storm's named grouping methods, for a declarer that defines ``grouping``."""

    def grouping(
        self, component_id: str, grouping: Grouping, stream_id: str = DEFAULT_STREAM_ID
    ) -> Self:
        raise NotImplementedError

    def shuffle_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM_ID) -> Self:
        return self.grouping(component_id, ShuffleGrouping(), stream_id)

    def fields_grouping(
        self,
        component_id: str,
        fields: Fields | Iterable[str] | str,
        stream_id: str = DEFAULT_STREAM_ID,
    ) -> Self:
        return self.grouping(component_id, FieldsGrouping(Fields.of(fields)), stream_id)

    def global_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM_ID) -> Self:
        return self.grouping(component_id, GlobalGrouping(), stream_id)

    def all_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM_ID) -> Self:
        return self.grouping(component_id, AllGrouping(), stream_id)

    def none_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM_ID) -> Self:
        return self.grouping(component_id, NoneGrouping(), stream_id)

    def direct_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM_ID) -> Self:
        return self.grouping(component_id, DirectGrouping(), stream_id)

    def local_or_shuffle_grouping(
        self, component_id: str, stream_id: str = DEFAULT_STREAM_ID
    ) -> Self:
        return self.grouping(component_id, LocalOrShuffleGrouping(), stream_id)
