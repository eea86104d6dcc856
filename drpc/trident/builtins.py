"""Trident's built-ins: ``Count``, ``Sum``, ``FilterNull``, ``MapGet``, ``MapList``,
``MapRemove``, ``FirstN``, ``Debug``.

Contract (Storm's behaviour):

- ``Count()``: a ``CombinerAggregator`` counting tuples (zero 0).
- ``Sum()``: a ``CombinerAggregator`` adding its one input field (zero 0).
- ``FilterNull()``: keeps a tuple only if none of its input fields is None.
- ``MapGet()``: a ``QueryFunction`` reading each key (the input fields: one
  field is the key itself, several a tuple of them) from a map state,
  emitting the stored value (None when absent).
- ``MapList(limit=100)``: a ``QueryFunction`` listing a map state's entries a
  page at a time, in key order (Storm's ``TupleCollectionGet`` lists them
  all, unbounded). Its one input field is the page argument
  (``drpc.trident.pages``: ``""``, or JSON such as ``{"after": "cow",
  "limit": 10}``); it emits two fields: the entries, a list of ``[key,
  value]``, and the key to send as ``after`` for the next page (None: this
  page is the last). ``limit`` is the most entries one answer holds, so no
  request reads an unbounded state: a request may ask for fewer, never more
  (``InvalidQueryError``, as for any malformed page argument). Reads at the
  request's pinned version, like every state query.
- ``MapRemove()``: a ``StateUpdater`` for ``partition_persist`` removing each
  tuple's key (its input fields, as ``MapGet`` reads them) from the map state
  in the batch's commit (``multi_remove``: with the map kind's txid rules).
- ``FirstN(n, sort_field=None, reverse=False)``: an ``Aggregator`` emitting
  the first ``n`` tuples of its input (its output fields are its input
  fields), by ``sort_field`` when given (largest first with ``reverse``).
- ``Debug(prefix="DEBUG")``: a filter printing every tuple and keeping it.
- ``Min(field=None, comparator=None)``, ``Max(...)``: Storm's comparison
  aggregators (``Min``, ``MinWithComparator``, ...): an ``Aggregator``
  emitting the whole input tuple whose ``field`` value (the whole
  ``TridentTuple`` without a field) is the least (greatest), by ``<`` or by
  ``comparator(a, b)`` (negative, zero or positive, as Java's
  ``Comparator.compare``); tuples whose value is None are skipped; among
  equal values the last seen wins; no tuple (or only None values): nothing
  emitted. Its output fields are its input fields.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from drpc.errors import InvalidQueryError, InvalidTopologyError
from drpc.state import MapPage
from drpc.trident.operations import (
    Aggregator,
    CombinerAggregator,
    Filter,
    QueryFunction,
    StateUpdater,
)
from drpc.trident.pages import page_request
from drpc.trident.tuples import TridentCollector, TridentTuple


class Count(CombinerAggregator[int]):
    def init(self, tuple: TridentTuple) -> int:
        return 1

    def combine(self, a: int, b: int) -> int:
        return a + b

    def zero(self) -> int:
        return 0


class Sum(CombinerAggregator[Any]):
    def init(self, tuple: TridentTuple) -> Any:
        return tuple.get_value(0)

    def combine(self, a: Any, b: Any) -> Any:
        return a + b

    def zero(self) -> Any:
        return 0


class FilterNull(Filter):
    def is_keep(self, tuple: TridentTuple) -> bool:
        return all(value is not None for value in tuple.values)


def key_of(values: Sequence[Any]) -> Any:
    """The state key of a tuple's key fields: the value itself for one field, else a tuple."""
    return values[0] if len(values) == 1 else tuple(values)


class MapGet(QueryFunction):
    def batch_retrieve(self, state: Any, keys: Sequence[TridentTuple]) -> Sequence[Any]:
        return list(state.multi_get([key_of(key.values) for key in keys]))

    def execute(self, tuple: TridentTuple, result: Any, collector: TridentCollector) -> None:
        collector.emit([result])


DEFAULT_LIST_LIMIT = 100


class MapList(QueryFunction):
    def __init__(self, limit: int = DEFAULT_LIST_LIMIT) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidTopologyError(f"MapList takes a limit that is an int >= 1, got {limit!r}")
        self.limit = limit

    def batch_retrieve(self, state: Any, keys: Sequence[TridentTuple]) -> Sequence[MapPage]:
        pages = []
        for key in keys:
            if len(key.values) != 1:
                raise InvalidQueryError(
                    f"MapList reads one input field, the page argument; got {len(key.values)}"
                )
            request = page_request(key.values[0])
            if request.limit is not None and request.limit > self.limit:
                raise InvalidQueryError(
                    f"a page's limit of {request.limit} is above this MapList's limit of "
                    f"{self.limit}"
                )
            limit = self.limit if request.limit is None else request.limit
            pages.append(state.page(limit, after=request.after, prefix=request.prefix))
        return pages

    def execute(self, tuple: TridentTuple, result: MapPage, collector: TridentCollector) -> None:
        collector.emit([[[key, value] for key, value in result.entries], result.next_after])


class MapRemove(StateUpdater):
    def update_state(
        self, state: Any, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        state.multi_remove([key_of(tuple.values) for tuple in tuples])


class FirstN(Aggregator[list[TridentTuple]]):
    def __init__(self, n: int, sort_field: str | None = None, reverse: bool = False) -> None:
        if n < 0:
            raise ValueError(f"FirstN takes n >= 0, got {n}")
        self.n = n
        self.sort_field = sort_field
        self.reverse = reverse

    def init(self, batch_id: Any, collector: TridentCollector) -> list[TridentTuple]:
        return []

    def aggregate(
        self, state: list[TridentTuple], tuple: TridentTuple, collector: TridentCollector
    ) -> None:
        state.append(tuple)

    def complete(self, state: list[TridentTuple], collector: TridentCollector) -> None:
        if self.sort_field is not None:
            field = self.sort_field
            state = sorted(state, key=lambda t: t.get_value_by_field(field), reverse=self.reverse)
        for tuple in state[: self.n]:
            collector.emit(tuple.values)


class Debug(Filter):
    def __init__(self, prefix: str = "DEBUG") -> None:
        self.prefix = prefix

    def is_keep(self, tuple: TridentTuple) -> bool:
        print(f"{self.prefix}: {list(tuple.values)!r}", flush=True)
        return True


Comparator = Callable[[Any, Any], int]
"""Java's ``Comparator.compare``: negative, zero or positive as ``a`` is less, equal, more."""


class _Comparison(Aggregator[list[TridentTuple]]):
    """Keeps the tuple whose value wins ``_replaces`` (see the module doc: ``Min``, ``Max``)."""

    def __init__(self, field: str | None = None, comparator: Comparator | None = None) -> None:
        if field is None and comparator is None:
            raise ValueError(
                f"{type(self).__name__} compares a field's values or whole tuples with a "
                "comparator: give a field, a comparator or both"
            )
        self.field = field
        self.comparator = comparator

    def _value(self, tuple: TridentTuple) -> Any:
        return tuple if self.field is None else tuple.get_value_by_field(self.field)

    def _order(self, current: Any, new: Any) -> int:
        """Negative, zero or positive as ``current`` is less than, equal to or more than
        ``new``."""
        if self.comparator is not None:
            return self.comparator(current, new)
        return -1 if current < new else (1 if new < current else 0)

    def _replaces(self, current: Any, new: Any) -> bool:
        raise NotImplementedError

    def init(self, batch_id: Any, collector: TridentCollector) -> list[TridentTuple]:
        return []

    def aggregate(
        self, state: list[TridentTuple], tuple: TridentTuple, collector: TridentCollector
    ) -> None:
        value = self._value(tuple)
        if value is None:
            return
        if not state:
            state.append(tuple)
        elif self._replaces(self._value(state[0]), value):
            state[0] = tuple

    def complete(self, state: list[TridentTuple], collector: TridentCollector) -> None:
        if state:
            collector.emit(state[0].values)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(field={self.field!r}, comparator={self.comparator!r})"


class Min(_Comparison):
    def _replaces(self, current: Any, new: Any) -> bool:
        return self._order(current, new) >= 0


class Max(_Comparison):
    def _replaces(self, current: Any, new: Any) -> bool:
        return self._order(current, new) <= 0
