"""Build-time validation: every error names the component at fault."""

from __future__ import annotations

from typing import Any

import pytest

from drpc import (
    BaseBasicBolt,
    BaseRichSpout,
    Fields,
    InvalidTopologyError,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    TopologyBuilder,
)
from drpc.examples.reach import CountAggregator, GetFollowers, GetTweeters, PartialUniquer


class WordSpout(BaseRichSpout):
    def next_tuple(self) -> None:
        pass

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("word"))
        declarer.declare_stream("signals", Fields("signal"), direct=True)


class Echo(BaseBasicBolt):
    def __init__(self, fields: tuple[str, ...] = ("id", "result"), streams: int = 1) -> None:
        self.fields = fields
        self.streams = streams

    def execute(self, tuple: Any, collector: Any) -> None:
        collector.emit(tuple.values)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields(*self.fields))
        for n in range(1, self.streams):
            declarer.declare_stream(f"extra{n}", Fields(*self.fields))


def builder_with_spout() -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("words", WordSpout())
    return builder


def test_a_valid_topology_assigns_task_ids_by_sorted_component_id() -> None:
    builder = builder_with_spout()
    builder.set_bolt("count", Echo(("word",)), 3).fields_grouping("words", Fields("word"))
    builder.set_bolt("audit", Echo(("word",)), 2).shuffle_grouping("count")
    topology = builder.create_topology("t")
    assert topology.component_task_ids == {"audit": [1, 2], "count": [3, 4, 5], "words": [6]}
    assert topology.downstream_tasks("count", "default") == [1, 2]


@pytest.mark.parametrize(
    ("wire", "component", "message"),
    [
        (
            lambda b: b.set_bolt("x", Echo()).shuffle_grouping("nope"),
            "x",
            "unknown component 'nope'",
        ),
        (lambda b: b.set_bolt("x", Echo()).shuffle_grouping("words", "nope"), "x", "stream 'nope'"),
        (
            lambda b: b.set_bolt("x", Echo()).fields_grouping("words", Fields("url")),
            "x",
            "undeclared field 'url'",
        ),
        (lambda b: b.set_bolt("x", Echo()).direct_grouping("words"), "x", "not declared direct"),
        (
            lambda b: b.set_bolt("x", Echo()).shuffle_grouping("words", "signals"),
            "x",
            "direct streams need direct_grouping",
        ),
        (lambda b: b.set_bolt("x", Echo()), "x", "subscribes to no stream"),
    ],
)
def test_wiring_errors_name_the_component(wire: Any, component: str, message: str) -> None:
    builder = builder_with_spout()
    wire(builder)
    with pytest.raises(InvalidTopologyError, match=message) as caught:
        builder.create_topology()
    assert caught.value.component == component
    assert f"component {component!r}" in str(caught.value)


def test_duplicate_and_reserved_component_ids() -> None:
    builder = builder_with_spout()
    with pytest.raises(InvalidTopologyError, match="duplicate component id") as caught:
        builder.set_bolt("words", Echo())
    assert caught.value.component == "words"
    with pytest.raises(InvalidTopologyError, match="reserved"):
        builder.set_bolt("__acker", Echo())


@pytest.mark.parametrize("parallelism", [0, -1, 1.5, True])
def test_parallelism_must_be_a_positive_integer(parallelism: Any) -> None:
    with pytest.raises(InvalidTopologyError, match="parallelism") as caught:
        builder_with_spout().set_bolt("x", Echo(), parallelism)
    assert caught.value.component == "x"


def test_duplicate_stream_declaration_names_the_component() -> None:
    class Twice(Echo):
        def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
            declarer.declare(Fields("a"))
            declarer.declare(Fields("b"))

    builder = builder_with_spout()
    builder.set_bolt("twice", Twice()).shuffle_grouping("words")
    with pytest.raises(InvalidTopologyError, match="declares stream 'default' twice") as caught:
        builder.create_topology()
    assert caught.value.component == "twice"


def test_linear_drpc_last_bolt_must_declare_exactly_one_stream() -> None:
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(Echo(streams=2))
    with pytest.raises(InvalidTopologyError, match="exactly one stream") as caught:
        builder.create_topology()
    assert caught.value.component == "bolt0"


def test_linear_drpc_last_bolt_must_declare_exactly_two_fields() -> None:
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(Echo(("id",)))
    builder.add_bolt(Echo(("id", "a", "b"))).shuffle_grouping()
    with pytest.raises(InvalidTopologyError, match="exactly two fields") as caught:
        builder.create_topology()
    assert caught.value.component == "bolt1"


def test_linear_drpc_needs_a_step() -> None:
    with pytest.raises(InvalidTopologyError, match="at least one bolt"):
        LinearDRPCTopologyBuilder("f").create_topology()


def test_linear_drpc_first_step_cannot_use_all_grouping() -> None:
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(Echo(), 3).all_grouping()
    with pytest.raises(InvalidTopologyError, match="exactly once") as caught:
        builder.create_topology()
    assert caught.value.component == "bolt0"


def test_linear_drpc_later_steps_must_declare_a_grouping() -> None:
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(Echo())
    builder.add_bolt(Echo())
    with pytest.raises(InvalidTopologyError, match="declare how the step receives") as caught:
        builder.create_topology()
    assert caught.value.component == "bolt1"


def test_linear_drpc_parallel_last_batch_step_must_be_grouped_on_the_id() -> None:
    builder = LinearDRPCTopologyBuilder("reach")
    builder.add_bolt(GetTweeters(), 4)
    builder.add_bolt(GetFollowers(), 12).shuffle_grouping()
    builder.add_bolt(PartialUniquer(), 6).fields_grouping(Fields("id", "follower"))
    builder.add_bolt(CountAggregator(), 3).shuffle_grouping()
    with pytest.raises(InvalidTopologyError, match="fields-grouped on the request id") as caught:
        builder.create_topology()
    assert caught.value.component == "bolt3"


def test_linear_drpc_grouping_on_an_undeclared_field_names_the_step() -> None:
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(Echo(("id", "word")))
    builder.add_bolt(Echo()).fields_grouping("url")
    with pytest.raises(InvalidTopologyError, match="undeclared field 'url'") as caught:
        builder.create_topology()
    assert caught.value.component == "bolt1"


@pytest.mark.parametrize("name", ["", "a/b", "line\nbreak", 7])
def test_linear_drpc_function_names_are_checked(name: Any) -> None:
    with pytest.raises(InvalidTopologyError):
        LinearDRPCTopologyBuilder(name)


def test_linear_drpc_structure_matches_storm() -> None:
    topology = LinearDRPCTopologyBuilder("reach")
    topology.add_bolt(GetTweeters(), 4)
    topology.add_bolt(GetFollowers(), 12).shuffle_grouping()
    topology.add_bolt(PartialUniquer(), 6).fields_grouping(Fields("id", "follower"))
    topology.add_bolt(CountAggregator(), 3).fields_grouping(Fields("id"))
    built = topology.create_topology()
    assert built.drpc_function == "reach"
    assert built.drpc_steps == ["bolt0", "bolt1", "bolt2", "bolt3"]
    assert built.expected_reports("bolt0") == 0
    assert built.expected_reports("bolt1") == 1  # only the bolt0 task that got the request
    assert built.expected_reports("bolt2") == 12
    assert built.expected_reports("bolt3") == 6
    assert built.expected_reports("join-result") == 1  # only the owner of the id finishes bolt3
    last = built.components["bolt3"].coordination
    assert last is not None and str(last.id_stream) == "prepare-request:id"
    assert built.components["bolt0"].coordination.id_stream is None  # type: ignore[union-attr]
