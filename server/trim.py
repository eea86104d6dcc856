"""Give the memory a burst freed back to the operating system.

Contract. glibc's malloc keeps what a burst freed (a client's megabyte calls
and unsent replies, a thousand withdrawn requests, a large rendering) in its
heaps, fragmented, so the process's resident size stays near its high-water
mark although nothing holds that memory any more. ``MemoryTrimmer``:

- ``run()``, a task on the server's loop, looks at the process's resident
  size every ``interval`` seconds (default 10; reading ``/proc/self/statm``)
  and, when it is ``growth`` bytes (default 4 MiB) or more above what it was
  after the last trim, calls glibc's ``malloc_trim(0)`` in a worker thread,
  which returns every whole free page of every heap;
- ``trim()`` does one such trim now and returns the resident size after it;
- ``trims`` counts them. Where there is no glibc or no ``/proc`` it does
  nothing (``available`` is False).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 10.0
DEFAULT_GROWTH = 4 * 1024 * 1024
_STATM = "/proc/self/statm"


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


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
        self._trim = _malloc_trim()
        self.available = self._trim is not None and resident_bytes() is not None
        self._floor = resident_bytes() or 0

    def trim(self) -> int | None:
        """Trim now; the resident size after it (None when unavailable)."""
        if self._trim is None:
            return None
        self._trim(0)
        self.trims += 1
        self._floor = resident_bytes() or 0
        return self._floor

    async def run(self) -> None:
        if not self.available:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval)
            resident = resident_bytes() or 0
            if resident - self._floor >= self.growth:
                after = await loop.run_in_executor(None, self.trim)
                log.debug("trimmed the heap: %d -> %s bytes resident", resident, after)
            elif resident < self._floor:
                self._floor = resident
