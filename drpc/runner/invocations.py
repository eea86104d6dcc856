"""``RemoteInvocations``: requests fetched from several servers' invocations ports.

Contract:

- ``RemoteInvocations`` is the ``Invocations`` handle the topologies pull
  from: one background poller thread per server calls ``fetchRequest`` for
  each function, a batch of calls pipelined in one round trip (the batch
  doubles while batches come back full, up to ``max_fetch_batch``), and
  wakes the topology's spout. At most ``max_buffered`` requests wait here
  per function: a poller whose buffers are full fetches again as soon as the
  topology takes one. After a poll that found nothing it waits 1 ms, doubling
  up to ``poll_interval`` seconds while polls find nothing (Storm's idle
  spouts back off so). ``fetch_request`` only takes from the buffer, so it
  never waits on the network;
- each request remembers the server it came from (``ReturnInfo.origin`` is
  that server's "host:port") and its result or failure goes back to that
  server only (``failRequestV2``, keeping the failure's type and message),
  queued for that server's ``OutcomeSender`` (``drpc.runner.outcomes``): at
  most ``max_queued_outcomes`` (default 10 000) wait per server; an outcome
  dropped for any reason (queue full, server unknown or down) is logged with
  its request and server and counted in ``dropped_outcomes``, and the server
  fails that request at its deadline (or at once, if the connection that
  fetched it closed);
- each server binds a request to the connection that fetched it and fails it
  at once (INTERNAL_ERROR) when that connection closes before an answer: so
  ``stop()`` stops fetching, sends what is queued within ``stop_timeout``
  seconds (default 2), and closes the fetch connections last;
- a server that cannot be reached is retried every ``reconnect_interval``
  seconds by its own poller while the others keep being served;
- when a poller's link breaks, the requests it fetched that still wait in the buffers
  are dropped (logged, counted in ``dropped_requests``): that server failed them when
  the connection that fetched them closed, so running them would only answer late.
  The poller sees the break at its next fetch;
- ``settings`` (an ``InvocationsSettings``, picklable) is what a handle was
  built with; ``RemoteInvocations.from_settings(settings, functions)`` builds
  another, e.g. in a Spark task the settings were shipped to: the resident
  Spark executor ships them to its tasks, each of which then fetches from
  every server itself, and calls ``hand_off(function)`` so this handle's
  pollers leave that function to them (with none left, it starts none);
- with ``tls`` every server is reached over TLS; the runner's certificate CN
  is the user the servers' ACL must name as ``invocation.user`` (Storm's wire
  protocol has no place for a bearer token, so over Thrift a certificate is
  the runner's identity); a refusal (``AuthorizationException``) is logged
  like a lost link and retried every ``reconnect_interval``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drpc.client import DEFAULT_INVOCATIONS_PORT, DRPCInvocationsClient
from drpc.client.calls import Address, format_address, parse_servers
from drpc.errors import DRPCExecutionException
from drpc.hosting import Wakeups
from drpc.protocol.tls import TLSSettings
from drpc.protocol.wire import MAX_FRAME_SIZE
from drpc.requests import DRPCRequest, ReturnInfo
from drpc.runner.outcomes import LINK_ERRORS, Outcome, OutcomeSender

log = logging.getLogger("drpc.runner")  # one name for the runner's log lines, whatever module

DEFAULT_POLL_INTERVAL = 0.05
DEFAULT_RECONNECT_INTERVAL = 1.0
DEFAULT_MAX_BUFFERED = 64
DEFAULT_CALL_TIMEOUT = 10.0
DEFAULT_MAX_QUEUED_OUTCOMES = 10_000
"""Outcomes (results and failures) waiting to be sent, per server."""
DEFAULT_STOP_TIMEOUT = 2.0
"""Seconds ``stop()`` gives the queued outcomes to reach their servers."""
MIN_IDLE_WAIT = 0.001
"""A poller's first wait after a poll that found nothing (it doubles up to poll_interval)."""
DEFAULT_MAX_FETCH_BATCH = 16
"""Most fetches a poller sends one server at once, for one function (one round trip)."""


@dataclass(frozen=True, slots=True)
class InvocationsSettings:
    """Everything a ``RemoteInvocations`` is built from; picklable, so a process can ship
    it to another (a Spark task) that builds its own (``RemoteInvocations.from_settings``).
    The fields are ``RemoteInvocations``' keywords, documented there."""

    servers: tuple[Address, ...]
    poll_interval: float = DEFAULT_POLL_INTERVAL
    reconnect_interval: float = DEFAULT_RECONNECT_INTERVAL
    max_buffered: int = DEFAULT_MAX_BUFFERED
    timeout: float = DEFAULT_CALL_TIMEOUT
    max_frame_size: int = MAX_FRAME_SIZE
    tls: TLSSettings | None = None
    max_queued_outcomes: int = DEFAULT_MAX_QUEUED_OUTCOMES
    stop_timeout: float = DEFAULT_STOP_TIMEOUT
    max_fetch_batch: int = DEFAULT_MAX_FETCH_BATCH

    def build(self, functions: Sequence[str]) -> RemoteInvocations:
        """A handle fetching ``functions`` from these servers
        (``drpc.requests.InvocationsBlueprint``)."""
        return RemoteInvocations.from_settings(self, functions)

    def __post_init__(self) -> None:
        if not self.servers:
            raise ValueError("no server to serve: give at least one invocations address")
        for name in ("max_buffered", "max_queued_outcomes", "max_frame_size", "max_fetch_batch"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        for name in ("poll_interval", "reconnect_interval", "stop_timeout"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {self.timeout!r}")

    @property
    def origins(self) -> list[str]:
        """Each server as its requests' ``ReturnInfo.origin`` names it."""
        return [format_address(address) for address in self.servers]


class RemoteInvocations:
    """Requests from the invocations ports of several servers; outcomes back to each."""

    def __init__(
        self,
        servers: str | Sequence[str | Address],
        functions: Sequence[str],
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        reconnect_interval: float = DEFAULT_RECONNECT_INTERVAL,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
        timeout: float = DEFAULT_CALL_TIMEOUT,
        max_frame_size: int = MAX_FRAME_SIZE,
        tls: TLSSettings | None = None,
        max_queued_outcomes: int = DEFAULT_MAX_QUEUED_OUTCOMES,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        max_fetch_batch: int = DEFAULT_MAX_FETCH_BATCH,
    ) -> None:
        """
        :param servers: invocations ports, "host:port,..." or a list (port default 3773).
        :param functions: the DRPC functions to fetch requests for.
        :param poll_interval: longest wait, in seconds, between polls that find nothing,
            default 0.05: a poller waits ``MIN_IDLE_WAIT`` (1 ms) after a poll that found
            nothing, doubling the wait while polls keep finding nothing (a lone caller's
            request is fetched within a few ms, an idle server is asked 20 times a second).
        :param reconnect_interval: seconds between attempts to reach a server that is
            down, default 1.
        :param max_buffered: most fetched requests waiting here per function, default 64;
            a poller fetches no more for that function until the topology takes some.
        :param timeout: seconds for connecting and for each call to a server, default 10.
        :param max_frame_size: largest reply frame accepted in bytes, default 1 MiB.
        :param tls: reach the servers over TLS with these settings (None: plain TCP).
        :param max_queued_outcomes: most results and failures waiting to be sent to one
            server, default 10 000; past it an outcome is dropped (logged, counted in
            ``dropped_outcomes``) and the server fails that request at its deadline.
        :param stop_timeout: seconds ``stop()`` gives the queued outcomes to reach their
            servers (and the pollers to end), default 2.
        :param max_fetch_batch: most fetches a poller sends a server at once for one
            function, pipelined in one round trip, default 16; a batch that came back full
            doubles the next one (up to this and the buffer's room), one that did not
            shrinks to what came.
        """
        self._setup(
            InvocationsSettings(
                tuple(parse_servers(servers, DEFAULT_INVOCATIONS_PORT)),
                poll_interval=poll_interval,
                reconnect_interval=reconnect_interval,
                max_buffered=max_buffered,
                timeout=timeout,
                max_frame_size=max_frame_size,
                tls=tls,
                max_queued_outcomes=max_queued_outcomes,
                stop_timeout=stop_timeout,
                max_fetch_batch=max_fetch_batch,
            ),
            functions,
        )

    @classmethod
    def from_settings(
        cls, settings: InvocationsSettings, functions: Sequence[str]
    ) -> RemoteInvocations:
        """A handle built from ``settings`` (e.g. another ``RemoteInvocations``'
        ``settings``, shipped to this process), fetching requests for ``functions``."""
        invocations = cls.__new__(cls)
        invocations._setup(settings, functions)
        return invocations

    def _setup(self, settings: InvocationsSettings, functions: Sequence[str]) -> None:
        self.settings = settings
        """What this handle was built with (picklable: ``from_settings`` rebuilds it)."""
        self.functions = list(functions)
        self.handed_off: list[str] = []  # fetched elsewhere (``hand_off``)
        self.poll_interval = settings.poll_interval
        self.reconnect_interval = settings.reconnect_interval
        self.max_buffered = settings.max_buffered

        def client(address: Address) -> DRPCInvocationsClient:
            return DRPCInvocationsClient(
                *address,
                timeout=settings.timeout,
                max_frame_size=settings.max_frame_size,
                tls=settings.tls,
            )

        # Requests are fetched on one connection per server and answered on another, so a
        # slow fetch never delays a result. A server binds a request to the connection
        # that fetched it: closing that one fails the requests it still holds.
        self._clients = {format_address(address): client(address) for address in settings.servers}
        self._senders = {
            origin: OutcomeSender(
                client(address), settings.max_queued_outcomes, self._outcome_dropped
            )
            for origin, address in zip(self._clients, settings.servers, strict=True)
        }
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified as a full buffer gets room
        self._buffers: dict[str, deque[DRPCRequest]] = {name: deque() for name in functions}
        self._wakeups = Wakeups()
        self._stopping = threading.Event()
        self._flushed = threading.Event()  # the outcomes are sent: fetch connections may close
        self._pollers: list[threading.Thread] = []
        self._polls_ended: list[threading.Event] = []  # one per poller: it fetches no more
        self._started = False
        self.dropped_outcomes = 0
        """Results and failures that never reached their server (queue full, unknown
        server, link down, not sent by the stop deadline): those requests fail at their
        server's deadline, or at once if the connection that fetched them closed."""
        self.dropped_requests = 0
        """Fetched requests dropped unrun because the link to their server broke."""
        self.connected: dict[str, bool] = dict.fromkeys(self._clients, False)

    @property
    def origins(self) -> list[str]:
        return list(self._clients)

    def hand_off(self, function: str) -> None:
        """Fetch ``function`` no more here: handles built from ``settings`` fetch it."""
        with self._lock:
            if function in self.functions:
                self.functions.remove(function)
                self.handed_off.append(function)

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for sender in self._senders.values():
            sender.start()
        if not self.functions:  # every function handed off: nothing to fetch here
            return
        for origin, client in self._clients.items():
            ended = threading.Event()
            poller = threading.Thread(
                target=self._poll,
                args=(origin, client, ended),
                name=f"drpc-poller-{origin}",
                daemon=True,
            )
            poller.start()
            self._pollers.append(poller)
            self._polls_ended.append(ended)

    def stop_fetching(self, deadline: float | None = None) -> None:
        """Fetch no more requests (outcomes are still sent); waits for the pollers' calls
        in flight until ``deadline`` (``time.monotonic()``; default ``stop_timeout`` from
        now)."""
        if deadline is None:
            deadline = time.monotonic() + self.settings.stop_timeout
        self._stopping.set()
        for ended in self._polls_ended:
            ended.wait(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Stop fetching, send the queued outcomes within ``stop_timeout`` seconds (the
        rest are dropped and counted), then close every connection. A call stuck on a
        server that does not answer ends on its own within ``timeout`` (daemon threads):
        ``stop`` does not wait for it past its deadline."""
        deadline = time.monotonic() + self.settings.stop_timeout
        self.stop_fetching(deadline)
        for sender in self._senders.values():
            sender.close(deadline)
        for sender in self._senders.values():
            sender.join(deadline)
        # The fetch connections close last: a server fails at once the requests that the
        # connection which fetched them still holds when it closes.
        self._flushed.set()
        for poller in self._pollers:
            poller.join(max(0.0, deadline - time.monotonic()))
        if not self._started:
            for client in self._clients.values():
                client.close()

    def buffered(self, function: str) -> int:
        with self._lock:
            return len(self._buffers[function])

    def queued_outcomes(self, origin: str) -> int:
        """Outcomes waiting to be sent to the server ``origin`` ("host:port")."""
        return self._senders[origin].queued()

    # -- the Invocations protocol ------------------------------------------------------------

    def fetch_request(self, function: str) -> DRPCRequest | None:
        with self._lock:
            buffer = self._buffers.get(function)
            if not buffer:
                return None
            if len(buffer) >= self.max_buffered:
                self._room.notify_all()  # a poller waiting for room fetches again
            return buffer.popleft()

    def result(self, return_info: ReturnInfo, result: str) -> None:
        """Queue ``result`` for the server that issued the request; never waits."""
        self._queue(Outcome(return_info, result))

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        """Queue the failure for the server that issued the request; never waits."""
        self._queue(Outcome(return_info, error=error))

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        return self._wakeups.add(function, callback)

    def has_requests(self, function: str) -> bool:
        # no lock: the answer is a hint either way (``WakeupSource``)
        return bool(self._buffers.get(function))

    # -- internals ---------------------------------------------------------------------------

    def _queue(self, outcome: Outcome) -> None:
        sender = self._senders.get(outcome.return_info.origin)
        if sender is None:
            self._outcome_dropped(outcome, f"unknown server {outcome.return_info.origin!r}")
            return
        sender.put(outcome)

    def _outcome_dropped(self, outcome: Outcome, reason: str) -> None:
        with self._lock:
            self.dropped_outcomes += 1
        info = outcome.return_info
        log.warning(
            "dropped the %s of request %s for %s: %s",
            outcome.what,
            info.request_id,
            info.origin,
            reason,
            extra={"request_id": info.request_id, "server": info.origin},
        )

    def _poll(self, origin: str, client: DRPCInvocationsClient, ended: threading.Event) -> None:
        try:
            self._poll_until_stopped(origin, client)
        finally:
            ended.set()
            self._flushed.wait()
            client.close()

    def _poll_until_stopped(self, origin: str, client: DRPCInvocationsClient) -> None:
        batches: dict[str, int] = {}  # each function's next batch size
        idle_wait = 0.0  # the wait after a poll that found nothing: backs off while idle
        while not self._stopping.is_set():
            try:
                fetched = self._poll_round(client, batches)
            except LINK_ERRORS as error:
                if self.connected[origin]:
                    log.warning("lost %s (%s); reconnecting in the background", origin, error)
                else:
                    log.debug("%s still unreachable: %s", origin, error)
                self.connected[origin] = False
                client.close()
                self._drop_buffered(origin, error)
                self._stopping.wait(self.reconnect_interval)
                continue
            except Exception:
                log.exception("polling %s failed", origin)
                self._stopping.wait(self.reconnect_interval)
                continue
            if not self.connected[origin]:
                log.info("serving %s for %s", ", ".join(self.functions), origin)
                self.connected[origin] = True
            if fetched:
                idle_wait = 0.0
                continue
            with self._lock:
                if self._full():  # the topology is behind: fetch once it takes one
                    self._room.wait(self.poll_interval)
                    continue
            idle_wait = min(max(2 * idle_wait, MIN_IDLE_WAIT), self.poll_interval)
            self._stopping.wait(idle_wait)

    def _drop_buffered(self, origin: str, error: BaseException) -> None:
        """Drop the buffered requests of ``origin``, whose fetch connection broke."""
        with self._lock:
            dropped = 0
            for function, buffer in self._buffers.items():
                kept = deque(request for request in buffer if request.return_info.origin != origin)
                dropped += len(buffer) - len(kept)
                self._buffers[function] = kept
            self.dropped_requests += dropped
            if dropped:
                self._room.notify_all()
        if dropped:
            log.warning(
                "dropped %d fetched request(s) of %s unrun: the link broke (%s), and the server "
                "failed them",
                dropped,
                origin,
                error,
                extra={"server": origin},
            )

    def _full(self) -> bool:
        """No function has room in its buffer. Holds ``_lock``."""
        return all(len(self._buffers[f]) >= self.max_buffered for f in self.functions)

    def _poll_round(self, client: DRPCInvocationsClient, batches: dict[str, int]) -> bool:
        """Fetch a batch of requests for each function with room (``max_fetch_batch``);
        True if any came."""
        fetched = False
        most = self.settings.max_fetch_batch
        for function in list(self.functions):
            room = self.max_buffered - self.buffered(function)
            if room <= 0:
                continue
            asked = min(room, batches.get(function, 1))
            requests = client.fetch_requests(function, asked)
            came = len(requests)
            batches[function] = min(most, 2 * asked) if came == asked else max(1, came)
            if not requests:
                continue
            fetched = True
            with self._lock:
                self._buffers[function].extend(requests)
            self._wakeups.notify(function)
        return fetched
