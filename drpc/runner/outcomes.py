"""Outcomes on their way back: each server's results and failures, sent by a thread of its own.

Contract:

- ``OutcomeSender(client, max_queued, dropped)`` sends one server's outcomes (an
  ``Outcome``: a result, or a failure keeping its type and message) over a
  connection of its own, from a queue, on a thread of its own; ``put`` never
  waits, so neither the topology's threads nor the other servers wait on a
  slow or silent server;
- everything queued goes pipelined in one round trip (``answer_many``), up to
  ``OUTCOME_BATCH`` outcomes at a time;
- at most ``max_queued`` outcomes wait; past it, or once closing, an outcome
  is dropped: ``dropped(outcome, reason)`` is called, and so it is for each
  outcome of a batch whose link fails (a kept connection the server closed
  while idle is retried once on a new one);
- ``close(deadline)`` takes no more, sends what is queued until ``deadline``,
  drops the rest and closes the connection.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from drpc.client import (
    AuthorizationException,
    DRPCConnectionError,
    DRPCInvocationsClient,
    DRPCTimeoutError,
    ProtocolError,
)
from drpc.errors import DRPCExecutionException
from drpc.requests import ReturnInfo

OUTCOME_BATCH = 64
"""Most outcomes a sender pipelines to its server in one round trip."""

LINK_ERRORS = (DRPCConnectionError, DRPCTimeoutError, ProtocolError, AuthorizationException)
"""What a call to a server raises when the link to it is down or refused."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """A result (``error`` None) or a failure on its way to the server that issued it."""

    return_info: ReturnInfo
    result: str = ""
    error: DRPCExecutionException | None = None

    @property
    def what(self) -> str:
        return "result" if self.error is None else "failure"


class OutcomeSender:
    """Sends one server's outcomes from a queue, on a thread and a connection of its own,
    so neither the topology's threads nor the other servers wait on this one."""

    def __init__(
        self,
        client: DRPCInvocationsClient,
        max_queued: int,
        dropped: Callable[[Outcome, str], None],
    ) -> None:
        self.client = client
        self.origin = client.origin
        self.max_queued = max_queued
        self._dropped = dropped
        self._queue: deque[Outcome] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._deadline: float | None = None  # set by close(): drain until then
        self._kept = False  # the client holds a connection that answered the last call
        self._thread = threading.Thread(
            target=self._run, name=f"drpc-outcomes-{self.origin}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def queued(self) -> int:
        with self._ready:
            return len(self._queue)

    def put(self, outcome: Outcome) -> None:
        with self._ready:
            if self._deadline is not None:
                reason = "the runner is stopping"
            elif len(self._queue) >= self.max_queued:
                reason = f"{len(self._queue)} outcomes queued (max_queued_outcomes)"
            else:
                self._queue.append(outcome)
                self._ready.notify()
                return
        self._dropped(outcome, reason)

    def close(self, deadline: float) -> None:
        """Take no more outcomes; send the queued ones until ``deadline``
        (``time.monotonic()``), then drop the rest and end."""
        with self._ready:
            if self._deadline is None:
                self._deadline = deadline
            self._ready.notify()

    def join(self, deadline: float) -> None:
        if self._thread.is_alive():
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        try:
            while outcomes := self._next():
                self._send(outcomes)
        finally:
            with self._ready:
                left = list(self._queue)
                self._queue.clear()
            for outcome in left:
                self._dropped(outcome, "not sent within the stop deadline")
            self.client.close()

    def _next(self) -> list[Outcome]:
        """What is queued, up to ``OUTCOME_BATCH`` outcomes, once there is any; none at
        the stop deadline."""
        with self._ready:
            while not self._queue:
                if self._deadline is not None:
                    return []
                self._ready.wait()
            if self._deadline is not None and time.monotonic() >= self._deadline:
                return []
            queue = self._queue
            return [queue.popleft() for _ in range(min(len(queue), OUTCOME_BATCH))]

    def _send(self, outcomes: list[Outcome]) -> None:
        """Send ``outcomes`` pipelined, in one round trip."""
        answers = [
            (o.return_info.request_id, o.result if o.error is None else o.error) for o in outcomes
        ]
        for attempt in range(2):
            try:
                self.client.answer_many(answers)
            except DRPCConnectionError as error:
                # A kept connection may have been closed by the server while idle: the calls
                # did not reach it, so they go once more on a new connection.
                retry = self._kept and attempt == 0
                self._kept = False
                if not retry:
                    self._drop_all(outcomes, str(error))
                    return
            except LINK_ERRORS as error:
                self._kept = False
                self.client.close()
                self._drop_all(outcomes, str(error))
                return
            else:
                self._kept = True
                return

    def _drop_all(self, outcomes: list[Outcome], reason: str) -> None:
        for outcome in outcomes:
            self._dropped(outcome, reason)
