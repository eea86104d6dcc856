"""The local engine's turns: what a turn sends leaves as it ends, grouped per destination
with each root's acks folded into one; a turn folds runs of count reports and of acks;
ready actors run first in first out, so a step fanning in takes its senders' messages in
one turn; a ready actor waits for an awake worker rather than waking a second one, unless
that worker's turn is blocked past the handoff; an idle spout's polls may be far apart
when it asks to be woken."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import Future

from drpc import (
    BaseBasicBolt,
    BasicOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    Tuple,
)
from drpc.errors import Failure
from drpc.examples.reach import build_reach
from drpc.examples.square import build_square
from drpc.executors.local.actors import Actor, ReadyQueue, Scheduler, Turns
from drpc.executors.local.messages import (
    Ack,
    AckFail,
    AckInit,
    Message,
    Outbox,
    ReportMessage,
    Tick,
    TupleMessage,
    fold_acks,
    fold_reports,
)
from drpc.executors.local.tasks import BoltTask
from drpc.semantics.acker import Acker, RootCompleted
from drpc.testing import LocalDRPC

from .waiting import wait_until


def test_an_outbox_folds_each_roots_acks_and_keeps_the_other_acker_messages_in_order() -> None:
    outbox = Outbox()
    failure = Failure.tree_timed_out(1.0, "step")
    outbox.add_acker(7, AckInit(7, 0b0110, owner=1))
    outbox.add_acker(7, Ack(7, 0b0100))
    outbox.add_acker(9, Ack(9, 0b1000))
    outbox.add_acker(9, AckFail(9, failure))
    outbox.add_acker(7, Ack(7, 0b0010))
    later = Outbox()
    later.add_acker(9, Ack(9, 0b0001))
    outbox.take(later)
    assert outbox.acker_messages() == [
        (7, AckInit(7, 0b0110, 1)),
        (9, AckFail(9, failure)),
        (7, Ack(7, 0b0110)),
        (9, Ack(9, 0b1001)),
    ]


def test_outboxes_share_nothing_they_were_sent() -> None:
    one, other, third = Outbox(), Outbox(), Outbox()
    one.add_acker(7, AckInit(7, 1, owner=1))
    one.add_ack(8, 2)
    one.add_ack(9, 4)  # a second root: kept beside the first
    assert other.acker_messages() == [] and other.ack_values() == []
    other.add_ack(5, 1)
    other.add_ack(6, 2)
    third.take(one)
    assert third.acker_messages() == [(7, AckInit(7, 1, 1)), (8, Ack(8, 2)), (9, Ack(9, 4))]
    assert other.ack_values() == [(5, 1), (6, 2)]
    assert Outbox().acker_messages() == []


def test_a_folded_ack_completes_a_root_as_the_acks_it_folds_do() -> None:
    edges = [0x1111, 0x2222, 0x4444]
    separately, folded = Acker(30.0), Acker(30.0)
    root = 5
    init = edges[0] ^ edges[1] ^ edges[2]
    assert separately.init(root, init, "spout", 0.0) == []
    assert separately.ack(root, edges[0], 0.0) == []
    assert separately.ack(root, edges[1], 0.0) == []
    outbox = Outbox()
    for edge in edges:
        outbox.add_acker(root, Ack(root, edge))
    ((_, message),) = outbox.acker_messages()
    assert isinstance(message, Ack)
    assert folded.init(root, init, "spout", 0.0) == []
    assert folded.ack(root, message.ack_val, 0.0) == [RootCompleted(root, "spout")]
    assert separately.ack(root, edges[2], 0.0) == [RootCompleted(root, "spout")]


def report(id: int, source_task: int, tuples: int, edges: dict[int, int]) -> ReportMessage:
    return ReportMessage("step", source_task, id, tuples, edges)


def test_a_run_of_count_reports_of_one_id_and_roots_folds_into_one_standing_for_them_all() -> None:
    data = TupleMessage("step", "default", 1, b"", {7: 0x10})
    batch: list[Message] = [
        report(1, 1, 2, {7: 0b0001}),
        report(1, 2, 0, {7: 0b0010}),
        report(1, 3, 3, {7: 0b0100}),
        report(2, 1, 1, {8: 0b1000}),  # another id: a run of its own
        data,  # not a report: ends the run
        report(2, 2, 0, {8: 0b0001}),
        report(2, 3, 0, {8: 0b0010, 9: 0b0100}),  # other roots: not folded
        report(2, 4, 5, {8: 0b0001, 9: 0b0001}),
    ]
    assert fold_reports(batch) == [
        ReportMessage("step", 3, 1, 5, {7: 0b0111}, reports=3),
        report(2, 1, 1, {8: 0b1000}),
        data,
        report(2, 2, 0, {8: 0b0001}),
        ReportMessage("step", 4, 2, 5, {8: 0b0011, 9: 0b0101}, reports=2),
    ]
    single: list[Message] = [report(1, 1, 2, {7: 1})]
    assert fold_reports(single) == single
    assert batch[0] == report(1, 1, 2, {7: 0b0001})  # the batch's messages are not changed
    nothing_folds: list[Message] = [report(1, 1, 2, {7: 1}), data, report(2, 1, 0, {7: 2})]
    assert fold_reports(nothing_folds) is nothing_folds  # no copy when nothing folds
    # a fold after unfolded messages keeps them, in order
    late = [data, report(3, 1, 1, {7: 1}), report(3, 2, 1, {7: 2})]
    assert fold_reports(late) == [data, ReportMessage("step", 2, 3, 2, {7: 3}, reports=2)]


def test_a_run_of_acks_folds_into_one_per_root_and_other_acker_messages_end_runs() -> None:
    failure = Failure.tree_timed_out(1.0, "step")
    batch: list[Message] = [
        Ack(7, 0b0001),
        Ack(9, 0b1000),
        Ack(7, 0b0010),
        AckInit(7, 0b0110, 1),
        Ack(7, 0b0100),
        AckFail(9, failure),
        Ack(9, 0b0001),
        Ack(9, 0b0001),
    ]
    assert fold_acks(batch) == [
        Ack(7, 0b0011),
        Ack(9, 0b1000),
        AckInit(7, 0b0110, 1),
        Ack(7, 0b0100),
        AckFail(9, failure),
        Ack(9, 0),
    ]
    separately, folded = Acker(30.0), Acker(30.0)
    outcomes = [separately.init(7, 0b0111, "spout", 0.0)]
    outcomes += [separately.ack(7, value, 0.0) for value in (0b0001, 0b0010, 0b0100)]
    assert outcomes[-1] == [RootCompleted(7, "spout")]
    assert folded.init(7, 0b0111, "spout", 0.0) == []
    (ack,) = fold_acks([Ack(7, 0b0001), Ack(7, 0b0010), Ack(7, 0b0100)])
    assert isinstance(ack, Ack)
    assert folded.ack(7, ack.ack_val, 0.0) == [RootCompleted(7, "spout")]


def test_a_reach_call_hands_each_step_its_count_reports_folded_and_every_one_counted() -> None:
    calls = 20
    with LocalDRPC() as drpc:
        engine = drpc.register(build_reach())
        for _ in range(calls):
            assert drpc.execute("reach", "foo.com/blog/1") == "16"
    handled: Counter[str] = Counter()  # report messages each step handled
    standing_for: Counter[str] = Counter()  # the reports they stood for
    for task in engine.tasks.values():
        if isinstance(task, BoltTask):
            handled[task.component_id] += task.messages_handled.get("ReportMessage", 0)
            standing_for[task.component_id] += task.reports_received
    # storm-starter reach: 12 GetFollowers tasks each report to the 6 PartialUniquer tasks,
    # and those to the CountAggregator task that owns the request's id (the 2 others
    # would only give it up: gathering's idle give-ups).
    assert standing_for["bolt2"] == 12 * 6 * calls
    assert standing_for["bolt3"] == 6 * calls
    assert handled["bolt2"] < standing_for["bolt2"] / 2  # runs of them came as one
    assert handled["bolt3"] < standing_for["bolt3"]


class Recording(Actor):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.seen: list[tuple[float, str]] = []

    def handle(self, message: Message) -> None:
        assert isinstance(message, Tick)
        self.seen.append((message.now, threading.current_thread().name))


class SendsAsTurnsEnd(Turns):
    """Turn hooks: the end of ``source``'s first turn posts two messages to ``target``."""

    def __init__(self, source: Recording, target: Recording) -> None:
        self.source, self.target = source, target
        self.scheduler: Scheduler | None = None
        self.turns = 0
        self.sent = False

    def begin_turn(self, actor: Actor) -> object:
        self.turns += 1
        return None

    def end_turn(self, turn: object) -> None:
        assert self.scheduler is not None
        if self.source.seen and not self.sent:
            self.sent = True
            self.scheduler.post_many(self.target, [Tick(0.0), Tick(1.0)])


def test_a_turn_takes_the_mailbox_at_once_and_the_actor_its_end_readies_waits_for_that_worker() -> (
    None
):
    source, target = Recording("source"), Recording("target")
    turns = SendsAsTurnsEnd(source, target)
    scheduler = Scheduler(4, "turns", turns=turns, batch=2)
    turns.scheduler = scheduler
    scheduler.post_many(source, [Tick(10.0), Tick(11.0), Tick(12.0)])
    scheduler.post_many(source, [])  # already scheduled: no second hand-off
    assert len(scheduler._ready) == 1
    scheduler.start()
    try:
        wait_until(lambda: len(source.seen) == 3 and len(target.seen) == 2, what="both handled")
    finally:
        scheduler.stop(5.0)
    assert [now for now, _ in source.seen] == [10.0, 11.0, 12.0]
    assert [now for now, _ in target.seen] == [0.0, 1.0]
    first_turn_thread = source.seen[0][1]
    assert source.seen[1][1] == first_turn_thread  # the batch of two ran in one turn
    assert {thread for _, thread in target.seen} == {first_turn_thread}  # no second worker
    assert turns.turns == 3  # source: 2 + 1 messages; target: both at once


class Outgoing(Turns):
    """Turn hooks that send, as each turn ends, what its handling queued (the engine's
    outbox does so), and number the turns."""

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.queued: list[tuple[Actor, Message]] = []
        self.turn = 0

    def begin_turn(self, actor: Actor) -> object:
        self.turn += 1
        return None

    def end_turn(self, turn: object) -> None:
        assert self.scheduler is not None
        queued, self.queued = self.queued, []
        for actor, message in queued:
            self.scheduler.post(actor, message)


class Relay(Actor):
    """Handling a message queues one for each of ``targets``, sent as the turn ends."""

    def __init__(self, hooks: Outgoing, targets: list[Actor]) -> None:
        super().__init__()
        self.hooks, self.targets = hooks, targets

    def handle(self, message: Message) -> None:
        self.hooks.queued.extend((target, message) for target in self.targets)


class TurnRecording(Actor):
    def __init__(self, hooks: Outgoing) -> None:
        super().__init__()
        self.hooks = hooks
        self.turns: list[int] = []

    def handle(self, message: Message) -> None:
        self.turns.append(self.hooks.turn)


def test_a_step_fanning_in_takes_its_senders_messages_in_one_turn() -> None:
    hooks = Outgoing()
    scheduler = Scheduler(4, "fan-in", turns=hooks, handoff=3600.0)
    hooks.scheduler = scheduler
    sink = TurnRecording(hooks)
    senders = [Relay(hooks, [sink]) for _ in range(10)]
    gate = Relay(hooks, list(senders))
    scheduler.start()
    try:
        scheduler.post(gate, Tick(0.0))
        wait_until(lambda: len(sink.turns) == 10, what="every sender's message handled")
    finally:
        scheduler.stop(5.0)
    # Each sender's turn made the sink ready; it ran once, after all of them.
    assert len(set(sink.turns)) == 1


class Fanning(Actor):
    """Handling a message posts one to each of ``targets`` (from the worker, mid-turn)."""

    def __init__(self, scheduler: Scheduler, targets: list[Recording]) -> None:
        super().__init__()
        self.scheduler, self.targets = scheduler, targets
        self.thread = ""

    def handle(self, message: Message) -> None:
        self.thread = threading.current_thread().name
        for number, target in enumerate(self.targets):
            self.scheduler.post(target, Tick(float(number)))


class Working(Recording):
    """Each message takes a millisecond of CPU: long enough for other threads to get the GIL."""

    def handle(self, message: Message) -> None:
        until = time.perf_counter() + 0.001
        while time.perf_counter() < until:
            pass
        super().handle(message)


class Blocking(Actor):
    """Its turn blocks until ``release`` is set, as a bolt waiting on I/O does."""

    def __init__(self) -> None:
        super().__init__()
        self.started, self.release, self.done = (threading.Event() for _ in range(3))

    def handle(self, message: Message) -> None:
        self.started.set()
        self.release.wait(10.0)
        self.done.set()


def test_actors_made_ready_while_a_worker_is_awake_wait_for_it_not_for_a_second_thread() -> None:
    scheduler = Scheduler(4, "lazy", handoff=3600.0)  # the watchdog never steps in
    targets: list[Recording] = [Working(f"target-{i}") for i in range(50)]
    fanning = Fanning(scheduler, targets)
    scheduler.start()
    try:
        scheduler.post(fanning, Tick(0.0))
        wait_until(lambda: all(target.seen for target in targets), what="every target handled")
    finally:
        scheduler.stop(60.0)
    assert {thread for target in targets for _, thread in target.seen} == {fanning.thread}
    # The watchdog was timing the ready queue for up to an hour: stop woke it, not a timeout.
    assert not scheduler._watchdog.is_alive()


def test_a_blocked_turn_holds_the_others_up_only_for_the_handoff() -> None:
    scheduler = Scheduler(2, "handoff", handoff=0.005)
    blocking, other = Blocking(), Recording("other")
    scheduler.start()
    try:
        scheduler.post(blocking, Tick(0.0))
        assert blocking.started.wait(5.0)
        scheduler.post(other, Tick(1.0))  # from outside: a worker is awake, so none is woken
        wait_until(lambda: bool(other.seen), timeout=5.0, what="the other actor handled")
        assert not blocking.done.is_set()  # handled while the first turn was still blocked
    finally:
        blocking.release.set()
        scheduler.stop(5.0)


def test_a_drpc_spout_that_asks_to_be_woken_serves_calls_with_idle_polls_an_hour_apart() -> None:
    with LocalDRPC(max_idle_wait=3600.0) as drpc:
        drpc.register(build_square())
        assert [drpc.execute("square", str(n)) for n in range(3)] == ["0", "1", "4"]


def test_a_backlog_of_calls_is_served_though_the_spout_is_not_polled_after_an_emit() -> None:
    # Not polled again after an emit, the DRPC spout asks for its next poll while requests
    # wait: with idle polls an hour apart, a backlog it did not ask for would stall.
    with LocalDRPC(max_idle_wait=3600.0) as drpc:
        drpc.register(build_square())
        calls = [drpc.submit("square", str(n)) for n in range(40)]
        assert [call.result(timeout=10) for call in calls] == [str(n * n) for n in range(40)]


def test_the_ready_queue_is_first_in_first_out_whatever_the_interleaving() -> None:
    queue = ReadyQueue()
    actors = [Recording(f"actor-{i}") for i in range(6)]
    taken: list[Actor] = []
    queue.append(actors[0])
    queue.append(actors[1])
    taken.append(queue.popleft())
    queue.append(actors[2])  # arrives while actors[1] waits in the other list
    queue.append(actors[3])
    assert len(queue) == 3
    taken += [queue.popleft(), queue.popleft()]
    queue.append(actors[4])
    queue.append(actors[5])
    taken += [queue.popleft() for _ in range(3)]
    assert taken == actors
    assert len(queue) == 0 and not queue


class TokenPerTurn(Turns):
    """Turn hooks returning a fresh token per turn and recording the one each end gets."""

    def __init__(self) -> None:
        self.begun: list[object] = []
        self.ended: list[object] = []

    def begin_turn(self, actor: Actor) -> object:
        token = object()
        self.begun.append(token)
        return token

    def end_turn(self, turn: object) -> None:
        self.ended.append(turn)


class RecordsTurn(Actor):
    def __init__(self) -> None:
        super().__init__()
        self.turns: list[object] = []

    def handle_batch(self, batch: list[Message], turn: object = None) -> None:
        self.turns.append(turn)
        super().handle_batch(batch, turn)

    def handle(self, message: Message) -> None:
        pass


def test_what_begin_turn_returns_reaches_the_actor_and_the_end_of_that_turn() -> None:
    hooks = TokenPerTurn()
    scheduler = Scheduler(1, "tokens", turns=hooks, batch=1)
    actor = RecordsTurn()
    scheduler.post_many(actor, [Tick(0.0), Tick(1.0), Tick(2.0)])
    scheduler.start()
    try:
        wait_until(lambda: len(hooks.ended) == 3, what="three turns")
    finally:
        scheduler.stop(5.0)
    assert actor.turns == hooks.begun == hooks.ended
    assert len(set(map(id, hooks.begun))) == 3


class Completes(Recording):
    """Records each tick's thread; the tick numbered ``last`` completes ``call``."""

    def __init__(self, name: str, call: Future[str], last: float) -> None:
        super().__init__(name)
        self.call, self.last = call, last

    def handle(self, message: Message) -> None:
        super().handle(message)
        if isinstance(message, Tick) and message.now == self.last:
            self.call.set_result("done")


def idle_scheduler(threads: int) -> Scheduler:
    """A started scheduler whose workers all sleep, taking one message a turn, with a
    watchdog that never fires in a test (60 s handoff)."""
    scheduler = Scheduler(threads, "helping", batch=1, handoff=60.0)
    scheduler.start()
    wait_until(lambda: scheduler._awake == 0, what="workers asleep")
    return scheduler


def test_a_caller_with_no_worker_awake_runs_the_turns_itself_until_its_call_is_done() -> None:
    scheduler = idle_scheduler(2)
    try:
        call: Future[str] = Future()
        actor = Completes("actor", call, last=2.0)
        sleep = scheduler.begin_help()
        assert sleep is not None
        assert scheduler.begin_help() is None  # a second caller: someone is awake already
        scheduler.end_call()  # (its call done)
        scheduler.post_many(actor, [Tick(1.0), Tick(2.0), Tick(3.0)])  # 3: after the call
        scheduler.help_until(sleep, call)
        me = threading.current_thread().name
        assert call.result(0) == "done"
        # no worker woke: the helper ran the turn; what came after the call waits
        assert actor.seen == [(1.0, me), (2.0, me)]
        assert scheduler._awake == 0 and len(scheduler._ready) == 1
        # the next caller's helping takes it first
        later: Future[str] = Future()
        other = Completes("other", later, last=4.0)
        sleep = scheduler.begin_help()
        assert sleep is not None
        scheduler.post(other, Tick(4.0))
        scheduler.help_until(sleep, later)
        assert actor.seen[-1] == (3.0, me) and other.seen == [(4.0, me)]
    finally:
        scheduler.stop(5.0)


def test_a_helper_leaving_work_behind_wakes_a_worker_when_another_caller_waits() -> None:
    scheduler = idle_scheduler(1)
    try:
        call: Future[str] = Future()
        actor = Completes("actor", call, last=1.0)
        sleep = scheduler.begin_help()
        assert sleep is not None
        assert scheduler.begin_help() is None  # it waits for a call of its own
        scheduler.post_many(actor, [Tick(1.0), Tick(2.0)])
        scheduler.help_until(sleep, call)
        wait_until(lambda: len(actor.seen) == 2, what="the rest taken by a worker")
        me = threading.current_thread().name
        assert actor.seen[0] == (1.0, me)
        assert actor.seen[1][1] == "helping-worker-0"
        scheduler.end_call()
    finally:
        scheduler.stop(5.0)


def test_a_sleeping_helper_wakes_when_its_call_completes_elsewhere() -> None:
    scheduler = idle_scheduler(1)
    try:
        call: Future[str] = Future()
        sleep = scheduler.begin_help()
        assert sleep is not None
        timer = threading.Timer(0.05, call.set_result, ("done",))
        timer.start()
        scheduler.help_until(sleep, call)  # nothing to run: it sleeps until the result
        assert call.result(0) == "done"
        assert scheduler._awake == 0 and scheduler._callers == 0
    finally:
        scheduler.stop(5.0)


class RunsOn(BaseBasicBolt):
    """[id, arg] -> [id, the name of the thread that ran this step]."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], threading.current_thread().name])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "thread"))


def test_sequential_local_drpc_calls_run_on_the_calling_thread() -> None:
    builder = LinearDRPCTopologyBuilder("where")
    builder.add_bolt(RunsOn())
    with LocalDRPC(handoff=60.0) as drpc:
        engine = drpc.register(builder)
        for _ in range(5):
            wait_until(lambda: engine.scheduler._awake == 0, what="workers asleep")
            assert drpc.execute("where", "x") == threading.current_thread().name
            assert engine.turn_outbox() is None  # what this thread sends now goes at once


class BlocksUntil(Actor):
    """Its turn waits for ``release``, then records that it ended."""

    def __init__(self, release: threading.Event, events: list[str]) -> None:
        super().__init__()
        self.release, self.events = release, events

    def handle(self, message: Message) -> None:
        self.events.append("turn began")
        self.release.wait(30)
        self.events.append("turn ended")


def test_stop_waits_for_a_helping_caller_to_finish_its_turn() -> None:
    scheduler = idle_scheduler(1)
    release, events = threading.Event(), []
    call: Future[str] = Future()

    def help() -> None:  # a caller's thread: it begins helping and helps
        sleep = scheduler.begin_help()
        assert sleep is not None
        scheduler.post(BlocksUntil(release, events), Tick(0.0))
        scheduler.help_until(sleep, call)

    helper = threading.Thread(target=help)
    helper.start()
    wait_until(lambda: events == ["turn began"], what="the helper's turn")

    def stop() -> None:
        scheduler.stop(30.0)
        events.append("stop returned")

    stopper = threading.Thread(target=stop)
    stopper.start()
    wait_until(lambda: scheduler._stopped, what="stop begun")
    release.set()
    stopper.join(30)
    helper.join(30)
    assert events == ["turn began", "turn ended", "stop returned"]
    assert scheduler._helper_threads == set()
