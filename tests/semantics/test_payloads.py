"""How emitted values travel between tasks of one process: shared when nothing can
change them, pickled otherwise, and never unpicklable where Spark would refuse them."""

from __future__ import annotations

import enum
import pickle
from typing import Any

import pytest

from drpc.errors import UnserializableValueError
from drpc.requests import ReturnInfo
from drpc.semantics.routing import freeze_values, pickled_values, receiver_values, thaw_values


class Level(enum.IntEnum):
    LOW = 1


@pytest.mark.parametrize(
    "values",
    [
        ["foo.com/blog/1", 16, 2.5, True, None, b"raw"],
        [7, ReturnInfo("r1", "server-a")],
        [],
    ],
)
def test_immutable_values_are_shared_and_each_receiver_gets_its_own_list(
    values: list[Any],
) -> None:
    payload = freeze_values("bolt", "default", values)
    assert payload == tuple(values)
    first, second = thaw_values(payload), thaw_values(payload)
    assert first == second == values
    assert type(first) is list and first is not second
    first.append("mutated by one receiver")
    assert thaw_values(payload) == values


@pytest.mark.parametrize(
    "values",
    [
        [7, ["a", "list"]],
        [{"a": 1}],
        [Level.LOW],  # an int subclass: not known to be immutable
        [("a", "tuple")],  # immutable, but holding anything
    ],
)
def test_anything_else_is_pickled_so_receivers_get_copies(values: list[Any]) -> None:
    payload = freeze_values("bolt", "default", values)
    assert isinstance(payload, bytes) and pickle.loads(payload) == values
    first, second = thaw_values(payload), thaw_values(payload)
    assert first == second == values
    if isinstance(first[-1], list | dict):
        assert first[-1] is not second[-1]


def test_a_value_that_cannot_travel_between_processes_is_refused_naming_the_step() -> None:
    with pytest.raises(UnserializableValueError, match=r"step 'counter'.*stream 'totals'"):
        freeze_values("counter", "totals", [1, lambda: None])


@pytest.mark.parametrize(
    "values",
    [
        ["foo.com/blog/1", 16, 2.5, True, None, b"raw"],
        ("a", "tuple", "of", "strings"),  # any sequence: each receiver still gets a list
        [],
    ],
)
def test_an_emit_handed_over_at_once_copies_immutable_values_for_each_receiver(
    values: list[Any] | tuple[Any, ...],
) -> None:
    assert pickled_values("bolt", "default", values) is None
    first, second = receiver_values(values, None), receiver_values(values, None)
    assert first == second == list(values)
    assert type(first) is list and first is not second and first is not values
    first.append("mutated by one receiver")
    assert receiver_values(values, None) == list(values)


@pytest.mark.parametrize("values", [[7, ["a", "list"]], ([{"a": 1}],), [Level.LOW]])
def test_an_emit_handed_over_at_once_pickles_anything_else_once(
    values: list[Any] | tuple[Any, ...],
) -> None:
    pickled = pickled_values("bolt", "default", values)
    assert isinstance(pickled, bytes) and pickle.loads(pickled) == list(values)
    first, second = receiver_values(values, pickled), receiver_values(values, pickled)
    assert first == second == list(values)
    if isinstance(first[-1], list | dict):
        assert first[-1] is not second[-1] and first[-1] is not values[-1]
    with pytest.raises(UnserializableValueError, match=r"step 'counter'.*stream 'totals'"):
        pickled_values("counter", "totals", [1, lambda: None])
