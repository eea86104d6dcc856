"""ShellBolt end to end: real subprocesses over real pipes, as DRPC steps on every executor."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from drpc import (
    BaseBasicBolt,
    BaseBatchBolt,
    BasicOutputCollector,
    BatchOutputCollector,
    CoordinatedDRPCTopologyBuilder,
    DRPCExceptionType,
    DRPCExecutionException,
    Failure,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputCollector,
    OutputFieldsDeclarer,
    TopologyContext,
    Tuple,
)
from drpc.errors import ShellHandshakeError
from drpc.examples.transactional_global_count import (
    DATA,
    GLOBAL_COUNT_MAP,
    PARTITION_TAKE_PER_BATCH,
    BatchCount,
    UpdateGlobalCount,
)
from drpc.multilang import ShellBolt
from drpc.state import StateEnvironment, TransactionalMap
from drpc.state.topology import STATE_DIR_CONF
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder, run
from tests.multilang.bolts import NODE, JsExclaim, PyExclaim
from tests.topologies.bolts import EmitN, Identity

FAST = {"heartbeat_interval": 0.2, "heartbeat_timeout": 1.0}


def serve(drpc: LocalDRPC, bolt: ShellBolt, parallelism: int = 2, name: str = "exclaim") -> None:
    builder = LinearDRPCTopologyBuilder(name)
    builder.add_bolt(bolt, parallelism)
    drpc.register(builder)


def failure_of(drpc: LocalDRPC, function: str, args: str) -> str:
    with pytest.raises(DRPCExecutionException) as caught:
        drpc.execute(function, args)
    assert caught.value.type is DRPCExceptionType.FAILED_REQUEST
    return caught.value.msg


@pytest.mark.timeout(60)
def test_a_shell_bolt_is_a_drpc_step(drpc: LocalDRPC) -> None:
    serve(drpc, PyExclaim())
    assert drpc.execute("exclaim", "hello") == "hello!"
    futures = [drpc.submit("exclaim", f"call{i}") for i in range(20)]
    assert [f.result(timeout=30) for f in futures] == [f"call{i}!" for i in range(20)]


@pytest.mark.timeout(60)
def test_crash_garbage_and_hang_fail_the_call_and_serving_goes_on(drpc: LocalDRPC) -> None:
    serve(drpc, PyExclaim(**FAST), parallelism=1)
    assert drpc.execute("exclaim", "before") == "before!"

    crashed = failure_of(drpc, "exclaim", "crash")
    assert "ShellProcessExitedError" in crashed and "pybolt.py" in crashed
    assert "exit status 3" in crashed and "about to crash on purpose" in crashed
    assert drpc.execute("exclaim", "after crash") == "after crash!"

    garbage = failure_of(drpc, "exclaim", "garbage")
    assert "ShellProtocolError" in garbage and "this is not json" in garbage
    assert drpc.execute("exclaim", "after garbage") == "after garbage!"

    started = time.monotonic()
    hung = failure_of(drpc, "exclaim", "hang")
    assert "ShellHeartbeatTimeoutError" in hung and "heartbeat_timeout=1 s" in hung
    assert "killed by signal 9" in hung
    assert time.monotonic() - started < 10
    assert drpc.execute("exclaim", "after hang") == "after hang!"


@pytest.mark.timeout(90)
def test_what_a_subprocess_wrote_before_it_exited_counts(drpc: LocalDRPC) -> None:
    """Its emit and ack, then its end: the task settles them in that order, so the tuple
    is acked, not failed by the exit; then a new subprocess serves."""
    for n in range(3):
        serve(drpc, PyExclaim(**FAST), parallelism=1, name=f"exits{n}")
        assert drpc.execute(f"exits{n}", "then-exit") == "then-exit!"
        assert served_after_a_restart(drpc, f"exits{n}", "after") == "after!"


def served_after_a_restart(drpc: LocalDRPC, function: str, args: str) -> str:
    """The call's answer once a restarted subprocess takes it: a call that races the exit
    fails with it, typed, as every tuple the exited subprocess had does."""
    for _ in range(100):
        try:
            return drpc.execute(function, args)
        except DRPCExecutionException as error:
            assert "ShellProcessExitedError" in error.msg, error.msg
            time.sleep(0.05)
    raise AssertionError(f"{function} was not served again")


@pytest.mark.timeout(30)
def test_a_slow_tuple_within_the_heartbeat_timeout_is_not_a_hang() -> None:
    with LocalDRPC(timeout=20) as drpc:
        serve(drpc, PyExclaim(heartbeat_interval=0.1, heartbeat_timeout=1.5), parallelism=1)
        assert drpc.execute("exclaim", "sleep:0.6") == "sleep:0.6!"
        # the same wait past a shorter timeout is one
        serve(drpc, PyExclaim(heartbeat_interval=0.1, heartbeat_timeout=0.3), 1, "short")
        assert "ShellHeartbeatTimeoutError" in failure_of(drpc, "short", "sleep:0.6")
        assert drpc.execute("short", "fine") == "fine!"


@pytest.mark.timeout(60)
@pytest.mark.skipif(NODE is None, reason="node is not on PATH")
def test_a_bolt_in_javascript(drpc: LocalDRPC) -> None:
    serve(drpc, JsExclaim())
    assert drpc.execute("exclaim", "node") == "node!"
    assert drpc.execute("exclaim", "again") == "again!"


@pytest.mark.timeout(30)
def test_failing_logging_and_errors_from_the_subprocess(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(1, logger="drpc.multilang")
    with LocalDRPC(timeout=20) as drpc:
        serve(drpc, PyExclaim(), parallelism=1, name="f")
        assert "the multilang subprocess failed it" in failure_of(drpc, "f", "fail")
        assert drpc.execute("f", "log") == "log!"
        assert drpc.execute("f", "error") == "error!"
    logged = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "drpc.multilang.bolt0" and r.getMessage().startswith(("level", "no level"))
    ]
    assert logged == [
        (5, "level 0"),
        (logging.DEBUG, "level 1"),
        (logging.INFO, "level 2"),
        (logging.WARNING, "level 3"),
        (logging.ERROR, "level 4"),
        (logging.INFO, "no level"),
    ]
    assert any(
        "Shell Process Exception: something went wrong" in r.getMessage() for r in caplog.records
    )


class Recording(OutputCollector):
    """A collector that records what the bolt did (the subprocess is real)."""

    def __init__(self) -> None:
        self.emitted: list[list[Any]] = []
        self.acked: list[Tuple] = []
        self.failed: list[tuple[Tuple, Any]] = []

    def emit(self, values: Any, anchors: Any = None, stream: str = "default") -> list[int]:
        self.emitted.append(list(values))
        return [7]

    def emit_direct(
        self, task: int, values: Any, anchors: Any = None, stream: str = "default"
    ) -> None:
        self.emitted.append([task, *values])

    def ack(self, tuple: Tuple) -> None:
        self.acked.append(tuple)

    def fail(self, tuple: Tuple, reason: Failure | BaseException | str | None = None) -> None:
        self.failed.append((tuple, reason))

    def report_error(self, error: BaseException) -> None:
        pass


class RecordingTurns(Recording):
    """A ``Recording`` whose task runs turns only when the test says (``run_turns``)."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[Any] = []

    def call_in_turn(self, run: Any) -> None:
        self.turns.append(run)

    def run_turns(self) -> None:
        while self.turns:
            self.turns.pop(0)()


def prepared(
    bolt: ShellBolt, collector: Recording | None = None
) -> tuple[TopologyContext, Recording]:
    builder = LinearDRPCTopologyBuilder("f")
    builder.add_bolt(bolt)
    topology = builder.create_topology()
    context = TopologyContext(topology, "bolt0", topology.component_task_ids["bolt0"][0])
    collector = collector if collector is not None else Recording()
    bolt.prepare({}, context, collector)
    return context, collector


@pytest.mark.timeout(30)
def test_the_task_s_turns_settle_the_output_then_the_end_that_followed_it() -> None:
    """Once started, what the subprocess writes is settled on the task's turns only, in
    order: the ack it wrote before exiting counts, and the exit fails nothing."""
    bolt = PyExclaim(heartbeat_interval=0.2, heartbeat_timeout=30.0)
    turns = RecordingTurns()
    prepared(bolt, turns)
    try:
        tuple = Tuple([1, "then-exit"], Fields("request", "args"), "prepare-request", "default", 2)
        bolt.execute(tuple)
        wait_for(lambda: len(turns.turns) == 1)  # its emit, waiting for the task ids
        turns.run_turns()
        assert turns.emitted == [[1, "then-exit!"]]
        wait_for(lambda: len(turns.turns) == 2)  # its ack, then its end
        assert turns.acked == [] and turns.failed == []  # nothing settled outside a turn
        turns.run_turns()
        assert turns.acked == [tuple] and turns.failed == []
    finally:
        bolt.cleanup()


def wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.timeout(20)
def test_handshake_writes_the_pid_file_and_the_pid() -> None:
    bolt = PyExclaim()
    try:
        _, collector = prepared(bolt)
        shell = bolt._shell
        assert shell is not None and shell.process is not None
        assert bolt.pid == shell.process.pid
        assert os.listdir(shell.pid_dir) == [str(bolt.pid)]
        fields = bolt._shell.setup["context"]["stream->outputfields"]  # type: ignore[union-attr]
        assert fields["default"] == ["id", "result"]
        from drpc import Fields

        tuple = Tuple([1, "x"], Fields("request", "args"), "prepare-request", "default", 2)
        bolt.execute(tuple)
        wait_for(lambda: collector.acked)
        assert collector.emitted == [[1, "x!"]] and collector.acked == [tuple]
        direct = Tuple([1, "direct:9"], Fields("request", "args"), "prepare-request", "default", 2)
        bolt.execute(direct)
        wait_for(lambda: len(collector.acked) == 2)
        assert collector.emitted[-1] == [9, 1, "direct:9"]
        pid_dir = shell.pid_dir
    finally:
        bolt.cleanup()
    assert not os.path.exists(pid_dir)


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("options", "settings", "expected"),
    [
        (("--silent-start",), {"start_timeout": 0.5}, "did not answer the handshake within"),
        (("--exit-at-start",), {}, "exit status 2"),
        (("--pid-only-answer", "hello"), {}, "answered the handshake with 'hello'"),
    ],
)
def test_a_subprocess_that_does_not_answer_the_handshake_fails_prepare(
    options: tuple[str, ...], settings: dict[str, float], expected: str
) -> None:
    started = time.monotonic()
    bolt = PyExclaim(*options, **settings)
    with pytest.raises(ShellHandshakeError, match="handshake") as caught:
        prepared(bolt)
    assert expected in str(caught.value)
    assert time.monotonic() - started < 5
    if "--exit-at-start" in options:
        assert caught.value.exit_status == 2
        assert "cannot start: no configuration" in caught.value.stderr_tail


@pytest.mark.timeout(20)
def test_a_slow_handshake_within_the_start_timeout_is_fine() -> None:
    bolt = PyExclaim("--start-delay", "0.3", start_timeout=3.0)
    try:
        prepared(bolt)
        assert bolt.pid is not None
    finally:
        bolt.cleanup()


@pytest.mark.timeout(20)
def test_a_command_that_cannot_run_fails_prepare() -> None:
    class Missing(PyExclaim):
        def __init__(self) -> None:
            ShellBolt.__init__(self, os.path.join(os.path.dirname(__file__), "no-such-program"))

    with pytest.raises(ShellHandshakeError, match="could not be started"):
        prepared(Missing())


@pytest.mark.timeout(20)
def test_metrics_reach_update_metric() -> None:
    seen: list[tuple[str, Any]] = []

    class Counting(PyExclaim):
        def update_metric(self, name: str, params: Any) -> None:
            seen.append((name, params))

    bolt = Counting()
    try:
        _, collector = prepared(bolt)
        from drpc import Fields

        bolt.execute(Tuple([1, "metrics"], Fields("request", "args"), "p", "default", 2))
        wait_for(lambda: collector.acked)
    finally:
        bolt.cleanup()
    assert seen == [("calls", 1)]


def test_a_shell_bolt_needs_a_command() -> None:
    with pytest.raises(ValueError):
        ShellBolt()
    assert ShellBolt(sys.executable, "x.py").command == (sys.executable, "x.py")


@pytest.mark.timeout(60)
def test_a_restart_keeps_serving_concurrent_callers() -> None:
    with LocalDRPC(timeout=20) as drpc:
        serve(drpc, PyExclaim(**FAST), parallelism=2)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            good = [pool.submit(drpc.execute, "exclaim", f"x{i}") for i in range(10)]
            assert "ShellProcessExitedError" in failure_of(drpc, "exclaim", "crash")
            more = [pool.submit(drpc.execute, "exclaim", f"y{i}") for i in range(10)]
            assert [f.result(timeout=20) for f in more] == [f"y{i}!" for i in range(10)]
        # calls that shared the crashed subprocess may fail with it; the rest answer
        for i, future in enumerate(good):
            try:
                assert future.result(timeout=20) == f"x{i}!"
            except DRPCExecutionException as error:
                assert "ShellProcessExitedError" in error.msg


class IdKind(BaseBasicBolt):
    """[id, text] -> [id, the kind of id this step received]."""

    def execute(self, tuple: Any, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], type(tuple[0]).__name__])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "kind"))


@pytest.mark.timeout(60)
def test_a_step_after_a_shell_bolt_keeps_the_request_s_pinned_reads(
    drpc: LocalDRPC, tmp_path: Any
) -> None:
    """JSON carries the request id as a plain int; the step after the subprocess must still
    get the engine's ``PinnedRequest``, whose reads pin the state version the call reads."""
    state = StateEnvironment.open(str(tmp_path / "state"))
    builder = LinearDRPCTopologyBuilder("kind")
    builder.add_bolt(PyExclaim(), 1)
    builder.add_bolt(IdKind(), 1).shuffle_grouping()
    drpc.register(builder.create_topology({STATE_DIR_CONF: state.path}))
    assert drpc.execute("kind", "hello") == "PinnedRequest"


class Gather(BaseBatchBolt):
    """Answers every value it received for the request, sorted and comma-joined."""

    def prepare(
        self, conf: Any, context: TopologyContext, collector: BatchOutputCollector, id: Any
    ) -> None:
        self.collector, self.id, self.values = collector, id, []

    def execute(self, tuple: Tuple) -> None:
        self.values.append(str(tuple[1]))

    def finish_batch(self) -> None:
        self.collector.emit([self.id, ",".join(sorted(self.values))])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


@pytest.mark.timeout(60)
def test_a_shell_bolt_is_one_branch_of_a_dag_step(drpc: LocalDRPC) -> None:
    """A diamond: the request's n values go through a ShellBolt on one branch and a Python
    bolt on the other, and a batch bolt answers once both branches have reported."""
    builder = CoordinatedDRPCTopologyBuilder("shell-diamond")
    builder.set_bolt("split", EmitN(), 2)
    builder.set_bolt("shell", PyExclaim(), 2).shuffle_grouping("split")
    builder.set_bolt("python", Identity(), 2).shuffle_grouping("split")
    builder.set_bolt("gather", Gather(), 1).global_grouping("shell").global_grouping("python")
    drpc.register(builder.create_topology())
    assert drpc.execute("shell-diamond", "3") == "0,0!,1,1!,2,2!"
    assert drpc.execute("shell-diamond", "0") == ""  # nothing on either branch: answered


@pytest.mark.timeout(120)
def test_a_shell_bolt_in_a_transactional_topology_keeps_its_tuples_in_their_batch(
    tx_executor: str, tmp_path: Path
) -> None:
    """storm-starter's global count with a multilang step between the spout and the batch
    count: the attempt crosses as "txid:attempt_id" and comes back as the attempt, so
    every word is counted in its batch, exactly once."""
    spout = MemoryTransactionalSpout(DATA, Fields("word"), PARTITION_TAKE_PER_BATCH)
    builder = TransactionalTopologyBuilder("shell-count", "spout", spout, 3)
    builder.set_bolt("exclaim", PyExclaim(), 2).shuffle_grouping("spout")
    builder.set_bolt("partial-count", BatchCount(), 3).none_grouping("exclaim")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    state_dir = tmp_path / "state"
    result = run(builder, state_dir=str(state_dir), executor=tx_executor)
    assert [commit.txid for commit in result.commits] == [1, 2, 3, 4]
    env = StateEnvironment.open(str(state_dir))
    try:
        assert TransactionalMap(env, GLOBAL_COUNT_MAP).get("count") == 19
    finally:
        env.close()
