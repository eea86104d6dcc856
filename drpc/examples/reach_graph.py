"""Reach on a large synthetic follower graph, loaded once per worker process.

``generate_graph(path)`` writes a seeded power-law graph: ``users`` people,
``edges`` follow edges (followees drawn from a power law, followers uniform)
and ``tweets`` (url, tweeter) pairs (urls drawn from a power law). It is
stored as flat integer arrays (``array.tofile``), so a worker loads it in
milliseconds. ``load_graph(path)`` reads it back; ``graph_resource(path)`` is
the ``WorkerResource`` the bolts use, so the graph never travels with a job.

The topology is storm-starter's reach with batching inside tuples, written
for a graph whose tweeters have few followers each:

- GetTweeterChunks: [id, url] -> [id, chunk of tweeter ids] (``chunk`` per tuple);
- GetFollowers (shuffle): a chunk -> [id, follower ids], each tweeter's
  followers read as one slice of the CSR arrays;
- ReachUniquer (fields id, batch): the distinct followers of a request, counted.

storm-starter splits the uniquing over blocks of the follower space
(PartialUniquer, then CountAggregator), so one huge reach spreads over tasks.
Here that split costs more than it spreads: a tweeter's followers in six
blocks are six slices, and most slices hold a follower or two, so the
per-slice work doubled a call's CPU (measured: 150 ms against 82 ms for the
20 most tweeted urls on the local executor). Calls spread over the tasks by
request id instead.

Urls are named ``url/<n>``; ``top_urls(graph, k)`` lists the most tweeted.
"""

from __future__ import annotations

import json
import os
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drpc import (
    BaseBasicBolt,
    BaseBatchBolt,
    BasicOutputCollector,
    BatchOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    TopologyContext,
    Tuple,
)
from drpc.resources import WorkerResource

FORMAT = "drpc-reach-graph-1"


@dataclass
class Graph:
    users: int
    urls: int
    blocks: int
    follower_offsets: array  # index user*blocks+block -> start in followers
    followers: array
    tweet_offsets: array  # index url -> start in tweeters
    tweeters: array

    def tweeters_of(self, url: int) -> array:
        return self.tweeters[self.tweet_offsets[url] : self.tweet_offsets[url + 1]]

    def followers_of(self, user: int, block: int) -> array:
        slot = user * self.blocks + block
        return self.followers[self.follower_offsets[slot] : self.follower_offsets[slot + 1]]


def _csr(keys: Sequence[int], values: Sequence[int], slots: int) -> tuple[array, array]:
    counts = array("q", bytes(8 * (slots + 1)))
    for key in keys:
        counts[key + 1] += 1
    for slot in range(slots):
        counts[slot + 1] += counts[slot]
    position = array("q", counts)
    out = array("i", bytes(4 * len(values)))
    for key, value in zip(keys, values, strict=True):
        out[position[key]] = value
        position[key] += 1
    return counts, out


def generate_graph(
    path: str | os.PathLike[str],
    *,
    users: int = 100_000,
    edges: int = 2_000_000,
    urls: int = 50_000,
    tweets: int = 500_000,
    blocks: int = 6,
    seed: int = 2011,
) -> Path:
    """Write the graph to ``path`` (skipped if a graph with these parameters is there)."""
    path = Path(path)
    params = {
        "format": FORMAT,
        "users": users,
        "edges": edges,
        "urls": urls,
        "tweets": tweets,
        "blocks": blocks,
        "seed": seed,
    }
    if path.exists():
        with path.open("rb") as existing:
            if json.loads(existing.readline()) == params:
                return path
    rng = random.Random(seed)
    uniform = rng.random
    followees = [int(users * uniform() ** 2.5) for _ in range(edges)]
    followers = [int(users * uniform()) for _ in range(edges)]
    slots = [
        f * blocks + follower % blocks for f, follower in zip(followees, followers, strict=True)
    ]
    follower_offsets, follower_ids = _csr(slots, followers, users * blocks)
    tweet_urls = [int(urls * uniform() ** 3) for _ in range(tweets)]
    tweet_users = [int(users * uniform()) for _ in range(tweets)]
    tweet_offsets, tweeter_ids = _csr(tweet_urls, tweet_users, urls)
    partial = path.with_suffix(".partial")
    with partial.open("wb") as out:
        out.write((json.dumps(params) + "\n").encode())
        for block in (follower_offsets, follower_ids, tweet_offsets, tweeter_ids):
            out.write(len(block).to_bytes(8, "little"))
            block.tofile(out)
    partial.replace(path)
    return path


def load_graph(path: str) -> Graph:
    with open(path, "rb") as source:
        params = json.loads(source.readline())
        if params.get("format") != FORMAT:
            raise ValueError(f"{path} is not a drpc reach graph")
        arrays = []
        for typecode in ("q", "i", "q", "i"):
            length = int.from_bytes(source.read(8), "little")
            block = array(typecode)
            block.fromfile(source, length)
            arrays.append(block)
    return Graph(params["users"], params["urls"], params["blocks"], *arrays)


def graph_resource(path: str | os.PathLike[str]) -> WorkerResource[Graph]:
    resolved = str(Path(path).resolve())
    return WorkerResource(f"reach-graph:{resolved}", load_graph, resolved)


def top_urls(graph: Graph, k: int = 20) -> list[str]:
    counts = [
        (graph.tweet_offsets[url + 1] - graph.tweet_offsets[url], url) for url in range(graph.urls)
    ]
    counts.sort(key=lambda pair: (-pair[0], pair[1]))
    return [f"url/{url}" for _, url in counts[:k]]


def url_index(url: str, graph: Graph) -> int | None:
    prefix, _, number = url.partition("/")
    if prefix != "url" or not number.isdigit() or int(number) >= graph.urls:
        return None
    return int(number)


class GetTweeterChunks(BaseBasicBolt):
    def __init__(self, resource: WorkerResource[Graph], chunk: int = 2000) -> None:
        self.resource = resource
        self.chunk = chunk

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.graph = self.resource.get()

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        url = url_index(tuple[1], self.graph)
        if url is None:
            return
        tweeters = self.graph.tweeters_of(url)
        for start in range(0, len(tweeters), self.chunk):
            collector.emit([tuple[0], tweeters[start : start + self.chunk]])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "tweeters"))


class GetFollowers(BaseBasicBolt):
    def __init__(self, resource: WorkerResource[Graph]) -> None:
        self.resource = resource

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.graph = self.resource.get()

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        offsets, followers, blocks = (
            self.graph.follower_offsets,
            self.graph.followers,
            self.graph.blocks,
        )
        found = array("i")
        for tweeter in tuple[1]:
            first = tweeter * blocks
            found.extend(followers[offsets[first] : offsets[first + blocks]])
        collector.emit([tuple[0], found])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "followers"))


class ReachUniquer(BaseBatchBolt):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector = collector
        self.id = id
        self.followers: set[int] = set()

    def execute(self, tuple: Tuple) -> None:
        self.followers.update(tuple[1])

    def finish_batch(self) -> None:
        self.collector.emit([self.id, len(self.followers)])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "reach"))


def build_graph_reach(
    path: str | os.PathLike[str], function: str = "reach-graph", chunk: int = 2000
) -> LinearDRPCTopologyBuilder:
    resource = graph_resource(path)
    builder = LinearDRPCTopologyBuilder(function)
    builder.add_bolt(GetTweeterChunks(resource, chunk), 4)
    builder.add_bolt(GetFollowers(resource), 12).shuffle_grouping()
    builder.add_bolt(ReachUniquer(), 6).fields_grouping(Fields("id"))
    return builder


def sliced_reach(graph: Graph, url: str) -> int:
    """The reach as a competent user computes it in one process: each tweeter's followers
    over every block are one contiguous slice of the CSR arrays, so one ``set.update``
    per tweeter (``exact_reach`` walks the blocks: six updates per tweeter)."""
    index = url_index(url, graph)
    if index is None:
        return 0
    offsets, followers, blocks = graph.follower_offsets, graph.followers, graph.blocks
    seen: set[int] = set()
    for tweeter in graph.tweeters_of(index):
        first = tweeter * blocks
        seen.update(followers[offsets[first] : offsets[first + blocks]])
    return len(seen)


def reach_cost(graph: Graph, url: str) -> int:
    """Follower edges ``url``'s reach reads: what a job balances its tasks by."""
    index = url_index(url, graph)
    if index is None:
        return 0
    offsets, blocks = graph.follower_offsets, graph.blocks
    return sum(
        offsets[tweeter * blocks + blocks] - offsets[tweeter * blocks]
        for tweeter in graph.tweeters_of(index)
    )


def deal_by_cost(graph: Graph, urls: Sequence[str], hands: int) -> list[list[str]]:
    """``urls`` dealt into ``hands`` lists of about equal ``reach_cost``: the costliest
    first, each to the lightest hand so far."""
    dealt: list[list[str]] = [[] for _ in range(hands)]
    loads = [0] * hands
    for url in sorted(urls, key=lambda u: reach_cost(graph, u), reverse=True):
        lightest = loads.index(min(loads))
        dealt[lightest].append(url)
        loads[lightest] += reach_cost(graph, url)
    return dealt


def exact_reach(graph: Graph, url: str) -> int:
    """The reach computed directly, for checking answers."""
    index = url_index(url, graph)
    if index is None:
        return 0
    seen: set[int] = set()
    for tweeter in graph.tweeters_of(index):
        for block in range(graph.blocks):
            seen.update(graph.followers_of(tweeter, block))
    return len(seen)
