"""Helpers for tests that talk to a real DRPC server over 127.0.0.1 sockets."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from drpc.server import DRPCServer, ServerThread
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport

from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.examples.exclamation import build_exclamation
from tests.topologies.bolts import FailOn
from tests.waiting import wait_until as wait_until  # re-exported for the server tests

HOST = "127.0.0.1"
EPHEMERAL_PORTS = ["--host", HOST, "--port", "0", "--invocations-port", "0", "--http-port", "0"]
"""``drpc-server`` flags: listen on 127.0.0.1, every port picked by the system."""


LISTENING = re.compile(
    r"DRPC server serving (?P<functions>.+?); execute \(Thrift\) on [\d.]+:(?P<port>\d+), "
    r"invocations \(Thrift\) on [\d.]+:(?P<invocations>\d+); "
    r"HTTP on (?P<scheme>https?)://[\d.]+:(?P<http>\d+)/drpc/"
)
"""The line a ``drpc-server`` logs once it listens, with its functions and ports."""


@dataclass
class ServerProcess:
    process: subprocess.Popen[str]
    listening: re.Match[str]
    log: list[str]

    @property
    def text(self) -> str:
        """Everything it logged so far (all of it once the ``with`` block ended)."""
        return "".join(self.log)

    @property
    def port(self) -> int:
        return int(self.listening["port"])

    @property
    def invocations_port(self) -> int:
        return int(self.listening["invocations"])

    @property
    def http_port(self) -> int:
        return int(self.listening["http"])

    def rss_kib(self) -> int:
        """Its resident memory in KiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        assert found is not None
        return int(found.group(1))

    def fds(self) -> int:
        """Its open file descriptors."""
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))


@contextmanager
def server_process(
    command: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> Iterator[ServerProcess]:
    """Run a ``drpc-server`` command line until it logs where it listens; at the end stop it
    with SIGTERM and check it exited 0. Its stderr is read by one thread from start to end,
    so no line is lost between the two (``communicate`` after reading lines would skip
    what the line reader had already buffered)."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    log: list[str] = []
    lines: queue.Queue[str | None] = queue.Queue()

    def read(stream: IO[str]) -> None:
        for line in stream:
            log.append(line)
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, args=(process.stderr,), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while (line := lines.get(timeout=max(deadline - time.monotonic(), 0.01))) is not None:
            if listening := LISTENING.search(line):
                break
        else:
            raise AssertionError("the server exited without listening:\n" + "".join(log))
        yield ServerProcess(process, listening, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
            reader.join(timeout=60)
    assert process.returncode == 0, "".join(log)


def server_options(**options: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "host": HOST,
        "port": 0,
        "invocations_port": 0,
        "http_port": 0,
        "executor": "local",
        "timeout": 30.0,
    }
    return defaults | options


@contextmanager
def running_server(*topologies: LinearDRPCTopologyBuilder, **options: Any) -> Iterator[DRPCServer]:
    """A started DRPCServer on ephemeral ports in a background thread, hosting ``topologies``."""
    server = DRPCServer(**server_options(**options))
    for topology in topologies:
        server.register(topology)
    with ServerThread(server) as running:
        yield running


def failing_topology(bad: str = "bad") -> LinearDRPCTopologyBuilder:
    """Function "failing": "x" -> "x!", but a step raises for ``bad``."""
    builder = LinearDRPCTopologyBuilder("failing")
    builder.add_bolt(FailOn(bad), 2)
    return builder


def exclamation() -> LinearDRPCTopologyBuilder:
    return build_exclamation(parallelism=2)


@contextmanager
def generated_client(service: Any, port: int, timeout_ms: int = 30_000) -> Iterator[Any]:
    """A client generated by the Thrift compiler, over framed transport and binary protocol,
    exactly as a Storm user would build it."""
    raw = TSocket.TSocket(HOST, port)
    raw.setTimeout(timeout_ms)
    transport = TTransport.TFramedTransport(raw)
    client = service.Client(TBinaryProtocol.TBinaryProtocol(transport))
    transport.open()
    try:
        yield client
    finally:
        transport.close()


def raw_connection(port: int) -> socket.socket:
    connection = socket.create_connection((HOST, port), timeout=10)
    return connection


def frame_header(length: int) -> bytes:
    return struct.pack(">i", length)


def closed_by_server(connection: socket.socket) -> bytes:
    """Read until the server closes the connection (FIN or reset); returns what it sent."""
    received = bytearray()
    while True:
        try:
            chunk = connection.recv(65536)
        except ConnectionResetError:  # closed with our unread bytes in its buffer
            return bytes(received)
        if not chunk:
            return bytes(received)
        received += chunk


def free_port() -> int:
    """A port nothing listens on (bound then released)."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def connect_from(source: str, port: int, timeout: float = 10.0) -> socket.socket:
    """A connection to ``port`` on 127.0.0.1 from the loopback address ``source`` (any of
    127.0.0.0/8), so a test can be another client address."""
    return socket.create_connection((HOST, port), timeout=timeout, source_address=(source, 0))


def http_get(port: int, path: str, timeout: float = 30.0) -> tuple[int, bytes]:
    """GET ``path`` from 127.0.0.1:``port``: the status and body, errors included."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=timeout) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
