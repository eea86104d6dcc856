"""An asyncio listener for one Thrift service over framed binary protocol, plain or TLS.

Contract:

- each connection reads frames in a loop; a frame announcing a negative
  length or more than ``limits.max_frame_size`` bytes, a truncated frame, a
  frame that does not arrive whole within ``limits.read_timeout`` seconds of
  its first byte, bytes that are not a Thrift message, a message over the
  string, container or nesting limits (``drpc.protocol.scan``), or a method the
  service does not have close that connection only (a method it does not
  have, or a call with malformed arguments, first gets a
  ``TApplicationException`` reply); the reason is logged (``refusals``: one
  WARNING line each, rate-limited), the listener keeps serving everyone else;
- calls on one connection run concurrently and each reply carries its call's
  sequence id, so a sequential client (one call at a time, like Thrift's
  generated clients) and a multiplexing one (matching replies by sequence id)
  both work; at most ``limits.max_calls_per_connection`` of a connection's
  calls run at once: the calls read past them wait as their checked frames
  (parked, a few bytes each) and start in order as running ones finish;
- what one connection makes the server hold is bounded: while its running
  calls (each its frame plus ``CALL_COST``, what a started call holds), its
  parked frames (each plus ``PARKED_COST``) and its replies not yet sent pass
  ``limits.max_pending_bytes``, the connection is not read; while its unsent
  replies alone pass it, finished calls also hold their replies, and a
  connection that stays so for ``limits.write_timeout`` seconds is closed
  (aborted: what it did not take is dropped) and its calls are cancelled,
  which withdraws their requests;
- a connection with no call in flight may wait ``limits.idle_timeout``
  seconds for its next frame, then it is closed (a multiplexing client waiting
  for long calls is not idle);
- at ``max_connections`` open connections, or ``limits.max_connections_per_address``
  from one client address (default: half of ``max_connections``, at most 256; see
  ``drpc.server.admission``), the oldest idle connection (of that address, or of any)
  is closed to make room for a new one; only when none is idle is the new one closed at
  once, so sockets that do nothing never lock out a caller that works;
- with an ``ssl`` context the connection is TLS; a verified client
  certificate's subject CN is the caller's identity (``Peer.identity``),
  otherwise the identity is None (anonymous);
- a handler that raises anything but ``ProtocolError`` is a server bug: it is
  logged with its traceback and the caller gets an INTERNAL_ERROR
  ``TApplicationException``; the connection stays open;
- a connection handles up to ``FRAMES_PER_TURN`` of the frames it has
  buffered before the other connections get a turn; a frame that has arrived
  whole is taken without arming the deadlines above (it cannot be late), and
  every frame is checked against the wire limits when read but decoded only
  when its call starts (a parked frame costs a structural walk, not a decode);
- when a connection ends (the client closed it, or a limit above), calls
  still in flight on it are cancelled and its parked frames dropped: a burst
  of pipelined calls abandoned by closing leaves little behind, as parking
  keeps the connection read, so its end is seen at once;
- ``on_close(peer)``, if given, is called once when a connection has ended
  (its calls cancelled); ``holds(peer)``, if given, says that a connection
  holds something of the service's (the invocations service: requests it
  fetched and did not answer): such a connection is not idle, so neither the
  idle timeout nor a reclaim closes it (``Peer`` is unique per connection:
  ``connection`` numbers them);
- ``close()`` stops accepting, lets calls in flight write their replies (up to
  a grace period), then closes every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from drpc.server.admission import ConnectionTable, default_per_address
from drpc.server.limits import CALL_COST, PARKED_COST, Limits
from drpc.server.refusals import RefusalLog
from thrift.Thrift import TApplicationException

from drpc.protocol.scan import WireLimits
from drpc.protocol.tls import common_name
from drpc.protocol.wire import (
    CALL,
    FRAME_HEADER_SIZE,
    Message,
    ProtocolError,
    check_call,
    decode_message,
    encode_application_error,
    frame_length,
)

DEFAULT_MAX_CONNECTIONS = 4096

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Peer:
    """Who is calling: the remote address ("host:port"), its host, the authenticated
    identity if any, and the connection's number (unique within its listener)."""

    address: str
    identity: str | None = None
    host: str = ""
    connection: int = 0


MethodHandler = Callable[[Message, Peer], Awaitable[bytes]]
"""Reads a call's arguments from the message and returns the framed reply."""


class _Connection:
    """One client connection: its streams, who it is, and its calls in flight."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: Peer,
        task: asyncio.Task[None],
    ) -> None:
        self.task = task  # its key in the listener's ConnectionTable
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.calls: dict[asyncio.Task[None], int] = {}  # each running call and its charge
        self.parked: deque[bytes] = deque()  # checked payloads of calls not started yet
        self.held_bytes = 0  # running calls' and parked frames' charges
        self.ended = False  # no call starts any more
        self.waiting: asyncio.Timeout | None = None  # the idle deadline of a frame awaited

    def park(self, payload: bytes) -> None:
        self.parked.append(payload)
        self.held_bytes += _parked_charge(payload)

    def unpark(self) -> bytes | None:
        """The oldest parked payload, or None (none, or the connection ended)."""
        if self.ended or not self.parked:
            return None
        payload = self.parked.popleft()
        self.held_bytes -= _parked_charge(payload)
        return payload

    def end(self) -> None:
        self.ended = True
        self.parked.clear()
        self.held_bytes = sum(self.calls.values())

    def call_done(self, call: asyncio.Task[None], idle_timeout: float) -> bool:
        """Forget a finished call; True when the connection became idle by it (it waits
        for its next frame with nothing in flight: its idle deadline starts)."""
        self.held_bytes -= self.calls.pop(call, 0)
        waiting = self.waiting
        if not self.calls and not self.parked and waiting is not None and waiting.when() is None:
            waiting.reschedule(asyncio.get_running_loop().time() + idle_timeout)
            return True
        return False


FRAMES_PER_TURN = 64
"""Frames a connection handles from what it has buffered before the other connections get
a turn (reading a frame that has arrived does not wait). One frame per turn made a burst of
1 000 pipelined calls take 1 000 turns of a busy loop, seconds, and a burst abandoned by
closing held its started calls that long; 64 frames take about a millisecond."""


def _parked_charge(payload: bytes) -> int:
    return len(payload) + FRAME_HEADER_SIZE + PARKED_COST


class ThriftListener:
    def __init__(
        self,
        service_name: str,
        methods: Mapping[str, MethodHandler],
        *,
        limits: Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        refusals: RefusalLog | None = None,
        on_close: Callable[[Peer], None] | None = None,
        holds: Callable[[Peer], bool] | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be positive, got {max_connections!r}")
        self.service_name = service_name
        self._methods = dict(methods)
        self.limits = limits or Limits()
        self._wire_limits = WireLimits(
            self.limits.max_string_length,
            self.limits.max_container_length,
            self.limits.max_nesting_depth,
        )
        self._ssl = ssl_context
        self.max_connections = max_connections
        self.max_connections_per_address = (
            self.limits.max_connections_per_address or default_per_address(max_connections)
        )
        self._table: ConnectionTable[asyncio.Task[None]] = ConnectionTable(
            max_connections, self.max_connections_per_address
        )
        self.refusals = refusals or RefusalLog(self.limits.refusal_logs_per_second)
        self.refused_connections = 0
        self.reclaimed_connections = 0  # idle ones closed to make room for a new one
        self.idle_closed = 0
        self.write_timeouts = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._calls: set[asyncio.Task[None]] = set()
        self._on_close = on_close
        self._holds = holds
        self._numbers = itertools.count(1)
        self.port: int | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            ssl=self._ssl,
            ssl_handshake_timeout=self.limits.read_timeout if self._ssl else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self, grace: float = 5.0) -> None:
        if self._server is not None:
            self._server.close()
        if self._calls:
            await asyncio.wait(list(self._calls), timeout=grace)
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=grace)
        if self._server is not None:
            await self._server.wait_closed()

    def connections_from(self, host: str) -> int:
        """Open connections from the client address ``host``."""
        return self._table.connections_from(host)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peername = writer.get_extra_info("peername")
        host = _host(peername)
        admission = self._table.open(task, host, asyncio.get_running_loop().time())
        if not admission.admitted:
            self.refused_connections += 1
            self.refusals.refuse(
                "%s: refused a connection from %s: %s",
                self.service_name,
                _format_address(peername),
                admission.reason,
            )
            writer.close()
            return
        for idle in admission.reclaim:
            self.reclaimed_connections += 1
            log.info(
                "%s: closed an idle connection to make room for one from %s",
                self.service_name,
                _format_address(peername),
            )
            idle.cancel()
        self._connections.add(task)
        peer = Peer(
            _format_address(peername),
            common_name(writer.get_extra_info("peercert")),
            host,
            next(self._numbers),
        )
        try:
            await self._serve(_Connection(reader, writer, peer, task))
        except asyncio.CancelledError:
            pass  # close() or a reclaim cancelled this connection: it is closed
        finally:
            self._connections.discard(task)
            self._table.closed(task)
            if self._on_close is not None:
                try:
                    self._on_close(peer)
                except Exception:
                    log.exception("%s: on_close for %s raised", self.service_name, peer.address)

    async def _serve(self, connection: _Connection) -> None:
        writer, peer, calls = connection.writer, connection.peer, connection.calls
        writer.transport.set_write_buffer_limits(high=self.limits.max_pending_bytes)
        in_turn = 0
        try:
            while self._may_read_now(connection) or await self._may_read(connection):
                payload = await self._buffered_frame(connection)
                if payload is None:
                    payload = await self._read_frame(connection)
                header = None if payload is None else self._check(payload, peer)
                if payload is None or header is None:
                    break
                name, message_type = header
                handler = self._methods.get(name)
                if handler is None or message_type != CALL:
                    what = "unknown method" if handler is None else "not a call"
                    self._refuse(peer, f"{what} {name[:100]!r}")
                    writer.write(
                        encode_application_error(
                            name,
                            decode_message(payload).seqid,
                            TApplicationException.UNKNOWN_METHOD,
                            f"{what} {name[:100]!r} on {self.service_name}",
                        )
                    )
                    break
                if len(calls) < self.limits.max_calls_per_connection:
                    self._start(connection, handler, decode_message(payload))
                else:
                    connection.park(payload)
                in_turn += 1
                if in_turn == FRAMES_PER_TURN:  # then the other connections' turn
                    in_turn = 0
                    await asyncio.sleep(0)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("%s: connection from %s failed", self.service_name, peer.address)
        finally:
            connection.end()
            for call in list(calls):
                call.cancel()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.limits.write_timeout):
                    await writer.drain()
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # the client did not take what it was sent
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _start(self, connection: _Connection, handler: MethodHandler, message: Message) -> None:
        self._table.busy(connection.task)
        call = asyncio.create_task(self._call(handler, message, connection))
        connection.calls[call] = message.size + FRAME_HEADER_SIZE + CALL_COST
        connection.held_bytes += message.size + FRAME_HEADER_SIZE + CALL_COST
        self._calls.add(call)
        call.add_done_callback(lambda done: self._call_done(connection, done))

    def _call_done(self, connection: _Connection, call: asyncio.Task[None]) -> None:
        self._calls.discard(call)
        if connection.call_done(call, self.limits.idle_timeout) and not self._holding(connection):
            self._table.idle(connection.task, asyncio.get_running_loop().time())
        payload = connection.unpark()
        if payload is not None:  # checked when read: within the limits, its method exists
            message = decode_message(payload)
            self._start(connection, self._methods[message.name], message)

    def _may_read_now(self, connection: _Connection) -> bool:
        """``_may_read`` when it need not wait (most frames): nothing to await."""
        transport = connection.writer.transport
        unsent = transport.get_write_buffer_size()
        return (
            unsent + connection.held_bytes <= self.limits.max_pending_bytes
            and not transport.is_closing()
        )

    async def _may_read(self, connection: _Connection) -> bool:
        """Wait until the connection may be read: what its calls hold and its unsent
        replies within ``max_pending_bytes``. False when it must close instead (its
        replies were not taken in time)."""
        calls = connection.calls
        while True:
            if not await self._room(connection):
                return False
            pending = connection.held_bytes + connection.writer.transport.get_write_buffer_size()
            if not calls or pending <= self.limits.max_pending_bytes:
                return True
            await asyncio.wait(set(calls), return_when=asyncio.FIRST_COMPLETED)

    async def _room(self, connection: _Connection) -> bool:
        """Wait while the connection's unsent replies exceed ``max_pending_bytes``; False
        when they did for ``write_timeout`` seconds (the connection is then closed)."""
        transport = connection.writer.transport
        if transport.get_write_buffer_size() <= self.limits.max_pending_bytes:
            return not transport.is_closing()
        try:
            async with asyncio.timeout(self.limits.write_timeout):
                await connection.writer.drain()
        except TimeoutError:
            if not transport.is_closing():
                self.write_timeouts += 1
                self._refuse(
                    connection.peer,
                    f"{transport.get_write_buffer_size()} reply bytes not taken within "
                    f"{self.limits.write_timeout:g} s (write_timeout)",
                )
                transport.abort()
            return False
        except ConnectionError:
            return False
        return not transport.is_closing()

    async def _buffered_frame(self, connection: _Connection) -> bytes | None:
        """The next frame's payload if all of it has arrived already, else None (then
        ``_read_frame`` waits for it, under its deadlines). A pipelined burst's frames are
        taken this way without arming two timers each: reading what has arrived cannot
        wait."""
        reader = connection.reader
        length = self._buffered_length(reader)
        if length is None:
            return None
        await reader.readexactly(FRAME_HEADER_SIZE)
        return await reader.readexactly(length)

    def _buffered_length(self, reader: asyncio.StreamReader, first: bytes = b"") -> int | None:
        """The payload length of the next frame if all of it has arrived, the first
        ``len(first)`` bytes of its header read already; else None. Only looks at what
        arrived (StreamReader has no public way to say how much; without its buffer
        every frame takes ``_read_frame``'s way)."""
        buffer = getattr(reader, "_buffer", None)
        missing = FRAME_HEADER_SIZE - len(first)
        if not isinstance(buffer, bytearray) or len(buffer) < missing:
            return None
        try:
            length = frame_length(first + bytes(buffer[:missing]), self.limits.max_frame_size)
        except ProtocolError:
            return None  # _read_frame refuses it, saying why
        return length if len(buffer) >= missing + length else None

    async def _read_frame(self, connection: _Connection) -> bytes | None:
        """The next frame's payload, or None when the connection should close (reason
        logged).

        With no call in flight a connection may wait ``idle_timeout`` for its next frame;
        once a frame's first byte is in, the whole frame must follow within
        ``read_timeout``."""
        reader, peer = connection.reader, connection.peer
        idle_timeout = self.limits.idle_timeout
        idle = not connection.calls and not connection.parked
        if idle and not self._holding(connection):
            self._table.idle(connection.task, asyncio.get_running_loop().time())
        try:
            while True:
                try:
                    async with asyncio.timeout(idle_timeout if idle else None) as waiting:
                        connection.waiting = waiting
                        first = await reader.read(1)
                    break
                except TimeoutError:
                    if not self._holding(connection):
                        raise
                    # It holds requests it fetched: not idle; look again in idle_timeout
                    # (a deadline fires only while the connection has no call in flight).
                    idle = True
            self._table.busy(connection.task)
        except TimeoutError:
            self.idle_closed += 1
            log.debug(
                "%s: closing connection from %s: idle for %g s",
                self.service_name,
                peer.address,
                idle_timeout,
            )
            return None
        finally:
            connection.waiting = None
        if not first:
            return None
        whole = self._buffered_length(reader, first)
        if whole is not None:  # the rest came with its first byte: no deadline to arm
            await reader.readexactly(FRAME_HEADER_SIZE - 1)
            return await reader.readexactly(whole)
        length = -1
        try:
            async with asyncio.timeout(self.limits.read_timeout):
                header = first + await reader.readexactly(FRAME_HEADER_SIZE - 1)
                length = frame_length(header, self.limits.max_frame_size)
                return await reader.readexactly(length)
        except asyncio.IncompleteReadError as error:
            if length < 0:
                got = len(error.partial) + 1
                self._refuse(peer, f"truncated frame header ({got} of 4 bytes)")
            else:
                self._refuse(peer, f"truncated frame ({len(error.partial)} of {length} bytes)")
        except TimeoutError:
            self._refuse(
                peer, f"a frame did not arrive whole within {self.limits.read_timeout:g} s"
            )
        except ProtocolError as error:
            self._refuse(peer, str(error))
        return None

    def _holding(self, connection: _Connection) -> bool:
        return self._holds is not None and self._holds(connection.peer)

    def _check(self, payload: bytes, peer: Peer) -> tuple[str, int] | None:
        """The method name and message type in ``payload``, or None when it is not a
        message within the wire limits (the connection then closes, reason logged)."""
        try:
            return check_call(payload, self._wire_limits)
        except ProtocolError as error:
            self._refuse(peer, str(error))
            return None

    def _refuse(self, peer: Peer, reason: str) -> None:
        self.refusals.refuse(
            "%s: closing connection from %s: %s", self.service_name, peer.address, reason
        )

    async def _call(
        self, handler: MethodHandler, message: Message, connection: _Connection
    ) -> None:
        peer, writer = connection.peer, connection.writer
        try:
            reply = await handler(message, peer)
        except ProtocolError as error:
            self._refuse(peer, str(error))
            writer.write(
                encode_application_error(
                    message.name, message.seqid, TApplicationException.PROTOCOL_ERROR, str(error)
                )
            )
            writer.close()
            return
        except Exception as error:
            log.exception("%s: %s from %s raised", self.service_name, message.name, peer.address)
            reply = encode_application_error(
                message.name,
                message.seqid,
                TApplicationException.INTERNAL_ERROR,
                f"internal error: {type(error).__name__}",
            )
        if await self._room(connection):
            writer.write(reply)


def _host(peername: object) -> str:
    if isinstance(peername, tuple) and peername:
        return str(peername[0])
    return str(peername)


def _format_address(peername: object) -> str:
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return str(peername)
