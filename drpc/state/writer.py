"""The writer lock of a state directory: one process writes to it at a time.

Contract. ``WriterLock(path)`` guards ``path``; ``claim(holder)`` claims it for
this process as ``holder`` (a topology id) and returns a ``WriterClaim`` to
``release()``.

- The first claim takes an exclusive advisory ``flock`` on ``WRITER_LOCK_FILE``
  in the directory and writes the process id and holders into it (JSON); the
  last release drops it. While another process holds it, ``claim`` raises
  ``StateInUseError`` naming that process and its holders.
- Within one process, claims of different holders coexist (the environment
  serializes their writes); a second claim of a holder already claimed raises
  ``StateInUseError`` too.
- The kernel drops a ``flock`` when its process dies, so a killed writer never
  leaves a stale lock. Readers take no lock.
- ``claim_when_free(holder, stop, poll=...)`` is ``claim`` for a standby: while another
  process holds the directory it tries again every ``poll`` seconds (``on_busy`` hears the
  first refusal), until it has the claim or ``stop`` is set (None).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable
from contextlib import suppress

from drpc.errors import StateError, StateInUseError

WRITER_LOCK_FILE = "drpc-writer.lock"
CLAIM_POLL = 0.05
"""Seconds between a standby's tries to claim a directory another process holds."""


class WriterLock:
    """This process's claims on one state directory (see module doc)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._claims: set[str] = set()
        self._lock = threading.Lock()
        self._fd: int | None = None

    def claim(self, holder: str) -> WriterClaim:
        with self._lock:
            if holder in self._claims:
                raise StateInUseError(self.path, os.getpid(), (holder,))
            if self._fd is None:
                self._fd = self._lock_directory()
            self._claims.add(holder)
            self._describe()
        return WriterClaim(self, holder)

    def claim_when_free(
        self,
        holder: str,
        stop: threading.Event,
        *,
        poll: float = CLAIM_POLL,
        on_busy: Callable[[StateInUseError], None] | None = None,
    ) -> WriterClaim | None:
        busy = False
        while True:
            try:
                return self.claim(holder)
            except StateInUseError as error:
                if error.pid == os.getpid():
                    raise  # this process claimed it as holder already: waiting cannot help
                if not busy and on_busy is not None:
                    on_busy(error)
                busy = True
            if stop.wait(poll):
                return None

    def holders(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted(self._claims))

    def release(self, holder: str) -> None:
        with self._lock:
            self._claims.discard(holder)
            if self._claims:
                self._describe()
            elif self._fd is not None:
                fd, self._fd = self._fd, None
                with suppress(OSError):
                    os.ftruncate(fd, 0)
                os.close(fd)  # closing the only descriptor drops the flock

    def release_all(self) -> None:
        for holder in self.holders():
            self.release(holder)

    def _lock_directory(self) -> int:
        fd = os.open(os.path.join(self.path, WRITER_LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, holders = _read_claim(fd)
            os.close(fd)
            raise StateInUseError(self.path, pid, holders) from None
        except OSError as error:
            os.close(fd)
            raise StateError(f"cannot lock state directory {self.path!r}: {error}") from error
        return fd

    def _describe(self) -> None:
        assert self._fd is not None
        data = (json.dumps({"pid": os.getpid(), "holders": sorted(self._claims)}) + "\n").encode()
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))


class WriterClaim:
    """This process's claim to write a state directory as ``holder``; ``release()`` it
    (or leave a ``with`` block). Releasing twice is harmless."""

    def __init__(self, lock: WriterLock, holder: str) -> None:
        self.lock = lock
        self.holder = holder
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.lock.release(self.holder)

    def __enter__(self) -> WriterClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_claim(fd: int) -> tuple[int | None, tuple[str, ...]]:
    """The pid and holders a writer lock file names (None, () if unreadable)."""
    try:
        claim = json.loads(os.pread(fd, 4096, 0))
        return int(claim["pid"]), tuple(str(holder) for holder in claim["holders"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, ()
