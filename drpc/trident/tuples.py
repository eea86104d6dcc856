"""Trident tuples: named values a Trident operation reads, and the collector it emits into.

Contract. ``TridentTuple`` is an immutable view of a tuple's values under the
names of its fields (``tuple["word"]``, ``tuple.get_value_by_field("word")``,
``tuple[0]``, ``tuple.values``); operations receive only their input fields,
in the order they named them. ``TridentCollector`` gathers what a function
emits for one input tuple: ``emit(values)`` appends one output tuple (as many
values as the operation's output fields, else ``InvalidTupleError``);
``report_error`` raises.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from drpc.errors import InvalidTupleError


class TridentTuple:
    """Values with field names (see the module doc); several tuples share one name index."""

    __slots__ = ("_index", "values")

    def __init__(self, values: Sequence[Any], index: Mapping[str, int]) -> None:
        self.values: tuple[Any, ...] = values if type(values) is tuple else tuple(values)
        self._index = index

    @classmethod
    def of(cls, fields: Sequence[str], values: Sequence[Any]) -> TridentTuple:
        return cls(values, {name: position for position, name in enumerate(fields)})

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self._index)

    def get_value(self, position: int) -> Any:
        return self.values[position]

    def get_value_by_field(self, name: str) -> Any:
        try:
            return self.values[self._index[name]]
        except KeyError:
            raise KeyError(f"no field {name!r} in {list(self._index)}") from None

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self.get_value_by_field(key)
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TridentTuple):
            return self.values == other.values and list(self._index) == list(other._index)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.values)

    def __repr__(self) -> str:
        pairs = ", ".join(
            f"{name}={value!r}" for name, value in zip(self._index, self.values, strict=True)
        )
        return f"TridentTuple({pairs})"


class TridentCollector:
    """Collects what one operation emits for one input (see the module doc)."""

    __slots__ = ("emitted", "what", "width")

    def __init__(self, width: int, what: str) -> None:
        self.width = width
        self.what = what
        self.emitted: list[tuple[Any, ...]] = []

    def emit(self, values: Sequence[Any]) -> None:
        if len(values) != self.width:
            raise InvalidTupleError(
                f"{self.what} emitted {len(values)} value(s) {list(values)!r:.80}; its output "
                f"fields take {self.width}"
            )
        self.emitted.append(tuple(values))

    def report_error(self, error: BaseException) -> None:
        raise error

    def take(self) -> list[tuple[Any, ...]]:
        emitted, self.emitted = self.emitted, []
        return emitted
