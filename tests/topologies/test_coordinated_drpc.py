"""DRPC topologies whose steps form a DAG (``CoordinatedDRPCTopologyBuilder``): wiring,
build-time checks, and a diamond answered on every executor."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from drpc import CoordinatedDRPCTopologyBuilder, InvalidTopologyError
from drpc.executors.plan import compile_plan
from drpc.testing import LocalDRPC

from . import bolts


def diamond() -> CoordinatedDRPCTopologyBuilder:
    """split (the request n -> 0..n-1) feeds left (as is) and right (x10); sum reads both."""
    builder = CoordinatedDRPCTopologyBuilder("diamond")
    builder.set_bolt("split", bolts.EmitN(), 2)
    builder.set_bolt("left", bolts.Identity(), 3).shuffle_grouping("split")
    builder.set_bolt("right", bolts.Scale(10), 2).fields_grouping("split", "i")
    (
        builder.set_bolt("sum", bolts.SumField(), 2)
        .fields_grouping("left", "id")
        .fields_grouping("right", "id")
    )
    return builder


def test_a_diamond_answers_once_both_branches_have_reported(drpc: LocalDRPC) -> None:
    topology = diamond().create_topology()
    assert topology.drpc_steps == ["split", "left", "right", "sum"]
    assert topology.expected_reports("left") == 1  # only the split task that got the request
    assert topology.expected_reports("sum") == 3 + 2  # every task of both branches
    assert topology.expected_reports("join-result") == 1  # only the owner of the id
    drpc.register(topology)
    assert drpc.execute("diamond", "4") == str(sum(range(4)) * 11)
    assert drpc.execute("diamond", "0") == "0"  # no step emits anything: still answered
    assert drpc.execute("diamond", "2") == "11"


def test_the_spark_plan_of_a_diamond_shuffles_both_branches_into_the_join() -> None:
    plan = compile_plan(diamond().create_topology())
    assert [stage.components for stage in plan.stages] == [
        ("split",),
        ("left",),
        ("right",),
        ("sum",),
    ]
    assert plan.stages[3].spark_inputs == (1, 2)
    assert plan.persisted(plan.stages[0])  # read by both branches: computed once
    assert plan.placement["join-result"] == plan.placement["prepare-request"] == "driver"


def test_steps_reading_the_request_and_a_join_of_three_inputs() -> None:
    builder = CoordinatedDRPCTopologyBuilder("f")
    builder.set_bolt("a", bolts.EmitN(), 2).shuffle_grouping(builder.REQUEST)
    builder.set_bolt("c", bolts.EmitN(), 3)  # reads the request too, by none grouping
    builder.set_bolt("b", bolts.Scale(10), 2).shuffle_grouping("a")
    builder.set_bolt("sum", bolts.SumField()).shuffle_grouping("a").global_grouping(
        "b"
    ).shuffle_grouping("c")
    topology = builder.create_topology()
    assert topology.drpc_steps == ["a", "c", "b", "sum"]
    # one report from each first step (a, c), one from each of b's two tasks
    assert topology.expected_reports("sum") == 1 + 1 + 2
    assert topology.expected_reports("a") == topology.expected_reports("c") == 0
    sum_step = topology.components["sum"].coordination
    assert sum_step is not None and str(sum_step.id_stream) == "prepare-request:id"
    assert sorted(str(s) for s in topology.components["sum"].inputs) == [
        "a:__coord",
        "a:default",
        "b:__coord",
        "b:default",
        "c:__coord",
        "c:default",
        "prepare-request:id",
    ]


def _cycle(builder: CoordinatedDRPCTopologyBuilder) -> None:
    builder.set_bolt("a", bolts.EmitN())
    builder.set_bolt("b", bolts.Identity()).shuffle_grouping("a").shuffle_grouping("d")
    builder.set_bolt("c", bolts.Identity()).shuffle_grouping("b")
    builder.set_bolt("d", bolts.Identity()).shuffle_grouping("c")
    builder.set_bolt("e", bolts.CountPerRequest()).shuffle_grouping("d")


def _unknown(builder: CoordinatedDRPCTopologyBuilder) -> None:
    builder.set_bolt("a", bolts.EmitN())
    builder.set_bolt("b", bolts.CountPerRequest()).shuffle_grouping("a").shuffle_grouping("x")


def _scaffolding(builder: CoordinatedDRPCTopologyBuilder) -> None:
    builder.set_bolt("a", bolts.CountPerRequest()).shuffle_grouping("join-result")


def _two_sinks(builder: CoordinatedDRPCTopologyBuilder) -> None:
    builder.set_bolt("a", bolts.EmitN())
    builder.set_bolt("b", bolts.CountPerRequest()).shuffle_grouping("a")
    builder.set_bolt("c", bolts.CountPerRequest()).shuffle_grouping("a")


def _request_and_step(builder: CoordinatedDRPCTopologyBuilder) -> None:
    builder.set_bolt("a", bolts.EmitN())
    builder.set_bolt("b", bolts.CountPerRequest()).shuffle_grouping("a").shuffle_grouping(
        builder.REQUEST
    )


def _request_return_stream(builder: CoordinatedDRPCTopologyBuilder) -> None:
    builder.set_bolt("a", bolts.FailOn("x")).shuffle_grouping(builder.REQUEST, "ret")


def _request_to_every_task(builder: CoordinatedDRPCTopologyBuilder) -> None:
    builder.set_bolt("a", bolts.FailOn("x"), 2).all_grouping(builder.REQUEST)


def _sink_not_grouped_on_the_id(builder: CoordinatedDRPCTopologyBuilder) -> None:
    builder.set_bolt("a", bolts.EmitN())
    builder.set_bolt("b", bolts.Identity()).shuffle_grouping("a")
    builder.set_bolt("sum", bolts.SumField(), 2).fields_grouping("a", "id").shuffle_grouping("b")


def _sink_with_three_fields(builder: CoordinatedDRPCTopologyBuilder) -> None:
    builder.set_bolt("a", bolts.EmitN())
    builder.set_bolt("b", bolts.AckFromAThread(("id", "i", "j"))).shuffle_grouping("a")


@pytest.mark.parametrize(
    ("declare", "step", "message"),
    [
        (_cycle, "b", r"cycle \(b -> c -> d -> b\)"),
        (_unknown, "b", "reads unknown step 'x'"),
        (_scaffolding, "a", "reads drpc's own component 'join-result'"),
        (_two_sinks, "c", r"steps \['b', 'c'\] are read by no step"),
        (_request_and_step, "b", r"reads the request and step\(s\) \['a'\]"),
        (_request_return_stream, "a", "reads stream 'ret' of the request"),
        (_request_to_every_task, "a", "all grouping would hand it to every task"),
        (_sink_not_grouped_on_the_id, "sum", "shuffle grouping on stream 'default' of 'b'"),
        (_sink_with_three_fields, "b", "exactly two fields"),
    ],
)
def test_build_time_checks_name_the_step(
    declare: Callable[[CoordinatedDRPCTopologyBuilder], None], step: str, message: str
) -> None:
    builder = CoordinatedDRPCTopologyBuilder("f")
    declare(builder)
    with pytest.raises(InvalidTopologyError, match=message) as caught:
        builder.create_topology()
    assert caught.value.component == step


def test_declaration_checks() -> None:
    with pytest.raises(InvalidTopologyError, match="needs at least one bolt"):
        CoordinatedDRPCTopologyBuilder("f").create_topology()
    with pytest.raises(InvalidTopologyError, match="may not contain '/'"):
        CoordinatedDRPCTopologyBuilder("a/b")
    builder = CoordinatedDRPCTopologyBuilder("f")
    builder.set_bolt("a", bolts.EmitN())
    for taken in ("a", "prepare-request"):
        with pytest.raises(InvalidTopologyError, match="duplicate component id") as caught:
            builder.set_bolt(taken, bolts.Identity())
        assert caught.value.component == taken
    with pytest.raises(InvalidTopologyError, match="needs a BaseBasicBolt") as caught:
        builder.set_bolt("spout", object())  # type: ignore[arg-type]
    assert caught.value.component == "spout"
    builder.set_bolt("b", bolts.CountPerRequest(), 0).shuffle_grouping("a")
    with pytest.raises(InvalidTopologyError, match="parallelism must be a positive") as caught:
        builder.create_topology()
    assert caught.value.component == "b"
