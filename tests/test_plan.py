"""The Spark compiler's stage plans (no Spark needed)."""

from __future__ import annotations

import pytest

from drpc import Fields, LinearDRPCTopologyBuilder
from drpc.examples.exclamation import build_exclamation
from drpc.examples.reach import build_reach
from drpc.executors.plan import DRIVER, SPARK, compile_plan, explain

from .topologies import bolts


def test_reach_compiles_to_three_shuffles_with_one_stage_per_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = compile_plan(build_reach().create_topology())
    assert plan.shuffles == 3
    assert [stage.components for stage in plan.stages] == [
        ("bolt0",),
        ("bolt1",),
        ("bolt2",),
        ("bolt3",),
    ]
    assert [stage.parallelism for stage in plan.stages] == [4, 12, 6, 3]
    assert plan.placement["prepare-request"] == DRIVER and plan.placement["bolt2"] == SPARK
    assert plan.hints["bolt3"].synthesize_ids  # the id stream is not shipped
    text = explain(build_reach())
    assert "3 shuffles" in text and "fields(id, follower)" in text
    assert capsys.readouterr().out.strip() == text


def test_local_or_shuffle_with_equal_parallelism_fuses_into_one_stage() -> None:
    builder = LinearDRPCTopologyBuilder("fused")
    builder.add_bolt(bolts.EmitN(), 3)
    builder.add_bolt(bolts.Identity(), 3).local_or_shuffle_grouping()
    builder.add_bolt(bolts.Identity(), 3).local_or_shuffle_grouping()
    builder.add_bolt(bolts.CountPerRequest(), 2).shuffle_grouping()
    builder.add_bolt(bolts.SumField()).global_grouping()
    plan = compile_plan(builder.create_topology())
    assert [stage.components for stage in plan.stages] == [
        ("bolt0", "bolt1", "bolt2"),
        ("bolt3",),
        ("bolt4",),
    ]
    assert plan.shuffles == 2
    # Zero count reports are implied, not shipped: one from bolt0 (only the task that got the
    # request knows it), one from each bolt1 task.
    assert plan.hints["bolt1"].implied_sources == (("bolt0", 1),)
    assert plan.hints["bolt2"].implied_sources == (("bolt1", 3),)
    assert plan.hints["join-result"].implied_sources == (("bolt4", 1),)
    assert all(plan.hints[c].omit_zero_reports for c in ("bolt0", "bolt1", "bolt2", "bolt3"))


def test_different_parallelism_or_groupings_do_not_fuse() -> None:
    builder = LinearDRPCTopologyBuilder("apart")
    builder.add_bolt(bolts.EmitN(), 3)
    builder.add_bolt(bolts.Identity(), 2).local_or_shuffle_grouping()
    builder.add_bolt(bolts.Identity(), 2).fields_grouping(Fields("i"))
    builder.add_bolt(bolts.CountPerRequest()).global_grouping()
    plan = compile_plan(builder.create_topology())
    assert len(plan.stages) == 4 and plan.shuffles == 3


def test_a_single_step_topology_needs_no_shuffle() -> None:
    plan = compile_plan(build_exclamation().create_topology())
    assert plan.shuffles == 0
    assert plan.driver_components() == [
        "drpc-spout",
        "prepare-request",
        "join-result",
        "return-results",
    ]
    assert [plan.after_spark(c) for c in plan.driver_components()] == [False, False, True, True]


@pytest.mark.parametrize(
    ("grouping", "tasks", "fused"),
    [
        ("global", 1, True),  # one task to one task: task 0 sends to task 0
        ("global", 3, False),  # every task sends to task 0: a shuffle
        ("shuffle", 1, True),
        ("shuffle", 3, False),
        ("fields", 1, True),
        ("fields", 3, False),
        ("all", 1, True),
        ("all", 3, False),
        ("local_or_shuffle", 3, True),
        ("direct", 1, False),  # the emitter picks the task: never fused
        ("direct", 3, False),
    ],
)
def test_a_step_fuses_with_its_upstream_only_through_a_grouping_that_keeps_the_task_index(
    grouping: str, tasks: int, fused: bool
) -> None:
    builder = LinearDRPCTopologyBuilder("fusion")
    if grouping == "direct":
        builder.add_bolt(bolts.DirectToEveryTask(), tasks)
        declarer = builder.add_bolt(bolts.RecordTask(), tasks)
    else:
        builder.add_bolt(bolts.EmitN(), tasks)
        declarer = builder.add_bolt(bolts.Identity(), tasks)
    if grouping == "fields":
        declarer.fields_grouping(Fields("i"))
    else:
        getattr(declarer, f"{grouping}_grouping")()
    plan = compile_plan(builder.create_topology())
    if fused:
        assert [stage.components for stage in plan.stages] == [("bolt0", "bolt1")]
        assert plan.shuffles == 0
    else:
        assert [stage.components for stage in plan.stages] == [("bolt0",), ("bolt1",)]
        assert plan.shuffles == 1
