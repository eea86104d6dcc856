"""The in-process engine's runtime: actors with mailboxes on a pool of threads, and a timer.

Contract. An ``Actor`` handles the messages posted to its mailbox one at a
time (``handle``, called by ``handle_batch``, which may fold some first); the
``Scheduler`` runs actors that have messages on ``threads`` worker threads. A
turn takes up to ``batch`` messages from one actor's mailbox at once and
handles them in order, so a busy actor cannot starve the others; an exception
from ``handle`` is logged and the actor goes on. ``Turns`` hooks (the engine's
outbox) bracket every turn: what the actor sends during it leaves when it
ends, all of it in one hand-off (``post_each``); a worker
thread does nothing but take and run turns. One lock
guards the ready queue and every mailbox, so a turn takes it twice: to post
what it sent, and to take the next turn. Ready actors wait in one
queue, first in first out: a step fanning in from many tasks is run once their
turns are over, taking all their messages in one turn, instead of once per
sender.

A ready actor wakes a sleeping worker only when no worker is awake: an awake
worker takes it as its turn ends. Handlers are Python holding the GIL, so a
second thread running at once would only contend for it (with four threads
running, a call cost about twice the CPU). A turn that blocks (a bolt
sleeping or waiting on I/O) must not hold the rest up, so while actors wait
a watchdog looks every ``handoff`` seconds, and when no worker has taken one
since its last look it wakes a sleeping worker. It keeps looking for one
``handoff`` after the queue empties: a busy engine's queue empties between most
turns, and a watchdog woken by each post that refilled it cost a tenth of a
ShellBolt's throughput.

A thread waiting for a call may help (``begin_help``, ``help_until``): when
no worker is awake it becomes the awake one, running turns as a worker does
until its call is done, so a caller alone costs no hand-off to a worker and
back; otherwise it waits (``end_call``). Work still queued when a helper
leaves goes to a worker woken at once when other callers wait, else to the
next helper or, within ``handoff``, a worker the watchdog wakes.

The ``Timer`` calls functions after a delay on one thread of its own; a
callback's exception is logged.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any, Final, Protocol

from mypy_extensions import mypyc_attr

from drpc.executors.local.messages import Message, ReportMessage
from drpc.executors.local.mutex import Mutex
from drpc.model.tuples import Tuple

log = logging.getLogger(__name__)

BATCH = 64
"""Default most messages one turn of an actor handles."""

HANDOFF = 0.002
"""Default seconds actors may wait, no worker taking any, before a sleeping worker is woken."""

SLEPT: Final = object()
"""What a helper's ``_take_or_sleep`` returns after it slept (``Scheduler.help_until``)."""


class Awaited(Protocol):
    """A call's outcome a helper runs turns for (``Scheduler.help_until``): a ``Future``, or
    a ``drpc.executors.local.calls.Call``."""

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None: ...


@mypyc_attr(allow_interpreted_subclasses=True)
class Actor:
    """Something with a mailbox that handles one message at a time.

    ``turns_taken`` and ``messages_handled`` (by kind, after any folding) count what it
    did, for diagnostics (``bench/engine_cost.py --counts``).
    """

    name = "actor"

    def __init__(self) -> None:
        # Both guarded by the scheduler's lock (``Scheduler``). A list, not a deque: a turn
        # takes the whole mailbox by swapping in an empty one, and lists are the compiled
        # build's own (a deque's methods are Python calls).
        self._mailbox: list[Message] = []
        self._scheduled = False
        self.turn_box: object = None  # what the engine's turn hooks keep for the actor's turns
        self.turns_taken = 0
        # by class (cheaper to count than by name); the two kinds most messages are, in
        # counters of their own (``count_handled``)
        self._tuples_handled = 0
        self._reports_handled = 0
        self._handled: dict[type, int] = {}

    @property
    def messages_handled(self) -> dict[str, int]:
        handled = {kind.__name__: count for kind, count in self._handled.items()}
        if self._tuples_handled:
            handled[Tuple.__name__] = self._tuples_handled
        if self._reports_handled:
            handled[ReportMessage.__name__] = self._reports_handled
        return handled

    def count_handled(self, kind: type, count: int) -> None:
        """``count`` messages of class ``kind`` handled (``messages_handled``)."""
        if kind is Tuple:
            self._tuples_handled += count
        elif kind is ReportMessage:
            self._reports_handled += count
        else:
            handled = self._handled
            handled[kind] = handled.get(kind, 0) + count

    def handle(self, message: Message) -> None:
        raise NotImplementedError

    def handle_batch(self, batch: list[Message], turn: object = None) -> None:
        """Handle one turn's messages in order; an exception from one is logged and the
        others are still handled. An actor may fold messages first where handling the
        folded one comes to the same (``drpc.executors.local.messages``). ``turn``: what
        the scheduler's ``Turns.begin_turn`` returned for this turn."""
        self.turns_taken += 1
        for message in batch:
            self.count_handled(type(message), 1)
            try:
                self.handle(message)
            except Exception:
                log.exception("%s failed to handle a %s message", self.name, type(message).__name__)


class ReadyQueue:
    """First in, first out, on two lists (the compiled build's own; a deque's methods are
    Python calls): appended to one, taken from the other, reversed when it runs out."""

    def __init__(self) -> None:
        self._back: list[Actor] = []
        self._front: list[Actor] = []  # reversed: the next to take is last

    def append(self, actor: Actor) -> None:
        self._back.append(actor)

    def popleft(self) -> Actor:
        front = self._front
        if not front:  # the back, reversed, becomes the front; the empty front, the back
            back = self._back
            back.reverse()
            self._back, self._front = front, back
            front = back
        return front.pop()

    def waiting(self) -> bool:
        """Whether an actor waits (``bool(queue)``, called directly when compiled)."""
        return bool(self._back) or bool(self._front)

    def __len__(self) -> int:
        return len(self._back) + len(self._front)


@mypyc_attr(allow_interpreted_subclasses=True)
class Turns:
    """Called around every turn, on the worker thread that runs it (a class, not a
    protocol: compiled, the scheduler then calls an engine's hooks directly).
    ``begin_turn`` returns what the scheduler hands the actor's ``handle_batch`` and
    then ``end_turn`` for that turn (an engine's outbox: no look-up of it by thread)."""

    def begin_turn(self, actor: Actor) -> object:
        """What ``actor``'s turn, about to run, is handed (``handle_batch``'s ``turn``)."""
        return None

    def end_turn(self, turn: object) -> None:
        pass

    def under_lock(self, turn: object, actors: list[Actor], messages: list[Message]) -> object:
        """Called by ``Scheduler.post_each`` with its lock held, when given a ``turn``; it
        may add posts (an actor and a message at the same position)."""
        return None


class Scheduler:
    """Runs actors with pending messages on a pool of worker threads."""

    def __init__(
        self,
        threads: int,
        name: str,
        *,
        turns: Turns | None = None,
        batch: int = BATCH,
        handoff: float = HANDOFF,
    ) -> None:
        """
        :param turns: hooks called around every turn (default none).
        :param batch: most messages one turn handles (default ``BATCH``).
        :param handoff: seconds ready actors may wait with no worker taking any before
            a sleeping worker is woken for them (default ``HANDOFF``, 2 ms).
        """
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if not handoff > 0:
            raise ValueError(f"handoff must be positive, got {handoff}")
        # One lock guards the ready queue and the counts (a ``Mutex``: taken twice a turn). A
        # sleeping worker blocks on a lock of its own, held until a waker releases it; the
        # watchdog likewise on _watch_wakeup. Raw locks, not Conditions: a Condition's
        # methods are Python code, and actors are made ready tens of times per request.
        self._lock = Mutex()
        self._ready = ReadyQueue()
        self._sleepers: list[threading.Lock] = []  # one per sleeping worker, held
        self._callers = 0  # callers waiting for a call, helping or not (``begin_help``)
        self._done_calls: set[threading.Lock] = set()  # helpers whose call is done
        self._helper_threads: set[int] = set()  # the threads helping (for ``stop``)
        self._awake = threads  # workers not sleeping, or woken and about to run
        self._taken = 0  # actors taken from _ready so far
        self._watching = False  # the watchdog is timing the ready queue
        self._watch_wakeup = threading.Lock()
        self._watch_wakeup.acquire()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
            for i in range(threads)
        ]
        self._watchdog = threading.Thread(target=self._watch, name=f"{name}-watch", daemon=True)
        self._stopped = False
        self._turns = turns
        self._batch = batch
        self._handoff = handoff

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        self._watchdog.start()

    def post(self, actor: Actor, message: Message) -> None:
        self.post_each([actor], [message])

    def post_many(self, actor: Actor, messages: Iterable[Message]) -> None:
        """Post ``messages`` in order, as one hand-off."""
        posted = list(messages)
        self.post_each([actor] * len(posted), posted)

    @property
    def lock(self) -> Mutex:
        """The lock of the ready queue and every mailbox (see ``post_each``'s ``turn``)."""
        return self._lock

    def post_each(
        self, actors: list[Actor], messages: list[Message], turn: object = None
    ) -> object:
        """Post each of ``messages`` to the actor at its position in ``actors``, in order,
        under one lock: what a turn sends leaves at once, and each actor is made ready
        in the order of its first message. With ``turn``, the ``Turns`` hooks'
        ``under_lock(turn, actors, messages)`` runs first under the same lock (it may add
        posts); returns what it returned."""
        # acquire and release, not ``with``: compiled, a ``with`` on a lock makes and calls
        # two bound methods, and this runs for every turn
        lock = self._lock
        lock.acquire()
        try:
            hooked = None
            if turn is not None and self._turns is not None:
                hooked = self._turns.under_lock(turn, actors, messages)
            readied = False
            for index in range(len(actors)):
                actor = actors[index]
                actor._mailbox.append(messages[index])
                if not actor._scheduled:
                    actor._scheduled = True
                    self._ready.append(actor)
                    readied = True
            wake = self._readied() if readied else None
        finally:
            lock.release()
        if wake is not None:
            wake.release()
        return hooked

    def _readied(self) -> threading.Lock | None:
        """Under ``_lock``, actors were made ready: the lock to release so that a sleeping
        worker or the watchdog sees to them, or None (an awake worker will)."""
        if self._awake == 0:
            return self._wake_one()
        if not self._watching:
            self._watching = True
            return self._watch_wakeup
        return None

    def _wake_one(self) -> threading.Lock | None:
        """Under ``_lock``: the lock to release to wake a sleeping worker, counted awake."""
        if not self._sleepers:
            return None
        self._awake += 1
        return self._sleepers.pop()

    def _next(
        self, sleep: threading.Lock, done: Actor | None
    ) -> tuple[Actor, list[Message]] | None:
        """The next actor from the ready queue and the messages of its turn (up to
        ``batch``), sleeping on ``sleep`` (held) until there is one; None to stop.
        ``done``, the actor whose turn this worker just ran, goes back on the queue if
        messages came for it meanwhile, else is no longer scheduled."""
        lock = self._lock
        while True:
            wake = None
            lock.acquire()
            try:
                if done is not None:
                    wake = self._settle(done)
                    done = None
                if self._ready.waiting():
                    return self._take()
                if self._stopped:
                    return None
                self._awake -= 1
                self._sleepers.append(sleep)
            finally:
                lock.release()
                if wake is not None:
                    wake.release()
            sleep.acquire()  # until a waker releases it, counting this worker awake

    # -- a caller's thread running turns while it waits (``help_until``) --------------------

    def begin_help(self) -> threading.Lock | None:
        """A caller is about to wait for a call. When no worker is awake, make its thread
        a helper for ``help_until``, counted as an awake worker, and return its sleep lock
        (held); else None: the awake one takes the work (a second thread running turns
        would only contend for the GIL), and the caller waits, then calls ``end_call``."""
        sleep = threading.Lock()
        sleep.acquire()
        with self._lock:
            self._callers += 1
            if self._awake or self._stopped:
                return None
            self._awake += 1
            self._helper_threads.add(threading.get_ident())
        return sleep

    def end_call(self) -> None:
        """A caller that did not help has its call done."""
        with self._lock:
            self._callers -= 1

    def help_until(self, sleep: threading.Lock, finished: Awaited) -> None:
        """Run turns on this thread, as a worker does, until ``finished`` is done (or the
        scheduler stops); then stop helping. What is still queued then goes to a worker
        woken for it when other callers wait; else it waits for the next helper (a
        sequential caller's next call takes it, with no hand-off), or a worker the
        watchdog wakes within ``handoff``."""
        finished.add_done_callback(lambda _: self._call_done(sleep))
        done: Actor | None = None
        try:
            while True:
                taken = self._take_or_sleep(sleep, done)
                done = None
                if taken is None:
                    return
                if taken is SLEPT:
                    continue
                assert isinstance(taken, tuple)
                actor, batch = taken
                self._run_turn(actor, batch)
                done = actor
        finally:
            self.end_help(sleep, done)

    def end_help(self, sleep: threading.Lock, done: Actor | None = None) -> None:
        """The helper stops (after ``begin_help``, perhaps without helping), ``done`` the
        actor of its last turn."""
        wakes: list[threading.Lock] = []
        with self._lock:
            self._callers -= 1
            self._awake -= 1
            self._done_calls.discard(sleep)
            self._helper_threads.discard(threading.get_ident())
            if done is not None:
                wake = self._settle(done)
                if wake is not None:
                    wakes.append(wake)
            if self._ready and not self._awake:
                if self._callers:  # their calls may wait in the queue: a worker, now
                    worker = self._wake_one()
                    if worker is not None:
                        wakes.append(worker)
                elif not self._watching:
                    self._watching = True  # it wakes a worker unless a helper comes first
                    wakes.append(self._watch_wakeup)
        for wake in wakes:
            wake.release()

    def _take_or_sleep(
        self, sleep: threading.Lock, done: Actor | None
    ) -> tuple[Actor, list[Message]] | object | None:
        """A helper's ``_next``: the next turn, None when its call is done (``_call_done``)
        or the scheduler stopped, or ``SLEPT`` after sleeping on ``sleep`` until a post or
        the end of its call woke it (counted awake again by its waker)."""
        wake = None
        self._lock.acquire()
        try:
            if done is not None:
                wake = self._settle(done)
            # a set look-up, not the future's ``done()``: a Future's methods are Python code
            if sleep in self._done_calls or self._stopped:
                return None
            if self._ready.waiting():
                return self._take()
            self._awake -= 1
            self._sleepers.append(sleep)
        finally:
            self._lock.release()
            if wake is not None:
                wake.release()
        sleep.acquire()
        return SLEPT

    def _call_done(self, sleep: threading.Lock) -> None:
        """The call of the helper with ``sleep`` is done: it stops after its turn, or now
        if it sleeps."""
        with self._lock:
            self._done_calls.add(sleep)
            if sleep not in self._sleepers:
                return
            self._sleepers.remove(sleep)
            self._awake += 1
        sleep.release()

    def _settle(self, done: Actor) -> threading.Lock | None:
        """Under ``_lock``: the actor whose turn just ran goes back on the queue if messages
        came for it meanwhile, else is no longer scheduled; the lock to release, if any."""
        if done._mailbox:
            self._ready.append(done)
            return self._readied()
        done._scheduled = False
        return None

    def _take(self) -> tuple[Actor, list[Message]]:
        """Under ``_lock``, the queue not empty: the next actor and its turn's messages."""
        self._taken += 1
        actor = self._ready.popleft()
        mailbox = actor._mailbox
        if len(mailbox) <= self._batch:
            actor._mailbox = []
            return actor, mailbox
        batch = mailbox[: self._batch]
        del mailbox[: self._batch]
        return actor, batch

    def _watch(self) -> None:
        """Wake a sleeping worker for actors that no awake worker takes (it is blocked)."""
        wakeup = self._watch_wakeup
        lingered = False
        while True:
            with self._lock:
                if self._stopped:
                    return
                idle = not self._ready
                if idle and lingered:
                    self._watching = False  # the next post or re-queued turn releases wakeup
                taken = self._taken
            if idle:
                # The queue empties between most turns of a busy engine: still watching for
                # one handoff, the posts that refill it need not wake this thread each time.
                if lingered:
                    wakeup.acquire()
                else:
                    wakeup.acquire(timeout=self._handoff)  # only stop() releases it now
                lingered = not lingered
                continue
            lingered = False
            wakeup.acquire(timeout=self._handoff)
            with self._lock:
                stuck = bool(self._ready) and self._taken == taken and not self._stopped
                sleeper = self._wake_one() if stuck else None
            if sleeper is not None:
                sleeper.release()

    def _work(self) -> None:
        sleep = threading.Lock()
        sleep.acquire()
        done: Actor | None = None
        while True:
            taken = self._next(sleep, done)
            if taken is None or self._stopped:
                return
            actor, batch = taken
            self._run_turn(actor, batch)
            done = actor

    def _run_turn(self, actor: Actor, batch: list[Message]) -> None:
        """One turn of ``actor`` on ``batch``, between the turn hooks; an exception from
        either is logged, and the thread goes on."""
        turns = self._turns
        turn = turns.begin_turn(actor) if turns is not None else None
        try:
            actor.handle_batch(batch, turn)
        except Exception:
            log.exception("%s failed to handle its messages", actor.name)
        if turns is not None:
            try:
                turns.end_turn(turn)
            except Exception:
                log.exception("%s: sending what its turn produced failed", actor.name)

    def stop(self, timeout: float) -> None:
        with self._lock:
            self._stopped = True
            sleepers, self._sleepers = self._sleepers, []
            self._awake += len(sleepers)
            self._watching = True
        for sleeper in sleepers:
            sleeper.release()
        # Idle, or timing the ready queue for up to `handoff`, the watchdog waits on its
        # lock: wake it either way (a poster may have released the lock already).
        with suppress(RuntimeError):
            self._watch_wakeup.release()
        deadline = time.monotonic() + timeout
        for thread in (*self._threads, self._watchdog):
            if thread is not threading.current_thread() and thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        # Helping callers finish the turn they run, as the workers did; then they return.
        while self._others_help() and time.monotonic() < deadline:
            time.sleep(0.001)

    def _others_help(self) -> bool:
        """Whether threads other than this one are helping."""
        with self._lock:
            return bool(self._helper_threads - {threading.get_ident()})


class Timer:
    """Calls functions after a delay, on one thread."""

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        # Not "_thread": compiled, that attribute becomes a C field named after C's __thread.
        self._timer_thread = threading.Thread(target=self._run, name=f"{name}-timer", daemon=True)

    def start(self) -> None:
        self._timer_thread.start()

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        seq = next(self._seq)
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, seq, callback))
            # Compared by number, not identity: a compiled build boxes the tuple anew.
            if self._heap[0][1] == seq:  # else the thread already wakes up before it is due
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._stopped:
                    return
                _, _, callback = heapq.heappop(self._heap)
            try:
                callback()
            except Exception:
                log.exception("timer callback failed")

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._timer_thread.is_alive() and self._timer_thread is not threading.current_thread():
            self._timer_thread.join(2.0)
