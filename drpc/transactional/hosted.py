"""A transactional topology run hosted beside DRPC functions: in ``drpc-server`` or
``drpc-runner``.

Contract. ``HostedTransactional(topology, state_dir=..., executor=...,
max_spout_pending=None, ...)`` owns one ``TransactionalRunner`` over one state
directory; ``start()`` runs it on a thread of its own, polling its source
forever (a committed empty batch does not stop it); ``stop(timeout)`` asks it
to stop after the commit in progress and waits. It resumes after the last
commit in the state directory, so a host killed at any point and started
again continues exactly once: a commit is all there or not at all.

A run that fails (``TransactionalError``: a batch kept failing, or the state
is full) stops that run only: the host keeps serving, ``status()`` holds
the error, and it is logged. ``restart_delay`` (default None: no restart)
starts a failed run again after that many seconds, for sources whose
failures pass.

The DRPC functions the host serves can read the run's committed state (open
the same state directory: LMDB environments are shared within the process); a
partitioned state is read where its partitions live, so serve the functions that
read it from the process that runs it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from drpc.model.topology import Topology
from drpc.observe import Observer
from drpc.transactional.builder import TransactionalTopologyBuilder
from drpc.transactional.run import TransactionalRunner

log = logging.getLogger(__name__)


class HostedTransactional:
    def __init__(
        self,
        topology: Topology | TransactionalTopologyBuilder,
        *,
        state_dir: str,
        executor: str = "local",
        max_spout_pending: int | None = None,
        observer: Observer | None = None,
        poll_interval: float = 0.05,
        idle_interval: float = 0.5,
        restart_delay: float | None = None,
        **runner_options: Any,
    ) -> None:
        """
        :param state_dir: the LMDB state directory (created if missing).
        :param executor: ``"local"`` or ``"spark"`` (default ``"local"``).
        :param max_spout_pending: batches in flight (default None: the topology's
            ``topology.max.spout.pending``, else 1).
        :param observer: receives the run's ``tx_*`` events.
        :param poll_interval: seconds the run loop waits for an event before it looks
            again (default 0.05).
        :param idle_interval: seconds after a committed empty batch before the next
            transaction opens (default 0.5).
        :param restart_delay: seconds before a failed run starts again; None (default)
            leaves it stopped.
        :param runner_options: more ``TransactionalRunner`` keywords (``max_attempts``,
            ``state_options``, ``master``, ``conf`` ...).
        """
        if restart_delay is not None and restart_delay < 0:
            raise ValueError(f"restart_delay must be None or >= 0, got {restart_delay!r}")
        self._runner_arguments: dict[str, Any] = dict(
            state_dir=state_dir,
            executor=executor,
            max_spout_pending=max_spout_pending,
            observer=observer,
            **runner_options,
        )
        self._topology = topology
        self.runner = TransactionalRunner(topology, **self._runner_arguments)
        self.topology_id = self.runner.info.id
        self.state_dir = state_dir
        self.poll_interval = poll_interval
        self.idle_interval = idle_interval
        self.restart_delay = restart_delay
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> HostedTransactional:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name=f"drpc-tx-{self.topology_id}", daemon=True
            )
            self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self.runner.run(
                    until_idle=False,
                    stop=self._stop,
                    poll_interval=self.poll_interval,
                    idle_interval=self.idle_interval,
                )
                self.error = None
            except Exception as error:
                self.error = error
                log.error("transactional topology %r stopped: %s", self.topology_id, error)
                if self.restart_delay is None or self._stop.wait(self.restart_delay):
                    return
                log.info("restarting transactional topology %r", self.topology_id)
                self.runner.close()
                self.runner = TransactionalRunner(self._topology, **self._runner_arguments)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning(
                    "transactional topology %r did not stop within %g s", self.topology_id, timeout
                )
        self.runner.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def status(self) -> dict[str, Any]:
        """The runner's status (last committed txid, in flight, replays, error)."""
        return {**self.runner.status(), "state_dir": self.state_dir}
