"""An asyncio listener for one Thrift service over framed binary protocol.

Contract:

- each connection reads frames in a loop; a frame announcing a negative
  length or more than ``max_frame_size`` bytes, a truncated frame, bytes that
  are not a Thrift message, or a method the service does not have close that
  connection only (a method it does not have, or a call with malformed
  arguments, first gets a ``TApplicationException`` reply); the reason is
  logged, the listener keeps serving everyone else;
- calls on one connection run concurrently and each reply carries its call's
  sequence id, so a sequential client (one call at a time, like Thrift's
  generated clients) and a multiplexing one (matching replies by sequence id)
  both work;
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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from thrift.Thrift import TApplicationException

from drpc.wire import (
    CALL,
    FRAME_HEADER_SIZE,
    MAX_FRAME_SIZE,
    Message,
    ProtocolError,
    decode_message,
    encode_application_error,
    frame_length,
)

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
        max_frame_size: int = MAX_FRAME_SIZE,
    ) -> None:
        if max_frame_size < 1:
            raise ValueError(f"max_frame_size must be positive, got {max_frame_size!r}")
        self.service_name = service_name
        self._methods = dict(methods)
        self.max_frame_size = max_frame_size
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._calls: set[asyncio.Task[None]] = set()
        self.port: int | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._accept, host, port)
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
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._connections.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = Peer(_format_address(peername))
        calls: set[asyncio.Task[None]] = set()
        try:
            while True:
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
        """The next message, or None when the connection should close (reason logged)."""
        try:
            header = await reader.readexactly(FRAME_HEADER_SIZE)
        except asyncio.IncompleteReadError as error:
            if error.partial:
                self._refuse(peer, f"truncated frame header ({len(error.partial)} of 4 bytes)")
            return None
        try:
            length = frame_length(header, self.max_frame_size)
            payload = await reader.readexactly(length)
            return decode_message(payload)
        except asyncio.IncompleteReadError as error:
            self._refuse(peer, f"truncated frame ({len(error.partial)} of {length} bytes)")
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
