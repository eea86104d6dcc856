"""``Fields`` names the values of a stream; ``Values`` is what a bolt emits.

Contract: ``Fields`` is an immutable, hashable sequence of distinct non-empty
names with O(1) ``field_index``; ``Values`` is a plain ``list`` built from
positional arguments, as in Storm's ``new Values(a, b)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload


class Fields(Sequence[str]):
    """Ordered, distinct field names: ``Fields("id", "count")`` or ``Fields(["id", "count"])``."""

    __slots__ = ("_index", "_names")

    def __init__(self, *names: str | Iterable[str]) -> None:
        first = names[0] if len(names) == 1 else None
        flat: tuple[Any, ...] = (
            tuple(first) if first is not None and not isinstance(first, str) else names
        )
        index: dict[str, int] = {}
        for position, name in enumerate(flat):
            if not isinstance(name, str) or not name:
                raise TypeError(f"field names must be non-empty strings, got {name!r}")
            if name in index:
                raise ValueError(f"duplicate field name {name!r} in {list(flat)}")
            index[name] = position
        self._names: tuple[str, ...] = flat
        self._index = index

    @classmethod
    def of(cls, fields: Fields | Iterable[str] | str) -> Fields:
        """Accept a ``Fields``, a list of names or a single name."""
        if isinstance(fields, Fields):
            return fields
        if isinstance(fields, str):
            return cls(fields)
        return cls(list(fields))

    def field_index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"unknown field {name!r}; fields are {list(self._names)}") from None

    def select(self, selector: Fields, values: Sequence[Any]) -> list[Any]:
        """The values of the ``selector`` fields, in the selector's order."""
        return [values[self.field_index(name)] for name in selector]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return self._names[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Fields):
            return self._names == other._names
        if isinstance(other, (list, tuple)):
            return list(self._names) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"Fields({', '.join(repr(n) for n in self._names)})"

    def __reduce__(self) -> tuple[object, ...]:
        return (Fields, (list(self._names),))

    def to_list(self) -> list[str]:
        return list(self._names)


class Values(list[Any]):
    """The values of one tuple: ``Values("foo.com/blog/1", 16)``."""

    def __init__(self, *values: Any) -> None:
        super().__init__(values)
