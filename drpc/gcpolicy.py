"""How drpc runs work that keeps many objects alive: a longer young generation.

Contract: ``collected_less_often()`` runs a block with the cycle collector's
first threshold at ``YOUNG_THRESHOLD`` allocations (Python's default: 700);
``enter_less_often()`` and ``leave_less_often()`` do the same for a span that
is not a block (an in-process engine from its start to its stop: many tuples in
flight are objects kept alive the same way).
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


def enter_less_often() -> None:
    """Make the young generation ``YOUNG_THRESHOLD`` allocations long until the matching
    ``leave_less_often``."""
    global _inside, _found
    with _lock:
        if _inside == 0:
            _found = gc.get_threshold()
            gc.set_threshold(YOUNG_THRESHOLD, *_found[1:])
        _inside += 1


def leave_less_often() -> None:
    """End what one ``enter_less_often`` began; the last to leave restores the threshold."""
    global _inside
    with _lock:
        if _inside == 0:
            raise RuntimeError("leave_less_often without enter_less_often")
        _inside -= 1
        if _inside == 0:
            gc.set_threshold(*_found)


@contextmanager
def collected_less_often() -> Iterator[None]:
    """Run the block with the young generation ``YOUNG_THRESHOLD`` allocations long."""
    enter_less_often()
    try:
        yield
    finally:
        leave_less_often()
