"""The memory trimmer: it trims only once the resident size grew past its threshold, and a
trim gives what a burst freed back to the operating system."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from drpc.server.trim import MemoryTrimmer, resident_bytes

from tests.waiting import wait_until

MIB = 1024 * 1024


def resident() -> int:
    size = resident_bytes()
    assert size is not None
    return size


async def test_it_trims_once_the_freed_memory_passes_its_threshold() -> None:
    trimmer = MemoryTrimmer(interval=0.05, growth=32 * MIB)
    assert trimmer.available  # glibc 2.33+: the machines drpc serves on
    running = asyncio.create_task(trimmer.run())
    try:
        under = [b"u" * 10_000 for _ in range(1000)]
        kept_under = under[::10]
        del under  # 9 MB freed: under the threshold
        await asyncio.sleep(0.3)
        assert trimmer.trims == 0
        over = [b"o" * 10_000 for _ in range(5000)]
        kept_over = over[::10]
        del over  # 45 MB more: past it
        while trimmer.trims == 0:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert trimmer.trims == 1  # nothing more freed since: no second trim
        assert len(kept_under) + len(kept_over) == 600
    finally:
        running.cancel()


async def test_it_trims_again_when_a_later_burst_reuses_what_it_gave_back() -> None:
    trimmer = MemoryTrimmer(interval=0.05, growth=16 * MIB)
    running = asyncio.create_task(trimmer.run())
    try:
        first = [b"a" * 10_000 for _ in range(5000)]
        kept_first = first[::10]
        del first  # 45 MB freed: trimmed
        await asyncio.to_thread(wait_until, lambda: trimmer.trims == 1)
        # The second burst fits in the pages the trim gave back: resident again, and
        # free again once it ends, yet glibc's free bytes are no more than after the trim.
        second = [b"c" * 10_000 for _ in range(4000)]
        kept_second = second[::10]
        del second
        await asyncio.to_thread(wait_until, lambda: trimmer.trims == 2)
        assert len(kept_first) + len(kept_second) == 900
    finally:
        running.cancel()


_BURST = """
import sys
from drpc.server.trim import MemoryTrimmer, resident_bytes
trimmer = MemoryTrimmer()
if sys.argv[1] == "pinned":
    assert trimmer.pin_mmap_threshold()
big = bytearray(4 * 1024 * 1024)
del big  # left to itself, glibc now takes every block under 4 MB from its heaps
blocks = [b"m" * 100_000 for _ in range(500)]  # 50 MB of 100 KB blocks
kept = blocks[::10]  # one in ten outlives the burst
grown = resident_bytes()
del blocks
print(grown - resident_bytes())
"""


@pytest.mark.parametrize("threshold", ["pinned", "glibc's own"])
def test_with_the_mmap_threshold_pinned_big_blocks_are_given_back_when_freed(
    threshold: str,
) -> None:
    # A fresh interpreter: this one's heaps have holes that big blocks would fill.
    freed = subprocess.run(
        [sys.executable, "-c", _BURST, threshold], capture_output=True, text=True, check=True
    )
    given_back = int(freed.stdout)
    if threshold == "pinned":
        assert given_back > 40 * MIB, given_back  # at once, no trim
    else:
        assert given_back < 10 * MIB, given_back  # held, fragmented, until a trim


def test_a_trim_returns_what_a_burst_freed() -> None:
    trimmer = MemoryTrimmer()
    blocks = [b"b" * 10_000 for _ in range(6000)]  # 60 MB in small heap blocks
    kept = blocks[::10]  # one in ten outlives the burst: the heap is fragmented
    del blocks
    before = resident()
    after = trimmer.trim()
    assert after is not None and after < before - 30 * MIB, (before, after)
    assert trimmer.trims == 1 and len(kept) == 600
