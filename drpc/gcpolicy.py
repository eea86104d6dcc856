"""How drpc runs work that keeps many objects alive: a longer young generation.

Contract: ``collected_less_often()`` runs a block with the cycle collector's
first threshold at ``YOUNG_THRESHOLD`` allocations (Python's default: 700).
A Spark task, a commit or a job's collected output keeps a few objects per
tuple alive until it ends, so at the default a collection runs every 700
allocations, promotes everything it finds, and the full collections that
triggers walk it all again (a fifth of a transactional bench's driver and
worker CPU). Cyclic garbage made inside the block waits at most
``YOUNG_THRESHOLD`` allocations. Blocks nest and run on several threads at
once: the first to enter raises the threshold, the last to leave restores
the one it found.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
"""Allocations between young collections inside ``collected_less_often``."""

_lock = threading.Lock()
_inside = 0
_found: tuple[int, ...] = ()


@contextmanager
def collected_less_often() -> Iterator[None]:
    """Run the block with the young generation ``YOUNG_THRESHOLD`` allocations long."""
    global _inside, _found
    with _lock:
        if _inside == 0:
            _found = gc.get_threshold()
            gc.set_threshold(YOUNG_THRESHOLD, *_found[1:])
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                gc.set_threshold(*_found)
