"""Test helpers: ``LocalDRPC``, an in-process DRPC server hosting topologies.

Contract. ``with LocalDRPC(executor="local") as drpc: drpc.register(builder);
drpc.execute("reach", url)`` runs the topology on the chosen executor in this
process and blocks for the answer:

- a result is returned as the string the topology produced;
- a failure anywhere in the request's tuples raises
  ``DRPCExecutionException`` with ``type == FAILED_REQUEST`` and a message
  naming the step and the exception; concurrent requests are unaffected;
- a request whose tuple tree does not complete within
  ``topology.message.timeout.secs`` (default 30, in ``conf`` or the topology's
  own conf) raises FAILED_REQUEST naming the step where it was stuck, as
  Storm's DRPC spout fails it;
- past its deadline (``timeout`` seconds, default 600 as Storm's server) a
  request raises with ``type == SERVER_TIMEOUT`` and leaves its queue;
- an unregistered function raises FAILED_REQUEST at once, listing the
  registered functions;
- on exit every outstanding request fails with SERVER_SHUTDOWN.

``master``, ``spark_conf`` and ``start_timeout`` set up the Spark session of
runtimes on Spark (``drpc.runtime.get_session``); other ``executor_options``
go to every runtime's executor.
``submit`` returns a ``concurrent.futures.Future`` for concurrent callers.
``observer`` (a ``drpc.observe.Observer``) is handed to the hosted runtimes,
which then report their events to it.
LocalDRPC is also the ``Invocations`` handle the hosted topologies pull from
(at most once per request, never blocking).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from drpc.builders.coordinated_drpc import CoordinatedDRPCTopologyBuilder
from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.errors import DRPCError, DRPCExceptionType, DRPCExecutionException
from drpc.executors.local.calls import Call
from drpc.hosting import Host, Wakeups
from drpc.model.topology import Topology
from drpc.observe import Observer
from drpc.requests import (
    DEFAULT_REQUEST_TIMEOUT,
    LOCAL_ORIGIN,
    DRPCRequest,
    PendingRequest,
    RequestTable,
    ReturnInfo,
)
from drpc.sparkconf import DEFAULT_START_TIMEOUT, session_options

log = logging.getLogger(__name__)

W = TypeVar("W", Future[str], Call)
"""Where a call's outcome goes: a caller's ``Future``, or a ``Call`` its own thread waits on."""


class LocalDRPC:
    def __init__(
        self,
        executor: str = "local",
        *,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        conf: dict[str, Any] | None = None,
        observer: Observer | None = None,
        master: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        **executor_options: Any,
    ) -> None:
        self.executor_name = executor
        self.observer = observer
        self.timeout = timeout
        self._conf = dict(conf or {})
        self._table = RequestTable(timeout=timeout)
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._wakeups = Wakeups()
        self._host = Host(
            self,
            executor=executor,
            conf=self._conf,
            observer=observer,
            executor_options=executor_options,
            spark_options=session_options(master, spark_conf, start_timeout),
        )
        self._closed = False
        self._expirer_wakes_at = math.inf  # the expirer's next look at the table
        self._expirer = threading.Thread(
            target=self._expire_loop, name="LocalDRPC-expirer", daemon=True
        )
        self._expirer.start()

    # -- hosting ------------------------------------------------------------------------

    def register(
        self, topology: LinearDRPCTopologyBuilder | CoordinatedDRPCTopologyBuilder | Topology
    ) -> Any:
        """Run a DRPC topology on this LocalDRPC's executor; returns the executor."""
        with self._lock:
            if self._closed:
                raise DRPCError("LocalDRPC is shut down")
        return self._host.register(topology)

    def runtime(self, function: str) -> Any:
        return self._host.runtime(function)

    @property
    def functions(self) -> list[str]:
        return self._host.functions

    # -- calling --------------------------------------------------------------------------

    def submit(self, function: str, args: str, timeout: float | None = None) -> Future[str]:
        future: Future[str] = Future()
        return self._submit(function, args, timeout, future)

    def _submit(self, function: str, args: str, timeout: float | None, future: W) -> W:
        """Queue a call whose outcome goes to ``future`` (a ``Future`` or a ``Call``)."""
        if not isinstance(args, str):
            raise TypeError(f"DRPC arguments are strings, got {type(args).__name__}")
        with self._lock:
            if function not in self._host:
                registered = ", ".join(self._host.functions) or "none"
                future.set_exception(
                    DRPCExecutionException(
                        f"function {function!r} is not registered; "
                        f"registered functions: {registered}",
                        DRPCExceptionType.FAILED_REQUEST,
                    )
                )
                return future
            request = self._table.submit(function, args, time.monotonic(), timeout)
            request.waiter = future
            if request.deadline < self._expirer_wakes_at:  # else its sleep ends soon enough
                self._wakeup.notify()
        self._wakeups.notify(function)
        return future

    def execute(self, function: str, args: str, timeout: float | None = None) -> str:
        """Call ``function`` with ``args`` and wait for its result. On the local executor
        this thread runs the engine's turns meanwhile when no worker thread is awake
        (``LocalExecutor.call_inline``)."""
        try:
            runtime = self._host.runtime(function)
        except KeyError:
            runtime = None
        call_inline = getattr(runtime, "call_inline", None)
        if call_inline is None:
            return self.submit(function, args, timeout).result()
        # a Call, not a Future: this thread is the only one waiting for it
        call: Call = call_inline(lambda: self._submit(function, args, timeout, Call()))
        result: str = call.result()
        return result

    # -- the invocations handle hosted topologies use ---------------------------------------

    def fetch_request(self, function: str) -> DRPCRequest | None:
        with self._lock:
            request = self._table.fetch(function)
        return None if request is None else request.as_request(LOCAL_ORIGIN)

    def result(self, return_info: ReturnInfo, result: str) -> None:
        with self._lock:
            request = self._table.complete(return_info.request_id, result)
        if request is not None:
            request.waiter.set_result(result)

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        with self._lock:
            request = self._table.fail(return_info.request_id, error)
        if request is not None:
            request.waiter.set_exception(error)

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        return self._wakeups.add(function, callback)

    def has_requests(self, function: str) -> bool:
        # no lock: the answer is a hint either way (``WakeupSource``), and a dict read is
        # atomic under the GIL
        return self._table.queue_depth(function) > 0

    @property
    def late_results(self) -> int:
        return self._table.late_results

    def outstanding(self) -> int:
        with self._lock:
            return len(self._table)

    # -- lifecycle --------------------------------------------------------------------------

    def _expire_loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                deadline = self._table.next_deadline()
                now = time.monotonic()
                if deadline is None or deadline > now:
                    self._expirer_wakes_at = math.inf if deadline is None else deadline
                    self._wakeup.wait(None if deadline is None else deadline - now)
                    self._expirer_wakes_at = -math.inf
                    continue
                expired = self._table.expire(now)
            _settle(expired)

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            settled = self._table.shutdown()
            self._wakeup.notify_all()
        _settle(settled)
        self._host.stop()
        self._expirer.join(2.0)

    def __enter__(self) -> LocalDRPC:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _settle(requests: list[PendingRequest]) -> None:
    for request in requests:
        assert request.error is not None
        request.waiter.set_exception(request.error)
