"""Exactly once while the state directory grows (real LMDB, both executors).

A state directory is pre-filled to one of ``LEVELS`` levels just under its
initial map size, so that across the levels the map has to grow at every kind
of write a transaction makes: a batch's metadata, a partition's metadata (whose
initializer emits the batch), and the commit. Whatever write grows, the user
callbacks inside it run once: the committed count equals the input at every
level, and a coordinator that claims work is called exactly once per txid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from drpc import Fields
from drpc.errors import StateFullError
from drpc.examples.transactional_global_count import (
    DATA,
    GLOBAL_COUNT_MAP,
    BatchCount,
    UpdateGlobalCount,
)
from drpc.state import StateEnvironment, TransactionalMap
from drpc.state.topology import TopologyState
from drpc.transactional import MemoryTransactionalSpout, TransactionalTopologyBuilder
from drpc.transactional.filelog import FileLogTransactionalSpout, append_lines
from drpc.transactional.run import TransactionalRunner

from . import bolts

KIB = 1024
MAP_SIZE = 256 * KIB
FILLER_VALUE = b"x" * 400  # about a tenth of a page: levels a fraction of a page apart
LEVELS = 56
WORDS = [values[0] for partition in DATA.values() for values in partition]
TAKE = 3


def build(spout: Any) -> TransactionalTopologyBuilder:
    builder = TransactionalTopologyBuilder("global-count", "spout", spout)
    builder.set_bolt("partial-count", BatchCount(), 2).none_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    return builder


def memory_spout(directory: Path) -> Any:
    return MemoryTransactionalSpout(DATA, Fields("word"), TAKE)


def file_log_spout(directory: Path) -> Any:
    log_dir = directory / "log"
    for partition, rows in DATA.items():
        append_lines(log_dir, partition, [values[0] for values in rows])
    return FileLogTransactionalSpout(log_dir, Fields("word"), TAKE)


def claiming_spout(directory: Path) -> Any:
    return bolts.ClaimingSpout(WORDS, TAKE * len(DATA), str(directory / "calls"))


SPOUTS: dict[str, Callable[[Path], Any]] = {
    "memory": memory_spout,
    "file-log": file_log_spout,
    "claiming-coordinator": claiming_spout,
}


def fill(directory: Path, values: int) -> bool:
    """Write ``values`` filler values in one commit at a fixed map size; False if full."""
    env = StateEnvironment.open(directory, map_size=MAP_SIZE, max_map_size=MAP_SIZE)
    filler = TransactionalMap(env, "filler")
    try:
        env.run_write(
            lambda txn: filler.handle(txn, 1).multi_put(dict.fromkeys(range(values), FILLER_VALUE))
        )
        return True
    except StateFullError:
        return False
    finally:
        env.close()


@pytest.fixture(scope="module")
def capacity(tmp_path_factory: pytest.TempPathFactory) -> int:
    """How many filler values fit in the initial map."""
    low, high = 0, 4 * MAP_SIZE // len(FILLER_VALUE)
    while low + 1 < high:
        middle = (low + high) // 2
        if fill(tmp_path_factory.mktemp("capacity"), middle):
            low = middle
        else:
            high = middle
    return low


class Growth(logging.Handler):
    """What each growth of the map was for, by state directory."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.writes: dict[str, list[str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "grew the map" in message:
            directory = str(record.args[0]) if record.args else ""  # type: ignore[index]
            self.writes.setdefault(directory, []).append(message.split(" for ", 1)[1])


@pytest.fixture
def growth() -> Iterator[Growth]:
    handler = Growth()
    logger = logging.getLogger("drpc.state.env")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def write_kind(what: str) -> str:
    if "/meta" in what:
        return "batch metadata"
    if "/partition/" in what:
        return "partition metadata"
    if what.startswith("the commit of"):
        return "commit"
    return what


def run_level(
    tx_executor: str, make_topology: Callable[[Path], Any], directory: Path, filler: int
) -> tuple[Any, int]:
    """Run the topology ``make_topology(directory)`` over ``directory / "state"`` filled with
    ``filler`` values; its result and how often the map grew."""
    state = directory / "state"
    assert fill(state, filler)
    with TransactionalRunner(
        make_topology(directory),
        state_dir=str(state),
        executor=tx_executor,
        state_options={"map_size": MAP_SIZE},
    ) as runner:
        result = runner.run()
        resizes = runner.env.resizes
    runner.env.close()
    return result, resizes


def run_global_count(
    tx_executor: str, make_spout: Callable[[Path], Any], directory: Path, filler: int
) -> tuple[Any, int, str]:
    result, resizes = run_level(
        tx_executor, lambda directory: build(make_spout(directory)), directory, filler
    )
    state = str(directory / "state")
    return result, resizes, TopologyState.at(state).transactional_map(GLOBAL_COUNT_MAP).get("count")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("spout", list(SPOUTS))
def test_every_level_of_growth_commits_exactly_the_input(
    tx_executor: str, spout: str, capacity: int, growth: Growth, tmp_path: Path
) -> None:
    directories = [tmp_path / f"level-{level}" for level in range(LEVELS)]
    # Spark runs overlap: each is mostly waiting for its small jobs.
    with ThreadPoolExecutor(1 if tx_executor == "local" else 6) as pool:
        outcomes = list(
            pool.map(
                lambda level: run_global_count(
                    tx_executor, SPOUTS[spout], directories[level], capacity - level
                ),
                range(LEVELS),
            )
        )
    kinds: set[str] = set()
    for level, (result, resizes, total) in enumerate(outcomes):
        assert total == len(WORDS), f"level {level}: committed {total} of {len(WORDS)} words"
        assert result.tuples == len(WORDS)
        where = growth.writes.get(str((directories[level] / "state").resolve()), [])
        kinds.update(write_kind(what) for what in where)
        assert len(where) == resizes
        if spout == "claiming-coordinator":
            calls = [int(line) for line in (directories[level] / "calls").read_text().split()]
            assert calls == [commit.txid for commit in result.commits], f"level {level}"
    assert {"batch metadata", "commit"} <= kinds
    if spout != "claiming-coordinator":  # only partitioned spouts keep partition metadata
        assert "partition metadata" in kinds
    assert sum(1 for result, resizes, _ in outcomes if resizes) >= LEVELS * 3 // 4
