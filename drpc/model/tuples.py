"""``Tuple``: one message between tasks, with its values, names and origin.

Contract: ``t[0]``/``t["name"]`` read a value; ``source_component``,
``source_stream`` and ``source_task`` tell where it came from. The acking
bookkeeping (``message_id``: root id -> edge id, and the XOR of the edges
emitted while this tuple was being processed) belongs to the executor and is
invisible to bolts apart from equality-by-identity, as in Storm.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from drpc.model.fields import Fields

EMPTY_MESSAGE_ID: dict[int, int] = {}


class Tuple:
    """A tuple received by a bolt. Its ``values``: a list is kept as given (as Storm keeps
    it: executors hand over lists of their own), any other sequence is copied into one."""

    __slots__ = (
        "_ack_val",
        "_done",
        "fields",
        "message_id",
        "source_component",
        "source_stream",
        "source_task",
        "values",
    )

    def __init__(
        self,
        values: Sequence[Any],
        fields: Fields,
        source_component: str,
        source_stream: str,
        source_task: int,
        message_id: dict[int, int] = EMPTY_MESSAGE_ID,
    ) -> None:
        # typed a list: compiled, reading a value is then the list's own indexing
        self.values: list[Any] = values if isinstance(values, list) else list(values)
        self.fields = fields
        self.source_component = source_component
        self.source_stream = source_stream
        self.source_task = source_task
        self.message_id = message_id
        self._ack_val = 0
        self._done = False

    def __getitem__(self, key: int | str) -> Any:
        if type(key) is int:
            return self.values[key]
        if isinstance(key, str):
            return self.values[self.fields.field_index(key)]
        return self.values[key]

    def get(self, name: str, default: Any = None) -> Any:
        """The value of field ``name``, or ``default`` if the stream has no such field."""
        if name in self.fields:
            return self.values[self.fields.field_index(name)]
        return default

    def contains(self, name: str) -> bool:
        return name in self.fields

    def select(self, selector: Fields) -> list[Any]:
        return self.fields.select(selector, self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __repr__(self) -> str:
        return (
            f"Tuple({self.source_component}:{self.source_stream} task {self.source_task}, "
            f"{dict(zip(self.fields, self.values, strict=False))!r})"
        )
