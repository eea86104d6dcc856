"""Trident's processors taking a batch's tuples together, and the compiled path's pieces."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from drpc import Fields
from drpc.errors import InvalidTupleError
from drpc.examples.vocabulary_counts import Split
from drpc.model.tuples import Tuple
from drpc.transactional.filelog import FileLogMeta
from drpc.trident import Count, MapGet, Sum
from drpc.trident.bolts import KeyedPartials, PersistBolt, SegmentBolt
from drpc.trident.fused import RangeTask, _shares
from drpc.trident.operations import ReducerAggregator
from drpc.trident.processors import (
    BatchContext,
    EachProcessor,
    Emit,
    PartitionAggregateProcessor,
    Processor,
    ProjectProcessor,
    Root,
    Selection,
    StateQueryProcessor,
    Values,
    state_reads,
)
from drpc.trident.state import LMDBMapState
from drpc.trident.tuples import TridentTuple
from tests.trident.consistent import CountsOneByOne

FIELDS = ("word", "n")
ROWS: list[Values] = [("cat", 2), ("dog", 5), ("cat", 1), ("eel", 4), ("dog", 3), ("cat", 7)]


class CountTooMuch(Count):
    """A Count whose init is its own: the batched count must not stand in for it."""

    def init(self, tuple: TridentTuple) -> int:
        return 10


def segment(aggregator: Any, group: tuple[str, ...]) -> tuple[Root, list[tuple[str, Values]]]:
    """Root -> project(word, n) -> partition aggregate -> emit, and what the emit outputs."""
    out: list[tuple[str, Values]] = []
    root = Root()
    project = ProjectProcessor(Selection(FIELDS, FIELDS))
    input = ("n",) if isinstance(aggregator, Sum) else ()
    width = 1
    aggregate = PartitionAggregateProcessor(
        Selection(FIELDS, group), Selection(FIELDS, input), aggregator, width
    )
    emit = Emit("s")
    root.children.append(project)
    project.children.append(aggregate)
    aggregate.children.append(emit)
    root.prepare(
        BatchContext({}, None, "batch", lambda stream, values: out.append((stream, values)))
    )
    return root, out


@pytest.mark.parametrize(
    "aggregator", [Count(), Sum(), CountTooMuch()], ids=["count", "sum", "count-subclass"]
)
@pytest.mark.parametrize("group", [("word",), (), ("word", "n")], ids=["word", "none", "both"])
def test_taking_a_batch_together_outputs_what_one_at_a_time_does(
    aggregator: Any, group: tuple[str, ...]
) -> None:
    outputs = []
    for together in (False, True):
        root, out = segment(aggregator, group)
        if together:
            root.receive_many("spout", ROWS[:4])
            root.receive_many("spout", ROWS[4:])
        else:
            for values in ROWS:
                root.receive("spout", values)
        root.finish()
        outputs.append(out)
    assert outputs[0] == outputs[1]
    if group == ("word",):
        expected = {
            "count": [("cat", 3), ("dog", 2), ("eel", 1)],
            "sum": [("cat", 10), ("dog", 8), ("eel", 4)],
            "count-subclass": [("cat", 30), ("dog", 20), ("eel", 10)],
        }
        assert [values for _, values in outputs[1]] in expected.values()


def test_a_selection_pickles_and_selects_as_before() -> None:
    expected = {(): (), ("n",): (2,), ("n", "word"): (2, "cat")}
    for selected, values in expected.items():
        selection = pickle.loads(pickle.dumps(Selection(FIELDS, selected)))
        assert selection.values(("cat", 2)) == values
        assert selection.tuple(("cat", 2)).fields == selected


def test_partitions_go_to_emitter_tasks_as_in_storm() -> None:
    ranges = [RangeTask(p, FileLogMeta(0, 10, 1)) for p in (0, 1, 2, 4, 5)]
    shares = _shares(ranges, 2)
    assert [[task.partition for task in share] for share in shares] == [[0, 2, 4], [1, 5]]
    assert [[task.partition for task in share] for share in _shares(ranges, 8)] == [
        [0], [1], [2], [4], [5]
    ]  # fmt: skip


class Concatenate(ReducerAggregator[str]):
    def init(self) -> str:
        return ""

    def reduce(self, current: str, tuple: TridentTuple) -> str:
        return current + tuple.get_value(0)


def persist_tuple(values: list[Any]) -> Tuple:
    return Tuple(["batch", *values], Fields("$batch", "word", "count"), "segment", "s", 1)


def test_a_committer_takes_a_batch_of_partials_in_one_piece() -> None:
    group, input = Selection(("word", "count"), ("word",)), Selection(("word", "count"), ("count",))
    bolt = PersistBolt(LMDBMapState.transactional("counts"), group, input, Count())
    bolt.execute(persist_tuple(["cat", 2]))
    bolt.execute(
        Tuple(["batch", KeyedPartials({"cat": 3, "dog": 1})], Fields("$batch", "p"), "s", "s", 1)
    )
    bolt.execute(Tuple(["batch", KeyedPartials({"dog": 4})], Fields("$batch", "p"), "s", "s", 1))
    assert bolt.partials == {"cat": 5, "dog": 5}
    reducer = PersistBolt(LMDBMapState.transactional("words"), group, input, Concatenate())
    with pytest.raises(InvalidTupleError, match="Concatenate is not a CombinerAggregator"):
        reducer.execute(
            Tuple(["batch", KeyedPartials({"cat": 1})], Fields("$batch", "p"), "s", "s", 1)
        )


def test_a_segment_reads_state_where_its_operations_can() -> None:
    def tree(*processors: Processor) -> Root:
        root = Root()
        parent: Processor = root
        for processor in processors:
            parent.children.append(processor)
            parent = processor
        return root

    state = LMDBMapState.transactional("counts")
    words, nothing = Selection(FIELDS, ("word",)), Selection(FIELDS, ())

    def query() -> StateQueryProcessor:
        return StateQueryProcessor(state, words, MapGet(), 1)

    def count() -> PartitionAggregateProcessor:
        return PartitionAggregateProcessor(nothing, nothing, Count(), 1)

    user_query = StateQueryProcessor(state, words, CountsOneByOne(), 1)
    mine = PartitionAggregateProcessor(nothing, nothing, CountTooMuch(), 1)
    assert state_reads(tree(ProjectProcessor(words), count(), Emit("s"))) == "nowhere"
    assert state_reads(tree(query(), ProjectProcessor(words), count(), Emit("s"))) == "finish"
    assert state_reads(tree(user_query, Emit("s"))) == "finish"  # a query runs as it finishes
    split = EachProcessor(words, Split(), 1)
    assert state_reads(tree(query(), split)) == "anywhere"  # the user's Split may read a map
    assert state_reads(tree(mine)) == "anywhere"
    assert SegmentBolt(tree(query()), {}).state_reads == "finish"
