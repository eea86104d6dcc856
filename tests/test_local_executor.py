"""The in-process engine itself: spouts, acking, timeouts, isolation, cleanup."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from drpc import (
    BaseBasicBolt,
    BaseRichBolt,
    BaseRichSpout,
    BasicOutputCollector,
    DRPCExceptionType,
    DRPCExecutionException,
    FailedException,
    Fields,
    InvalidTopologyError,
    LinearDRPCTopologyBuilder,
    OutputCollector,
    OutputFieldsDeclarer,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from drpc.examples.reach import EXPECTED_REACH, build_reach
from drpc.examples.square import build_square
from drpc.executors.local import LocalExecutor
from drpc.executors.local.messages import Tick
from drpc.executors.local.tasks import BoltTask
from drpc.testing import LocalDRPC

from .topologies import bolts
from .waiting import SLACK, wait_until

EVENTS: dict[str, list[Any]] = {}
LOCK = threading.Lock()


def record(kind: str, value: Any) -> None:
    with LOCK:
        EVENTS.setdefault(kind, []).append(value)


class ListSpout(BaseRichSpout):
    """Emits each word once with itself as message id; records acks and fails."""

    def __init__(self, words: list[str]) -> None:
        self.words = list(words)

    def open(
        self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        if self.words:
            word = self.words.pop(0)
            self.collector.emit([word, [word]], msg_id=word)

    def ack(self, msg_id: Any) -> None:
        record("ack", msg_id)

    def fail(self, msg_id: Any) -> None:
        record("fail", msg_id)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("word", "box"))


class SplitAndMutate(BaseBasicBolt):
    """Fails words starting with 'x'; mutates the list it received (must not leak to peers)."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.task_id = context.this_task_id
        self.tasks = context.this_component_tasks

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        if tuple["word"].startswith("x"):
            raise FailedException("no x words")
        box = tuple["box"]
        record("box", (self.task_id, list(box)))
        box.append(self.task_id)
        for letter in tuple["word"]:
            collector.emit([letter])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("letter"))


class CountLetters(BaseRichBolt):
    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        record("letter", tuple["letter"])
        self.collector.ack(tuple)


@pytest.fixture(autouse=True)
def clear_events() -> None:
    EVENTS.clear()


def test_spout_tuples_are_acked_when_their_tree_completes_and_failed_otherwise() -> None:
    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout(["cat", "dog", "xray", "ox"]))
    builder.set_bolt("split", SplitAndMutate(), 2).all_grouping("words")
    builder.set_bolt("count", CountLetters(), 3).fields_grouping("split", Fields("letter"))
    with LocalExecutor(builder.create_topology("letters")) as executor:
        wait_until(lambda: len(EVENTS.get("ack", [])) + len(EVENTS.get("fail", [])) == 4)
        assert sorted(EVENTS["ack"]) == ["cat", "dog", "ox"]
        assert EVENTS["fail"] == ["xray"]
        assert sorted(EVENTS["letter"]) == sorted("catcatdogdogoxox")
        # Each of the two tasks got its own copy of the list: no mutation leaked across.
        assert all(box == [word] for _, box in EVENTS["box"] for word in [box[0]])
        wait_until(lambda: executor.pending_roots() == 0)


def test_nothing_is_left_tracked_after_many_mixed_requests() -> None:
    with LocalDRPC(timeout=30) as drpc:
        reach = drpc.register(build_reach())
        square = drpc.register(build_square())
        futures = []
        for n in range(300):
            futures.append(("reach", drpc.submit("reach", list(EXPECTED_REACH)[n % 4])))
            futures.append(("square", drpc.submit("square", str(n % 5) if n % 7 else "oops")))
        outcomes = [(name, future.exception(timeout=60)) for name, future in futures]
        assert sum(1 for _, error in outcomes if error is not None) == sum(
            1 for n in range(300) if n % 7 == 0
        )
        for runtime in (reach, square):
            wait_until(
                lambda runtime=runtime: (
                    runtime.pending_roots() == 0
                    and runtime.tracked_ids() == 0
                    and runtime.held_tuples() == 0
                    and runtime.open_batches() == 0
                )
            )
        assert drpc.outstanding() == 0


class RepliesFromItsOwnThreads(BaseRichBolt):
    """Emits and acks each input from a pool of threads of its own, racing the engine's
    turns for the task's lock."""

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="bolt-own")

    def execute(self, tuple: Tuple) -> None:
        self.pool.submit(self._reply, tuple)

    def _reply(self, tuple: Tuple) -> None:
        self.collector.emit([tuple[0], tuple[1].upper()], anchors=tuple)
        self.collector.ack(tuple)

    def cleanup(self) -> None:
        self.pool.shutdown()

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


def test_a_bolt_emitting_and_acking_from_its_own_threads_under_load_answers_every_call() -> None:
    builder = LinearDRPCTopologyBuilder("shout")
    builder.add_bolt(RepliesFromItsOwnThreads(), 2)
    builder.add_bolt(bolts.Identity(), 2).shuffle_grouping()
    with LocalDRPC(timeout=30) as drpc:
        runtime = drpc.register(builder)
        futures = [(word, drpc.submit("shout", word)) for word in (f"w{n}" for n in range(400))]
        assert [future.result(timeout=60) for _, future in futures] == [
            word.upper() for word, _ in futures
        ]
        wait_until(lambda: runtime.pending_roots() == 0 and runtime.tracked_ids() == 0)
        assert drpc.outstanding() == 0


class BrokenPrepareBolt(bolts.Identity):
    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        raise RuntimeError("no database")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


def test_a_bolt_whose_prepare_raises_fails_registration_naming_it() -> None:
    builder = LinearDRPCTopologyBuilder("broken")
    builder.add_bolt(BrokenPrepareBolt())
    with LocalDRPC() as drpc, pytest.raises(InvalidTopologyError, match="no database") as caught:
        drpc.register(builder)
    assert caught.value.component == "bolt0"
    assert drpc.functions == []


def test_an_unpicklable_bolt_is_refused_at_registration() -> None:
    bolt = bolts.FailOn("x")
    bolt.lock = threading.Lock()  # type: ignore[attr-defined]
    builder = LinearDRPCTopologyBuilder("locked")
    builder.add_bolt(bolt)
    with (
        LocalDRPC() as drpc,
        pytest.raises(InvalidTopologyError, match="cannot be pickled") as caught,
    ):
        drpc.register(builder)
    assert caught.value.component == "bolt0"


def test_registering_a_function_twice_is_refused() -> None:
    with LocalDRPC() as drpc:
        drpc.register(build_square())
        with pytest.raises(Exception, match="already registered"):
            drpc.register(build_square())


def test_arguments_must_be_strings() -> None:
    with LocalDRPC() as drpc:
        drpc.register(build_square())
        with pytest.raises(TypeError, match="strings"):
            drpc.execute("square", 3)  # type: ignore[arg-type]


def test_executor_options_are_checked() -> None:
    topology = build_square().create_topology()
    with pytest.raises(ValueError, match="threads"):
        LocalExecutor(topology, threads=0)
    with pytest.raises(ValueError, match="max_idle_wait"):
        LocalExecutor(topology, max_idle_wait=0.0)
    with pytest.raises(ValueError, match=r"message\.timeout"):
        LocalExecutor(topology, conf={"topology.message.timeout.secs": -1})


def _only_waits_upstream(task: BoltTask) -> bool:
    ids = list(task.roots_of_id)
    assert task.tracker is not None
    status = task.tracker.status(ids[0]) if ids else None
    return status is not None and status.waits_upstream


class _OtherShare:
    """Where the tasks a share does not host run: another engine in this process (the
    resident executor puts it in another process; the stuck-step rule is the same)."""

    def __init__(self) -> None:
        self.engine: LocalExecutor | None = None

    def deliver(self, task_id: int, message: Any) -> None:
        assert self.engine is not None
        self.engine.post(self.engine.tasks[task_id], message)

    def to_acker(self, root: int, message: Any) -> None:
        assert self.engine is not None
        self.engine.to_acker(root, message)

    def broadcast_abandon(self, root: int) -> None:
        assert self.engine is not None
        self.engine.abandon_local(root)


def test_a_step_that_times_out_waiting_for_a_step_in_another_share_names_that_step() -> None:
    builder = LinearDRPCTopologyBuilder("forgetful")
    builder.add_bolt(bolts.RichForgetsToAck())
    # Long enough that the acker never times the tree out here: the step waiting for
    # bolt0's count report reaches its own deadline first (a race on a busy machine).
    topology = builder.create_topology({"topology.message.timeout.secs": 30})
    (forgetful,) = topology.component_task_ids["bolt0"]
    to_worker, to_driver = _OtherShare(), _OtherShare()
    worker = LocalExecutor(topology, hosted={forgetful}, remote=to_driver, ackers=False)
    to_worker.engine = worker
    every_task = {task for tasks in topology.component_task_ids.values() for task in tasks}
    with worker, LocalDRPC(hosted=every_task - {forgetful}, remote=to_worker) as drpc:
        driver = drpc.register(topology)
        to_driver.engine = driver
        future = drpc.submit("forgetful", "x")
        (join,) = [task for task in driver.coordinated_tasks if task.component_id == "join-result"]
        wait_until(lambda: _only_waits_upstream(join))
        driver.post(join, Tick(time.monotonic() + 31))
        error = future.exception(timeout=SLACK)
    assert isinstance(error, DRPCExecutionException)
    assert error.type is DRPCExceptionType.FAILED_REQUEST
    assert "stuck in step 'bolt0'" in error.msg, error.msg


class IdleSpout(BaseRichSpout):
    """Never emits; records when it is polled. With ``declares`` it promises wakeups."""

    def __init__(self, declares: bool) -> None:
        self.declares = declares

    def open(
        self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        if self.declares:
            context.declare_wakeups()

    def next_tuple(self) -> None:
        record(f"poll-{self.declares}", time.monotonic())

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("word"))


@pytest.mark.parametrize("declares", [False, True])
def test_an_idle_spout_backs_off_from_1_ms_unless_it_declared_its_wakeups(declares: bool) -> None:
    builder = TopologyBuilder()
    builder.set_spout("idle", IdleSpout(declares))
    builder.set_bolt("count", CountLetters()).shuffle_grouping("idle")
    with LocalExecutor(builder.create_topology("idle"), max_idle_wait=0.25):
        wait_until(lambda: len(EVENTS.get(f"poll-{declares}", [])) >= 3, timeout=5.0)
    polls = EVENTS[f"poll-{declares}"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(polls)]
    if declares:  # a safety net only: every pause is the longest
        assert min(gaps) >= 0.25 * 0.9
    else:  # Storm's wait strategy: 1 ms, then doubling
        assert gaps[0] < 0.1


def test_a_short_deadline_submitted_behind_a_long_one_still_expires_on_time() -> None:
    builder = LinearDRPCTopologyBuilder("slow")
    builder.add_bolt(bolts.SleepThenEcho())
    with LocalDRPC() as drpc:
        drpc.register(builder)
        long_one = drpc.submit("slow", "1", timeout=60)
        time.sleep(0.1)  # the expirer now sleeps until the long deadline
        started = time.monotonic()
        with pytest.raises(DRPCExecutionException) as short:
            drpc.submit("slow", "1", timeout=0.3).result(timeout=30)
        assert short.value.type is DRPCExceptionType.SERVER_TIMEOUT
        assert time.monotonic() - started < 0.3 + SLACK
        assert long_one.result(timeout=30) == "slept"
