"""Fields, Values, Tuple, stable hashing and groupings."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import pickle
import subprocess
import sys
import uuid
from collections import Counter
from typing import Any

import pytest

from drpc import Fields, Tuple, UnhashableGroupingValueError, Values, stable_hash
from drpc.errors import InvalidTopologyError
from drpc.model.grouping import (
    AllGrouping,
    BatchGlobalGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
    fields_grouping,
)


def test_fields_index_select_and_equality() -> None:
    fields = Fields("id", "url", "count")
    assert fields == Fields(["id", "url", "count"]) == ["id", "url", "count"]
    assert fields.field_index("url") == 1
    assert "count" in fields and "nope" not in fields
    assert fields.select(Fields("count", "id"), [1, "u", 3]) == [3, 1]
    assert hash(fields) == hash(Fields(["id", "url", "count"]))
    assert pickle.loads(pickle.dumps(fields)) == fields
    with pytest.raises(KeyError, match="unknown field 'nope'"):
        fields.field_index("nope")


@pytest.mark.parametrize("bad", [("a", "a"), ("a", ""), ("a", 3)])
def test_fields_reject_duplicates_and_non_names(bad: tuple[object, ...]) -> None:
    with pytest.raises((ValueError, TypeError)):
        Fields(*bad)  # type: ignore[arg-type]


def test_values_is_a_list_of_its_arguments() -> None:
    assert Values("a", 1) == ["a", 1]
    assert pickle.loads(pickle.dumps(Values("a", 1))) == ["a", 1]


def test_tuple_access_by_index_and_name() -> None:
    t = Tuple([7, "foo.com"], Fields("id", "url"), "bolt0", "default", 3)
    assert t[0] == 7 and t["url"] == "foo.com" and t[-1] == "foo.com"
    assert (t.source_component, t.source_stream, t.source_task) == ("bolt0", "default", 3)
    assert t.get("missing", "x") == "x" and t.contains("id")
    assert t.select(Fields("url")) == ["foo.com"]
    assert list(t) == [7, "foo.com"] and len(t) == 2
    with pytest.raises(KeyError):
        t["missing"]


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: str


SAMPLES: list[object] = [
    "foo.com/blog/1",
    "ünïcødé",
    b"bytes",
    0,
    -1,
    2**70,
    3.5,
    None,
    True,
    (1, "a"),
    [1, "a"],
    frozenset({"a", "b", "c"}),
    {"k": [1, 2], "j": None},
    Color.RED,
    uuid.UUID(int=12345),
    Point(1, "p"),
]


def test_stable_hash_is_identical_across_processes_with_different_hash_seeds() -> None:
    here = [stable_hash([value]) for value in SAMPLES] + [stable_hash(["a", 1, None])]
    script = (
        f"import json, sys; sys.path.insert(0, {os.getcwd()!r}); "
        "from tests.model.test_model import SAMPLES; from drpc import stable_hash; "
        "print(json.dumps([stable_hash([v]) for v in SAMPLES] + [stable_hash(['a', 1, None])]))"
    )
    for seed in ("1", "2", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        assert json.loads(out.stdout) == here


GOLDEN_HASHES = [
    1213079951, 1847947602, 3773195189, 0, 2039857924, 3807180936, 3309943302, 2462723854,
    1364076727, 804735287, 804735287, 1486946185, 110707736, 3331476773, 1011272156,
    1527020063,
]  # fmt: skip


def test_stable_hash_is_the_same_function_in_every_build_and_version() -> None:
    """Pinned: a tuple's task must not move when the engine is compiled, runs pure (as
    executors given drpc in a zip do, beside a compiled driver) or is optimised."""
    assert [stable_hash([value]) for value in SAMPLES] == GOLDEN_HASHES
    assert stable_hash(["a", 1, None]) == 3641460640
    assert stable_hash([2**64 - 1, "user7"]) == 2799284762
    assert stable_hash([-(2**63), 1.25]) == 3227772753


def test_equal_values_hash_equal() -> None:
    assert stable_hash([1]) == stable_hash([1.0]) == stable_hash([True])
    assert stable_hash([(1, 2)]) == stable_hash([[1, 2]])
    assert stable_hash([{"a", "b"}]) == stable_hash([frozenset({"b", "a"})])
    assert stable_hash(["a"]) != stable_hash(["b"])


def test_unhashable_values_are_refused_with_the_type_named() -> None:
    class Opaque:
        pass

    with pytest.raises(UnhashableGroupingValueError, match="Opaque"):
        stable_hash([Opaque()])


def test_fields_grouping_spreads_and_is_consistent() -> None:
    fields = Fields("id", "follower")
    partitioner = FieldsGrouping(Fields("follower")).partitioner(fields, 0, 1, 6)
    other_source = FieldsGrouping(Fields("follower")).partitioner(fields, 3, 4, 6)
    counts: Counter[int] = Counter()
    for n in range(6000):
        [task] = partitioner.choose([n % 7, f"user{n}"])
        assert other_source.choose([99, f"user{n}"]) == (task,)
        counts[task] += 1
    assert set(counts) == set(range(6)) and min(counts.values()) > 800


def test_fields_grouping_remembers_short_string_hashes_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import drpc.model.partitioners as partitioners

    monkeypatch.setattr(partitioners, "MEMO_ENTRIES", 4)
    monkeypatch.setattr(partitioners, "_hashes", {})
    partitioner = FieldsGrouping(Fields("w")).partitioner(Fields("w"), 0, 1, 5)
    other = FieldsGrouping(Fields("w")).partitioner(Fields("w"), 1, 2, 3)
    long = "x" * (partitioners.MEMO_KEY_LENGTH + 1)
    values: list[Any] = [f"w{n}" for n in range(10)] * 2 + [long, 1, 1.0, True, b"w1"]
    for value in values:
        assert partitioner.choose([value]) == (stable_hash([value]) % 5,)
        assert other.choose([value]) == (stable_hash([value]) % 3,)
    memo = partitioners._hashes
    assert 0 < len(memo) <= 4 and all(type(key) is str and len(key) < len(long) for key in memo)
    assert all(memo[key] == stable_hash([key]) for key in memo)
    two = FieldsGrouping(Fields("a", "b")).partitioner(Fields("a", "b"), 0, 1, 5)
    assert two.choose(["a", "b"]) == (stable_hash(["a", "b"]) % 5,)
    assert set(memo) <= {f"w{n}" for n in range(10)}
    longest = "y" * partitioners.MEMO_KEY_LENGTH
    assert partitioner.choose([longest]) == (stable_hash([longest]) % 5,)
    assert longest in memo


def test_shuffle_and_none_round_robin_from_the_source_index() -> None:
    fields = Fields("x")
    for grouping in (ShuffleGrouping(), NoneGrouping()):
        partitioner = grouping.partitioner(fields, 2, 4, 3)
        assert [partitioner.choose([i])[0] for i in range(6)] == [2, 0, 1, 2, 0, 1]


def test_global_all_and_local_or_shuffle() -> None:
    fields = Fields("x")
    assert GlobalGrouping().partitioner(fields, 3, 4, 5).choose([1]) == (0,)
    assert AllGrouping().partitioner(fields, 0, 1, 3).choose([1]) == (0, 1, 2)
    same = LocalOrShuffleGrouping().partitioner(fields, 2, 4, 4)
    assert {same.choose([i]) for i in range(10)} == {(2,)}
    assert LocalOrShuffleGrouping().keeps_task_index(4, 4)
    assert not LocalOrShuffleGrouping().keeps_task_index(4, 3)
    other = LocalOrShuffleGrouping().partitioner(fields, 2, 4, 3)
    assert sorted(other.choose([i])[0] for i in range(3)) == [0, 1, 2]
    assert DirectGrouping().needs_direct_stream and not ShuffleGrouping().needs_direct_stream


@pytest.mark.parametrize(
    "grouping",
    [
        ShuffleGrouping(),
        NoneGrouping(),
        LocalOrShuffleGrouping(),
        FieldsGrouping(Fields("w")),
        FieldsGrouping(Fields("n", "w")),
        GlobalGrouping(),
        BatchGlobalGrouping(),
        AllGrouping(),
    ],
    ids=lambda value: f"{value.kind}-{len(getattr(value, 'fields', ()))}",
)
def test_choose_many_chooses_as_choose_one_by_one(grouping: Grouping) -> None:
    fields = Fields("n", "w")
    # Words (remembered or not yet), a long string, other types: every branch of the rule.
    many: list[list[Any]] = [
        [n, value]
        for n, value in enumerate(
            [f"w{n % 37}" for n in range(200)]
            + ["x" * 100, 3, 1.5, b"w1", ("t", 1), [1, "w1"], None]
        )
    ]
    one_by_one = grouping.partitioner(fields, 1, 3, 4)
    at_once = grouping.partitioner(fields, 1, 3, 4)
    expected = [one_by_one.choose(values) for values in many]
    assert at_once.choose_many(many[:50]) + at_once.choose_many(many[50:]) == expected
    assert at_once.choose_many([]) == []


def test_a_batch_global_grouping_chooses_as_a_fields_grouping_on_the_batch_id() -> None:
    fields = Fields("batch", "x")
    by_batch = BatchGlobalGrouping().partitioner(fields, 0, 1, 5)
    by_fields = FieldsGrouping(Fields("batch")).partitioner(fields, 0, 1, 5)
    # runs of one batch, a batch seen again later, an equal id that is another object
    batches = [None, None, 1, 1, 2, 3, 3, 3, 4, 1, 10**20, int("1" + "0" * 20), "b", 7]
    rows = [[batch, f"x{index}"] for index, batch in enumerate(batches)]
    chosen = [by_batch.choose(row) for row in rows]
    assert chosen == [by_fields.choose(row) for row in rows]
    assert len(set(chosen)) > 1  # the batches do not all go to one task


@pytest.mark.parametrize(
    ("grouping", "keeps"),
    [
        # (source tasks, target tasks): (1, 1), (1, 3), (3, 1), (3, 3)
        (GlobalGrouping(), (True, True, False, False)),
        (BatchGlobalGrouping(), (True, False, False, False)),
        (ShuffleGrouping(), (True, False, False, False)),
        (NoneGrouping(), (True, False, False, False)),
        (FieldsGrouping(Fields("x")), (True, False, False, False)),
        (AllGrouping(), (True, False, False, False)),
        (LocalOrShuffleGrouping(), (True, False, False, True)),
        (DirectGrouping(), (False, False, False, False)),
    ],
    ids=lambda value: getattr(value, "kind", ""),
)
def test_which_groupings_keep_the_task_index(grouping: Grouping, keeps: tuple[bool, ...]) -> None:
    shapes = [(1, 1), (1, 3), (3, 1), (3, 3)]
    assert tuple(grouping.keeps_task_index(s, t) for s, t in shapes) == keeps


def test_direct_streams_never_ask_a_partitioner_and_fields_grouping_builds_the_spec() -> None:
    direct = DirectGrouping().partitioner(Fields("x"), 0, 1, 3)
    with pytest.raises(AssertionError, match=r"^direct streams are routed by emit_direct, never"):
        direct.choose([1])
    assert fields_grouping("x") == FieldsGrouping(Fields("x"))
    assert fields_grouping(["x", "y"]).fields == Fields("x", "y")


@pytest.mark.parametrize("fields", [["x", "y"], ("x", "y"), Fields("x", "y")])
def test_a_fields_grouping_holds_its_fields_as_fields(fields: Any) -> None:
    grouping = FieldsGrouping(fields)
    assert isinstance(grouping.fields, Fields) and grouping.fields.to_list() == ["x", "y"]
    assert FieldsGrouping("x").fields.to_list() == ["x"]


def test_a_fields_grouping_selecting_nothing_or_an_undeclared_field_is_refused() -> None:
    declared = Fields("id", "url")
    FieldsGrouping(Fields("url")).validate(declared, "bolt1", "default")
    with pytest.raises(InvalidTopologyError) as empty:
        FieldsGrouping(Fields()).validate(declared, "bolt1", "default")
    assert (str(empty.value), empty.value.component) == (
        "component 'bolt1': fields grouping on default selects no fields",
        "bolt1",
    )
    with pytest.raises(InvalidTopologyError) as undeclared:
        FieldsGrouping(Fields("id", "user")).validate(declared, "bolt2", "s")
    assert (str(undeclared.value), undeclared.value.component) == (
        "component 'bolt2': fields grouping on undeclared field 'user' of s "
        "(declared fields: ['id', 'url'])",
        "bolt2",
    )
