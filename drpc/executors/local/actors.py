"""The in-process engine's runtime: actors with mailboxes on a pool of threads, and a timer.

Contract. An ``Actor`` handles the messages posted to its mailbox one at a
time (``handle``); the ``Scheduler`` runs actors that have messages on
``threads`` worker threads, at most ``BATCH`` messages per turn so a busy
actor cannot starve the others; an exception from ``handle`` is logged and
the actor goes on. The ``Timer`` calls functions after a delay on one thread
of its own; a callback's exception is logged.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

from drpc.executors.local.messages import Message

log = logging.getLogger(__name__)

BATCH = 64


class Actor:
    """Something with a mailbox that handles one message at a time."""

    name = "actor"

    def __init__(self) -> None:
        self._mailbox: deque[Message] = deque()
        self._scheduled = False
        self._lock = threading.Lock()

    def handle(self, message: Message) -> None:
        raise NotImplementedError


class Scheduler:
    """Runs actors with pending messages on a pool of worker threads."""

    def __init__(self, threads: int, name: str) -> None:
        self._ready: queue.SimpleQueue[Actor | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
            for i in range(threads)
        ]
        self._stopped = False

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def post(self, actor: Actor, message: Message) -> None:
        with actor._lock:
            actor._mailbox.append(message)
            if actor._scheduled:
                return
            actor._scheduled = True
        self._ready.put(actor)

    def _work(self) -> None:
        while True:
            actor = self._ready.get()
            if actor is None or self._stopped:
                return
            for _ in range(BATCH):
                with actor._lock:
                    if not actor._mailbox:
                        actor._scheduled = False
                        break
                    message = actor._mailbox.popleft()
                try:
                    actor.handle(message)
                except Exception:
                    log.exception(
                        "%s failed to handle a %s message", actor.name, type(message).__name__
                    )
            else:
                self._ready.put(actor)

    def stop(self, timeout: float) -> None:
        self._stopped = True
        for _ in self._threads:
            self._ready.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class Timer:
    """Calls functions after a delay, on one thread."""

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"{name}-timer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def schedule(self, delay: float, callback: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), callback))
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
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)
