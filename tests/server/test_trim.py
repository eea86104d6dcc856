"""The memory trimmer: it trims only once the resident size grew past its threshold, and a
trim gives what a burst freed back to the operating system."""

from __future__ import annotations

import asyncio

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


def test_a_trim_returns_what_a_burst_freed() -> None:
    trimmer = MemoryTrimmer()
    blocks = [b"b" * 10_000 for _ in range(6000)]  # 60 MB in small heap blocks
    kept = blocks[::10]  # one in ten outlives the burst: the heap is fragmented
    del blocks
    before = resident()
    after = trimmer.trim()
    assert after is not None and after < before - 30 * MIB, (before, after)
    assert trimmer.trims == 1 and len(kept) == 600
