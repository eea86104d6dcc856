"""The remote runner: serve DRPC topologies for DRPC servers in other processes.

``python -m drpc.runner --servers host:3773[,host:3773...] --topology module:attr``
(also ``drpc-runner``) runs each topology on an executor in this process and
feeds it from the invocations port of every listed server.

Contract:

- ``RemoteInvocations`` is the ``Invocations`` handle the topologies pull
  from: one background poller thread per server calls ``fetchRequest`` for
  each function (at most ``max_buffered`` requests waiting here per function;
  ``poll_interval`` seconds between polls that found nothing) and wakes the
  topology's spout; ``fetch_request`` only takes from that buffer, so it never
  waits on the network;
- each request remembers the server it came from (``ReturnInfo.origin`` is
  that server's "host:port") and its result or failure goes back to that
  server only (``failRequestV2``, keeping the failure's type and message);
- a server that cannot be reached is retried every ``reconnect_interval``
  seconds by its own poller while the others keep being served; an outcome
  for a server that is down is logged and dropped (the server fails that
  request at its deadline);
- with ``tls`` every server is reached over TLS; the runner's certificate CN
  is the user the servers' ACL must name as ``invocation.user`` (Storm's wire
  protocol has no place for a bearer token, so over Thrift a certificate is
  the runner's identity); a refusal (``AuthorizationException``) is logged
  like a lost link and retried every ``reconnect_interval``;
- ``settings`` (``InvocationsSettings``, picklable) rebuilds the same handle in
  another process (``RemoteInvocations.from_settings``): the resident Spark
  executor ships it to its tasks, each of which then fetches from every
  server itself, and calls ``hand_off(function)`` so this process's pollers
  leave that function to them;
- ``RemoteRunner`` ties it together: ``start()`` starts pollers and one
  executor per topology, ``stop()`` stops both.

Tracing: the executors' spans stay in this process (Storm's ``result`` call
carries only the result), so a server's trace of a request a runner served
shows its queue wait and the ``runner`` time, fetch to result. Log lines about
one request carry its ``request_id`` and ``server`` (``--log-format json``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.client import (
    DEFAULT_INVOCATIONS_PORT,
    AuthorizationException,
    DRPCConnectionError,
    DRPCInvocationsClient,
    DRPCTimeoutError,
    ProtocolError,
)
from drpc.client.calls import Address, format_address, parse_servers
from drpc.client.cli import add_tls_arguments, tls_from_args
from drpc.commandline import CommandLineParser
from drpc.errors import DRPCError, DRPCExecutionException
from drpc.hosting import (
    Host,
    Wakeups,
    add_hosting_arguments,
    as_topology,
    hosting_setup,
)
from drpc.model.topology import Topology
from drpc.protocol.tls import TLSSettings
from drpc.protocol.wire import MAX_FRAME_SIZE
from drpc.requests import DRPCRequest, ReturnInfo

log = logging.getLogger("drpc.runner")  # not "__main__" under python -m

DEFAULT_POLL_INTERVAL = 0.05
DEFAULT_RECONNECT_INTERVAL = 1.0
DEFAULT_MAX_BUFFERED = 64
DEFAULT_CALL_TIMEOUT = 10.0

_LINK_ERRORS = (DRPCConnectionError, DRPCTimeoutError, ProtocolError, AuthorizationException)


@dataclass(frozen=True)
class InvocationsSettings:
    """What ``RemoteInvocations`` was built with, to build it again elsewhere."""

    servers: tuple[Address, ...]
    poll_interval: float = DEFAULT_POLL_INTERVAL
    reconnect_interval: float = DEFAULT_RECONNECT_INTERVAL
    max_buffered: int = DEFAULT_MAX_BUFFERED
    timeout: float = DEFAULT_CALL_TIMEOUT
    max_frame_size: int = MAX_FRAME_SIZE
    tls: TLSSettings | None = None


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
    ) -> None:
        """
        :param servers: invocations ports, "host:port,..." or a list (port default 3773).
        :param functions: the DRPC functions to fetch requests for.
        :param poll_interval: seconds a poller waits after a round that found nothing,
            default 0.05.
        :param reconnect_interval: seconds between attempts to reach a server that is
            down, default 1.
        :param max_buffered: most fetched requests waiting here per function, default 64;
            a poller fetches no more for that function until the topology takes some.
        :param timeout: seconds for connecting and for each call to a server, default 10.
        :param max_frame_size: largest reply frame accepted in bytes, default 1 MiB.
        :param tls: reach the servers over TLS with these settings (None: plain TCP).
        """
        if max_buffered < 1:
            raise ValueError(f"max_buffered must be >= 1, got {max_buffered!r}")
        addresses = parse_servers(servers, DEFAULT_INVOCATIONS_PORT)
        self.settings = InvocationsSettings(
            tuple(addresses),
            poll_interval,
            reconnect_interval,
            max_buffered,
            timeout,
            max_frame_size,
            tls,
        )
        self.functions = list(functions)
        self.handed_off: list[str] = []
        self.poll_interval = poll_interval
        self.reconnect_interval = reconnect_interval
        self.max_buffered = max_buffered
        self._clients = {
            format_address(address): DRPCInvocationsClient(
                *address, timeout=timeout, max_frame_size=max_frame_size, tls=tls
            )
            for address in addresses
        }
        self._lock = threading.Lock()
        self._buffers: dict[str, deque[DRPCRequest]] = {name: deque() for name in functions}
        self._wakeups = Wakeups()
        self._stopping = threading.Event()
        self._pollers: list[threading.Thread] = []
        self.connected: dict[str, bool] = dict.fromkeys(self._clients, False)

    @classmethod
    def from_settings(
        cls, settings: InvocationsSettings, functions: Sequence[str]
    ) -> RemoteInvocations:
        """A handle like the one ``settings`` came from, fetching ``functions``."""
        return cls(
            list(settings.servers),
            functions,
            poll_interval=settings.poll_interval,
            reconnect_interval=settings.reconnect_interval,
            max_buffered=settings.max_buffered,
            timeout=settings.timeout,
            max_frame_size=settings.max_frame_size,
            tls=settings.tls,
        )

    def hand_off(self, function: str) -> None:
        """Stop fetching ``function`` here: processes built from ``settings`` fetch it."""
        with self._lock:
            if function in self.functions:
                self.functions.remove(function)
                self.handed_off.append(function)

    @property
    def origins(self) -> list[str]:
        return list(self._clients)

    def start(self) -> None:
        if not self.functions:  # every function handed off: nothing to fetch here
            return
        for origin, client in self._clients.items():
            poller = threading.Thread(
                target=self._poll, args=(origin, client), name=f"drpc-poller-{origin}", daemon=True
            )
            poller.start()
            self._pollers.append(poller)

    def stop(self) -> None:
        self._stopping.set()
        for poller in self._pollers:
            poller.join()
        self._pollers.clear()
        for client in self._clients.values():
            client.close()

    def buffered(self, function: str) -> int:
        with self._lock:
            return len(self._buffers[function])

    # -- the Invocations protocol ------------------------------------------------------------

    def fetch_request(self, function: str) -> DRPCRequest | None:
        with self._lock:
            buffer = self._buffers.get(function)
            return buffer.popleft() if buffer else None

    def result(self, return_info: ReturnInfo, result: str) -> None:
        self._send(
            return_info, "result", lambda client: client.result(return_info.request_id, result)
        )

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        self._send(
            return_info,
            "failure",
            lambda client: client.fail_request_v2(return_info.request_id, error),
        )

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        return self._wakeups.add(function, callback)

    # -- internals ---------------------------------------------------------------------------

    def _send(
        self,
        return_info: ReturnInfo,
        what: str,
        send: Callable[[DRPCInvocationsClient], None],
    ) -> None:
        client = self._clients.get(return_info.origin)
        if client is None:
            log.error(
                "dropped the %s of request %s: unknown server %r",
                what,
                return_info.request_id,
                return_info.origin,
                extra={"request_id": return_info.request_id, "server": return_info.origin},
            )
            return
        try:
            send(client)
        except _LINK_ERRORS as error:
            log.warning(
                "dropped the %s of request %s for %s: %s",
                what,
                return_info.request_id,
                return_info.origin,
                error,
                extra={"request_id": return_info.request_id, "server": return_info.origin},
            )

    def _poll(self, origin: str, client: DRPCInvocationsClient) -> None:
        while not self._stopping.is_set():
            try:
                fetched = self._poll_round(client)
            except _LINK_ERRORS as error:
                if self.connected[origin]:
                    log.warning("lost %s (%s); reconnecting in the background", origin, error)
                else:
                    log.debug("%s still unreachable: %s", origin, error)
                self.connected[origin] = False
                client.close()
                self._stopping.wait(self.reconnect_interval)
                continue
            except Exception:
                log.exception("polling %s failed", origin)
                self._stopping.wait(self.reconnect_interval)
                continue
            if not self.connected[origin]:
                log.info("serving %s for %s", ", ".join(self.functions), origin)
                self.connected[origin] = True
            if not fetched:
                self._stopping.wait(self.poll_interval)

    def _poll_round(self, client: DRPCInvocationsClient) -> bool:
        """Fetch at most one request per function with room; True if any came."""
        fetched = False
        for function in list(self.functions):
            if self.buffered(function) >= self.max_buffered:
                continue
            request = client.fetch_request(function)
            if request is None:
                continue
            fetched = True
            with self._lock:
                self._buffers[function].append(request)
            self._wakeups.notify(function)
        return fetched


class RemoteRunner:
    """Runs topologies in this process for the servers' invocations ports."""

    def __init__(
        self,
        topologies: Sequence[LinearDRPCTopologyBuilder | Topology],
        servers: str | Sequence[str | Address],
        *,
        executor: str | None = None,
        conf: dict[str, Any] | None = None,
        executor_options: dict[str, Any] | None = None,
        **invocations_options: Any,
    ) -> None:
        self.topologies = [as_topology(topology) for topology in topologies]
        functions = []
        for topology in self.topologies:
            if topology.drpc_function is None:
                raise DRPCError(f"topology {topology.name!r} does not serve a DRPC function")
            functions.append(topology.drpc_function)
        self.invocations = RemoteInvocations(servers, functions, **invocations_options)
        self.host = Host(
            self.invocations,
            executor=executor,
            conf=conf,
            executor_options=executor_options,
        )
        self.executor = self.host.executor

    def start(self) -> RemoteRunner:
        try:
            for topology in self.topologies:
                self.host.register(topology)
        except BaseException:
            self.stop()
            raise
        invocations = self.invocations
        invocations.start()
        log.info(
            "runner serving %s for %s on the %s executor%s",
            ", ".join(invocations.functions + invocations.handed_off),
            ", ".join(invocations.origins),
            self.executor,
            f"; the resident Spark tasks fetch {', '.join(invocations.handed_off)} themselves"
            if invocations.handed_off
            else "",
        )
        return self

    def stop(self) -> None:
        self.invocations.stop()
        self.host.stop()

    def __enter__(self) -> RemoteRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="drpc-runner",
        description="Serve DRPC topologies for DRPC servers through their invocations ports.",
    )
    parser.add_argument(
        "--servers",
        required=True,
        help="invocations ports, host:port[,host:port...] "
        f"(port default {DEFAULT_INVOCATIONS_PORT})",
    )
    add_hosting_arguments(parser, topology_required=True)
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=DEFAULT_POLL_INTERVAL,
        help="seconds between polls that found nothing (default %(default)g)",
    )
    parser.add_argument(
        "--reconnect-interval",
        type=float,
        default=DEFAULT_RECONNECT_INTERVAL,
        help="seconds between attempts to reach a server that is down (default %(default)g)",
    )
    add_tls_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    topologies, executor_options = hosting_setup(parser, args)
    try:
        runner = RemoteRunner(
            topologies,
            args.servers,
            executor=args.executor,
            executor_options=executor_options,
            poll_interval=args.poll_interval,
            reconnect_interval=args.reconnect_interval,
            tls=tls_from_args(args),
        )
    except (ValueError, DRPCError) as error:  # a bad --servers, an unusable TLS file
        parser.error(str(error))
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(signum, request_stop)
    try:
        runner.start()
    except DRPCError as error:  # e.g. SparkStartError: no executor registered in time
        log.error("cannot serve: %s", error)
        return 1
    try:
        stopping.wait()
        log.info("stopping")
    finally:
        runner.stop()
    return 0


if __name__ == "__main__":
    # Run the module's own import, not ``__main__``'s copy: the resident Spark executor
    # recognises drpc.runner.RemoteInvocations, which it can rebuild on its tasks.
    from drpc.runner import main as imported_main

    raise SystemExit(imported_main())
