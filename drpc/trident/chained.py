"""Chained aggregation at run time: several aggregators in one pass over a batch's tuples.

Contract. ``ChainedAggregator(links)`` is an ``Aggregator`` (Storm's
``ChainedAggregatorImpl``) over the union of its links' input fields; each
``ChainLink`` names which of those fields its aggregator reads and how many
fields it outputs. Per group of a batch partition (the step that runs it,
``PartitionAggregateProcessor``, keeps one chain state per group):

- a ``CombinerAggregator`` link combines ``init(tuple)`` over the tuples
  and outputs one value (``zero()`` when it saw none); a
  ``ReducerAggregator`` link reduces from ``init()`` and outputs the value;
  an ``Aggregator`` link outputs what it emits (none, one or several
  tuples) into a collector of its own;
- ``complete`` emits the cross product of the links' outputs, each row the
  concatenation of one output of every link in link order, as Storm does;
  a link that output nothing gives no row (Storm fails there).

The declaring side (``Stream.chained_agg`` in ``drpc.trident.stream``)
decides where chains run: per partition, or for the whole batch (per group)
after a repartition, with combiner-only chains combining partials first.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from drpc.trident.operations import (
    Aggregator,
    AnyAggregator,
    CombinerAggregator,
    ReducerAggregator,
)
from drpc.trident.processors import Selection
from drpc.trident.tuples import TridentCollector, TridentTuple

Values = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One aggregator of a chain: the positions of its inputs in the chain's input, its
    output width."""

    input: Selection
    aggregator: AnyAggregator
    width: int


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


@dataclass(slots=True)
class ChainState:
    """One group's state: a value per link, and the collectors of the ``Aggregator`` links."""

    values: list[Any]
    collectors: list[TridentCollector | None]


class ChainedAggregator(Aggregator[ChainState]):
    """Several aggregators over one pass (see the module doc)."""

    def __init__(self, links: tuple[ChainLink, ...]) -> None:
        self.links = links

    def wrapped(self) -> tuple[AnyAggregator, ...]:
        """The aggregators it runs (``processors.state_reads`` judges those)."""
        return tuple(link.aggregator for link in self.links)

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        for link in self.links:
            link.aggregator.prepare(conf, context)

    def init(self, batch_id: Any, collector: TridentCollector) -> ChainState:
        state = ChainState([], [])
        for link in self.links:
            aggregator = link.aggregator
            if isinstance(aggregator, Aggregator):
                own = TridentCollector(link.width, type(aggregator).__name__)
                state.values.append(aggregator.init(batch_id, own))
                state.collectors.append(own)
                continue
            state.values.append(
                aggregator.init() if isinstance(aggregator, ReducerAggregator) else _UNSET
            )
            state.collectors.append(None)
        return state

    def aggregate(
        self, state: ChainState, tuple: TridentTuple, collector: TridentCollector
    ) -> None:
        values = state.values
        for i, link in enumerate(self.links):
            aggregator = link.aggregator
            projected = link.input.tuple(tuple.values)
            if isinstance(aggregator, CombinerAggregator):
                value = aggregator.init(projected)
                values[i] = value if values[i] is _UNSET else aggregator.combine(values[i], value)
            elif isinstance(aggregator, ReducerAggregator):
                values[i] = aggregator.reduce(values[i], projected)
            else:
                own = state.collectors[i]
                assert own is not None
                aggregator.aggregate(values[i], projected, own)

    def complete(self, state: ChainState, collector: TridentCollector) -> None:
        outputs: list[list[Values]] = []
        for i, link in enumerate(self.links):
            aggregator, value, own = link.aggregator, state.values[i], state.collectors[i]
            if isinstance(aggregator, Aggregator):
                assert own is not None
                aggregator.complete(value, own)
                outputs.append(own.take())
            elif isinstance(aggregator, CombinerAggregator):
                outputs.append([(aggregator.zero() if value is _UNSET else value,)])
            else:
                outputs.append([(value,)])
        for row in itertools.product(*outputs):
            collector.emit(tuple(itertools.chain.from_iterable(row)))
