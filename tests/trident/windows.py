"""Operations and topologies of the windowing tests (module-level: Spark workers and the
killed subprocess import them). ``killed_topology`` is configured by environment for the
subprocess run: ``DRPC_STATE_DIR`` (the state directory), ``DRPC_TEST_MARKERS`` (where the
kill leaves its marker)."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Any

from drpc import Fields, Topology
from drpc.state.topology import current_commit
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    Aggregator,
    LMDBMapState,
    LMDBWindowsStoreFactory,
    Sum,
    TridentCollector,
    TridentTopology,
    TridentTuple,
    transactional_topology,
)
from drpc.trident.windowing import Window
from tests.transactional.bolts import first_commit_attempt

WORDS = "the cow jumped over the moon and the dish ran away with the spoon".split(" ")  # noqa: SIM905
WORD_DATA = {0: [[word] for word in WORDS * 3]}  # 42 words, one partition: a known order
TAKE = 5  # words per batch: windows of 4 end inside batches
WINDOW = 4


class Letters(Aggregator[list[str]]):
    """Emits ``[start, end, letters]``: the window's bounds and its first fields joined."""

    def init(self, batch_id: Any, collector: TridentCollector) -> list[str]:
        assert isinstance(batch_id, Window)
        self.window = batch_id
        return []

    def aggregate(self, state: list[str], tuple: TridentTuple, collector: TridentCollector) -> None:
        state.append(tuple.get_value(0))

    def complete(self, state: list[str], collector: TridentCollector) -> None:
        collector.emit([self.window.start, self.window.end, "".join(state)])


class CountPerWord(Aggregator[dict[str, int]]):
    """Emits ``[word, count]`` for each word of the window, in order of first sight."""

    def init(self, batch_id: Any, collector: TridentCollector) -> dict[str, int]:
        return {}

    def aggregate(
        self, state: dict[str, int], tuple: TridentTuple, collector: TridentCollector
    ) -> None:
        word = tuple.get_value(0)
        state[word] = state.get(word, 0) + 1

    def complete(self, state: dict[str, int], collector: TridentCollector) -> None:
        for word, count in state.items():
            collector.emit([word, count])


class CountPerWordKillingOnce(CountPerWord):
    """CountPerWord that SIGKILLs its process while the commit of ``txid`` fires a window,
    once across processes (a marker in ``marker_dir``): a run dying mid-commit."""

    def __init__(self, marker_dir: str, txid: int) -> None:
        self.marker_dir, self.txid = marker_dir, txid

    def complete(self, state: dict[str, int], collector: TridentCollector) -> None:
        chosen = first_commit_attempt(self.marker_dir, "kill-", lambda txid: txid == self.txid)
        if chosen is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        super().complete(state, collector)


class SumFailingCommits(Sum):
    """Sum whose combine fails the first commit of every even txid (commit phase)."""

    def __init__(self, marker_dir: str) -> None:
        self.marker_dir = marker_dir

    def combine(self, a: int, b: int) -> int:
        txid = first_commit_attempt(self.marker_dir, "c", lambda txid: txid % 2 == 0)
        if txid is not None:
            raise RuntimeError(f"injected: first commit of txid {txid}")
        return a + b


class TxidClock:
    """A clock for time windows that reads the txid of the commit calling it: txid T commits
    at ``seconds * T`` (no sleeps; the same time on every attempt of a commit)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self) -> float:
        commit = current_commit()
        assert commit is not None, "a window's clock is read in its commit"
        return self.seconds * commit[1]


def windowed_word_totals(
    aggregator: Aggregator[Any], combiner: Sum | None = None, words: Any = None
) -> tuple[TridentTopology, Any]:
    """Words -> tumbling windows of WINDOW words counted per word -> the totals per word of
    the windows fired, in a transactional map; returns the topology and that state."""
    topology = TridentTopology()
    totals = LMDBMapState.transactional("window-totals")
    state = (
        topology.new_stream(
            "words", MemoryTransactionalSpout(words or WORD_DATA, Fields("word"), TAKE)
        )
        .tumbling_window(
            WINDOW, LMDBWindowsStoreFactory("words"), ["word"], aggregator, ["word", "count"]
        )
        .group_by(["word"])
        .persistent_aggregate(totals, ["count"], combiner or Sum(), ["total"])
    )
    return topology, (totals, state)


def killed_topology() -> Topology:
    topology, _ = windowed_word_totals(CountPerWordKillingOnce(os.environ["DRPC_TEST_MARKERS"], 3))
    return transactional_topology(topology, os.environ["DRPC_STATE_DIR"])


def fired(words: Sequence[str], window: int) -> list[list[str]]:
    """The tumbling windows of ``window`` words that fire over ``words``: every full one."""
    return [list(words[i : i + window]) for i in range(0, len(words) - window + 1, window)]
