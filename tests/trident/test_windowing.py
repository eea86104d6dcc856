"""Trident windows (Storm's tumbling and sliding windows, by count and by time): the pure
window machine's traces, exact window contents on both executors of transactional runs,
time windows on an injected clock, exactly once under replays in both phases and under a
SIGKILLed run restarted on its state directory, the window store's bound, a windowed count
queried over DRPC, and the arguments refused."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from drpc import Fields
from drpc.errors import InvalidTopologyError, StateOrderError
from drpc.state import StateEnvironment
from drpc.state.env import WINDOWS_DB
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout, RunResult
from drpc.trident import (
    Count,
    FilterNull,
    LMDBMapState,
    LMDBWindowsStoreFactory,
    MapGet,
    Sum,
    TridentTopology,
    WindowConfig,
    drpc_topologies,
    run,
    transactional_topology,
)
from drpc.trident.window_store import WindowTaskStore, commit_window
from drpc.trident.windowing import Chunk, Progress, Window, advance

from .ops import Concat, Split, SplitFailingOnce
from .test_word_count import committed
from .windows import (
    WINDOW,
    WORDS,
    CountPerWord,
    Letters,
    SumFailingCommits,
    TxidClock,
    fired,
    windowed_word_totals,
)

SECOND = 1_000_000  # microseconds: the windows' unit of time

# -- the window machine, without LMDB ------------------------------------------------------


def trace(config: WindowConfig, batches: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """The windows (start, end) each commit fires, for batches of (size, time in seconds);
    a time window's bounds in seconds too."""
    progress, fired_windows = Progress(), []
    unit = SECOND if config.kind == "time" else 1
    for txid, (size, seconds) in enumerate(batches, start=1):
        step = advance(config, progress, txid, size, seconds * SECOND)
        fired_windows.append([(f.window.start // unit, f.window.end // unit) for f in step.firings])
        progress = step.progress
    return fired_windows


def test_count_windows_fire_as_storms_count_triggers() -> None:
    # Storm's sliding count window of 5 sliding by 2: its first windows hold 2 and 4 tuples
    assert trace(WindowConfig.sliding_count(5, 2), [(3, 0), (4, 0), (0, 0), (3, 0)]) == [
        [(0, 2)],
        [(0, 4), (1, 6)],
        [],
        [(3, 8), (5, 10)],
    ]
    assert trace(WindowConfig.tumbling_count(3), [(2, 0), (7, 0), (3, 0)]) == [
        [],
        [(0, 3), (3, 6), (6, 9)],
        [(9, 12)],
    ]


def test_a_window_keeps_only_the_batches_an_open_window_needs() -> None:
    config = WindowConfig.sliding_count(4, 2)
    progress = Progress()
    for txid in range(1, 40):
        step = advance(config, progress, txid, 3, 0)
        progress = step.progress
        held = sum(chunk.size for chunk in progress.chunks)
        assert held <= config.length + 3  # a window and a batch at most
        assert all(chunk.end > progress.fired_through + 2 - 4 for chunk in progress.chunks)
    assert progress.tuples == 117


def test_time_windows_fire_at_the_first_commit_after_their_end_and_skip_empty_ones() -> None:
    tumbling = WindowConfig.tumbling_duration(timedelta(seconds=10))
    # batches at 4 s, 8 s, 12 s, then nothing until 47 s (the clock then goes back: ignored)
    batches = [(1, 4), (1, 8), (1, 12), (0, 47), (1, 45), (0, 51)]
    assert trace(tumbling, batches) == [[], [], [(0, 10)], [(10, 20)], [], [(40, 50)]]
    sliding = WindowConfig.sliding_duration(timedelta(seconds=10), timedelta(seconds=5))
    step = advance(sliding, Progress(), 1, 2, 3 * SECOND)
    assert step.firings == ()
    step = advance(sliding, step.progress, 2, 1, 12 * SECOND)
    assert [(f.window, f.size) for f in step.firings] == [
        (Window(-5 * SECOND, 5 * SECOND), 2),
        (Window(0, 10 * SECOND), 2),
    ]
    assert step.progress.chunks == (Chunk(2, 1, 12 * SECOND),)  # the 3 s batch was evicted


def test_a_commit_of_the_txid_already_applied_returns_what_it_fired(tmp_path: Path) -> None:
    """Storm's per-txid trigger records: a batch committed again (never, when the commit
    is one transaction, but the store does not rely on it) fires nothing new."""
    env = StateEnvironment.open(tmp_path)
    config = WindowConfig.tumbling_count(2)

    def commit(txid: int, batch: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        def write(txn: Any) -> list[tuple[Any, ...]]:
            store = WindowTaskStore(txn, "topology", "w0", 0)
            return commit_window(store, config, txid, batch, 0, lambda w, rows: [(w, rows)])

        return env.run_write(write)

    assert commit(1, [("a",), ("b",), ("c",)]) == [(Window(0, 2), [("a",), ("b",)])]
    assert commit(1, [("x",)] * 5) == [(Window(0, 2), [("a",), ("b",)])]
    assert commit(2, [("d",)]) == [(Window(2, 4), [("c",), ("d",)])]
    assert commit(3, []) == []
    with pytest.raises(StateOrderError, match="txid 2 arrives after txid 3 was applied"):
        commit(2, [("e",)])


# -- runs ----------------------------------------------------------------------------------


def window_outputs(result: RunResult) -> list[list[list[Any]]]:
    """Per commit, what its windows fired (without the batch id), window by window."""
    return [
        [values[1:] for name in sorted(commit.outputs) for values in commit.outputs[name]]
        for commit in result.commits
    ]


LETTERS = {0: [[letter] for letter in "abcdefghij"]}


def test_count_windows_hold_exactly_their_tuples(tx_executor: str, tmp_path: Path) -> None:
    tumbling, sliding = TridentTopology(), TridentTopology()
    spout = MemoryTransactionalSpout(LETTERS, Fields("letter"), 4)  # abcd, efgh, ij, nothing
    tumbling.new_stream("letters", spout).tumbling_window(
        3, LMDBWindowsStoreFactory(), ["letter"], Letters(), ["start", "end", "letters"]
    )
    sliding.new_stream("letters", spout).sliding_window(
        5, 2, LMDBWindowsStoreFactory(), ["letter"], Concat(), ["letters"]
    )
    by_tumbling = run(tumbling, state_dir=str(tmp_path / "t"), executor=tx_executor)
    by_sliding = run(sliding, state_dir=str(tmp_path / "s"), executor=tx_executor)
    assert window_outputs(by_tumbling) == [
        [[0, 3, "abc"]],
        [[3, 6, "def"]],
        [[6, 9, "ghi"]],
        [],
    ]  # "j" waits for a window that has not filled
    assert window_outputs(by_sliding) == [
        [["ab"], ["abcd"]],
        [["bcdef"], ["defgh"]],
        [["fghij"]],
        [],
    ]


def test_each_task_windows_its_own_partitions(tmp_path: Path) -> None:
    topology = TridentTopology()
    data = {0: [[c] for c in "abcdef"], 1: [[c] for c in "ABCDEF"]}
    spout = MemoryTransactionalSpout(data, Fields("letter"), 3)
    (
        topology.new_stream("letters", spout, parallelism=2).tumbling_window(
            2, LMDBWindowsStoreFactory(), ["letter"], Concat(), ["letters"]
        )
    )
    result = run(topology, state_dir=str(tmp_path))
    assert sorted(v[0] for commit in window_outputs(result) for v in commit) == [
        "AB",
        "CD",
        "EF",
        "ab",
        "cd",
        "ef",
    ]


def test_time_windows_fire_on_the_injected_clock(tx_executor: str, tmp_path: Path) -> None:
    topology = TridentTopology()
    spout = MemoryTransactionalSpout(LETTERS, Fields("letter"), 2)  # ab cd ef gh ij, nothing
    stream = topology.new_stream("letters", spout)
    clock = TxidClock(5.0)  # txid T commits at 5T seconds: tuples on the windows' bounds
    stream.tumbling_window(
        timedelta(seconds=10), LMDBWindowsStoreFactory(), ["letter"], Concat(), ["t"], clock=clock
    )
    stream.window(
        WindowConfig.sliding_duration(timedelta(seconds=10), timedelta(seconds=5)),
        ["letter"],
        Letters(),
        ["start", "end", "s"],
        clock=clock,
    )
    result = run(topology, state_dir=str(tmp_path), executor=tx_executor)
    s = SECOND
    assert [commit.tuples for commit in result.commits] == [2, 2, 2, 2, 2, 0]
    assert window_outputs(result) == [
        [],  # 5 s: ab
        [["ab"], [0, 10 * s, "ab"]],  # 10 s: cd, in [10 s, 20 s) after the window it ends
        [[5 * s, 15 * s, "abcd"]],  # 15 s: ef
        [["cdef"], [10 * s, 20 * s, "cdef"]],  # 20 s: gh
        [[15 * s, 25 * s, "efgh"]],  # 25 s: ij
        [["ghij"], [20 * s, 30 * s, "ghij"]],  # 30 s: an empty batch fires what ended
    ]


def test_windows_fire_once_under_replays_in_both_phases(
    every_tx_executor: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    sentences = {0: [[" ".join(WORDS[i : i + 3])] for i in range(0, len(WORDS), 3)]}
    topology = TridentTopology()
    totals = LMDBMapState.transactional("window-totals")
    words = topology.new_stream(
        "sentences", MemoryTransactionalSpout(sentences, Fields("s"), 2)
    ).each(["s"], SplitFailingOnce(str(markers), percent=40), ["word"])
    (
        words.tumbling_window(
            WINDOW, LMDBWindowsStoreFactory(), ["word"], CountPerWord(), ["word", "count"]
        )
        .group_by(["word"])
        .persistent_aggregate(totals, ["count"], SumFailingCommits(str(markers)), ["total"])
    )
    # the same windows, joined: their outputs reach no step, so the run returns them
    words.tumbling_window(WINDOW, LMDBWindowsStoreFactory(), ["word"], Concat(), ["joined"])
    result = run(topology, state_dir=str(tmp_path / "state"), executor=every_tx_executor)
    assert result.replays["processing"] > 0 and result.replays["commit"] > 0
    windows = fired(WORDS, WINDOW)
    expected = Counter(word for window in windows for word in window)
    assert committed(tmp_path / "state", totals) == dict(expected)
    outputs = [values for commit in window_outputs(result) for values in commit]
    assert outputs == [["".join(window)] for window in windows]


def test_a_sigkilled_run_restarted_fires_every_window_once(tmp_path: Path) -> None:
    """The first run dies inside the commit of txid 3 while a window fires; a run over the
    same state directory resumes at txid 3 and fires it, and the others, once."""
    markers = tmp_path / "markers"
    markers.mkdir()
    state_dir = tmp_path / "state"
    env = {**os.environ, "DRPC_STATE_DIR": str(state_dir), "DRPC_TEST_MARKERS": str(markers)}
    command = [
        sys.executable, "-m", "drpc.transactional.cli", "run",
        "tests.trident.windows:killed_topology", "--state-dir", str(state_dir),
    ]  # fmt: skip
    killed = subprocess.run(command, env=env, capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    topology, (totals, _) = windowed_word_totals(CountPerWord())
    result = run(topology, state_dir=str(state_dir))
    assert result.commits[0].txid == 3  # txids 1 and 2 committed before the kill
    expected = Counter(word for window in fired(WORDS * 3, WINDOW) for word in window)
    assert committed(state_dir, totals) == dict(expected)
    # the store keeps only what the open window needs: the 2 words after the last window
    with StateEnvironment.open(state_dir).read() as txn:
        records = list(txn.scan(WINDOWS_DB, b""))
    assert len(records) == 3  # its progress, its last outputs, the batch of "the spoon"


def test_a_windowed_count_per_word_is_queried_over_drpc(tx_executor: str, tmp_path: Path) -> None:
    topology, (_, counts) = windowed_word_totals(CountPerWord())
    (
        topology.new_drpc_stream("windowed")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet(), ["total"])
        .each(["total"], FilterNull())
        .aggregate(["total"], Sum(), ["sum"])
    )
    state_dir = tmp_path / "state"
    run(topology, state_dir=str(state_dir), executor=tx_executor)
    counted = Counter(word for window in fired(WORDS * 3, WINDOW) for word in window)
    assert counted["the"] == 11 and sum(counted.values()) == 40  # "the spoon" never fired
    with LocalDRPC(timeout=60.0) as drpc:
        for compiled in drpc_topologies(topology, str(state_dir)):
            drpc.register(compiled)
        assert drpc.execute("windowed", "the") == "[[11]]"
        assert drpc.execute("windowed", "cow moon") == f"[[{counted['cow'] + counted['moon']}]]"
        assert drpc.execute("windowed", "zebra") == "[[0]]"


# -- arguments -----------------------------------------------------------------------------


def stream() -> Any:
    spout = MemoryTransactionalSpout(LETTERS, Fields("letter"), 2)
    return TridentTopology().new_stream("letters", spout)


STORE = LMDBWindowsStoreFactory()


DURATION = timedelta(seconds=1)
BAD = [
    # (arguments of the window call after the window, store, fields: what is wrong)
    ("tumbling", (0,), "window_count must be an int >= 1, got 0"),
    ("tumbling", (-2,), "window_count must be an int >= 1, got -2"),
    ("tumbling", (2.5,), "a window_count (int) or a window_duration (timedelta), got 2.5"),
    ("tumbling", (True,), "a window_count (int) or a window_duration (timedelta), got True"),
    ("tumbling", (timedelta(0),), "window_duration must be a timedelta of at least a micro"),
    ("tumbling", (-DURATION,), "window_duration must be a timedelta of at least a micro"),
    ("sliding", (3, 0), "slide_count must be an int >= 1, got 0"),
    ("sliding", (0, 1), "window_count must be an int >= 1, got 0"),
    ("sliding", (3, 4), "slide_count (4) must not exceed window_count (3)"),
    ("sliding", (DURATION, 2 * DURATION), "sliding_interval (datetime.timedelta(seconds=2)) "),
    ("sliding", (DURATION, timedelta(0)), "sliding_interval must be a timedelta of at least"),
    ("sliding", (2 * DURATION, 1), "(window_duration, sliding_interval), two timedeltas"),
]


@pytest.mark.parametrize(("kind", "window", "message"), BAD)
def test_bad_window_sizes_are_refused_by_name(
    kind: str, window: tuple[Any, ...], message: str
) -> None:
    declare = stream().tumbling_window if kind == "tumbling" else stream().sliding_window
    with pytest.raises(InvalidTopologyError) as caught:
        declare(*window, STORE, ["letter"], Count(), ["n"])
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((STORE, ["nope"], Count(), ["n"]), "window: no field(s) ['nope']"),
        ((STORE, ["letter"], Count(), ["n", "m"]), "a Count outputs one value, so one function"),
        ((STORE, ["letter"], CountPerWord(), ["w", "w"]), "window: duplicate field name 'w'"),
        ((STORE, ["letter"], CountPerWord(), []), "function_fields must name at least one"),
        ((STORE, ["letter"], Split(), ["n"]), "or Aggregator, got Split"),
        ((LMDBMapState.transactional("x"), ["letter"], Count(), ["n"]), "an LMDBWindowsStore"),
    ],
)
def test_bad_window_operands_are_refused_by_name(arguments: tuple[Any, ...], message: str) -> None:
    with pytest.raises(InvalidTopologyError) as caught:
        stream().tumbling_window(2, *arguments)
    assert message in str(caught.value)


def test_a_window_takes_a_config_and_a_callable_clock() -> None:
    with pytest.raises(InvalidTopologyError, match=r"window takes a WindowConfig, got \(2, 2\)"):
        stream().window((2, 2), ["letter"], Count(), ["n"])
    with pytest.raises(InvalidTopologyError, match="a window's clock is a callable, got 5"):
        stream().tumbling_window(2, STORE, ["letter"], Count(), ["n"], clock=5)


def test_the_edges_of_the_arguments_are_accepted(tmp_path: Path) -> None:
    s = stream()
    s.tumbling_window(1, STORE, ["letter"], Count(), ["one"])
    s.sliding_window(3, 3, STORE, ["letter"], Count(), ["slide-is-window"])
    s.sliding_window(3, 1, STORE, ["letter"], Count(), ["slide-one"])
    s.tumbling_window(timedelta(microseconds=1), STORE, ["letter"], Count(), ["us"])
    s.sliding_window(timedelta(seconds=2), timedelta(seconds=2), STORE, ["letter"], Count(), ["t"])
    compiled = transactional_topology(s.topology, str(tmp_path))
    assert compiled.transactional is not None
    assert len(compiled.transactional.committers) == 5
    assert WindowConfig.sliding(3, 3).is_tumbling


def test_windows_are_named_once_per_topology_and_not_on_drpc_streams() -> None:
    s = stream()
    s.tumbling_window(2, LMDBWindowsStoreFactory("mine"), ["letter"], Count(), ["n"])
    with pytest.raises(InvalidTopologyError, match="two windows of this topology are named 'mine'"):
        s.tumbling_window(3, LMDBWindowsStoreFactory("mine"), ["letter"], Count(), ["n"])
    drpc_stream = TridentTopology().new_drpc_stream("f")
    with pytest.raises(InvalidTopologyError, match="a window on a DRPC stream"):
        drpc_stream.tumbling_window(2, STORE, ["args"], Count(), ["n"])
