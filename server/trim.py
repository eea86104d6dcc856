"""Give the memory a burst freed back to the operating system.

Contract. glibc's malloc keeps what a burst freed (a client's megabyte calls
and unsent replies, a thousand withdrawn requests, a Spark batch's buffers)
in its heaps, fragmented, so the process's resident size stays near its
high-water mark although nothing holds that memory any more.
``MemoryTrimmer``:

- ``run()``, a task on the server's loop, first pins glibc's mmap threshold
  at ``mmap_threshold`` bytes (default 64 KiB; ``mallopt``): every block that
  big gets a mapping of its own, given back when freed. Left to itself glibc
  raises the threshold to the largest block freed (a 1 MB ``/metrics`` page),
  and every block under it (100 KB calls and replies) then comes from the
  heaps and fragments them;
- then, every ``interval`` seconds (default 10), it reads how many bytes
  glibc's heaps hold free (``mallinfo2().fordblks``) and the process's
  resident size and, when the free bytes are ``growth`` (default 4 MiB) or
  more and either they or the resident size grew by ``growth`` since the last
  trim (the resident size from its lowest since), calls ``malloc_trim(0)`` in
  a worker thread, which returns every whole free page of every heap. Both
  signals are needed: a burst freed after a trim shows in the free bytes
  only, and a burst reusing pages a trim gave back (they still count as free)
  in the resident size only;
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
DEFAULT_MMAP_THRESHOLD = 64 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
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
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
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
    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        growth: int = DEFAULT_GROWTH,
        mmap_threshold: int = DEFAULT_MMAP_THRESHOLD,
    ) -> None:
        if interval <= 0 or growth <= 0 or mmap_threshold <= 0:
            raise ValueError(
                "interval, growth and mmap_threshold must be positive, got "
                f"{interval!r}, {growth!r}, {mmap_threshold!r}"
            )
        self.interval = interval
        self.growth = growth
        self.mmap_threshold = mmap_threshold
        self.trims = 0
        self._libc = _glibc()
        self.available = self._libc is not None
        self._free_after_trim = self.free_bytes() or 0
        self._resident_after_trim = resident_bytes() or 0

    def pin_mmap_threshold(self) -> bool:
        """Give every block of ``mmap_threshold`` bytes or more a mapping of its own, from
        now on, in the whole process; False when unavailable."""
        return (
            self._libc is not None
            and self._libc.mallopt(_M_MMAP_THRESHOLD, self.mmap_threshold) == 1
        )

    def free_bytes(self) -> int | None:
        """Bytes glibc's heaps hold free (None when unavailable)."""
        return None if self._libc is None else int(self._libc.mallinfo2().fordblks)

    def trim(self) -> int | None:
        """Trim now; the resident size after it (None when unavailable)."""
        if self._libc is None:
            return None
        self._libc.malloc_trim(0)
        self.trims += 1
        self._free_after_trim = self.free_bytes() or 0
        after = resident_bytes()
        self._resident_after_trim = after or 0
        return after

    def due(self) -> bool:
        """Whether a trim is worth it now (see the module doc)."""
        free = self.free_bytes() or 0
        self._free_after_trim = min(self._free_after_trim, free)
        resident = resident_bytes()
        if resident is not None:
            self._resident_after_trim = min(self._resident_after_trim, resident)
        freed = free - self._free_after_trim >= self.growth
        grew = resident is not None and resident - self._resident_after_trim >= self.growth
        return free >= self.growth and (freed or grew)

    async def run(self) -> None:
        if not self.available:
            return
        self.pin_mmap_threshold()
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval)
            if self.due():
                after = await loop.run_in_executor(None, self.trim)
                log.debug("trimmed the heaps: %s bytes resident", after)
