"""Worker resources: loaded once per process, pickled without their value."""

from __future__ import annotations

import pickle

import pytest

from drpc import resources
from drpc.resources import WorkerResource

CALLS: list[int] = []


def load_table(size: int) -> list[int]:
    CALLS.append(size)
    return list(range(size))


def failing_loader() -> None:
    raise OSError("not yet")


def test_loaded_once_per_process_and_pickled_without_the_value() -> None:
    resources.unload("table")
    CALLS.clear()
    table = WorkerResource("table", load_table, 100_000)
    assert table.get() is table.get()
    assert CALLS == [100_000] and resources.loads("table") >= 1
    shipped = pickle.dumps(table)
    assert len(shipped) < 500  # the 100 000 values stay behind
    assert pickle.loads(shipped).get() is table.get()  # same process: the cached value
    assert CALLS == [100_000]


def test_one_name_cannot_mean_two_resources() -> None:
    resources.unload("clash")
    WorkerResource("clash", load_table, 1).get()
    with pytest.raises(ValueError, match="different loader"):
        WorkerResource("clash", load_table, 2).get()


def test_a_failing_loader_is_retried_on_next_use() -> None:
    resources.unload("flaky")
    flaky = WorkerResource("flaky", failing_loader)
    for _ in range(2):
        with pytest.raises(OSError):
            flaky.get()
    assert not flaky.loaded()
