"""Batch-mode tasks (what each Spark task runs), driven directly with records."""

from __future__ import annotations

import gc
import logging
import pickle
import threading
import time
from typing import Any

import pytest

from drpc import DRPCExceptionType, Fields, LinearDRPCTopologyBuilder, Topology
from drpc.errors import Failure
from drpc.executors.batch import TaskHints, TaskRun
from drpc.executors.plan import compile_plan
from drpc.executors.records import FailureNotice, Shipment
from drpc.executors.spark import stages
from drpc.executors.spark.stages import JobSpec
from drpc.logs import ContextFilter
from tests.waiting import settle_garbage

from .topologies import bolts


def chain() -> Topology:
    builder = LinearDRPCTopologyBuilder("chain")
    builder.add_bolt(bolts.EmitN(), 2)
    builder.add_bolt(bolts.CountPerRequest(), 3).shuffle_grouping()
    builder.add_bolt(bolts.SumField(), 2).fields_grouping(Fields("id"))
    return builder.create_topology()


def data(source: str, task: int, *values: Any) -> Shipment:
    return Shipment(source, task, [("default", [list(values)])])


def report(source: str, task: int, counts: dict[Any, int]) -> Shipment:
    return Shipment(source, task, reports=dict(counts))


def failure_notice(id: Any, failure: Failure) -> Shipment:
    return Shipment("bolt0", 0, failures=[FailureNotice(id, failure)])


def sent_tuples(run: TaskRun) -> list[tuple[int, list[Any]]]:
    """(receiving task, values) of every tuple the task sent."""
    return [
        (task, values)
        for task, shipment in run.shipments().items()
        for _, values in shipment.emitted()
    ]


def sent_reports(run: TaskRun) -> dict[int, dict[Any, int]]:
    return {task: s.reports for task, s in run.shipments().items() if s.reports}


def sent_failures(run: TaskRun) -> list[tuple[int, FailureNotice]]:
    return [
        (task, notice) for task, shipment in run.shipments().items() for notice in shipment.failures
    ]


def test_a_middle_task_finishes_each_id_and_reports_to_every_downstream_task() -> None:
    topology = chain()
    bolt0 = topology.component_task_ids["bolt0"]
    run = TaskRun(topology, "bolt1", 0, job_ids=(1, 2))
    run.run(
        [
            data("bolt0", bolt0[0], 1, 0),
            data("bolt0", bolt0[0], 1, 1),
            report("bolt0", bolt0[0], {1: 2}),
            report("bolt0", bolt0[1], {2: 0}),
        ]
    )
    assert run.failures == {}
    sent = [values for _, values in sent_tuples(run)]
    assert sorted(sent) == [[1, 2], [2, 0]]  # finish_batch ran for id 2 although it saw nothing
    reports = sent_reports(run)
    assert set(reports) == set(topology.component_task_ids["bolt2"])
    assert sum(counts.get(1, 0) for counts in reports.values()) == 1
    assert all(set(counts) == {1, 2} for counts in reports.values())  # zeros included


def test_fewer_tuples_than_reported_is_an_internal_error() -> None:
    topology = chain()
    bolt0 = topology.component_task_ids["bolt0"]
    run = TaskRun(topology, "bolt1", 0, job_ids=(1,))
    run.run([data("bolt0", bolt0[0], 1, 0), report("bolt0", bolt0[0], {1: 3})])
    failure = run.failures[1]
    assert failure.type is DRPCExceptionType.INTERNAL_ERROR
    assert "did not receive every tuple" in failure.message
    assert "1 of 3 reported tuples acked" in failure.message
    assert sent_tuples(run) == []  # no partial result travels on


def test_more_tuples_than_reported_is_an_internal_error() -> None:
    topology = chain()
    bolt0 = topology.component_task_ids["bolt0"]
    run = TaskRun(topology, "bolt1", 0, job_ids=(1,))
    run.run(
        [
            data("bolt0", bolt0[0], 1, 0),
            data("bolt0", bolt0[0], 1, 1),
            report("bolt0", bolt0[0], {1: 1}),
        ]
    )
    assert run.failures[1].type is DRPCExceptionType.INTERNAL_ERROR
    assert "received 2 tuples" in run.failures[1].message


def test_a_failure_from_upstream_drops_the_id_and_travels_on_once() -> None:
    topology = chain()
    bolt0 = topology.component_task_ids["bolt0"]
    boom = Failure(DRPCExceptionType.FAILED_REQUEST, "Request failed: boom")
    forwarders = []
    for index in range(3):
        if TaskRun(topology, "bolt1", index, job_ids=()).run([failure_notice(5, boom)]).outputs:
            forwarders.append(index)
    assert len(forwarders) == 1  # exactly one task of the component forwards it
    designated = forwarders
    run = TaskRun(topology, "bolt1", designated[0], job_ids=(5,))
    run.run(
        [data("bolt0", bolt0[0], 5, 0), failure_notice(5, boom), report("bolt0", bolt0[0], {5: 1})]
    )
    assert run.failures == {5: boom}
    fails = sent_failures(run)
    assert sorted(task for task, _ in fails) == topology.component_task_ids["bolt2"]
    assert all(notice == FailureNotice(5, boom) for _, notice in fails)
    assert sent_tuples(run) == []


def one_step(bolt: Any, conf: dict[str, Any] | None = None) -> Topology:
    builder = LinearDRPCTopologyBuilder("one-step")
    builder.add_bolt(bolt)
    return builder.create_topology(conf)


def request(topology: Topology, id: int, args: str) -> tuple[Any, ...]:
    return data("prepare-request", topology.component_task_ids["prepare-request"][0], id, args)


def test_a_rich_bolt_that_leaves_inputs_unacked_fails_the_id_at_the_message_timeout() -> None:
    topology = one_step(bolts.RichForgetsToAck(), {"topology.message.timeout.secs": 0.2})
    run = TaskRun(topology, "bolt0", 0, job_ids=(1,))
    run.run([request(topology, 1, "x")])
    failure = run.failures[1]
    assert failure.type is DRPCExceptionType.FAILED_REQUEST
    assert "left 1 of its 1 input tuples unacked within 0.2 s" in failure.message


def test_acks_from_the_bolts_own_thread_finish_the_id_before_the_task_ends() -> None:
    topology = one_step(bolts.AckFromAThread(("id", "result"), seconds=0.1))
    run = TaskRun(topology, "bolt0", 0, job_ids=(1, 2))
    run.run([request(topology, 1, "a"), request(topology, 2, "b")])
    assert run.failures == {}
    join = topology.component_task_ids["join-result"][0]
    sent = sorted(values for task, values in sent_tuples(run) if task == join)
    assert sent == [[1, "a"], [2, "b"]]


def test_calls_after_the_task_ended_are_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    topology = one_step(bolts.AckFromAThread(("id", "result"), seconds=0.5))
    run = TaskRun(topology, "bolt0", 0, job_ids=(1,), deadline=0.0)  # no wait at all
    run.run([request(topology, 1, "a")])
    assert "unacked" in run.failures[1].message
    outputs = {task: repr(shipment) for task, shipment in run.shipments().items()}
    with caplog.at_level(logging.WARNING, logger="drpc.executors.batch"):
        deadline = time.monotonic() + 10
        while len(caplog.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # the timer thread emits, then acks
    assert [r.getMessage() for r in caplog.records] == [
        "step 'bolt0' task 1 emitted a tuple after its batch ended (past its deadline); ignored",
        "step 'bolt0' task 1 acked a tuple after its batch ended (past its deadline); ignored",
    ]
    assert {task: repr(shipment) for task, shipment in run.shipments().items()} == outputs


def test_an_unpicklable_value_fails_only_its_id() -> None:
    builder = LinearDRPCTopologyBuilder("locks")
    builder.add_bolt(bolts.EmitN(), 1)
    builder.add_bolt(bolts.Identity(), 1).shuffle_grouping()
    builder.add_bolt(bolts.CountPerRequest()).fields_grouping(Fields("id"))
    topology = builder.create_topology()
    bolt0 = topology.component_task_ids["bolt0"][0]
    run = TaskRun(topology, "bolt1", 0, job_ids=(1, 2))
    lock = threading.Lock()
    run.run(
        [
            data("bolt0", bolt0, 1, 0),
            data("bolt0", bolt0, 2, lock),
            report("bolt0", bolt0, {1: 1, 2: 1}),
        ]
    )
    blobs = run.blobs()
    assert set(run.failures) == {2}
    assert "cannot be pickled" in run.failures[2].message and "bolt1" in run.failures[2].message
    shipped = [shipment for _, blob in blobs for shipment in pickle.loads(blob)]
    assert [values for s in shipped for _, values in s.emitted()] == [[1, 0]]
    assert any(notice.id == 2 for s in shipped for notice in s.failures)


def test_a_bolt_whose_prepare_raises_fails_every_id_it_would_handle() -> None:
    class Broken(bolts.CountPerRequest):
        def prepare(self, *args: Any) -> None:
            raise RuntimeError("no database")

    builder = LinearDRPCTopologyBuilder("broken")
    builder.add_bolt(bolts.EmitN())
    builder.add_bolt(Broken(), 2).shuffle_grouping()
    builder.add_bolt(bolts.SumField()).fields_grouping(Fields("id"))
    topology = builder.create_topology()
    bolt0 = topology.component_task_ids["bolt0"][0]
    run = TaskRun(topology, "bolt1", 0, job_ids=(1, 2))
    run.run([data("bolt0", bolt0, 1, 0), report("bolt0", bolt0, {1: 1, 2: 0})])
    assert set(run.failures) == {1, 2}
    assert "prepare" in run.failures[1].message and "no database" in run.failures[1].message


def test_implied_zero_reports_let_every_task_finish_every_id() -> None:
    builder = LinearDRPCTopologyBuilder("fused")
    builder.add_bolt(bolts.EmitN(), 3)
    builder.add_bolt(bolts.CountPerRequest(), 3).local_or_shuffle_grouping()
    builder.add_bolt(bolts.SumField()).global_grouping()
    topology = builder.create_topology()
    bolt0 = topology.component_task_ids["bolt0"]
    # bolt0 task 1 had request 7 and sent 2 tuples to bolt1 task 1; request 8 went elsewhere.
    run = TaskRun(
        topology,
        "bolt1",
        1,
        job_ids=(7, 8),
        hints=TaskHints(implied_sources=(("bolt0", 1),), omit_zero_reports=True),
    )
    run.run(
        [
            data("bolt0", bolt0[1], 7, 0),
            data("bolt0", bolt0[1], 7, 1),
            report("bolt0", bolt0[1], {7: 2}),
        ]
    )
    assert run.failures == {}
    assert sorted(values for _, values in sent_tuples(run)) == [[7, 2], [8, 0]]
    # Only the non-zero count travels, to the one task that received the tuples.
    [shipped] = sent_reports(run).values()
    assert set(shipped.values()) == {1} and len(shipped) == 2


class LoggingCount(bolts.CountPerRequest):
    def execute(self, tuple: Any) -> None:
        super().execute(tuple)
        logging.getLogger("tests.batch").info("execute %s", tuple[1])

    def finish_batch(self) -> None:
        logging.getLogger("tests.batch").info("finish %s", self.id)
        super().finish_batch()


def test_a_task_logs_with_the_fields_of_the_id_it_handles(
    caplog: pytest.LogCaptureFixture,
) -> None:
    builder = LinearDRPCTopologyBuilder("chain")
    builder.add_bolt(bolts.EmitN(), 2)
    builder.add_bolt(LoggingCount(), 1).shuffle_grouping()
    builder.add_bolt(bolts.SumField(), 2).fields_grouping(Fields("id"))
    topology = builder.create_topology()
    bolt0 = topology.component_task_ids["bolt0"]
    fields = {1: {"request_id": "7", "function": "chain"}, 2: {"request_id": "8"}}
    caplog.handler.addFilter(ContextFilter())
    with caplog.at_level(logging.INFO, logger="tests.batch"):
        logging.getLogger("tests.batch").info("before")
        run = TaskRun(topology, "bolt1", 0, job_ids=(1, 2, 3), log_fields=fields).run(
            [
                data("bolt0", bolt0[0], 1, "a"),
                data("bolt0", bolt0[1], 2, "b"),
                data("bolt0", bolt0[0], 1, "c"),
                report("bolt0", bolt0[0], {1: 2, 3: 0}),
                report("bolt0", bolt0[1], {2: 1}),
            ]
        )
        logging.getLogger("tests.batch").info("after")
    assert run.failures == {}
    seen = [
        (r.getMessage(), getattr(r, "request_id", None), getattr(r, "function", None))
        for r in caplog.records
        if r.name == "tests.batch"
    ]
    # Every line of an id carries its fields, finish_batch's included; id 3 has none, and
    # nothing leaks to lines logged before or after the task ran (or to the next id).
    assert seen == [
        ("before", None, None),
        ("execute a", "7", "chain"),
        ("execute b", "8", None),
        ("execute c", "7", "chain"),
        ("finish 1", "7", "chain"),  # ids finish in the order their reports arrive
        ("finish 3", None, None),
        ("finish 2", "8", None),
        ("after", None, None),
    ]


executed: list[tuple[Any, Any]] = []


class EchoUntilBad(bolts.CountPerRequest):
    """Emits each tuple as it executes it; raises on the value "bad"."""

    def execute(self, tuple: Any) -> None:
        if tuple[1] == "bad":
            raise ValueError("cannot count 'bad'")
        executed.append((self.id, tuple[1]))
        self.count += 1
        self.collector.emit([self.id, tuple[1]])


def echo_chain() -> Topology:
    builder = LinearDRPCTopologyBuilder("echo")
    builder.add_bolt(bolts.EmitN(), 1)
    builder.add_bolt(EchoUntilBad(), 1).shuffle_grouping()
    builder.add_bolt(bolts.SumField(), 2).fields_grouping(Fields("id"))
    return builder.create_topology()


def test_a_batch_bolt_runs_of_one_id_are_executed_acked_and_counted_in_order() -> None:
    executed.clear()
    topology = echo_chain()
    bolt0 = topology.component_task_ids["bolt0"][0]
    run = TaskRun(topology, "bolt1", 0, job_ids=(1, 2))
    tuples = [(1, "a"), (1, "b"), (2, "c"), (1, "d"), (2, "e"), (2, "f")]
    run.run([*(data("bolt0", bolt0, *t) for t in tuples), report("bolt0", bolt0, {1: 3, 2: 3})])
    assert run.failures == {}
    assert executed == tuples  # arrival order, across ids too
    sent = sent_tuples(run)
    reports = sent_reports(run)
    for id, last in ((1, 3), (2, 3)):
        per_task = {task: sum(1 for t, v in sent if t == task and v[0] == id) for task in reports}
        assert {task: counts[id] for task, counts in reports.items()} == per_task
        assert sum(per_task.values()) == last + 1  # the echoes and finish_batch's count


def test_a_batch_bolt_that_raises_fails_its_id_and_executes_nothing_after() -> None:
    executed.clear()
    topology = echo_chain()
    bolt0 = topology.component_task_ids["bolt0"][0]
    run = TaskRun(topology, "bolt1", 0, job_ids=(1, 2))
    tuples = [(1, "a"), (1, "bad"), (1, "c"), (2, "d"), (1, "e")]
    run.run([*(data("bolt0", bolt0, *t) for t in tuples), report("bolt0", bolt0, {1: 4, 2: 1})])
    assert executed == [(1, "a"), (2, "d")]
    assert set(run.failures) == {1}
    failure = run.failures[1]
    assert failure.type is DRPCExceptionType.FAILED_REQUEST
    assert "cannot count 'bad'" in failure.message and "bolt1" in failure.message
    assert [v for _, v in sent_tuples(run) if v[0] == 2] == [[2, "d"], [2, 1]]


def test_a_shipment_keeps_emit_order_in_runs_and_pickles_them_as_they_were() -> None:
    shipment = Shipment("bolt0", 4)
    shipment.add("a", [1, "x"])
    append_a = shipment.appender("a")
    append_a([1, "y"])  # the same run
    shipment.add("b", [1])
    shipment.add("a", [2, "z"])  # a new run: emit order across streams is kept
    shipment.appender("c")([])  # no values: stays a row, not a column
    shipment.add("c", [])
    shipment.add("d", [1, "w"])
    shipment.add("d", [1, "v", "extra"])  # widths differ: pickled as rows
    shipment.reports[1] = 7
    assert [stream for stream, _ in shipment.runs] == ["a", "b", "a", "c", "d"]
    assert list(shipment.emitted())[:4] == [
        ("a", [1, "x"]),
        ("a", [1, "y"]),
        ("b", [1]),
        ("a", [2, "z"]),
    ]
    assert shipment.count() == 8
    copy = pickle.loads(pickle.dumps([shipment], protocol=pickle.HIGHEST_PROTOCOL))[0]
    assert copy == shipment
    assert all(type(values) is list for _, values in copy.emitted())
    # A run of one id pickles the id once, then a reference to it per emit.
    one_id = Shipment("bolt0", 4, [("a", [[("request", 12), f"w{n}"] for n in range(1000)])])
    rows = Shipment(
        "bolt0", 4, [("a", [[("request", 12), f"w{n}", n] for n in range(999)] + [[1]])]
    )
    assert len(pickle.dumps(one_id)) < len(pickle.dumps(rows)) * 0.75


class EmitMany(bolts.CountPerRequest):
    """finish_batch emits its rows with one emit_many call; a 3-value row is malformed."""

    def finish_batch(self) -> None:
        rows: list[Any] = [[self.id, n] for n in range(self.count)]
        if self.id == 2:
            rows.insert(1, [self.id, 0, "extra"])
        self.collector.emit_many(rows)


def test_emit_many_routes_and_counts_like_emit_and_a_bad_row_fails_only_its_id() -> None:
    builder = LinearDRPCTopologyBuilder("many")
    builder.add_bolt(bolts.EmitN(), 1)
    builder.add_bolt(EmitMany(), 1).shuffle_grouping()
    builder.add_bolt(bolts.SumField(), 2).fields_grouping(Fields("id"))
    topology = builder.create_topology()
    bolt0 = topology.component_task_ids["bolt0"][0]
    run = TaskRun(topology, "bolt1", 0, job_ids=(1, 2))
    rows = [(1, "a"), (1, "b"), (1, "c"), (2, "d"), (2, "e")]
    run.run([*(data("bolt0", bolt0, *r) for r in rows), report("bolt0", bolt0, {1: 3, 2: 2})])
    assert set(run.failures) == {2}
    assert "emitted 3 values" in run.failures[2].message
    sent = sent_tuples(run)
    assert sorted(v for _, v in sent if v[0] == 1) == [[1, 0], [1, 1], [1, 2]]
    reports = sent_reports(run)
    assert {task: counts[1] for task, counts in reports.items()} == {
        task: sum(1 for t, v in sent if t == task and v[0] == 1) for task in reports
    }


class _Broadcast:
    def __init__(self, value: bytes) -> None:
        self.value = value


def test_a_spark_stage_frees_what_its_task_sent_without_the_cycle_collector() -> None:
    # A Python worker runs a full gc.collect() after every task: a task's output left to
    # the cycle collector (a run and its core refer to each other) costs a walk over
    # every tuple it sent, on every task.
    topology = chain()
    plan = compile_plan(topology)
    [stage] = [s for s in plan.stages if s.head == "bolt0"]
    token = "a-stage-frees-its-output"
    stages._topologies[token] = topology  # already loaded: nothing is frozen in this process
    prepare = topology.component_task_ids["prepare-request"][0]
    blob = pickle.dumps([data("prepare-request", prepare, 1, 20_000)])
    settle_garbage()
    gc.disable()
    try:
        output = list(
            stages._run_stage(
                0,
                [(0, blob)],
                token=token,
                broadcast=_Broadcast(b""),
                stage=stage,
                hints=plan.hints,
                job=JobSpec(ids=(1,), conf={}),
            )
        )
        sent = sum(shipment.count() for *_, b in output for shipment in pickle.loads(b))
        del output
        left_to_the_collector = gc.collect()
    finally:
        gc.enable()
        del stages._topologies[token]
    assert sent == 20_000
    assert left_to_the_collector < 1_000, left_to_the_collector
