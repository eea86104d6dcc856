"""Batch bolt instances: a fresh copy of the prototype per id, made without pickle only
when that comes to the same copy (``plain_state``)."""

from __future__ import annotations

import copyreg
from collections.abc import Sequence
from typing import Any

import pytest

from drpc import BaseRichSpout, Fields, OutputFieldsDeclarer, TopologyBuilder
from drpc.model.components import BaseBatchBolt, OutputCollector
from drpc.model.context import TopologyContext
from drpc.model.tuples import Tuple
from drpc.requests import ReturnInfo
from drpc.semantics.runners import BatchBoltRunner, plain_state


class Plain(BaseBatchBolt):
    def __init__(self) -> None:
        self.name = "plain"
        self.limit = 3
        self.weight = 0.5
        self.enabled = True
        self.nothing = None
        self.raw = b"x"
        self.origin = ReturnInfo("r1", "host")

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: Any, id: Any
    ) -> None:
        self.id = id
        self.seen: list[Any] = []

    def execute(self, tuple: Tuple) -> None:
        self.seen.append(tuple)

    def finish_batch(self) -> None:
        pass

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


class HoldsAList(Plain):
    def __init__(self) -> None:
        super().__init__()
        self.defaults = [1, 2]


class HoldsATuple(Plain):
    def __init__(self) -> None:
        super().__init__()
        self.pair = (1, 2)  # immutable, but not one of SHAREABLE's exact types


class Slotted(Plain):
    __slots__ = ("extra",)


class SetsState(Plain):
    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, restored=True)


class GetsState(Plain):
    def __getstate__(self) -> dict[str, Any]:
        return {"name": "from getstate"}


class Reduces(Plain):
    def __reduce__(self) -> Any:
        return (Reduces, ())


class OwnNew(Plain):
    def __new__(cls) -> OwnNew:
        return super().__new__(cls)


class Registered(Plain):
    pass


def _registered(bolt: Registered) -> Any:
    return (Registered, ())


copyreg.pickle(Registered, _registered)


def test_plain_state_is_the_attributes_when_they_are_all_immutable() -> None:
    bolt = Plain()
    state = plain_state(bolt)
    assert state == vars(bolt)
    assert state is not vars(bolt)


@pytest.mark.parametrize(
    "bolt",
    [
        HoldsAList(),
        HoldsATuple(),
        Slotted(),
        SetsState(),
        GetsState(),
        Reduces(),
        OwnNew(),
        Registered(),
    ],
    ids=lambda bolt: type(bolt).__name__,
)
def test_plain_state_is_none_when_unpickling_does_more_than_set_immutable_attributes(
    bolt: Plain,
) -> None:
    assert plain_state(bolt) is None


class _Sink(OutputCollector):
    def emit(
        self, values: Sequence[Any], anchors: Any = None, stream: str = "default"
    ) -> list[int]:
        return []

    def ack(self, tuple: Tuple) -> None:
        pass

    def fail(self, tuple: Tuple, reason: Any = None) -> None:
        pass


class _Source(BaseRichSpout):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "value"))


def _runner(bolt: Plain) -> BatchBoltRunner:
    builder = TopologyBuilder()
    builder.set_spout("source", _Source())
    builder.set_bolt("step", bolt).shuffle_grouping("source")
    topology = builder.create_topology()
    runner = BatchBoltRunner(bolt, "step")
    task = topology.component_task_ids["step"][0]
    runner.prepare({}, TopologyContext(topology, "step", task), _Sink())
    return runner


@pytest.mark.parametrize("kind", [Plain, HoldsAList, SetsState], ids=lambda kind: kind.__name__)
def test_each_id_gets_a_fresh_prepared_copy_of_the_prototype(kind: type[Plain]) -> None:
    runner = _runner(kind())
    first, second = runner.instance("a"), runner.instance("b")
    assert type(first) is type(second) is kind
    assert first is not second and runner.instance("a") is first
    assert (first.id, second.id) == ("a", "b")
    assert first.seen is not second.seen
    assert first.origin == ReturnInfo("r1", "host")
    first.name = "changed by batch a"
    runner.finished_id("a")
    assert runner.instance("a") is not first
    assert runner.instance("a").name == "plain"
    if kind is HoldsAList:
        assert first.defaults is not second.defaults  # type: ignore[attr-defined]
    if kind is SetsState:
        assert first.restored is True  # type: ignore[attr-defined]
