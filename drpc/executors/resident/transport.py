"""The wire between the processes of a resident deployment: batched frames over TCP.

Contract. A ``Node`` is one process of a deployment (index 0 the driver,
1..N the resident Spark tasks), all sharing a random ``token``:

- ``listen(host)`` opens its server socket on ``host`` (port 0: the OS picks)
  and returns ``(host, port)``; ``connect(peer, address)`` opens a connection
  to a peer and returns the address of this end (the interface that reaches
  it). A connection starts with a hello of fixed layout (``MAGIC``, the
  token, the sender's index), checked before anything is unpickled: a peer
  that does not know the token is closed at once, so nothing from outside
  the deployment reaches ``pickle.loads``. The accepting node answers a good
  hello with ``WELCOME`` once it has the connection among its peers, and
  ``connect`` returns only then (``TransportError`` when the peer closes
  instead): whatever the connecting node says next (that it is ready, say), the
  peer can already send to it.
- Every connection then carries frames both ways: a 4-byte big-endian length
  (at most ``max_frame_size``) and a pickled list of items. ``send(peer,
  item)`` sends an item. On a quiet connection (nothing queued or being written,
  and no frame sent for ``QUIET`` seconds) the calling thread writes it as a frame of
  its own, without blocking (what the socket does not take at once is left to the
  writer thread): a lone call's item leaves with no hand-off to another thread.
  Otherwise it is queued, and one writer thread per connection sends everything
  queued since its last frame as one frame, so under load many items share a frame.
- One reader thread per connection hands each frame's items, in order, to
  ``on_items(peer, items)``. ``on_lost(peer, reason)`` is called once when a
  connection breaks (end of stream, a socket error, a bad frame), never for
  ``close()``. ``peers()`` lists the connected peers; ``wait_for_peers``
  waits until given peers are connected.
- ``close()`` closes every socket and stops every thread of the node.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

log = logging.getLogger(__name__)

MAGIC = b"DRPC-RESIDENT-1\n"
TOKEN_SIZE = 32
DEFAULT_MAX_FRAME_SIZE = 256 * 1024 * 1024
QUIET = 0.0003
"""Seconds without a frame after which a connection is quiet: the next item is written by
the thread that sends it (under load, items wait for the writer thread and share frames).
A lone caller's requests come a call apart (0.7 to 1 ms on a 2-core machine): at 1 ms
each one waited for the writer thread, 0.2 ms of its round trip; at 0 every item under
load was a frame of its own, a third more CPU per call."""
WELCOME = b"+"
"""The accepting node's answer to a good hello: the connection is among its peers."""
_HELLO = struct.Struct(f">{len(MAGIC)}s{TOKEN_SIZE}sI")
_LENGTH = struct.Struct(">I")

Address = tuple[str, int]
ItemsHandler = Callable[[int, list[Any]], None]
LostHandler = Callable[[int, str], None]


class TransportError(Exception):
    """A connection could not be made or broke."""


class _Connection:
    """One peer: a socket, a writer thread draining a queue into frames, a reader thread."""

    def __init__(self, node: Node, peer: int, sock: socket.socket) -> None:
        self.node = node
        self.peer = peer
        self.sock = sock
        self._queue: list[Any] = []
        self._unsent = b""  # the rest of a frame a sender's non-blocking write left
        self._writing = False  # a thread is writing to the socket
        self._last_frame = 0.0  # time.monotonic() of the last frame started
        self._cond = threading.Condition()
        self._closed = False
        self._writer = threading.Thread(
            target=self._write, name=f"drpc-resident-{node.index}-to-{peer}", daemon=True
        )
        self._reader = threading.Thread(
            target=self._read, name=f"drpc-resident-{node.index}-from-{peer}", daemon=True
        )

    def start(self) -> None:
        self._writer.start()
        self._reader.start()

    def send(self, item: Any) -> None:
        with self._cond:
            if self._closed:
                return
            now = time.monotonic()
            if self._writing or self._queue or self._unsent or now - self._last_frame < QUIET:
                self._queue.append(item)
                if len(self._queue) == 1 and not self._writing:
                    self._cond.notify()
                return
            self._writing = True
            self._last_frame = now
        try:
            frame = _frame([item])
        except Exception as error:  # as the writer thread would: the connection is lost
            with self._cond:
                self._writing = False
            self.node._lost(self, f"sending failed: {type(error).__name__}: {error}")
            return
        try:
            sent = self.sock.send(frame, socket.MSG_DONTWAIT)
        except OSError:  # full (BlockingIOError) or broken: the writer sends it, or reports
            sent = 0
        with self._cond:
            self._writing = False
            if sent < len(frame):
                self._unsent = frame[sent:]
            if self._unsent or self._queue:
                self._cond.notify()

    def _write(self) -> None:
        while True:
            with self._cond:
                while (self._writing or not (self._queue or self._unsent)) and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                items, self._queue = self._queue, []
                unsent, self._unsent = self._unsent, b""
                self._writing = True
                self._last_frame = time.monotonic()
            try:
                self.sock.sendall(unsent + _frame(items) if items else unsent)
            except Exception as error:
                self.node._lost(self, f"sending failed: {type(error).__name__}: {error}")
                return
            with self._cond:
                self._writing = False

    def _read(self) -> None:
        sock = self.sock
        limit = self.node.max_frame_size
        try:
            while True:
                header = _recv_exact(sock, _LENGTH.size)
                if header is None:
                    self.node._lost(self, "the connection was closed")
                    return
                (length,) = _LENGTH.unpack(header)
                if length > limit:
                    self.node._lost(self, f"a frame of {length} bytes exceeds {limit}")
                    return
                body = _recv_exact(sock, length)
                if body is None:
                    self.node._lost(self, "the connection was closed inside a frame")
                    return
                self.node.on_items(self.peer, pickle.loads(body))
        except OSError as error:
            self.node._lost(self, f"receiving failed: {type(error).__name__}: {error}")
        except Exception:
            log.exception(
                "resident node %d: handling items from %d failed", self.node.index, self.peer
            )
            self.node._lost(self, "handling its items failed")

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def _frame(items: list[Any]) -> bytes:
    body = pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    """Exactly ``size`` bytes, or None at the end of the stream."""
    chunks = []
    remaining = size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class Node:
    """One process of a resident deployment (see the module doc)."""

    def __init__(
        self,
        index: int,
        token: bytes,
        on_items: ItemsHandler,
        on_lost: LostHandler,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        if len(token) != TOKEN_SIZE:
            raise ValueError(f"a deployment token is {TOKEN_SIZE} bytes, got {len(token)}")
        self.index = index
        self.token = token
        self.on_items = on_items
        self.on_lost = on_lost
        self.max_frame_size = max_frame_size
        self._connections: dict[int, _Connection] = {}
        self._lock = threading.Condition()
        self._server: socket.socket | None = None
        self._closed = False

    # -- connections -----------------------------------------------------------------------

    def listen(self, host: str) -> Address:
        server = socket.create_server((host, 0), backlog=64)
        self._server = server
        threading.Thread(
            target=self._accept, name=f"drpc-resident-{self.index}-accept", daemon=True
        ).start()
        address = server.getsockname()
        return str(address[0]), int(address[1])

    def connect(self, peer: int, address: Address, timeout: float = 30.0) -> str:
        """Connect to ``peer`` at ``address``; returns this end's address: the one of this
        host's interfaces that reaches the peer."""
        sock = socket.create_connection(address, timeout=timeout)
        try:
            _tune(sock)
            sock.sendall(_HELLO.pack(MAGIC, self.token, self.index))
            welcome = _recv_exact(sock, len(WELCOME))  # within ``timeout``
        except OSError as error:
            sock.close()
            raise TransportError(
                f"resident node {peer} at {address[0]}:{address[1]} did not take the "
                f"connection: {error}"
            ) from error
        if welcome != WELCOME:
            sock.close()
            raise TransportError(
                f"resident node {peer} at {address[0]}:{address[1]} closed the connection "
                "after the hello (a process of another deployment?)"
            )
        sock.settimeout(None)
        here = str(sock.getsockname()[0])
        self._add(peer, sock)
        return here

    def _accept(self) -> None:
        server = self._server
        assert server is not None
        while not self._closed:
            try:
                sock, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._greet, args=(sock,), daemon=True).start()

    def _greet(self, sock: socket.socket) -> None:
        sock.settimeout(10.0)
        try:
            hello = _recv_exact(sock, _HELLO.size)
        except OSError:
            hello = None
        if hello is None:
            sock.close()
            return
        magic, token, peer = _HELLO.unpack(hello)
        if magic != MAGIC or not hmac.compare_digest(token, self.token):
            log.warning(
                "resident node %d refused a connection that did not know the token", self.index
            )
            sock.close()
            return
        sock.settimeout(None)
        _tune(sock)
        self._add(peer, sock, welcome=True)

    def _add(self, peer: int, sock: socket.socket, welcome: bool = False) -> None:
        connection = _Connection(self, peer, sock)
        with self._lock:
            if self._closed:
                sock.close()
                return
            if welcome:
                # under the lock, before the connection is among the peers: a send to the
                # peer that missed it waits for the lock (``send``) and then finds it
                try:
                    sock.sendall(WELCOME)
                except OSError:
                    sock.close()
                    return
            old = self._connections.get(peer)
            self._connections[peer] = connection
            self._lock.notify_all()
        if old is not None:
            old.close()
        connection.start()

    def _lost(self, connection: _Connection, reason: str) -> None:
        with self._lock:
            if self._closed or self._connections.get(connection.peer) is not connection:
                return
            del self._connections[connection.peer]
        connection.close()
        self.on_lost(connection.peer, reason)

    def peers(self) -> list[int]:
        with self._lock:
            return sorted(self._connections)

    def wait_for_peers(self, peers: Collection[int], timeout: float) -> bool:
        """True once every peer in ``peers`` is connected, False after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not set(peers) <= set(self._connections):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return False
                self._lock.wait(remaining)
            return True

    # -- sending ---------------------------------------------------------------------------

    def send(self, peer: int, item: Any) -> bool:
        """Queue ``item`` for ``peer``; False if it is not connected (the item is dropped)."""
        connection = self._connections.get(peer)
        if connection is None:
            with self._lock:  # a connection being added: welcomed, not yet among the peers
                connection = self._connections.get(peer)
            if connection is None:
                return False
        connection.send(item)
        return True

    def broadcast(self, item: Any) -> None:
        for connection in list(self._connections.values()):
            connection.send(item)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections = list(self._connections.values())
            self._connections.clear()
            self._lock.notify_all()
        if self._server is not None:
            self._server.close()
        for connection in connections:
            connection.close()


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
