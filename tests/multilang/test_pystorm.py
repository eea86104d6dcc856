"""Bolts written with pystorm (from PyPI, an adapter no one here wrote) run unchanged as
DRPC steps through ``ShellBolt``, on every executor, and in a plain topology."""

from __future__ import annotations

import pytest

from drpc import (
    DRPCExceptionType,
    DRPCExecutionException,
    Fields,
    LinearDRPCTopologyBuilder,
)
from drpc.config import TOPOLOGY_TICK_TUPLE_FREQ_SECS
from drpc.inprocess import InProcessBolt
from drpc.model.streams import StreamInfo
from drpc.testing import LocalDRPC
from tests.multilang.bolts import PystormBolt
from tests.topologies.bolts import CountPerRequest

pytestmark = pytest.mark.timeout(90)


def test_a_pystorm_bolt_is_a_drpc_step(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("exclaim")
    builder.add_bolt(PystormBolt("exclaim"), 2)
    drpc.register(builder)
    assert drpc.execute("exclaim", "hello") == "hello!"
    futures = [drpc.submit("exclaim", f"call{i}") for i in range(20)]
    assert [f.result(timeout=30) for f in futures] == [f"call{i}!" for i in range(20)]
    with pytest.raises(DRPCExecutionException) as failed:
        drpc.execute("exclaim", "fail")
    assert failed.value.type is DRPCExceptionType.FAILED_REQUEST
    assert "pystorm bolt refuses 'fail'" in failed.value.msg
    assert drpc.execute("exclaim", "after") == "after!"  # the subprocess serves on


def test_a_pystorm_bolts_emits_are_counted_by_the_next_coordinated_step(drpc: LocalDRPC) -> None:
    builder = LinearDRPCTopologyBuilder("count-words")
    builder.add_bolt(PystormBolt("words", ("id", "word")), 2)
    builder.add_bolt(CountPerRequest(), 2).fields_grouping(Fields("id"))
    drpc.register(builder)
    assert drpc.execute("count-words", "the cow jumped over the moon") == "6"
    assert drpc.execute("count-words", "") == "0"


def test_a_pystorm_batching_bolt_flushes_on_tick_tuples_as_a_drpc_step(
    plain_executor: str,
) -> None:
    """pystorm's BatchingBolt holds a request's tuples until the second tick tuple
    (``topology.tick.tuple.freq.secs``), then emits and acks them: the step finishes the
    request only once they are acked. On the executors whose tasks live between two
    ticks (a job per batch has none)."""
    builder = LinearDRPCTopologyBuilder("batched")
    builder.add_bolt(PystormBolt("batched", conf={TOPOLOGY_TICK_TUPLE_FREQ_SECS: 0.05}), 2)
    with LocalDRPC(executor=plain_executor, timeout=30.0) as drpc:
        drpc.register(builder)
        assert drpc.execute("batched", "hello") == "hello!"
        futures = [drpc.submit("batched", f"call{i}") for i in range(10)]
        assert [f.result(timeout=30) for f in futures] == [f"call{i}!" for i in range(10)]


def test_a_pystorm_bolt_runs_in_the_task_as_a_drpc_step(drpc: LocalDRPC) -> None:
    """The same bolt in-process (``drpc.inprocess``): its own pystorm code, no subprocess;
    its exception fails the call with the reported error and the bolt serves on."""
    builder = LinearDRPCTopologyBuilder("in-process")
    streams = {"default": StreamInfo(Fields("id", "result"))}
    builder.add_bolt(InProcessBolt("tests.multilang.pystorm_bolts.Exclaim", streams, None), 2)
    drpc.register(builder)
    assert drpc.execute("in-process", "hello") == "hello!"
    with pytest.raises(DRPCExecutionException) as failed:
        drpc.execute("in-process", "fail")
    assert failed.value.type is DRPCExceptionType.FAILED_REQUEST
    assert "ValueError: pystorm bolt refuses 'fail'" in failed.value.msg
    futures = [drpc.submit("in-process", f"call{i}") for i in range(20)]
    assert [f.result(timeout=30) for f in futures] == [f"call{i}!" for i in range(20)]
