"""``AsyncDRPCClient``: the asyncio DRPC client, many concurrent calls on one connection.

Contract: ``await client.execute(function, args)`` behaves as
``DRPCClient.execute`` (same exceptions, ``servers`` failover, ``timeout``,
``max_frame_size``), and any number of calls may wait at once: they share one
connection per server, each call tagged with its own Thrift sequence id and
matched to its reply by it (the drpc server answers calls on one connection
as they finish). A call whose ``timeout`` passes raises ``DRPCTimeoutError``
and its late reply is dropped; the connection stays usable. A broken
connection fails every call waiting on it with ``DRPCConnectionError``, after
which each is retried once on a fresh connection, then on the next server.
``async with AsyncDRPCClient(...)`` closes the connections on exit.
``tls=TLSSettings(...)`` speaks TLS as ``DRPCClient`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from collections.abc import Sequence
from typing import Any

from drpc.client.calls import (
    Address,
    Call,
    execute_call,
    format_address,
    parse_servers,
    reply_length,
    unwrap,
)
from drpc.client.errors import DRPCConnectionError, DRPCTimeoutError
from drpc.client.sync import DEFAULT_PORT

from drpc.protocol.tls import TLSSettings
from drpc.protocol.wire import (
    FRAME_HEADER_SIZE,
    MAX_FRAME_SIZE,
    Message,
    ProtocolError,
    decode_message,
)

_MAX_SEQID = 2**31 - 1


class _MultiplexedConnection:
    def __init__(
        self,
        address: Address,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_frame_size: int,
    ) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._max_frame_size = max_frame_size
        self._seqids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self.broken: Exception | None = None
        self._reading = asyncio.create_task(self._read_replies())

    @classmethod
    async def open(
        cls,
        address: Address,
        max_frame_size: int,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> _MultiplexedConnection:
        try:
            reader, writer = await asyncio.open_connection(
                *address,
                ssl=tls,
                server_hostname=(server_hostname or address[0]) if tls is not None else None,
            )
        except OSError as error:
            raise DRPCConnectionError(f"{format_address(address)}: {error}") from error
        return cls(address, reader, writer, max_frame_size)

    async def call(self, call: Call) -> Any:
        if self.broken is not None:
            raise self.broken
        seqid = next(self._seqids) % _MAX_SEQID + 1
        reply: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[seqid] = reply
        try:
            self._writer.write(call.encode(seqid))
            await self._writer.drain()
            message = await reply
        except OSError as error:
            raise DRPCConnectionError(f"{format_address(self.address)}: {error}") from error
        finally:
            self._pending.pop(seqid, None)
        return call.check_reply(message, seqid)

    async def _read_replies(self) -> None:
        error: Exception
        try:
            while True:
                header = await self._reader.readexactly(FRAME_HEADER_SIZE)
                length = reply_length(header, self._max_frame_size, self.address)
                message = decode_message(await self._reader.readexactly(length))
                reply = self._pending.get(message.seqid)
                if reply is not None and not reply.done():
                    reply.set_result(message)
        except asyncio.IncompleteReadError:
            error = DRPCConnectionError(
                f"{format_address(self.address)}: the server closed the connection"
            )
        except ProtocolError as exc:
            error = exc
        except OSError as exc:
            error = DRPCConnectionError(f"{format_address(self.address)}: {exc}")
        self._break(error)

    def _break(self, error: Exception) -> None:
        self.broken = error
        for reply in self._pending.values():
            if not reply.done():
                reply.set_exception(error)
        self._writer.close()

    async def close(self) -> None:
        self._reading.cancel()
        self._break(DRPCConnectionError("the client closed the connection"))
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


class AsyncDRPCClient:
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
        """Parameters as ``DRPCClient``: ``timeout`` bounds each call including connecting;
        ``servers`` lists servers to fail over between; ``max_frame_size`` bounds replies;
        ``tls`` connects over TLS."""
        self.servers = parse_servers(servers if servers is not None else [(host, port)], port)
        self.timeout = timeout
        self.max_frame_size = max_frame_size
        self.tls = tls
        self._tls_context = tls.client_context() if tls is not None else None
        self._current = 0
        self._connections: dict[int, _MultiplexedConnection] = {}
        self._connecting = asyncio.Lock()
        self._closes = 0  # close() calls so far: a call in flight across one ends there

    async def execute(self, function: str, args: str) -> str:
        call = execute_call(function, args)
        try:
            async with asyncio.timeout(self.timeout):
                result = await self._call(call)
        except TimeoutError as error:
            if isinstance(error, DRPCTimeoutError):
                raise
            raise DRPCTimeoutError(f"execute {function!r} timed out") from error
        return unwrap(result, returns_value=True)

    async def _call(self, call: Call) -> Any:
        failures: list[str] = []
        start = self._current
        for step in range(len(self.servers)):
            index = (start + step) % len(self.servers)
            try:
                result = await self._call_on(index, call)
            except DRPCConnectionError as error:
                failures.append(str(error))
                continue
            self._current = index
            return result
        raise DRPCConnectionError("no DRPC server answered: " + "; ".join(failures))

    async def _call_on(self, index: int, call: Call) -> Any:
        closes = self._closes
        connection = self._connections.get(index)
        if connection is not None and connection.broken is None:
            try:
                return await connection.call(call)
            except DRPCConnectionError:
                if self._closes != closes:
                    raise  # close() ended it: a call in flight is not sent again
                # stale (the server restarted?): one fresh connection below
        connection = await self._fresh_connection(index, connection, closes)
        return await connection.call(call)

    async def _fresh_connection(
        self, index: int, failed: _MultiplexedConnection | None, closes: int
    ) -> _MultiplexedConnection:
        async with self._connecting:
            if self._closes != closes:
                raise DRPCConnectionError("the client closed its connections meanwhile")
            current = self._connections.get(index)
            if current is not None and current is not failed and current.broken is None:
                return current  # another call reconnected meanwhile
            if current is not None:
                await current.close()
            connection = await _MultiplexedConnection.open(
                self.servers[index],
                self.max_frame_size,
                self._tls_context,
                self.tls.server_hostname if self.tls else None,
            )
            self._connections[index] = connection
            return connection

    async def close(self) -> None:
        """Close every connection: the calls in flight fail with ``DRPCConnectionError``
        (never sent again); a later call connects anew."""
        self._closes += 1
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            await connection.close()

    async def __aenter__(self) -> AsyncDRPCClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
