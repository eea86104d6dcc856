"""Small value records for the engine's hot path: the messages tasks exchange and the
decisions the coordination rules make.

Contract. A subclass of ``Value`` lists its fields in ``__match_args__`` (so ``match``
patterns take them by position), stores them in an ``__init__`` of its own and never
changes them after. Two values are equal when they are of the same class and their
fields are equal; the repr names the class and its fields, as a dataclass's does. Values
are unhashable, as they are compared, never used as keys.

Why not ``NamedTuple`` or ``@dataclass``: their constructors are generated Python (a
``__new__`` lambda, an ``__init__`` made by ``exec``), which the compiled build
(``drpc/compiled.py``) cannot compile, and a request makes a few hundred of these. An
explicit ``__init__`` compiles to a native constructor, and even pure it costs less than
a NamedTuple's.
"""

from __future__ import annotations

from typing import ClassVar


class Value:
    """Equality and repr from ``__match_args__`` (see the module doc)."""

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()

    def fields(self) -> tuple[object, ...]:
        """The field values, in ``__match_args__`` order."""
        return tuple(getattr(self, name) for name in self.__match_args__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, Value):
            return False
        return other.fields() == self.fields()

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{type(self).__name__}({inner})"
