"""The abusive clients of the soak (``bench/soak.py``): issue 15's attacks, run in a loop.

Each attack runs on threads of its own, from a loopback address of its own
(127.0.0.2 and up: the server sees other clients than the good callers on
127.0.0.1), until ``--duration`` seconds have passed:

- ``amplify``: a runner fetches 200 function names of 256 bytes (so they are
  served), then, over and over, 100 calls of a 300-byte name are pipelined
  on one connection and their replies read, and ``/health`` is read: the
  replies must stay small (no echo of the name or of the served list);
- ``slow_reader``: four connections each send 200 calls of 100 KB and never
  read a reply, until the server closes them (write deadline), then again;
- ``abandon``: 1 000 calls of a function nobody answers pipelined, then the
  connection closed, over and over (the server withdraws them);
- ``idle``: as many idle connections as the server allows one address
  (``--per-address``), from two addresses, reopened when closed;
- ``names``: a runner fetching 50 new random 256-byte names a second;
- ``scrape``: ``GET /metrics`` and ``GET /health`` in a loop;
- ``bad_http``: 20 malformed HTTP request lines a second.

Prints one JSON object: per attack, the rounds done and what it saw (the
largest reply to a not-served call, connections the server refused or closed),
and the CPU seconds this process used (on one machine, taken from the server).

Usage: ``python bench/abusers.py --port P --invocations-port P --http-port P
[--duration 60] [--per-address 256] [--held soakheld] [--attacks amplify,idle,...]``.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import select
import socket
import string
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drpc.client import DRPCInvocationsClient  # noqa: E402
from drpc.client.calls import execute_call  # noqa: E402

HOST = "127.0.0.1"
NAME_BYTES = 256


class Attack:
    """Counts what one attack did; ``stop`` ends its loops."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.counts: Counter[str] = Counter()
        self.largest_reply = 0
        self._lock = threading.Lock()

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.counts[what] += n


def _connect(source: str, port: int, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection((HOST, port), timeout=timeout, source_address=(source, 0))


def _receive(connection: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionResetError("closed by the server")
        data += chunk
    return bytes(data)


def _closed(connection: socket.socket, timeout: float) -> bool:
    """Whether the server closed (or reset) ``connection`` within ``timeout``, read or not."""
    poller = select.poll()
    poller.register(connection, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(timeout * 1000))


def _name(prefix: str) -> str:
    tail = "".join(random.choices(string.ascii_lowercase, k=NAME_BYTES))
    return (prefix + tail)[:NAME_BYTES]


def amplify(attack: Attack, ports: dict[str, int], source: str) -> None:
    names = [f"amp-{i:03d}-".ljust(NAME_BYTES, "n") for i in range(200)]
    calls = b"".join(execute_call("n" * 300, "").encode(i + 1) for i in range(100))
    served_at = 0.0
    while not attack.stop.is_set():
        try:
            if time.monotonic() - served_at > 20:  # inside the server's runner liveness
                with DRPCInvocationsClient(HOST, ports["invocations"], timeout=10) as runner:
                    for name in names:
                        runner.fetch_request(name)
                served_at = time.monotonic()
            with _connect(source, ports["port"]) as connection:
                connection.sendall(calls)
                for _ in range(100):
                    size = int.from_bytes(_receive(connection, 4), "big")
                    _receive(connection, size)
                    attack.largest_reply = max(attack.largest_reply, size)
            with urllib.request.urlopen(f"http://{HOST}:{ports['http']}/health") as health:
                attack.largest_reply = max(attack.largest_reply, len(health.read()))
            attack.count("rounds")
        except OSError as error:
            attack.count(type(error).__name__)
            attack.stop.wait(0.5)


def slow_reader(attack: Attack, ports: dict[str, int], source: str) -> None:
    frame = execute_call("exclamation", "x" * 100_000).encode(1)
    while not attack.stop.is_set():
        try:
            connection = socket.socket()
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # takes little
            connection.bind((source, 0))
            connection.settimeout(10.0)
            connection.connect((HOST, ports["port"]))
            with connection:
                connection.settimeout(1.0)
                try:
                    for _ in range(200):
                        connection.sendall(frame)
                except TimeoutError:
                    attack.count("paused by the server")
                while not attack.stop.is_set():
                    if _closed(connection, 1.0):
                        attack.count("closed by the server")
                        break
            attack.count("rounds")
        except OSError as error:
            attack.count(type(error).__name__)
            attack.stop.wait(0.5)


def abandon(attack: Attack, ports: dict[str, int], source: str, held: str) -> None:
    calls = b"".join(execute_call(held, "abandoned").encode(i + 1) for i in range(1000))
    while not attack.stop.is_set():
        try:
            with _connect(source, ports["port"]) as connection:
                connection.sendall(calls)
                attack.stop.wait(0.5)
            attack.count("rounds")
        except OSError as error:
            attack.count(type(error).__name__)
            attack.stop.wait(0.5)


def idle(attack: Attack, ports: dict[str, int], source: str, per_address: int) -> None:
    held: list[socket.socket] = []
    while not attack.stop.is_set():
        for connection in [c for c in held if _closed(c, 0)]:
            attack.count("closed by the server")
            connection.close()
            held.remove(connection)
        while len(held) < per_address and not attack.stop.is_set():
            try:
                held.append(_connect(source, ports["port"]))
                attack.count("opened")
            except OSError as error:
                attack.count(type(error).__name__)
                break
        try:
            with _connect(source, ports["port"]) as extra:  # one past the cap: closed at once
                attack.count("refused" if _closed(extra, 5.0) else "not refused")
        except OSError as error:
            attack.count(type(error).__name__)
        attack.stop.wait(1.0)
    for connection in held:
        connection.close()


def names(attack: Attack, ports: dict[str, int], source: str) -> None:
    while not attack.stop.is_set():
        try:
            with DRPCInvocationsClient(HOST, ports["invocations"], timeout=10) as runner:
                while not attack.stop.is_set():
                    for _ in range(50):
                        runner.fetch_request(_name("churn-"))
                    attack.count("rounds")
                    attack.stop.wait(1.0)
        except OSError as error:
            attack.count(type(error).__name__)
            attack.stop.wait(0.5)


def scrape(attack: Attack, ports: dict[str, int], source: str) -> None:
    base = f"http://{HOST}:{ports['http']}"
    while not attack.stop.is_set():
        try:
            for path in ("/metrics", "/health"):
                with urllib.request.urlopen(base + path, timeout=30) as reply:
                    attack.count(f"{path} bytes", len(reply.read()))
            attack.count("rounds")
        except OSError as error:
            attack.count(type(error).__name__)
        attack.stop.wait(0.2)


def bad_http(attack: Attack, ports: dict[str, int], source: str) -> None:
    while not attack.stop.is_set():
        try:
            with _connect(source, ports["http"]) as connection:
                connection.sendall(b"GET /\x01\x02 HTTP/1.1\r\nHost: x\r\n\r\n")
                connection.recv(4096)
            attack.count("rounds")
        except OSError as error:
            attack.count(type(error).__name__)
        attack.stop.wait(0.05)


ATTACKS = ("amplify", "slow_reader", "abandon", "idle", "names", "scrape", "bad_http")


def run(
    ports: dict[str, int],
    seconds: float,
    per_address: int,
    held: str,
    attacks_wanted: tuple[str, ...] = ATTACKS,
) -> dict[str, object]:
    stop = threading.Event()
    plan: list[tuple[str, Callable[..., None], tuple[object, ...], int]] = [
        ("amplify", amplify, ("127.0.0.2",), 1),
        ("slow_reader", slow_reader, ("127.0.0.3",), 4),
        ("abandon", abandon, ("127.0.0.4", held), 1),
        ("idle", idle, ("127.0.0.5", per_address), 1),
        ("idle", idle, ("127.0.0.6", per_address), 1),
        ("names", names, ("127.0.0.7",), 1),
        ("scrape", scrape, ("127.0.0.8",), 1),
        ("bad_http", bad_http, ("127.0.0.9",), 1),
    ]
    attacks: dict[str, Attack] = {}
    threads = []
    for name, target, args, copies in plan:
        if name not in attacks_wanted:
            continue
        attack = attacks.setdefault(name, Attack(stop))
        for _ in range(copies):
            thread = threading.Thread(
                target=_guarded, args=(attack, target, ports, *args), daemon=True
            )
            thread.start()
            threads.append(thread)
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join(30)
    report: dict[str, object] = {name: dict(attack.counts) for name, attack in attacks.items()}
    if "amplify" in attacks:
        report["amplify_largest_reply_bytes"] = attacks["amplify"].largest_reply
    used = resource.getrusage(resource.RUSAGE_SELF)
    # On one machine the attackers' own CPU is taken from the server's: say how much.
    report["cpu_seconds"] = round(used.ru_utime + used.ru_stime, 2)
    return report


def _guarded(attack: Attack, target: Callable[..., None], *args: object) -> None:
    try:
        target(attack, *args)
    except Exception as error:  # an attack that stops early is reported, not hidden
        attack.count(f"stopped: {type(error).__name__}: {error}"[:200])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--invocations-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--per-address", type=int, default=256)
    parser.add_argument("--held", default="soakheld", help="a function nobody answers")
    parser.add_argument(
        "--attacks", default=",".join(ATTACKS), help="comma-separated (default: all)"
    )
    args = parser.parse_args()
    wanted = tuple(args.attacks.split(","))
    if unknown := set(wanted) - set(ATTACKS):
        parser.error(f"unknown attacks: {', '.join(sorted(unknown))}")
    ports = {"port": args.port, "invocations": args.invocations_port, "http": args.http_port}
    report = run(ports, args.duration, args.per_address, args.held, wanted)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
