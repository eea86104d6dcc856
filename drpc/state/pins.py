"""Version pins of one state directory: which committed versions requests may still read.

Contract. ``PinTable(path, retention)`` is one process's view of the pins of the state
directory ``path`` (the environment holds one per process):

- ``pin(version, now)`` pins ``version`` (a ``Pin``, released with ``release(pin)``,
  releasing twice is harmless); ``now`` is ``time.time()``. A pin lasts at most
  ``retention`` seconds: this process drops its pins older than that at its next
  ``pin``, so a request that never released its pin holds nothing for long.
- Every process that pins publishes, in the directory's pins file
  (``PINS_FILE``), one slot: its pid, the oldest version it pins, when its oldest pin
  still held was taken, and ``expires_at``, when the newest of its pins will be
  ``retention`` old. ``oldest(now)`` is the
  oldest version pinned by any live process whose slot has not expired, with when it
  was pinned, or None; the writer reclaims only what is older. While a process holds
  a pin younger than ``retention``, its slot has not expired and names a version at or
  below that pin's, so no writer reclaims what a young pin reads.
- A slot belongs to its process for the process's life through an ``fcntl`` record
  lock on its bytes, which the kernel drops when the process dies: a dead process's
  slot is free for the next process and ignored by ``oldest``. Publishing is one
  ``pwrite``; nothing here waits for another process but a slot claim, which takes
  the file's ``flock`` for a moment, once per process.
- ``local()`` says what this process pins: how many, the oldest version, and when the
  oldest pin still held was taken.

POSIX record locks belong to a process and closing any descriptor of a file drops them
all: a process that pins must not open the pins file in any other way.

Never used across fork: a child's pins would be published under the parent's slot;
the environment, which owns the table, refuses to be used across fork.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
from collections import deque
from dataclasses import dataclass, field

from drpc.errors import StateClosedError, StateError

PINS_FILE = "drpc-pins"
_SLOT = struct.Struct("<IIQdd")  # pid, 0, oldest version, pinned_at of it, expires_at
SLOT_SIZE = _SLOT.size


@dataclass(eq=False, slots=True)
class Pin:
    """One pinned version of a state directory (``PinTable.pin``)."""

    path: str
    version: int
    pinned_at: float
    released: bool = field(default=False)


@dataclass(frozen=True, slots=True)
class LocalPins:
    """What this process pins in a directory: ``count`` pins, the oldest ``version``
    (None without pins) pinned at ``pinned_at`` (``time.time()``)."""

    count: int
    version: int | None
    pinned_at: float | None


class PinTable:
    """This process's pins of one state directory, published for its writers (module doc)."""

    def __init__(self, path: str, retention: float) -> None:
        self.path = path
        self.retention = retention
        self._lock = threading.Lock()
        self._counts: dict[int, int] = {}  # version -> pins held
        self._order: deque[Pin] = deque()  # every pin held, oldest first
        self._fd: int | None = None
        self._closed = False
        self._slot = -1
        self._published: tuple[int, float, float] | None = None

    def pin(self, version: int, now: float) -> Pin:
        pin = Pin(self.path, version, now)
        with self._lock:
            self._expire(now)
            self._counts[version] = self._counts.get(version, 0) + 1
            self._order.append(pin)
            try:
                self._publish()
            except BaseException:  # not published: not held
                self._order.pop()
                self._drop(pin)
                raise
        return pin

    def release(self, pin: Pin) -> None:
        with self._lock:
            if pin.released:
                return
            self._drop(pin)
            while self._order and self._order[0].released:
                self._order.popleft()
            self._publish()

    def local(self) -> LocalPins:
        with self._lock:
            if not self._counts:
                return LocalPins(0, None, None)
            return LocalPins(
                sum(self._counts.values()), min(self._counts), self._order[0].pinned_at
            )

    def oldest(self, now: float) -> tuple[int, float] | None:
        """The oldest version any live process pins (its slot not expired), and when."""
        with self._lock:
            fd = self._open(create=False)
            if fd is None:
                return None  # no process ever pinned a version here
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            found: tuple[int, float] | None = None
            for slot in range(len(data) // SLOT_SIZE):
                _pid, _, version, pinned_at, expires_at = _SLOT.unpack_from(data, slot * SLOT_SIZE)
                if not version or expires_at <= now:
                    continue
                if slot != self._slot and not _alive(fd, slot):
                    continue
                if found is None or version < found[0]:
                    found = (version, pinned_at)
            return found

    def close(self) -> None:
        """Drop this process's slot; using the table afterwards raises ``StateClosedError``."""
        with self._lock:
            self._closed = True
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)  # drops this process's slot lock

    # -- internals ---------------------------------------------------------------------------

    def _drop(self, pin: Pin) -> None:
        pin.released = True
        left = self._counts[pin.version] - 1
        if left:
            self._counts[pin.version] = left
        else:
            del self._counts[pin.version]

    def _expire(self, now: float) -> None:
        order = self._order
        while order and (order[0].released or order[0].pinned_at <= now - self.retention):
            pin = order.popleft()
            if not pin.released:
                self._drop(pin)

    def _publish(self) -> None:
        if self._counts:
            order = self._order
            state = (min(self._counts), order[0].pinned_at, order[-1].pinned_at + self.retention)
        else:
            state = (0, 0.0, 0.0)
        if state == self._published:
            return
        fd = self._open(create=True)
        assert fd is not None
        if self._slot < 0:
            if not self._counts:
                return
            self._slot = _claim_slot(fd)
        os.pwrite(fd, _SLOT.pack(os.getpid(), 0, *state), self._slot * SLOT_SIZE)
        self._published = state

    def _open(self, create: bool) -> int | None:
        if self._closed:
            raise StateClosedError(f"the pins of state directory {self.path!r} are closed")
        if self._fd is None:
            flags = os.O_RDWR | (os.O_CREAT if create else 0)
            path = os.path.join(self.path, PINS_FILE)
            try:
                self._fd = os.open(path, flags, 0o644)
            except FileNotFoundError:
                if create:
                    raise StateError(f"cannot create the pins file {path!r}") from None
                return None
            except OSError as error:
                raise StateError(f"cannot open the pins file {path!r}: {error}") from error
        return self._fd


def _claim_slot(fd: int) -> int:
    """A slot of the pins file locked for this process: a free one (its process died),
    else a new one at the end."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        slots = os.fstat(fd).st_size // SLOT_SIZE
        for slot in range(slots + 1):
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, SLOT_SIZE, slot * SLOT_SIZE)
            except OSError:
                continue
            os.pwrite(fd, _SLOT.pack(os.getpid(), 0, 0, 0.0, 0.0), slot * SLOT_SIZE)
            return slot
        raise AssertionError("unreachable: the slot past the end is always free")
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _alive(fd: int, slot: int) -> bool:
    """Whether the process that claimed ``slot`` still holds its lock."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, SLOT_SIZE, slot * SLOT_SIZE)
    except OSError:
        return True
    fcntl.lockf(fd, fcntl.LOCK_UN, SLOT_SIZE, slot * SLOT_SIZE)
    return False
