"""``Mutex``, the scheduler's lock: exclusive, blocking while held, free after a ``with``."""

from __future__ import annotations

import threading

import pytest

from drpc.executors.local.mutex import Mutex


def test_a_held_mutex_blocks_another_thread_until_it_is_released() -> None:
    mutex = Mutex()
    mutex.acquire()
    taken = threading.Event()

    def take() -> None:
        mutex.acquire()
        taken.set()
        mutex.release()

    thread = threading.Thread(target=take)
    thread.start()
    assert not taken.wait(0.2)  # blocked, not spinning past the holder
    mutex.release()
    assert taken.wait(10)
    thread.join(10)
    mutex.acquire()  # free again
    mutex.release()


def test_threads_taking_it_in_turns_never_overlap() -> None:
    mutex = Mutex()
    inside = 0
    overlaps = 0
    entries = 0

    def work() -> None:
        nonlocal inside, overlaps, entries
        for _ in range(2000):
            with mutex:
                inside += 1
                if inside > 1:
                    overlaps += 1
                entries += 1
                if entries % 50 == 0:
                    threading.Event().wait(0.0001)  # give up the GIL while holding it
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert entries == 8000 and overlaps == 0


def test_a_with_block_releases_it_when_it_raises_and_another_thread_may_release_it() -> None:
    mutex = Mutex()
    with pytest.raises(ValueError), mutex:
        raise ValueError("inside")
    mutex.acquire()
    releaser = threading.Thread(target=mutex.release)  # as threading.Lock allows
    releaser.start()
    releaser.join(10)
    with mutex:
        pass
