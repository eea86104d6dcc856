"""Trident DRPC streams that branch, query several states and meet again (merge, join),
compiled onto the coordinated DRPC builder and served on every executor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from drpc import DRPCExceptionType, DRPCExecutionException, Fields, InvalidTopologyError
from drpc.testing import LocalDRPC
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    Count,
    FilterNull,
    LMDBMapState,
    MapGet,
    Stream,
    TridentState,
    TridentTopology,
    drpc_topologies,
    drpc_topology,
    run,
)

from .ops import PutLatest, RefuseWord, Split

PEOPLE = {
    0: [["ann", "oslo", 31], ["bob", "rome", 25], ["eve", "rome", None]],
    1: [["cid", "lima", 47], ["dan", "oslo", 19]],
}
CITY = LMDBMapState.transactional("city")
AGE = LMDBMapState.transactional("age")  # eve has no age


def people(topology: TridentTopology) -> tuple[TridentState, TridentState]:
    """The spout stream writing user -> city and user -> age (where known)."""
    stream = topology.new_stream(
        "people", MemoryTransactionalSpout(PEOPLE, Fields("user", "city", "age"), 5)
    )
    cities = stream.partition_persist(CITY, ["user", "city"], PutLatest())
    ages = stream.each(["age"], FilterNull()).partition_persist(AGE, ["user", "age"], PutLatest())
    return cities, ages


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both states, written once by a local transactional run."""
    path = tmp_path_factory.mktemp("people")
    writer = TridentTopology()
    people(writer)
    run(writer, state_dir=str(path), executor="local")
    return path


def users(topology: TridentTopology, function: str) -> Stream:
    return topology.new_drpc_stream(function).each(["args"], Split(), ["user"]).project(["user"])


def rows(answer: str) -> list[list[Any]]:
    return sorted(json.loads(answer), key=json.dumps)


def serve(drpc: LocalDRPC, topology: TridentTopology, state_dir: Path) -> None:
    for compiled in drpc_topologies(topology, str(state_dir)):
        drpc.register(compiled)


def profile(topology: TridentTopology) -> None:
    """The request's users split into two branches, each querying its own state (the city
    branch over two tasks by user), joined back on the user."""
    cities, ages = people(topology)
    asked = users(topology, "profile")
    city = (
        asked.partition_by(["user"])
        .state_query(cities, ["user"], MapGet(), ["city"])
        .each(["city"], FilterNull())
        .parallelism_hint(2)
    )
    age = (
        asked.filter(["user"], RefuseWord("bad"))
        .state_query(ages, ["user"], MapGet(), ["age"])
        .each(["age"], FilterNull())
    )
    topology.join(city, ["user"], age, ["user"], ["user", "city", "age"])


def test_a_join_of_two_branches_each_querying_a_state(drpc: LocalDRPC, state_dir: Path) -> None:
    topology = TridentTopology()
    profile(topology)
    serve(drpc, topology, state_dir)
    assert rows(drpc.execute("profile", "ann zed bob")) == [
        ["ann", "oslo", 31],
        ["bob", "rome", 25],
    ]
    assert drpc.execute("profile", "eve") == "[]"  # the age branch emits nothing for eve
    with pytest.raises(DRPCExecutionException) as caught:
        drpc.execute("profile", "cid bad")
    assert caught.value.type is DRPCExceptionType.FAILED_REQUEST
    assert "ValueError" in caught.value.msg and "cannot handle 'bad'" in caught.value.msg
    assert rows(drpc.execute("profile", "cid")) == [["cid", "lima", 47]]


def test_a_merge_of_two_branches_and_several_state_queries_in_a_row(
    drpc: LocalDRPC, state_dir: Path
) -> None:
    topology = TridentTopology()
    cities, ages = people(topology)
    asked = users(topology, "either")
    by_city = asked.state_query(cities, ["user"], MapGet(), ["value"]).project(["value"])
    by_age = (
        asked.shuffle()
        .state_query(ages, ["user"], MapGet(), ["value"])
        .parallelism_hint(2)
        .project(["value"])
    )
    topology.merge(by_city, by_age).each(["value"], FilterNull()).group_by(["value"]).aggregate(
        Count(), ["n"]
    )
    (
        users(topology, "both")
        .state_query(cities, ["user"], MapGet(), ["city"])
        .state_query(ages, ["user"], MapGet(), ["age"])
        .project(["city", "age"])
    )
    serve(drpc, topology, state_dir)
    assert rows(drpc.execute("either", "ann dan eve")) == [
        ["oslo", 2],
        ["rome", 1],
        [19, 1],
        [31, 1],
    ]
    assert rows(drpc.execute("both", "eve cid")) == [["lima", 47], ["rome", None]]


def test_a_merge_of_the_request_with_a_branch_of_itself(drpc: LocalDRPC, tmp_path: Path) -> None:
    topology = TridentTopology()
    asked = users(topology, "echo")
    shout = asked.map(lambda t: [t["user"].upper()], ["user"]).partition_by(["user"])
    topology.merge(asked, shout).global_().aggregate(["user"], Count(), ["n"])
    compiled = drpc_topology(topology, "echo", str(tmp_path))
    assert compiled.drpc_steps == ["b0", "b1", "b2", "b3", "b4", "return-tuples"]
    # the merge's segment reads b0 (the request's, one task knows it) and b1 (one task)
    assert compiled.expected_reports("b2") == 2
    drpc.register(compiled)
    assert drpc.execute("echo", "a b") == "[[4]]"


def test_drpc_streams_that_cannot_compile_are_named(tmp_path: Path) -> None:
    topology = TridentTopology()
    cities, _ = people(topology)
    asked = users(topology, "f")
    asked.state_query(cities, ["user"], MapGet(), ["city"])
    asked.each(["user"], Split(), ["part"])
    with pytest.raises(InvalidTopologyError, match=r"'f' ends in 2 branches \(fields \['user',"):
        drpc_topology(topology, "f", str(tmp_path))
    other = users(topology, "g")
    with pytest.raises(InvalidTopologyError, match=r"DRPC streams \['f', 'g'\]"):
        topology.merge(asked, other)
    spout = topology.new_stream(
        "more", MemoryTransactionalSpout(PEOPLE, Fields("user", "city", "age"), 5)
    )
    with pytest.raises(InvalidTopologyError, match="DRPC stream 'g' with a spout stream"):
        topology.join(other, ["user"], spout, ["user"], ["user", "city", "age"])
    users(topology, "h").group_by(["user"]).persistent_aggregate(
        LMDBMapState.transactional("h"), Count(), ["n"]
    )
    with pytest.raises(InvalidTopologyError, match="'h' writes state"):
        drpc_topology(topology, "h", str(tmp_path))
