"""A TCP gate for tests: ``TcpGate(upstream)`` listens on a free loopback port of its own
and relays every connection to ``127.0.0.1:upstream``; ``cut()`` drops every connection and
refuses new ones (the network is down, the server and its data kept), ``mend()`` lets them
through again."""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.brokers import free_port


class TcpGate:
    """A TCP gate before ``127.0.0.1:upstream`` (see the module doc)."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self.mend()

    def mend(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            dropping, self._open = self._open, []
        if listener is not None:
            with contextlib.suppress(OSError):  # wakes the accepting thread (Linux)
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for connection in dropping:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            with self._lock:
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
