"""Give the memory a burst freed back to the operating system.

Contract. glibc's malloc keeps what a burst freed (a client's megabyte calls
and unsent replies, a thousand withdrawn requests, a Spark batch's buffers)
in its heaps, fragmented, so the process's resident size stays near its
high-water mark although nothing holds that memory any more.
``MemoryTrimmer``:

- ``run()``, a task on the server's loop, every ``interval`` seconds (default
  10) reads the process's resident size and how many bytes glibc's heaps hold
  free (``mallinfo2().fordblks``) and, when both are ``growth`` bytes (default
  4 MiB) or more (the resident size above what it was after the last trim, or
  its lowest since), calls ``malloc_trim(0)`` in a worker thread, which
  returns every whole free page of every heap. The free bytes alone cannot
  tell when to trim again: pages a trim gave back still count as free, and a
  later burst that reuses them makes them resident without adding to them;
- ``trim()`` does one such trim now and returns the process's resident size
  after it (``/proc/self/statm``);
- ``trims`` counts them. Without glibc 2.33 or later it does nothing
  (``available`` is False).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 10.0
DEFAULT_GROWTH = 4 * 1024 * 1024
_STATM = "/proc/self/statm"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _glibc() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    try:
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
        libc.mallinfo2.restype = _MallInfo2
    except AttributeError:  # not glibc, or older than 2.33
        return None
    return libc


def resident_bytes() -> int | None:
    """The process's resident size in bytes, or None without ``/proc``."""
    try:
        with open(_STATM, "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class MemoryTrimmer:
    def __init__(self, interval: float = DEFAULT_INTERVAL, growth: int = DEFAULT_GROWTH) -> None:
        if interval <= 0 or growth <= 0:
            raise ValueError(f"interval and growth must be positive, got {interval!r}, {growth!r}")
        self.interval = interval
        self.growth = growth
        self.trims = 0
        self._libc = _glibc()
        self.available = self._libc is not None
        self._resident_after_trim = resident_bytes() or 0

    def free_bytes(self) -> int | None:
        """Bytes glibc's heaps hold free (None when unavailable)."""
        return None if self._libc is None else int(self._libc.mallinfo2().fordblks)

    def trim(self) -> int | None:
        """Trim now; the resident size after it (None when unavailable)."""
        if self._libc is None:
            return None
        self._libc.malloc_trim(0)
        self.trims += 1
        after = resident_bytes()
        self._resident_after_trim = after or 0
        return after

    def due(self) -> bool:
        """Whether a trim is worth it now: ``growth`` bytes free in glibc's heaps, and the
        resident size ``growth`` above what it was after the last trim (or its lowest
        since; without ``/proc``, the free bytes alone decide)."""
        free = self.free_bytes() or 0
        resident = resident_bytes()
        if resident is None:
            return free >= self.growth
        self._resident_after_trim = min(self._resident_after_trim, resident)
        return free >= self.growth and resident - self._resident_after_trim >= self.growth

    async def run(self) -> None:
        if not self.available:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval)
            if self.due():
                after = await loop.run_in_executor(None, self.trim)
                log.debug("trimmed the heaps: %s bytes resident", after)
