"""An asyncio listener for one Thrift service over framed binary protocol, plain or TLS.

Contract:

- each connection reads frames in a loop; a frame announcing a negative
  length or more than ``limits.max_frame_size`` bytes, a truncated frame, a
  frame that does not arrive whole within ``limits.read_timeout`` seconds of
  its first byte, bytes that are not a Thrift message, a message over the
  string, container or nesting limits (``drpc.protocol.scan``), or a method the
  service does not have close that connection only (a method it does not
  have, or a call with malformed arguments, first gets a
  ``TApplicationException`` reply); the reason is logged, the listener keeps
  serving everyone else;
- calls on one connection run concurrently and each reply carries its call's
  sequence id, so a sequential client (one call at a time, like Thrift's
  generated clients) and a multiplexing one (matching replies by sequence id)
  both work; with ``limits.max_calls_per_connection`` calls in flight the
  connection is not read until one finishes;
- at ``max_connections`` open connections a new one is closed at once (logged);
- with an ``ssl`` context the connection is TLS; a verified client
  certificate's subject CN is the caller's identity (``Peer.identity``),
  otherwise the identity is None (anonymous);
- a handler that raises anything but ``ProtocolError`` is a server bug: it is
  logged with its traceback and the caller gets an INTERNAL_ERROR
  ``TApplicationException``; the connection stays open;
- ``close()`` stops accepting, lets calls in flight write their replies (up to
  a grace period), then closes every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from drpc.server.limits import Limits
from thrift.Thrift import TApplicationException

from drpc.protocol.scan import WireLimits
from drpc.protocol.tls import common_name
from drpc.protocol.wire import (
    CALL,
    FRAME_HEADER_SIZE,
    Message,
    ProtocolError,
    decode_message,
    encode_application_error,
    frame_length,
)

DEFAULT_MAX_CONNECTIONS = 4096

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Peer:
    """Who is calling: the remote address, and the authenticated identity if any."""

    address: str
    identity: str | None = None


MethodHandler = Callable[[Message, Peer], Awaitable[bytes]]
"""Reads a call's arguments from the message and returns the framed reply."""


class ThriftListener:
    def __init__(
        self,
        service_name: str,
        methods: Mapping[str, MethodHandler],
        *,
        limits: Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
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
        self.refused_connections = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._calls: set[asyncio.Task[None]] = set()
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

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.max_connections:
            self.refused_connections += 1
            log.warning(
                "%s: refused a connection from %s: %d connections open",
                self.service_name,
                _format_address(writer.get_extra_info("peername")),
                len(self._connections),
            )
            writer.close()
            return
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass  # close() cancelled this connection: it is closed, nothing to report
        finally:
            self._connections.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = Peer(_format_address(peername), common_name(writer.get_extra_info("peercert")))
        calls: set[asyncio.Task[None]] = set()
        try:
            while True:
                while len(calls) >= self.limits.max_calls_per_connection:
                    done, _ = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
                    calls.difference_update(done)
                message = await self._read_message(reader, peer)
                if message is None:
                    break
                handler = self._methods.get(message.name)
                if handler is None or message.type != CALL:
                    what = "unknown method" if handler is None else "not a call"
                    log.warning(
                        "%s: closing connection from %s: %s %r",
                        self.service_name,
                        peer.address,
                        what,
                        message.name,
                    )
                    writer.write(
                        encode_application_error(
                            message.name,
                            message.seqid,
                            TApplicationException.UNKNOWN_METHOD,
                            f"{what} {message.name!r} on {self.service_name}",
                        )
                    )
                    break
                call = asyncio.create_task(self._call(handler, message, peer, writer))
                calls.add(call)
                self._calls.add(call)
                call.add_done_callback(calls.discard)
                call.add_done_callback(self._calls.discard)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("%s: connection from %s failed", self.service_name, peer.address)
        finally:
            for call in calls:
                call.cancel()
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_message(self, reader: asyncio.StreamReader, peer: Peer) -> Message | None:
        """The next message, or None when the connection should close (reason logged).

        An idle connection may wait for its next frame as long as it likes; once a frame's
        first byte is in, the whole frame must follow within ``read_timeout``."""
        first = await reader.read(1)
        if not first:
            return None
        length = -1
        try:
            async with asyncio.timeout(self.limits.read_timeout):
                header = first + await reader.readexactly(FRAME_HEADER_SIZE - 1)
                length = frame_length(header, self.limits.max_frame_size)
                payload = await reader.readexactly(length)
            return decode_message(payload, self._wire_limits)
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

    def _refuse(self, peer: Peer, reason: str) -> None:
        log.warning("%s: closing connection from %s: %s", self.service_name, peer.address, reason)

    async def _call(
        self,
        handler: MethodHandler,
        message: Message,
        peer: Peer,
        writer: asyncio.StreamWriter,
    ) -> None:
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
        if not writer.is_closing():
            writer.write(reply)
            with contextlib.suppress(ConnectionError):
                await writer.drain()


def _format_address(peername: object) -> str:
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return str(peername)
