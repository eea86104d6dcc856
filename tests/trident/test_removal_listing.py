"""Trident map states: keys removed by a topology (``MapRemove`` with ``partition_persist``)
exactly once under replays, and entries listed a page at a time over DRPC (``MapList``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from drpc import Fields
from drpc.errors import DRPCExecutionException, InvalidQueryError, InvalidTopologyError
from drpc.state import StateEnvironment
from drpc.state.versions import enter_reads, leave_reads
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    Count,
    LMDBMapState,
    MapList,
    PageRequest,
    TridentTopology,
    drpc_topologies,
    run,
)
from drpc.trident.pages import page_request
from drpc.trident.state import QueryMapState

from .ops import CountFailingCommits, RemoveFailingCommits
from .test_word_count import committed

# Two rows a partition a batch: txid 1 counts cat 2, dog 1, ant 1; txid 2 removes cat and
# counts eel, ant, bee; txid 3 counts cat again and removes dog and ant.
EVENTS = {
    0: [["cat", "+"], ["dog", "+"], ["cat", "-"], ["eel", "+"], ["cat", "+"], ["dog", "-"]],
    1: [["ant", "+"], ["cat", "+"], ["ant", "+"], ["bee", "+"], ["ant", "-"], ["bee", "+"]],
}
FINAL = {"cat": 1, "eel": 1, "bee": 2}


def counts_with_removals(markers: Path) -> TridentTopology:
    counts = LMDBMapState.transactional("counts", cache_size=8)
    topology = TridentTopology()
    events = topology.new_stream("events", MemoryTransactionalSpout(EVENTS, Fields("w", "op"), 2))
    (
        events.filter(lambda t: t.get_value(1) == "+")
        .group_by(["w"])
        .persistent_aggregate(counts, ["w"], CountFailingCommits(str(markers)), ["count"])
    )
    events.filter(lambda t: t.get_value(1) == "-").partition_persist(
        counts, ["w"], RemoveFailingCommits(str(markers), [2])
    )
    return topology


def test_a_topology_removes_keys_exactly_once_under_replays(
    tx_executor: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    state_dir = tmp_path / "state"
    result = run(counts_with_removals(markers), state_dir=str(state_dir), executor=tx_executor)
    assert result.replays["commit"] >= 2  # txid 2's removal, txid 3's counts
    assert [commit.tuples for commit in result.commits if commit.tuples] == [4, 4, 4]
    assert committed(state_dir, LMDBMapState.transactional("counts")) == FINAL


# -- listing over DRPC ---------------------------------------------------------------------

WORDS = {0: [["ant"], ["bee"], ["bee"]], 1: [["cat"], ["dog"], ["eel"]]}


def listing(limit: int) -> tuple[TridentTopology, Any]:
    counts = LMDBMapState.transactional("counts")
    topology = TridentTopology()
    state = (
        topology.new_stream("words", MemoryTransactionalSpout(WORDS, Fields("w"), 3))
        .group_by(["w"])
        .persistent_aggregate(counts, Count(), ["count"])
    )
    for function, queried in [
        ("entries", state),
        ("nothing", topology.new_static_state(LMDBMapState.opaque("never-written"))),
    ]:
        (
            topology.new_drpc_stream(function)
            .state_query(queried, ["args"], MapList(limit=limit), ["entries", "next"])
            .project(["entries", "next"])
        )
    return topology, counts


def test_entries_are_listed_page_by_page_over_drpc(executor: str, tmp_path: Path) -> None:
    topology, _ = listing(limit=2)
    state_dir = tmp_path / "state"
    run(topology, state_dir=str(state_dir))
    with LocalDRPC(executor=executor, timeout=60.0) as drpc:
        for compiled in drpc_topologies(topology, str(state_dir)):
            drpc.register(compiled)

        def page(argument: str, function: str = "entries") -> list[Any]:
            [[entries, after]] = json.loads(drpc.execute(function, argument))
            return [entries, after]

        assert page("") == [[["ant", 1], ["bee", 2]], "bee"]
        assert page('{"after": "bee"}') == [[["cat", 1], ["dog", 1]], "dog"]
        assert page('{"after": "dog"}') == [[["eel", 1]], None]
        assert page('{"after": "cat", "limit": 1}') == [[["dog", 1]], "dog"]
        assert page('{"prefix": "e"}') == [[["eel", 1]], None]
        assert page("", "nothing") == [[], None]
        for bad in ['{"limit": 3}', "bee"]:
            with pytest.raises(DRPCExecutionException, match="InvalidQueryError"):
                drpc.execute("entries", bad)


def test_a_listing_reads_at_the_requests_pinned_version(tmp_path: Path) -> None:
    topology, counts = listing(limit=10)
    state_dir = tmp_path / "state"
    run(topology, state_dir=str(state_dir), max_batches=1)
    env = StateEnvironment.open(state_dir)
    state_map = counts.open(env)
    pin = env.pin()
    try:
        env.run_write(lambda txn: state_map.handle(txn, 2).multi_remove(["ant", "bee"]))
        query = QueryMapState(state_map)
        assert [key for key, _ in query.page(10).entries] == ["cat", "dog", "eel"]
        previous = enter_reads(((env.path, pin.version),))
        try:
            assert [key for key, _ in query.page(10).entries] == ["ant", "bee", "cat", "dog", "eel"]
        finally:
            leave_reads(previous)
    finally:
        env.release(pin)


@pytest.mark.parametrize(
    ("argument", "expected"),
    [
        (None, PageRequest()),
        ("", PageRequest()),
        ('{"after": ["x", 1], "prefix": "a", "limit": 5}', PageRequest(("x", 1), "a", 5)),
        ({"after": b"raw"}, PageRequest(after=b"raw")),
        (PageRequest(limit=2), PageRequest(limit=2)),
    ],
)
def test_page_arguments_read_as_requests(argument: Any, expected: PageRequest) -> None:
    assert page_request(argument) == expected


@pytest.mark.parametrize(
    ("argument", "named"),
    [
        ("cat", "JSON object"),
        ("[1, 2]", "JSON object"),
        (7, "got int"),
        ('{"start": "a"}', "unknown start"),
        ('{"limit": 0}', "limit is an int >= 1"),
        ('{"limit": true}', "limit is an int >= 1"),
        ('{"after": 1.5}', "after is a key"),
        ('{"prefix": {"a": 1}}', "prefix is a key"),
        ('{"after": ["a", null]}', "after is a key"),
    ],
)
def test_a_bad_page_argument_names_what_is_wrong(argument: Any, named: str) -> None:
    with pytest.raises(InvalidQueryError, match=named):
        page_request(argument)


def test_a_listing_limit_is_a_positive_int() -> None:
    for limit in (0, -3, 1.5, True):
        with pytest.raises(InvalidTopologyError, match="MapList takes a limit"):
            MapList(limit=limit)  # type: ignore[arg-type]
    assert MapList().limit == 100
