"""The in-process engine's acker tasks.

Contract. ``AckerTask`` runs ``drpc.semantics.acker.Acker`` for the roots that
hash to it and sends each root's outcome to its spout; a failed root is
broadcast so coordinated tasks drop its ids. Its ledger takes the acker
messages of the engine's turns directly as each turn ends
(``LocalExecutor``); its mailbox, ticks and the acker messages sent from
outside a turn.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from drpc.executors.local.actors import Actor
from drpc.executors.local.messages import Ack, AckFail, AckInit, Message, RootDone, Tick, fold_acks
from drpc.executors.local.mutex import Mutex
from drpc.semantics.acker import Acker, AckerDecision, RootCompleted

if TYPE_CHECKING:
    from drpc.executors.local.executor import LocalExecutor


class AckerTask(Actor):
    """Runs the acker for the roots that hash to it (see the module doc).

    The ledger is guarded by ``lock``, which the engine's ackers share: a turn of the
    engine applies its acker messages to the ledgers directly as it ends
    (``LocalExecutor``), on whatever thread ran it; only ticks and acker messages from
    outside a turn come through the mailbox."""

    def __init__(self, engine: LocalExecutor, index: int, timeout: float, lock: Mutex) -> None:
        super().__init__()
        self.engine = engine
        self.name = f"__acker[{index}]"
        self.acker = Acker(timeout)
        self.lock = lock  # the engine's, shared by its ackers

    def handle_batch(self, batch: list[Message], turn: object = None) -> None:
        super().handle_batch(fold_acks(batch) if len(batch) > 1 else batch, turn)

    def apply(self, message: Message, now: float) -> list[AckerDecision]:
        """The ledger's decisions on ``message`` (an acker message or a ``Tick``)."""
        lock = self.lock
        lock.acquire()
        try:
            return self.decide(message, now)
        finally:
            lock.release()

    def decide(self, message: Message, now: float) -> list[AckerDecision]:
        """``apply`` with ``lock`` held."""
        acker = self.acker
        match message:
            case Ack(root, ack_val):
                return acker.ack(root, ack_val, now)
            case AckInit(root, ack_val, owner):
                return acker.init(root, ack_val, owner, now)
            case AckFail(root, failure):
                return acker.fail(root, failure, now)
            case Tick(now):
                return acker.expire(now)
            case _:
                return []

    def handle(self, message: Message) -> None:
        decisions = self.apply(message, time.monotonic())
        for decision in decisions:
            owner = cast(int, decision.owner)  # the task id of the spout that made the root
            if isinstance(decision, RootCompleted):
                self.engine.deliver(owner, RootDone(decision.root, None))
                continue
            failure = decision.failure
            if decision.timed_out:
                failure = self.engine.where_stuck(decision.root, failure)
            self.engine.deliver(owner, RootDone(decision.root, failure))
            self.engine.broadcast_abandon(decision.root)
