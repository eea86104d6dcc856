"""Which connections a Thrift port admits, and which idle ones it closes to make room.

Contract (sans-IO: the listener reports events, the table decides; it never touches a
socket):

- ``ConnectionTable(max_connections, max_per_address)`` tracks every open connection of
  one port by a key the listener picks, with its client address and whether it is idle
  (no call in flight, nothing parked, waiting for its next frame) and since when.
- ``open(key, host, now)`` decides on a new connection from ``host``: when ``host``
  already has ``max_per_address`` open, its oldest idle one is reclaimed to make room;
  then, when the port has ``max_connections`` open, the oldest idle one of any address
  is. Only when there is no idle connection to reclaim is the new one refused, with the
  reason (``Admission.reason``), so a caller that is working is never pushed out by
  sockets that do nothing. An admitted connection starts idle, as of ``now``.
- ``busy(key)`` when a frame starts arriving or a call is in flight; ``idle(key, now)``
  when the connection waits for its next frame with nothing in flight; ``closed(key)``
  when it ends, however it ended (a reclaimed key is already forgotten: a no-op).
- ``default_per_address(max_connections)`` is the per-address cap that follows the
  total: half of it, at most ``PER_ADDRESS_CEILING``, at least 1, so one address can
  never hold every connection of a port of two or more. ``check_per_address`` refuses a
  cap that would let it (``ValueError`` naming both limits).

The listener closes the reclaimed connections it is told to; it counts them apart from
the refused ones.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)

PER_ADDRESS_CEILING = 256
"""The largest per-address cap that follows the total (``default_per_address``)."""


def default_per_address(max_connections: int) -> int:
    """Half of ``max_connections``, at most ``PER_ADDRESS_CEILING``, at least 1."""
    return max(1, min(PER_ADDRESS_CEILING, max_connections // 2))


def check_per_address(max_per_address: int, max_connections: int) -> None:
    """Refuse a per-address cap that lets one address hold every connection of a port."""
    if max_connections >= 2 and max_per_address >= max_connections:
        raise ValueError(
            f"max_connections_per_address ({max_per_address}) must be below max_connections "
            f"({max_connections}): one client address could hold every connection and lock "
            "out every other caller"
        )


@dataclass(frozen=True, slots=True)
class Admission(Generic[Key]):
    """A decision on a new connection: admit it (after closing ``reclaim``) or refuse it."""

    admitted: bool
    reclaim: tuple[Key, ...] = ()
    reason: str | None = None


class ConnectionTable(Generic[Key]):
    """The open connections of one port (see the module doc). Every event is O(1): the
    idle connections are kept in the order they went idle, overall and per address."""

    def __init__(self, max_connections: int, max_per_address: int) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be positive, got {max_connections!r}")
        if max_per_address < 1:
            raise ValueError(
                f"max_connections_per_address must be positive, got {max_per_address!r}"
            )
        check_per_address(max_per_address, max_connections)
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self._host_of: dict[Key, str] = {}
        self._per_host: dict[str, int] = {}
        self._idle: dict[Key, float] = {}  # oldest idle first (insertion order)
        self._idle_of_host: dict[str, dict[Key, float]] = {}

    def __len__(self) -> int:
        return len(self._host_of)

    def connections_from(self, host: str) -> int:
        return self._per_host.get(host, 0)

    def idle_connections(self) -> int:
        return len(self._idle)

    def open(self, key: Key, host: str, now: float) -> Admission[Key]:
        if self._per_host.get(host, 0) >= self.max_per_address:
            idle_here = self._idle_of_host.get(host)
            if not idle_here:
                return Admission(
                    False,
                    reason=f"{self._per_host[host]} connections open from {host} "
                    "(max_connections_per_address), none of them idle",
                )
            victim = next(iter(idle_here))
        elif len(self._host_of) >= self.max_connections:
            if not self._idle:
                return Admission(
                    False,
                    reason=f"{len(self._host_of)} connections open (max_connections), "
                    "none of them idle",
                )
            victim = next(iter(self._idle))
        else:
            victim = None
        if victim is not None:  # one fewer from its address and in all: room for this one
            self.closed(victim)
        self._host_of[key] = host
        self._per_host[host] = self._per_host.get(host, 0) + 1
        self.idle(key, now)
        return Admission(True, () if victim is None else (victim,))

    def busy(self, key: Key) -> None:
        if self._idle.pop(key, None) is not None:
            self._idle_of_host[self._host_of[key]].pop(key)

    def idle(self, key: Key, now: float) -> None:
        host = self._host_of.get(key)
        if host is None or key in self._idle:
            return
        self._idle[key] = now
        self._idle_of_host.setdefault(host, {})[key] = now

    def closed(self, key: Key) -> None:
        self.busy(key)
        host = self._host_of.pop(key, None)
        if host is None:
            return
        left = self._per_host[host] - 1
        if left:
            self._per_host[host] = left
        else:
            del self._per_host[host]
            self._idle_of_host.pop(host, None)
