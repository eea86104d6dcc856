"""The DRPC server's core: request bookkeeping shared by every front end and runtime.

Contract. ``DRPCService`` wraps ``drpc.requests.RequestTable`` (ids "1", "2", …,
a FIFO queue per function, at-most-once handout) for an asyncio server whose
runtimes may live in other threads:

- ``await execute(function, args)`` waits on an asyncio future, never a
  thread, so any number of calls can wait at once; it returns the result or
  raises ``DRPCExecutionException``;
- ``fetch``/``complete``/``fail`` are safe from any thread; outcomes reach the
  waiting call on the event loop (``call_soon_threadsafe`` from other threads);
- one timer on the loop fails requests past their deadline with
  SERVER_TIMEOUT "Timed Out" and removes them from their queue;
- ``shutdown`` fails everything outstanding with SERVER_SHUTDOWN and refuses
  new calls;
- a result or failure for an unknown or settled id is ignored and counted
  (``late_results``);
- a function is *served* while a topology is registered for it in-process or
  a remote runner fetched it within ``runner_liveness`` seconds (a name whose
  window passed is forgotten at the next fetch); a call to a function that is
  not served fails at once with FAILED_REQUEST naming at most
  ``max_listed_functions`` of the served functions (the others counted),
  unless ``wait_for_unserved`` (Storm's behaviour: queue it and let it time
  out); for ``startup_grace`` seconds after ``attach`` such a call is queued
  instead, and fails so at the grace's end if no runner fetched its function
  by then (a restarted server's runners reconnect meanwhile);
- every operation from the network passes ``authorize(identity, operation,
  function)`` first: a function name over ``limits.max_function_name`` UTF-8
  bytes is refused with ``NameTooLongError`` before anything looks at it
  (``check_name``, which front ends also call on request ids), then the
  authorizer decides; the default allows everything (``drpc.server.acl``
  plugs in here) but the operations on the plain topologies the server runs
  (``ADMIN_OPERATIONS``, ``authorize_admin``): without an authorizer nobody may
  kill, activate or deactivate one;
- limits (``drpc.server.limits.Limits``) refuse a call at once with
  ``ServerBusyError`` (FAILED_REQUEST "server busy: …") when its function
  already has ``max_queue_depth`` requests waiting, when ``max_outstanding``
  requests are held, or when it would open a queue for one function name more
  than ``max_functions``, or when its ``caller`` (the user, or the client
  address when anonymous: front ends pass it) already holds
  ``max_outstanding_per_caller`` requests; runner fetches of more than
  ``max_functions`` distinct names are served but not remembered; a result
  over ``max_result_size`` UTF-8 bytes fails its request with FAILED_REQUEST
  instead of reaching the caller;
- a request a runner fetched over the network is bound to the connection
  that fetched it (``fetch(..., fetcher=peer)``, a key unique per
  connection); when that connection closes (``release(fetcher, runner)``)
  with requests of it still unanswered, each fails at once with
  INTERNAL_ERROR "Request failed: the runner at <address> that fetched it
  went away before answering" (counted in ``orphaned``) instead of waiting
  for its deadline; an answer that arrives later, on any connection, is a
  late result. The answer itself may come on any connection (Storm's
  runners answer on another one). While a connection holds requests
  (``holds(fetcher)``) it is not idle;
- a call whose caller goes away (its task is cancelled: the connection
  closed) withdraws its request if no runtime fetched it yet (settled with
  ``AbandonedError``, counted in ``withdrawn``); a fetched one stays held, and
  counted against its caller, until its runtime answers or its deadline, and
  that outcome reaches nobody;
- ``observer``, a ``drpc.observe.FanOut``, is the one bus every request's life
  goes to (metrics, the dashboard, traces) and that hosted runtimes report
  their events to: ``request_submitted`` and ``request_fetched`` (called with
  the service lock held: must be cheap and must not call back into the
  service), ``request_settled`` (before the waiting caller is woken, so a
  caller that got its answer finds it counted) and ``request_refused``
  (execute calls answered without queueing: busy, unauthorized, not served,
  shut down). An observer's exception is logged, never raised; add observers
  (``observer.observers``) before serving.
- tracing: ``execute(function, args, trace=RequestTrace(...))`` records the
  call's id, its queue wait, the step spans its runtime reports and when it
  settled (``drpc.requests``); ``tracer``, on the bus from the start, does the
  recording, and forgets a trace once its call settled. Log lines about one
  request (a failure, a timeout, a late or oversized result) carry
  ``request_id`` and ``function`` fields.

``EmbeddedInvocations`` is the ``Invocations`` handle in-process runtimes pull
from: the same table and the same at-most-once contract remote runners get.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from drpc.server.fetchers import FetchBindings
from drpc.server.identity import ANONYMOUS
from drpc.server.limits import Limits
from drpc.server.refusals import RefusalLog

from drpc.errors import (
    AbandonedError,
    AuthorizationException,
    DRPCExceptionType,
    DRPCExecutionException,
    NameTooLongError,
    ServerBusyError,
)
from drpc.hosting import Wakeups
from drpc.logs import request_extra
from drpc.observe import FanOut, Observer
from drpc.requests import (
    DEFAULT_REQUEST_TIMEOUT,
    LOCAL_ORIGIN,
    DRPCRequest,
    PendingRequest,
    RequestTable,
    RequestTrace,
    ReturnInfo,
    TraceCollector,
)

log = logging.getLogger(__name__)

DEFAULT_RUNNER_LIVENESS = 30.0
"""Seconds a remote runner's last ``fetchRequest`` keeps its function served."""

MAX_LOGGED_MESSAGE = 1000
"""Characters of a failure message (a runner's ``failRequestV2`` may send a megabyte) that
go into its log line; the caller still gets the whole message."""

EXECUTE = "execute"
FETCH_REQUEST = "fetchRequest"
RESULT = "result"
FAIL_REQUEST = "failRequest"
KILL_TOPOLOGY = "killTopology"
ACTIVATE = "activate"
DEACTIVATE = "deactivate"
ADMIN_OPERATIONS = frozenset({KILL_TOPOLOGY, ACTIVATE, DEACTIVATE})
"""Storm's Nimbus operations on a plain topology the server runs, named by the topology."""

OK = "ok"
FAILED = "failed"
TIMEOUT = "timeout"
SHUTDOWN = "shutdown"
INTERNAL_ERROR = "internal_error"
UNAUTHORIZED = "unauthorized"
BUSY = "busy"
ABANDONED = "abandoned"
OUTCOMES = (OK, FAILED, TIMEOUT, SHUTDOWN, INTERNAL_ERROR, UNAUTHORIZED, BUSY, ABANDONED)
"""What an execute call can end in, as metrics and the dashboard count it."""

_OUTCOME_OF_TYPE = {
    DRPCExceptionType.FAILED_REQUEST: FAILED,
    DRPCExceptionType.SERVER_TIMEOUT: TIMEOUT,
    DRPCExceptionType.SERVER_SHUTDOWN: SHUTDOWN,
    DRPCExceptionType.INTERNAL_ERROR: INTERNAL_ERROR,
}


def outcome_of(error: BaseException | None) -> str:
    """The outcome of a call that ended with ``error`` (None: a result)."""
    if error is None:
        return OK
    if isinstance(error, ServerBusyError):
        return BUSY
    if isinstance(error, AbandonedError):
        return ABANDONED
    if isinstance(error, AuthorizationException):
        return UNAUTHORIZED
    if isinstance(error, DRPCExecutionException):
        return _OUTCOME_OF_TYPE.get(error.type, FAILED)
    return INTERNAL_ERROR


class RequestTracer(TraceCollector):
    """Stamps traced requests (``PendingRequest.trace``) as they live and collects the
    spans runtimes report for them."""

    def request_submitted(self, request: PendingRequest) -> None:
        trace = request.trace
        if trace is not None:
            trace.request_id = request.id
            trace.function = request.function
            trace.submitted = request.submitted
            self.watch(request.id, trace)

    def request_fetched(self, request: PendingRequest, now: float) -> None:
        if request.trace is not None:
            request.trace.fetched = now

    def request_settled(self, request: PendingRequest, now: float) -> None:
        if request.trace is not None:
            request.trace.settled = now
            self.unwatch(request.id)


class Authorizer(Protocol):
    """Decides whether ``identity`` (None when unauthenticated) may do ``operation`` on
    ``function``; raises ``AuthorizationException`` to refuse."""

    def __call__(self, identity: str | None, operation: str, function: str) -> None: ...


def authorize_admin(
    authorizer: Authorizer | None,
    identity: str | None,
    operation: str,
    topology: str,
    *,
    process: str = "server",
) -> None:
    """Storm's rule for ``ADMIN_OPERATIONS`` on a plain topology: what ``authorizer``
    allows, and nothing to anyone without one (a ``process`` open to callers is not open
    to being stopped)."""
    if operation not in ADMIN_OPERATIONS:
        raise ValueError(f"{operation!r} is not one of {sorted(ADMIN_OPERATIONS)}")
    if authorizer is None:
        user = identity or ANONYMOUS
        raise AuthorizationException(
            f"DRPC request '{operation}' for '{user}' user is not authorized: this {process} "
            "has no ACL; list who may under nimbus.admins in an --acl file"
        )
    authorizer(identity, operation, topology)


class DRPCService:
    """Thread-safe request bookkeeping bound to one asyncio event loop."""

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        runner_liveness: float = DEFAULT_RUNNER_LIVENESS,
        wait_for_unserved: bool = False,
        startup_grace: float = 0.0,
        authorizer: Authorizer | None = None,
        limits: Limits | None = None,
        observers: Sequence[Observer] = (),
        refusals: RefusalLog | None = None,
    ) -> None:
        """
        :param startup_grace: seconds after ``attach`` during which a call to a function
            nobody serves waits for a runner to fetch it instead of failing at once (the
            runners of a restarted server reconnect); those still unfetched at its end
            fail as they would have (default 0: none).
        :param observers: put on the bus (``observer``) beside the tracer.
        :param refusals: where lines about refused input go (rate-limited); by default
            this module's logger at ``limits.refusal_logs_per_second``.
        """
        if runner_liveness < 0:
            raise ValueError(f"runner_liveness must be >= 0, got {runner_liveness!r}")
        if startup_grace < 0:
            raise ValueError(f"startup_grace must be >= 0, got {startup_grace!r}")
        self._table = RequestTable(timeout=timeout)
        self.runner_liveness = runner_liveness
        self.wait_for_unserved = wait_for_unserved
        self.startup_grace = startup_grace
        self._grace_until = -math.inf
        self._authorizer = authorizer
        self.limits = limits or Limits()
        self.refusals = refusals or RefusalLog(self.limits.refusal_logs_per_second)
        self.refused_busy = 0
        self.withdrawn = 0
        """Requests withdrawn because their caller went away before a fetch."""
        self.orphaned = 0
        """Requests failed because the connection that fetched them closed before an
        answer (``release``)."""
        self._bindings = FetchBindings()
        self.tracer = RequestTracer()
        """Collects the spans of traced calls."""
        self.observer = FanOut(self.tracer, *observers)
        """The bus: request events, and every hosted runtime's events."""
        self._lock = threading.Lock()
        self._embedded: set[str] = set()
        self._remote_fetches: OrderedDict[str, float] = OrderedDict()  # oldest fetch first
        self._wakeups = Wakeups()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_deadline = math.inf

    @property
    def timeout(self) -> float:
        return self._table.timeout

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the running loop that awaits results. Call from that loop's thread."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        if self.startup_grace > 0 and not self.wait_for_unserved:
            self._grace_until = time.monotonic() + self.startup_grace
            loop.call_later(self.startup_grace, self._end_grace)

    def _end_grace(self) -> None:
        """Fail the calls the startup grace held for functions still nobody serves."""
        now = time.monotonic()
        settled = []
        with self._lock:
            for function in self._table.queued_functions():
                if self._is_served(function, now):
                    continue
                error = self._not_served(function, now)
                for request_id in self._table.queued_ids(function):
                    request = self._table.withdraw(request_id, error)
                    if request is not None:
                        settled.append(request)
        if settled:
            self._settle(settled)

    # -- serving ------------------------------------------------------------------------

    def register_embedded(self, function: str) -> None:
        with self._lock:
            self._embedded.add(function)

    def unregister_embedded(self, function: str) -> None:
        with self._lock:
            self._embedded.discard(function)

    def served_functions(self) -> list[str]:
        with self._lock:
            return self._served(time.monotonic())

    def served_summary(self) -> tuple[list[str], int]:
        """At most ``limits.max_listed_functions`` served names (sorted) and how many are
        served: what may be shown to anyone who asks."""
        served = self.served_functions()
        return served[: self.limits.max_listed_functions], len(served)

    def _listed(self, now: float) -> str:
        served = self._served(now)
        shown = served[: self.limits.max_listed_functions]
        listed = ", ".join(shown) or "none"
        more = len(served) - len(shown)
        return f"{listed} and {more} more" if more else listed

    def _served(self, now: float) -> list[str]:
        remote = {
            name
            for name, fetched in self._remote_fetches.items()
            if now - fetched <= self.runner_liveness
        }
        return sorted(self._embedded | remote)

    def _is_served(self, function: str, now: float) -> bool:
        if function in self._embedded:
            return True
        fetched = self._remote_fetches.get(function)
        return fetched is not None and now - fetched <= self.runner_liveness

    def _not_served(self, function: str, now: float) -> DRPCExecutionException:
        return DRPCExecutionException(
            f"function {function!r} is not served: no topology is registered for it and no "
            f"runner fetched it in the last {self.runner_liveness:g} s; served functions: "
            f"{self._listed(now)}",
            DRPCExceptionType.FAILED_REQUEST,
        )

    def check_name(self, name: str, what: str = "function name") -> None:
        """Refuse ``name`` with ``NameTooLongError`` if it is over ``max_function_name``
        UTF-8 bytes; ``what`` says what it is in the message (never the name itself)."""
        limit = self.limits.max_function_name
        size = _utf8_size(name, limit)
        if size > limit:
            raise NameTooLongError(
                f"a {what} of {size} bytes exceeds the limit of {limit} (max_function_name)",
                DRPCExceptionType.FAILED_REQUEST,
            )

    def authorize(self, identity: str | None, operation: str, function: str) -> None:
        try:
            self.check_name(function)
            if self._authorizer is not None:
                self._authorizer(identity, operation, function)
        except (AuthorizationException, NameTooLongError) as error:
            if operation == EXECUTE:
                self.refused(function, error)
            raise

    def authorize_admin(self, identity: str | None, operation: str, topology: str) -> None:
        """``authorize`` for ``ADMIN_OPERATIONS``, which a server without an authorizer
        refuses to everyone (``authorize_admin``)."""
        self.check_name(topology, "topology name")
        authorize_admin(self._authorizer, identity, operation, topology)

    def refused(self, function: str, error: BaseException) -> None:
        """Report an execute call answered with ``error`` without being queued (front ends
        call this for refusals the service does not see, such as an unknown token)."""
        now = time.monotonic()
        with self._lock:
            known = self._is_served(function, now)
        self.observer.request_refused(function, error, known, now)

    # -- callers (event loop) -------------------------------------------------------------

    async def execute(
        self,
        function: str,
        args: str,
        *,
        trace: RequestTrace | None = None,
        caller: str | None = None,
    ) -> str:
        """Queue a request and wait for its outcome. Call on the attached loop.

        With ``trace`` the request's id, times and step spans are recorded there
        (``drpc.requests.RequestTrace``; read it once this returns or raises).
        ``caller`` is whoever calls (``caller_of``), held to
        ``max_outstanding_per_caller``. Cancelling the call withdraws its request
        unless a runtime fetched it already."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self.attach(loop)
        waiter: asyncio.Future[str] = loop.create_future()
        now = time.monotonic()
        with self._lock:
            refuse = not (self.wait_for_unserved or self._table.closed)
            try:
                self.check_name(function)
                if refuse and now >= self._grace_until and not self._is_served(function, now):
                    raise self._not_served(function, now)
                self._check_capacity(function, caller)
                request = self._table.submit(function, args, now, caller=caller)
            except DRPCExecutionException as error:
                known = self._is_served(function, now)
                self.observer.request_refused(function, error, known, now)
                raise
            request.waiter = waiter
            request.trace = trace
            self.observer.request_submitted(request)
        self._arm_expiry(request.deadline)
        self._wakeups.notify(function)
        try:
            return await waiter
        except asyncio.CancelledError:
            self._withdraw(request)
            raise

    def _withdraw(self, request: PendingRequest) -> None:
        gone = AbandonedError(
            "Request withdrawn: its caller went away before a runtime fetched it",
            DRPCExceptionType.FAILED_REQUEST,
        )
        with self._lock:
            withdrawn = self._table.withdraw(request.id, gone)
            if withdrawn is not None:
                self.withdrawn += 1
        if withdrawn is not None:
            self._settle([withdrawn])

    def _check_capacity(self, function: str, caller: str | None) -> None:
        """Refuse a new request for ``function`` if a limit is reached. Holds the lock."""
        limits = self.limits
        reason = None
        depth = self._table.queue_depth(function)
        held = 0 if caller is None else self._table.held_by(caller)
        if len(self._table) >= limits.max_outstanding:
            reason = f"{len(self._table)} requests outstanding (limit {limits.max_outstanding})"
        elif held >= limits.max_outstanding_per_caller:
            reason = (
                f"{held} requests outstanding for {caller} "
                f"(limit {limits.max_outstanding_per_caller} per caller)"
            )
        elif depth >= limits.max_queue_depth:
            reason = f"{depth} requests of {function!r} waiting (limit {limits.max_queue_depth})"
        elif depth == 0 and len(self._table.queued_functions()) >= limits.max_functions:
            reason = f"{limits.max_functions} functions have queued requests (limit reached)"
        if reason is not None:
            self.refused_busy += 1
            raise ServerBusyError(f"server busy: {reason}", DRPCExceptionType.FAILED_REQUEST)

    # -- runtimes and runners (any thread) ------------------------------------------------

    def fetch(
        self,
        function: str,
        origin: str,
        *,
        remote: bool,
        fetcher: Hashable | None = None,
    ) -> DRPCRequest | None:
        """Hand out the oldest queued request for ``function`` (at most once), or None.
        With ``fetcher`` (the fetching connection) the request is bound to it until it
        settles: ``release(fetcher, ...)`` fails it."""
        with self._lock:
            now = time.monotonic()
            if remote:
                self._remember_fetch(function, now)
            request = self._table.fetch(function)
            if request is not None:
                if fetcher is not None:
                    self._bindings.bind(fetcher, request.id)
                self.observer.request_fetched(request, now)
        if request is not None and request.trace is not None:
            request.trace.remote = remote
        return None if request is None else request.as_request(origin)

    def _remember_fetch(self, function: str, now: float) -> None:
        """Note a runner's fetch of ``function``; forget names whose window passed."""
        fetches = self._remote_fetches
        while fetches:
            name, fetched = next(iter(fetches.items()))
            if now - fetched <= self.runner_liveness:
                break
            del fetches[name]
        if function in fetches:
            fetches.move_to_end(function)
        elif len(fetches) >= self.limits.max_functions:
            self.refusals.refuse(
                "not tracking runner fetches of %r: %d functions tracked (limit)",
                function[:100],
                len(fetches),
            )
            return
        fetches[function] = now

    def tracked_functions(self) -> int:
        """Distinct function names held: runner fetches remembered and non-empty queues."""
        with self._lock:
            return len(set(self._remote_fetches) | set(self._table.queued_functions()))

    def function_of(self, request_id: str) -> str | None:
        with self._lock:
            request = self._table.get(request_id)
            return None if request is None else request.function

    def complete(self, request_id: str, result: str) -> bool:
        """Settle a request with its result; False if the id is unknown or already settled.
        A result over ``max_result_size`` bytes fails the request instead."""
        size = _utf8_size(result, self.limits.max_result_size)
        if size > self.limits.max_result_size:
            log.warning(
                "request %s: failed a result of %d bytes (limit %d)",
                request_id[:40],
                size,
                self.limits.max_result_size,
                extra=request_extra(request_id[:40], self.function_of(request_id)),
            )
            return self.fail(
                request_id,
                DRPCExecutionException(
                    f"Request failed: the result of {size} bytes exceeds the limit of "
                    f"{self.limits.max_result_size}",
                    DRPCExceptionType.FAILED_REQUEST,
                ),
            )
        with self._lock:
            request = self._table.complete(request_id, result)
        if request is None:
            log.debug(
                "ignored a late result for request %s",
                request_id[:40],
                extra=request_extra(request_id[:40]),
            )
            return False
        self._settle([request])
        return True

    def fail(self, request_id: str, error: DRPCExecutionException) -> bool:
        with self._lock:
            request = self._table.fail(request_id, error)
        if request is None:
            log.debug(
                "ignored a late failure for request %s",
                request_id[:40],
                extra=request_extra(request_id[:40]),
            )
            return False
        self._settle([request])
        log.info(
            "request %s of %r failed: %s: %s",
            request.id,
            request.function,
            error.type.name,
            error.msg[:MAX_LOGGED_MESSAGE],
            extra=request_extra(request.id, request.function),
        )
        return True

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        return self._wakeups.add(function, callback)

    # -- the connections that fetched requests ------------------------------------------------

    def holds(self, fetcher: Hashable) -> bool:
        """Whether ``fetcher`` holds requests it fetched and has not answered."""
        with self._lock:
            return self._bindings.holds(fetcher)

    def release(self, fetcher: Hashable, runner: str) -> int:
        """``fetcher``'s connection closed: fail every request it fetched and did not
        answer with INTERNAL_ERROR naming ``runner`` (its address); returns how many."""
        error = DRPCExecutionException(
            f"Request failed: the runner at {runner} that fetched it went away "
            "(its connection closed) before answering",
            DRPCExceptionType.INTERNAL_ERROR,
        )
        settled: list[PendingRequest] = []
        with self._lock:
            for request_id in self._bindings.release(fetcher):
                if self._table.get(request_id) is None:
                    continue  # settled a moment ago, not yet forgotten by _settle
                request = self._table.fail(request_id, error)
                if request is not None:
                    settled.append(request)
            self.orphaned += len(settled)
        if not settled:
            return 0
        self._settle(settled)
        for request in settled:
            log.warning(
                "request %s of %r failed: the runner at %s that fetched it went away",
                request.id,
                request.function,
                runner,
                extra=request_extra(request.id, request.function),
            )
        return len(settled)

    # -- deadlines and shutdown -------------------------------------------------------------

    def _arm_expiry(self, deadline: float) -> None:
        if deadline >= self._expiry_deadline:
            return
        assert self._loop is not None
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry_deadline = deadline
        self._expiry = self._loop.call_later(
            max(0.0, deadline - time.monotonic()), self._expire_due
        )

    def _expire_due(self) -> None:
        self._expiry = None
        self._expiry_deadline = math.inf
        with self._lock:
            expired = self._table.expire(time.monotonic())
            next_deadline = self._table.next_deadline()
        self._settle(expired)
        for request in expired:
            log.info(
                "request %s of %r timed out after %g s",
                request.id,
                request.function,
                request.timeout,
                extra=request_extra(request.id, request.function),
            )
        if next_deadline is not None:
            self._arm_expiry(next_deadline)

    def shutdown(self) -> int:
        """Fail every outstanding request with SERVER_SHUTDOWN; returns how many."""
        with self._lock:
            settled = self._table.shutdown()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
            self._expiry_deadline = math.inf
        self._settle(settled)
        return len(settled)

    @property
    def closed(self) -> bool:
        return self._table.closed

    # -- statistics ---------------------------------------------------------------------------

    @property
    def late_results(self) -> int:
        with self._lock:
            return self._table.late_results

    def outstanding(self) -> int:
        with self._lock:
            return len(self._table)

    def queue_depth(self, function: str) -> int:
        with self._lock:
            return self._table.queue_depth(function)

    def queue_depths(self) -> dict[str, int]:
        """Requests waiting, for every function that has some."""
        with self._lock:
            table = self._table
            return {name: table.queue_depth(name) for name in table.queued_functions()}

    # -- handing outcomes to waiters ------------------------------------------------------------

    def _settle(self, requests: list[PendingRequest]) -> None:
        if not requests:
            return
        if len(self._bindings):
            with self._lock:
                for request in requests:
                    self._bindings.settled(request.id)
        now = time.monotonic()
        for request in requests:
            self.observer.request_settled(request, now)
        if threading.get_ident() == self._loop_thread:
            for request in requests:
                _resolve(request)
            return
        loop = self._loop
        if loop is None:
            return  # nobody can be waiting: only execute() creates waiters, on the loop
        try:
            for request in requests:
                loop.call_soon_threadsafe(_resolve, request)
        except RuntimeError:
            log.debug("event loop closed; dropped %d outcome(s)", len(requests))


def _utf8_size(text: str, limit: int) -> int:
    """The UTF-8 size of ``text``, encoding it only when it might exceed ``limit``."""
    if len(text) * 4 <= limit:
        return len(text)  # a lower bound, and under the limit even at 4 bytes a character
    return len(text.encode("utf-8", "surrogatepass"))


def _resolve(request: PendingRequest) -> None:
    waiter = request.waiter
    if waiter is None or waiter.done():
        return  # the caller went away (connection closed) before the outcome
    if request.error is not None:
        waiter.set_exception(request.error)
    else:
        waiter.set_result(request.result)


class EmbeddedInvocations:
    """The invocations handle of a runtime hosted in the server's process."""

    def __init__(self, service: DRPCService) -> None:
        self._service = service

    def fetch_request(self, function: str) -> DRPCRequest | None:
        return self._service.fetch(function, LOCAL_ORIGIN, remote=False)

    def result(self, return_info: ReturnInfo, result: str) -> None:
        self._service.complete(return_info.request_id, result)

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        self._service.fail(return_info.request_id, error)

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        return self._service.add_listener(function, callback)
