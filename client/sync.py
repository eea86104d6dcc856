"""Blocking DRPC clients: ``DRPCClient`` (execute) and ``DRPCInvocationsClient`` (runners).

Contract:

- ``DRPCClient(host="localhost", port=3772, timeout=None)`` calls
  ``DistributedRPC.execute`` over framed binary Thrift and returns the result
  string, or raises ``DRPCExecutionException`` (``.type``, ``.msg``) or
  ``AuthorizationException`` as the server answered; it connects lazily and
  keeps one connection; a context manager closes it;
- ``servers=[...]`` gives several servers: a call goes to the current one and
  fails over to the next on a connection error (a server that cannot be
  reached in ``timeout``, or a connection that breaks before the reply); a
  kept connection found broken is first replaced once (the server may have
  restarted), so a function runs twice only if a connection broke mid-call;
  when every server failed, ``DRPCConnectionError`` lists why;
- ``timeout`` bounds each call as a whole, in seconds, connecting, a fresh try
  on a stale connection and failing over included (None: wait as long as the
  server does); past it ``DRPCTimeoutError`` and the connection is closed (a
  late reply cannot be mistaken for the next call's);
- replies over ``max_frame_size`` bytes (default 1 MiB) raise ``ProtocolError``
  and close the connection;
- instances are safe to share between threads (calls are serialized);
- ``tls=TLSSettings(ca, cert, key)`` speaks TLS: the server is verified
  against ``ca`` (host name included) and ``cert`` is presented, its subject
  CN being the user name the server authorizes (Thrift has no other place for
  an identity; bearer tokens travel over HTTP, ``drpc.client.http``); a failed
  handshake is a ``DRPCConnectionError``.

``DRPCInvocationsClient`` speaks ``DistributedRPCInvocations`` to one server,
with the same connection and frame rules (its timeout bounds connecting and each
read); after a connection error the next call reconnects.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any

from drpc.client.calls import (
    Address,
    Call,
    execute_call,
    fail_request_call,
    fail_request_v2_call,
    fetch_request_call,
    format_address,
    parse_servers,
    reply_length,
    result_call,
    unwrap,
)
from drpc.client.errors import DRPCConnectionError, DRPCTimeoutError

from drpc.errors import DRPCExecutionException
from drpc.protocol.tls import TLSSettings
from drpc.protocol.wire import (
    FRAME_HEADER_SIZE,
    MAX_FRAME_SIZE,
    Message,
    ProtocolError,
    decode_message,
    to_wire_execution_error,
)
from drpc.requests import DRPCRequest, ReturnInfo

DEFAULT_PORT = 3772
DEFAULT_INVOCATIONS_PORT = 3773


class _Connection:
    """One blocking framed-binary Thrift connection; one call at a time, or several
    pipelined (``call_many``)."""

    def __init__(
        self,
        address: Address,
        timeout: float | None,
        max_frame_size: int,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        self.address = address
        self.max_frame_size = max_frame_size
        self.calls = 0
        raw = None
        try:
            raw = socket.create_connection(address, timeout=timeout)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socket = (
                raw
                if tls is None
                else tls.wrap_socket(raw, server_hostname=server_hostname or address[0])
            )
        except OSError as error:  # a connect timeout or failed handshake too
            if raw is not None:
                raw.close()
            raise DRPCConnectionError(f"{format_address(address)}: {error}") from error

    def call(self, call: Call, deadline: float | None = None) -> Any:
        """The reply value of ``call``; with ``deadline`` (``time.monotonic()``) the
        exchange ends there with ``DRPCTimeoutError``, else each socket operation waits
        the connection's timeout."""
        self.calls += 1
        seqid = self.calls
        (message,) = self._exchange(call.encode(seqid), 1, call.method, deadline)
        return self._checked(call, message, seqid)

    def call_many(self, calls: list[Call]) -> list[Any]:
        """Each call's reply value, the calls pipelined: every frame sent at once, then
        the replies read, matched to their calls by sequence id (one round trip)."""
        seqids = range(self.calls + 1, self.calls + 1 + len(calls))
        self.calls += len(calls)
        frames = b"".join(call.encode(seqid) for call, seqid in zip(calls, seqids, strict=True))
        replies = {m.seqid: m for m in self._exchange(frames, len(calls), calls[0].method)}
        return [
            self._checked(call, replies.get(seqid), seqid)
            for call, seqid in zip(calls, seqids, strict=True)
        ]

    def _exchange(
        self, frames: bytes, count: int, method: str, deadline: float | None = None
    ) -> list[Message]:
        """Send ``frames``, then read ``count`` reply messages (by ``deadline``, if any)."""
        where = format_address(self.address)
        try:
            self._wait_until(deadline)
            self._socket.sendall(frames)
            messages = []
            for _ in range(count):
                header = self._receive(FRAME_HEADER_SIZE, deadline)
                length = reply_length(header, self.max_frame_size, self.address)
                messages.append(decode_message(self._receive(length, deadline)))
            return messages
        except TimeoutError as error:
            self.close()
            raise DRPCTimeoutError(f"{method} on {where} timed out") from error
        except ProtocolError:
            self.close()
            raise
        except OSError as error:
            self.close()
            raise DRPCConnectionError(f"{where}: {error}") from error

    def _checked(self, call: Call, message: Message | None, seqid: int) -> Any:
        try:
            if message is None:
                where = format_address(self.address)
                raise ProtocolError(f"no reply to {call.method!r} #{seqid} from {where}")
            return call.check_reply(message, seqid)
        except ProtocolError:
            self.close()
            raise

    def _wait_until(self, deadline: float | None) -> None:
        """Make the socket's next operation end by ``deadline`` (None: leave it)."""
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the call's time is up")
            self._socket.settimeout(left)

    def _receive(self, size: int, deadline: float | None = None) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            self._wait_until(deadline)
            chunk = self._socket.recv(size - len(chunks))
            if not chunk:
                raise ConnectionResetError("the server closed the connection")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self._socket.close()


class DRPCClient:
    def __init__(
        self,
        host: str = "localhost",
        port: int = DEFAULT_PORT,
        timeout: float | None = None,
        *,
        servers: str | Sequence[str | Address] | None = None,
        max_frame_size: int = MAX_FRAME_SIZE,
        tls: TLSSettings | None = None,
    ) -> None:
        """
        :param host: server host (ignored when ``servers`` is given).
        :param port: server execute port, default 3772.
        :param timeout: seconds each call may take in all (connecting and failing over
            included); None waits as long as the server does (its own deadline, 600 s by
            default).
        :param servers: servers to fail over between, as "host:port,host:port" or a list
            of "host:port" strings or (host, port) pairs.
        :param max_frame_size: largest reply frame accepted in bytes, default 1 MiB.
        :param tls: connect over TLS with these settings (None: plain TCP).
        """
        self.servers = parse_servers(servers if servers is not None else [(host, port)], port)
        self.timeout = timeout
        self.max_frame_size = max_frame_size
        self.tls = tls
        self._tls_context = tls.client_context() if tls is not None else None
        self._current = 0
        self._connection: _Connection | None = None
        self._lock = threading.Lock()

    def execute(self, function: str, args: str) -> str:
        """Call ``function`` with ``args`` on a server and return its result."""
        with self._lock:
            return unwrap(self._call(execute_call(function, args)), returns_value=True)

    def _call(self, call: Call) -> Any:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        failures: list[str] = []
        for step in range(len(self.servers)):
            if deadline is not None and time.monotonic() >= deadline:
                raise DRPCTimeoutError(
                    f"{call.method} timed out after {self.timeout:g} s: " + "; ".join(failures)
                )
            index = (self._current + step) % len(self.servers)
            try:
                result = self._call_on(index, call, deadline)
            except DRPCConnectionError as error:
                failures.append(str(error))
                continue
            self._current = index
            return result
        raise DRPCConnectionError("no DRPC server answered: " + "; ".join(failures))

    def _call_on(self, index: int, call: Call, deadline: float | None) -> Any:
        connection = self._connection
        if connection is not None and connection.address != self.servers[index]:
            connection.close()
            connection = None
        if connection is not None:
            try:
                return connection.call(call, deadline)
            except DRPCConnectionError:
                self._connection = None  # stale (the server restarted?): one fresh try below
        self._connection = None
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise DRPCTimeoutError(f"{call.method} timed out after {self.timeout:g} s")
        connection = _Connection(
            self.servers[index],
            left,
            self.max_frame_size,
            self._tls_context,
            self.tls.server_hostname if self.tls else None,
        )
        self._connection = connection
        try:
            return connection.call(call, deadline)
        except (DRPCConnectionError, DRPCTimeoutError, ProtocolError):
            self._connection = None
            raise

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __enter__(self) -> DRPCClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DRPCInvocationsClient:
    """A runner's handle on one server's invocations port (blocking, thread-safe)."""

    def __init__(
        self,
        host: str = "localhost",
        port: int = DEFAULT_INVOCATIONS_PORT,
        timeout: float | None = None,
        *,
        max_frame_size: int = MAX_FRAME_SIZE,
        tls: TLSSettings | None = None,
    ) -> None:
        self.address: Address = (host, port)
        self.origin = format_address(self.address)
        self.timeout = timeout
        self.max_frame_size = max_frame_size
        self.tls = tls
        self._tls_context = tls.client_context() if tls is not None else None
        self._connection: _Connection | None = None
        self._lock = threading.Lock()

    def fetch_request(self, function: str) -> DRPCRequest | None:
        """The next request for ``function``, or None when its queue is empty (never waits)."""
        request = self._call(fetch_request_call(function), returns_value=True)
        if not request.request_id:
            return None
        return DRPCRequest(function, request.func_args, ReturnInfo(request.request_id, self.origin))

    def fetch_requests(self, function: str, count: int) -> list[DRPCRequest]:
        """Up to ``count`` requests for ``function``: ``count`` fetches pipelined on the
        connection, in one round trip; the ones that found a request, in order."""
        fetched = self._call_many([fetch_request_call(function)] * count, returns_value=True)
        return [
            DRPCRequest(function, request.func_args, ReturnInfo(request.request_id, self.origin))
            for request in fetched
            if request.request_id
        ]

    def result(self, request_id: str, result: str) -> None:
        self._call(result_call(request_id, result), returns_value=False)

    def answer_many(self, answers: Sequence[tuple[str, str | DRPCExecutionException]]) -> None:
        """``result`` or ``fail_request_v2`` for each ``(request_id, result or error)``,
        pipelined on the connection: one round trip for them all."""
        self._call_many(
            [
                result_call(request_id, answer)
                if isinstance(answer, str)
                else fail_request_v2_call(request_id, to_wire_execution_error(answer))
                for request_id, answer in answers
            ],
            returns_value=False,
        )

    def fail_request(self, request_id: str) -> None:
        """Fail a request with Storm's "Request failed" (FAILED_REQUEST)."""
        self._call(fail_request_call(request_id), returns_value=False)

    def fail_request_v2(self, request_id: str, error: DRPCExecutionException) -> None:
        """Fail a request with this message and type."""
        self._call(
            fail_request_v2_call(request_id, to_wire_execution_error(error)), returns_value=False
        )

    def _call(self, call: Call, *, returns_value: bool) -> Any:
        return self._call_many([call], returns_value=returns_value)[0]

    def _call_many(self, calls: list[Call], *, returns_value: bool) -> list[Any]:
        with self._lock:
            if self._connection is None:
                self._connection = _Connection(
                    self.address,
                    self.timeout,
                    self.max_frame_size,
                    self._tls_context,
                    self.tls.server_hostname if self.tls else None,
                )
            try:
                results = self._connection.call_many(calls)
            except (DRPCConnectionError, DRPCTimeoutError, ProtocolError):
                self._connection = None
                raise
        return [unwrap(result, returns_value=returns_value) for result in results]

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __enter__(self) -> DRPCInvocationsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
