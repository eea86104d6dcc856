"""DRPC topologies end to end, on every executor (see the ``drpc`` fixture)."""

from __future__ import annotations

import contextlib
import time

import pytest

from drpc import DRPCExceptionType, DRPCExecutionException, Fields, LinearDRPCTopologyBuilder
from drpc.examples.exclamation import build_exclamation
from drpc.examples.reach import EXPECTED_REACH, build_reach
from drpc.examples.square import build_square
from drpc.testing import LocalDRPC
from tests.waiting import SLACK

from . import bolts


def failure_of(
    drpc: LocalDRPC, function: str, args: str, **kwargs: float
) -> DRPCExecutionException:
    with pytest.raises(DRPCExecutionException) as caught:
        drpc.execute(function, args, **kwargs)
    return caught.value


def test_reach_reference_answers(drpc: LocalDRPC) -> None:
    drpc.register(build_reach())
    for url, reach in EXPECTED_REACH.items():
        assert drpc.execute("reach", url) == reach


def test_200_concurrent_reach_requests_all_answer_correctly(drpc: LocalDRPC) -> None:
    drpc.register(build_reach())
    urls = list(EXPECTED_REACH) * 50
    futures = [drpc.submit("reach", url) for url in urls]
    answers = [future.result(timeout=60) for future in futures]
    assert answers == [EXPECTED_REACH[url] for url in urls]


def test_exclamation(drpc: LocalDRPC) -> None:
    drpc.register(build_exclamation())
    assert drpc.execute("exclamation", "hello") == "hello!"


@pytest.mark.parametrize(("n", "square"), [("2", "4"), ("10", "100"), ("1", "1"), ("0", "0")])
def test_square_by_coordination(drpc: LocalDRPC, n: str, square: str) -> None:
    drpc.register(build_square())
    assert drpc.execute("square", n) == square


def test_chain_of_identity_steps_then_a_finishing_step(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("chain")
    builder.add_bolt(bolts.EmitN(), 2)
    builder.add_bolt(bolts.Identity(), 3).shuffle_grouping()
    builder.add_bolt(bolts.Identity(), 4).fields_grouping(Fields("i"))
    builder.add_bolt(bolts.DoneWhenAllArrived(), 2).fields_grouping(Fields("id"))
    drpc.register(builder)
    for n in ("2", "3", "4"):
        assert drpc.execute("chain", n) == "done"


def test_a_failing_finish_batch_fails_the_request(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("incomplete")
    builder.add_bolt(bolts.EmitN(), 2)
    builder.add_bolt(bolts.FailInFinish(), 3).shuffle_grouping()
    builder.add_bolt(bolts.CountPerRequest()).fields_grouping(Fields("id"))
    drpc.register(builder)
    error = failure_of(drpc, "incomplete", "3")
    assert error.type is DRPCExceptionType.FAILED_REQUEST
    assert "bolt1" in error.msg and "the batch is incomplete" in error.msg
    assert "finish_batch" in error.msg


def test_one_failing_request_among_50_concurrent_ones(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("picky")
    builder.add_bolt(bolts.FailOn("bad"), 3)
    drpc.register(builder)
    args = [f"arg{i}" for i in range(49)]
    args.insert(17, "bad")
    futures = [drpc.submit("picky", arg) for arg in args]
    for arg, future in zip(args, futures, strict=True):
        if arg == "bad":
            error = future.exception(timeout=30)
            assert isinstance(error, DRPCExecutionException)
            assert error.type is DRPCExceptionType.FAILED_REQUEST
            assert (
                "bolt0" in error.msg
                and "ValueError" in error.msg
                and "cannot handle 'bad'" in error.msg
            )
        else:
            assert future.result(timeout=30) == arg + "!"


def test_a_request_past_its_deadline_times_out_and_the_next_one_succeeds(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("slow")
    builder.add_bolt(bolts.SleepThenEcho())
    drpc.register(builder)
    started = time.monotonic()
    error = failure_of(drpc, "slow", "6", timeout=0.5)
    assert error.type is DRPCExceptionType.SERVER_TIMEOUT
    assert error.msg.startswith("Timed Out")
    assert time.monotonic() - started < 0.5 + SLACK  # at the deadline, not when the bolt is done
    assert drpc.execute("slow", "0") == "slept"


def test_a_tree_stuck_past_the_message_timeout_fails_as_storm_fails_it_naming_the_step(
    drpc: LocalDRPC,
) -> None:
    builder = LinearDRPCTopologyBuilder("stuck")
    builder.add_bolt(bolts.Identity(), 2)
    builder.add_bolt(bolts.SleepThenEcho(), 2).shuffle_grouping()
    # Per topology, as in Storm; the server's request timeout (30 s here) is not involved.
    drpc.register(builder.create_topology({"topology.message.timeout.secs": 2}))
    error = failure_of(drpc, "stuck", "3")
    assert error.type is DRPCExceptionType.FAILED_REQUEST
    assert error.msg.startswith(
        "Request failed: the tuple tree did not complete within 2 s "
        "(topology.message.timeout.secs); stuck in step 'bolt1'"
    )
    # Serving goes on: a call soon answers again (on a loaded machine, a Spark job that
    # must start a new Python worker after the cancelled one may itself take 2 s).
    answers = []
    deadline = time.monotonic() + 60
    while not answers and time.monotonic() < deadline:
        with contextlib.suppress(DRPCExecutionException):
            answers.append(drpc.execute("stuck", "0"))
    assert answers == ["slept"]


def test_a_rich_bolt_that_never_acks_fails_at_the_message_timeout_naming_it(
    drpc: LocalDRPC,
) -> None:
    builder = LinearDRPCTopologyBuilder("forgetful")
    builder.add_bolt(bolts.RichForgetsToAck())
    drpc.register(builder.create_topology({"topology.message.timeout.secs": 0.5}))
    error = failure_of(drpc, "forgetful", "x")
    assert error.type is DRPCExceptionType.FAILED_REQUEST
    assert (
        "step 'bolt0'" in error.msg and "within 0.5 s (topology.message.timeout.secs)" in error.msg
    )


def test_a_rich_bolt_acking_from_its_own_thread_gives_the_same_answer_everywhere(
    drpc: LocalDRPC,
) -> None:
    builder = LinearDRPCTopologyBuilder("async-acks")
    builder.add_bolt(bolts.EmitN(), 2)
    builder.add_bolt(bolts.AckFromAThread(), 3).shuffle_grouping()
    builder.add_bolt(bolts.CountPerRequest(), 2).fields_grouping(Fields("id"))
    drpc.register(builder)
    futures = {n: drpc.submit("async-acks", str(n)) for n in (0, 1, 7, 20)}
    assert {n: future.result(timeout=30) for n, future in futures.items()} == {
        0: "0",
        1: "1",
        7: "7",
        20: "20",
    }


def test_an_unregistered_function_fails_at_once_listing_the_registered_ones(
    drpc: LocalDRPC,
) -> None:
    drpc.register(build_exclamation())
    started = time.monotonic()
    error = failure_of(drpc, "reach", "foo.com/blog/1")
    assert time.monotonic() - started < SLACK  # at once, not at the 30 s deadline
    assert error.type is DRPCExceptionType.FAILED_REQUEST
    assert "'reach' is not registered" in error.msg and "exclamation" in error.msg


def test_an_unpicklable_value_fails_the_request_naming_the_cause(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("lambda")
    builder.add_bolt(bolts.EmitUnpicklable())
    drpc.register(builder)
    error = failure_of(drpc, "lambda", "x")
    assert error.type is DRPCExceptionType.FAILED_REQUEST
    assert "cannot be pickled" in error.msg and "bolt0" in error.msg


def test_an_emit_with_the_wrong_number_of_values_fails_the_request(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("arity")
    builder.add_bolt(bolts.EmitWrongArity())
    drpc.register(builder)
    error = failure_of(drpc, "arity", "x")
    assert error.type is DRPCExceptionType.FAILED_REQUEST
    assert "emitted 1 values" in error.msg and "['id', 'result']" in error.msg


def test_rich_bolt_acks_and_fails_explicitly(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("upper")
    builder.add_bolt(bolts.RichUpper(), 2)
    drpc.register(builder)
    assert drpc.execute("upper", "shout") == "SHOUT"
    error = failure_of(drpc, "upper", "!no")
    assert error.type is DRPCExceptionType.FAILED_REQUEST
    assert "arguments may not start with '!'" in error.msg


def test_the_first_of_several_results_is_returned(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("twice")
    builder.add_bolt(bolts.EmitTwice())
    drpc.register(builder)
    assert drpc.execute("twice", "x") == "first"


def test_a_chain_that_emits_no_result_fails_instead_of_timing_out(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("silent")
    builder.add_bolt(bolts.EmitNothing(), 2)
    drpc.register(builder)
    started = time.monotonic()
    error = failure_of(drpc, "silent", "x")
    assert time.monotonic() - started < SLACK  # at once, not at the 30 s deadline
    assert error.type is DRPCExceptionType.FAILED_REQUEST
    assert "emitted no result" in error.msg and "bolt0" in error.msg


def test_direct_grouping_reaches_the_addressed_tasks(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("direct")
    builder.add_bolt(bolts.DirectToEveryTask())
    builder.add_bolt(bolts.RecordTask(), 3).direct_grouping()
    builder.add_bolt(bolts.SumField()).global_grouping()
    drpc.register(builder)
    assert drpc.execute("direct", "x") == "3"


def test_all_and_global_groupings(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("groupings")
    builder.add_bolt(bolts.EmitN(), 2)
    builder.add_bolt(bolts.TaskIndexOf(), 3).all_grouping()
    builder.add_bolt(bolts.CollectSorted()).global_grouping()
    drpc.register(builder)
    # Two tuples, each delivered to all three tasks of the middle step.
    assert drpc.execute("groupings", "2") == "0,0,1,1,2,2"


def test_local_or_shuffle_keeps_the_task_index(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("local")
    builder.add_bolt(bolts.EmitN(), 3)
    builder.add_bolt(bolts.Identity(), 3).shuffle_grouping()
    builder.add_bolt(bolts.TaskIndexOf(), 3).local_or_shuffle_grouping()
    builder.add_bolt(bolts.CollectSorted()).global_grouping()
    drpc.register(builder)
    # EmitN runs on one task; the shuffle spreads 3 tuples round robin over 3 tasks; each
    # stays on its task index through local-or-shuffle.
    assert drpc.execute("local", "3") == "0,1,2"


def test_shutdown_fails_outstanding_requests_with_server_shutdown(executor: str) -> None:
    server = LocalDRPC(executor=executor, timeout=30)
    builder = LinearDRPCTopologyBuilder("slow")
    builder.add_bolt(bolts.SleepThenEcho())
    server.register(builder)
    future = server.submit("slow", "2")
    time.sleep(0.2)
    server.shutdown()
    error = future.exception(timeout=10)
    assert isinstance(error, DRPCExecutionException)
    assert error.type is DRPCExceptionType.SERVER_SHUTDOWN
    assert error.msg == "Server Shutting Down"
