"""Storm-starter's Trident reach, over Trident states in LMDB.

``build_trident_reach()`` declares one topology with two spout streams: the
tweets (url, tweeter) go to the transactional map ``reach-tweeters`` (url ->
sorted tweeters, ``persistent_aggregate`` with the ``Union`` combiner), the
follow edges (user, follower) to ``reach-followers`` (user -> sorted
followers, ``partition_persist`` with the ``AddFollowers`` updater after a
``partition_by(user)``, so each user's edges of a batch meet in one task).
Its DRPC stream ``reach`` reads both as Storm's ``TridentReach`` does: the
url's tweeters (``state_query``), one tuple each, ``shuffle``, each
tweeter's followers, one tuple each, ``group_by(follower)`` with ``One``
(one tuple per distinct follower), then ``Sum``: ``"foo.com/blog/1"`` ->
``"[[16]]"`` over ``drpc.examples.reach``'s tables.

For the command lines, reading the state directory ``DRPC_STATE_DIR``
(default ``state``): ``topology()`` is the spout streams compiled for
``drpc-transactional run``; ``reach_query()`` is the ``reach`` function for
``drpc-server --topology``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from drpc.examples import state_dir
from drpc.examples.reach import FOLLOWERS_DB, TWEETERS_DB
from drpc.model.fields import Fields
from drpc.model.topology import Topology
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    CombinerAggregator,
    Function,
    LMDBMapState,
    MapGet,
    StateUpdater,
    Sum,
    TridentCollector,
    TridentTopology,
    TridentTuple,
    drpc_topology,
    transactional_topology,
)

TWEETERS = LMDBMapState.transactional("reach-tweeters")
FOLLOWERS = LMDBMapState.transactional("reach-followers")


class Union(CombinerAggregator[list[str]]):
    """The sorted distinct values of the first input field."""

    def init(self, tuple: TridentTuple) -> list[str]:
        return [tuple.get_value(0)]

    def combine(self, a: list[str], b: list[str]) -> list[str]:
        return sorted(set(a) | set(b))

    def zero(self) -> list[str]:
        return []


class AddFollowers(StateUpdater):
    """Adds a batch's (user, follower) edges to each user's stored sorted followers."""

    def update_state(
        self, state: Any, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        added: dict[str, set[str]] = {}
        for edge in tuples:
            added.setdefault(edge.get_value(0), set()).add(edge.get_value(1))
        users = list(added)
        stored = state.multi_get(users)
        state.multi_put(
            {
                user: sorted(set(old or ()) | added[user])
                for user, old in zip(users, stored, strict=True)
            }
        )


class ExpandList(Function):
    """One output tuple per element of the list in the first input field (None: none)."""

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        for item in tuple.get_value(0) or ():
            collector.emit([item])


class One(CombinerAggregator[int]):
    """1 per group, whatever it holds: counts distinct groups once summed."""

    def init(self, tuple: TridentTuple) -> int:
        return 1

    def combine(self, a: int, b: int) -> int:
        return 1

    def zero(self) -> int:
        return 1


def _pairs(table: Mapping[str, Sequence[str]], partitions: int) -> dict[int, list[list[str]]]:
    rows = [[key, value] for key, values in table.items() for value in values]
    return {p: rows[p::partitions] for p in range(partitions)}


def build_trident_reach(
    tweeters: Mapping[str, Sequence[str]] | None = None,
    followers: Mapping[str, Sequence[str]] | None = None,
    take_per_batch: int = 4,
) -> TridentTopology:
    topology = TridentTopology()
    tweets = MemoryTransactionalSpout(
        _pairs(TWEETERS_DB if tweeters is None else tweeters, 2),
        Fields("url", "tweeter"),
        take_per_batch,
    )
    follows = MemoryTransactionalSpout(
        _pairs(FOLLOWERS_DB if followers is None else followers, 3),
        Fields("user", "follower"),
        take_per_batch,
    )
    url_to_tweeters = (
        topology.new_stream("reach-tweets", tweets, parallelism=2)
        .group_by(["url"])
        .persistent_aggregate(TWEETERS, ["tweeter"], Union(), ["tweeters"])
    )
    tweeter_to_followers = (
        topology.new_stream("reach-follows", follows, parallelism=2)
        .partition_by(["user"])
        .partition_persist(FOLLOWERS, ["user", "follower"], AddFollowers())
    )
    (
        topology.new_drpc_stream("reach")
        .state_query(url_to_tweeters, ["args"], MapGet(), ["tweeters"])
        .each(["tweeters"], ExpandList(), ["tweeter"])
        .shuffle()
        .state_query(tweeter_to_followers, ["tweeter"], MapGet(), ["followers"])
        .each(["followers"], ExpandList(), ["follower"])
        .group_by(["follower"])
        .aggregate(One(), ["one"])
        .aggregate(["one"], Sum(), ["reach"])
    )
    return topology


def topology() -> Topology:
    return transactional_topology(build_trident_reach(), state_dir())


def reach_query() -> Topology:
    return drpc_topology(build_trident_reach(), "reach", state_dir())
