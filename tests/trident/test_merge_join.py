"""Two spout streams in one Trident topology: merged, joined within a batch, and
partition_persist with a StateUpdater, on both executors of transactional runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from drpc import Fields, InvalidTopologyError
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from drpc.trident import (
    Count,
    LMDBMapState,
    MapGet,
    TridentTopology,
    drpc_topologies,
    run,
    transactional_topology,
)

from .ops import PutLatest, Split
from .test_word_count import committed

TAKE = 2
# users -> city (3 partitions), purchases user -> item (2 partitions): batch t holds rows
# [t*TAKE, (t+1)*TAKE) of every partition of both spouts.
CITIES = {
    0: [["ann", "oslo"], ["bob", "rome"], ["cid", "oslo"], ["dan", "lima"], ["eve", "rome"]],
    1: [["fay", "lima"], ["gus", "oslo"]],
    2: [["hal", "rome"]],
}
PURCHASES = {
    0: [["ann", "tea"], ["cid", "jam"], ["bob", "pen"], ["dan", "ink"], ["eve", "cup"]],
    1: [["fay", "tea"], ["gus", "jam"], ["ann", "map"], ["hal", "pen"], ["zed", "cap"]],
}


# batch 0 joins ann, fay, gus; batch 1 dan (cid's purchase came a batch before his city,
# ann's map a batch after hers); batch 2 eve: a join sees one batch only.
JOINED = {
    ("oslo", "tea"): 1,
    ("lima", "tea"): 1,
    ("oslo", "jam"): 1,
    ("lima", "ink"): 1,
    ("rome", "cup"): 1,
}


def two_spouts(topology: TridentTopology) -> tuple[Any, Any]:
    cities = topology.new_stream(
        "cities", MemoryTransactionalSpout(CITIES, Fields("user", "city"), TAKE), parallelism=2
    )
    purchases = topology.new_stream(
        "purchases", MemoryTransactionalSpout(PURCHASES, Fields("buyer", "item"), TAKE)
    )
    return cities, purchases


def test_two_spout_streams_merge_and_join_within_each_batch(
    tx_executor: str, tmp_path: Path
) -> None:
    topology = TridentTopology()
    cities, purchases = two_spouts(topology)
    names = LMDBMapState.transactional("names")
    (
        topology.merge(cities.project(["user"]), purchases.project(["buyer"]))
        .group_by(["user"])
        .persistent_aggregate(names, Count(), ["seen"])
    )
    sales = LMDBMapState.transactional("sales")
    (
        topology.join(cities, ["user"], purchases, ["buyer"], ["user", "city", "item"])
        .group_by(["city", "item"])
        .persistent_aggregate(sales, Count(), ["count"])
    )
    state_dir = tmp_path / "state"
    result = run(topology, state_dir=str(state_dir), executor=tx_executor, max_spout_pending=2)
    everyone = Counter(
        row[0] for data in (CITIES, PURCHASES) for rows in data.values() for row in rows
    )
    assert committed(state_dir, names) == dict(everyone)
    assert committed(state_dir, sales) == JOINED
    assert result.tuples == sum(len(rows) for d in (CITIES, PURCHASES) for rows in d.values())
    # each batch holds both spouts' rows: 5 + 4, 2 + 4, 1 + 2 (then the idle empty ones)
    assert [commit.tuples for commit in result.commits if commit.tuples] == [9, 6, 3]


def test_partition_persist_state_is_queried_by_a_drpc_stream(
    tx_executor: str, tmp_path: Path
) -> None:
    topology = TridentTopology()
    cities, _ = two_spouts(topology)
    home = LMDBMapState.transactional("home")
    homes = cities.partition_persist(home, ["user", "city"], PutLatest())
    (
        topology.new_drpc_stream("home")
        .each(["args"], Split(), ["user"])
        .state_query(homes, ["user"], MapGet(), ["city"])
        .project(["city"])
    )
    state_dir = tmp_path / "state"
    run(topology, state_dir=str(state_dir), executor=tx_executor)
    assert committed(state_dir, home) == {
        user: city for rows in CITIES.values() for user, city in rows
    }
    with LocalDRPC(timeout=60.0) as drpc:
        for compiled in drpc_topologies(topology, str(state_dir)):
            drpc.register(compiled)
        assert drpc.execute("home", "ann hal zed") == '[["oslo"], ["rome"], [null]]'


def test_merge_and_join_misuse_is_named_when_declared(tmp_path: Path) -> None:
    topology = TridentTopology()
    cities, purchases = two_spouts(topology)
    query = topology.new_drpc_stream("q")
    with pytest.raises(InvalidTopologyError, match="DRPC stream 'q' with a spout stream"):
        topology.merge(cities.project(["user"]), query)
    with pytest.raises(InvalidTopologyError, match="different numbers of fields"):
        topology.merge(cities, purchases.project(["buyer"]))
    with pytest.raises(InvalidTopologyError, match="3 distinct out fields"):
        topology.join(cities, ["user"], purchases, ["buyer"], ["user", "city"])
    with pytest.raises(InvalidTopologyError, match="distinct streams"):
        topology.merge(cities, cities)
    with pytest.raises(InvalidTopologyError, match="all partitioned or all opaque"):
        topology.new_stream("opaque", OpaqueMemoryTransactionalSpout(CITIES, Fields("u", "c"), 1))
    with pytest.raises(InvalidTopologyError, match="declared twice"):
        topology.new_stream("cities", MemoryTransactionalSpout(CITIES, Fields("u", "c"), 1))
    compiled = transactional_topology(topology, str(tmp_path))
    assert compiled.transactional is not None
    assert compiled.transactional.id == "cities+purchases"
