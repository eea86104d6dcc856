"""Reach: how many distinct people were exposed to a URL through tweets.

The four steps of storm-starter's ReachTopology: GetTweeters (4 tasks),
GetFollowers (12 tasks, shuffle), PartialUniquer (6 tasks, batch, fields
id+follower) and CountAggregator (3 tasks, batch, fields id).

``python -m drpc.examples.reach`` runs it on a LocalDRPC and prints the reach
of the reference URLs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
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
from drpc.commandline import CommandLineParser
from drpc.testing import LocalDRPC

TWEETERS_DB: dict[str, list[str]] = {
    "foo.com/blog/1": ["sally", "bob", "tim", "george", "nathan"],
    "engineering.twitter.com/blog/5": ["adam", "david", "sally", "nathan"],
    "tech.backtype.com/blog/123": ["tim", "mike", "john"],
}

FOLLOWERS_DB: dict[str, list[str]] = {
    "sally": ["bob", "tim", "alice", "adam", "jim", "chris", "jai"],
    "bob": ["sally", "nathan", "jim", "mary", "david", "vivian"],
    "tim": ["alex"],
    "nathan": ["sally", "bob", "adam", "harry", "chris", "vivian", "emily", "jordan"],
    "adam": ["david", "carissa"],
    "mike": ["john", "bob"],
    "john": ["alice", "nathan", "jim", "mike", "bob"],
}

EXPECTED_REACH = {
    "foo.com/blog/1": "16",
    "engineering.twitter.com/blog/5": "14",
    "tech.backtype.com/blog/123": "7",
    "notaurl.com": "0",
}


class GetTweeters(BaseBasicBolt):
    """[id, url] -> [id, tweeter] for each person who tweeted the url."""

    def __init__(self, tweeters: Mapping[str, Sequence[str]] | None = None) -> None:
        self.tweeters = TWEETERS_DB if tweeters is None else tweeters

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        request, url = tuple[0], tuple[1]
        for tweeter in self.tweeters.get(url, ()):
            collector.emit([request, tweeter])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "tweeter"))


class GetFollowers(BaseBasicBolt):
    """[id, tweeter] -> [id, follower] for each follower of the tweeter."""

    def __init__(self, followers: Mapping[str, Sequence[str]] | None = None) -> None:
        self.followers = FOLLOWERS_DB if followers is None else followers

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        request, tweeter = tuple[0], tuple[1]
        for follower in self.followers.get(tweeter, ()):
            collector.emit([request, follower])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "follower"))


class PartialUniquer(BaseBatchBolt):
    """Distinct followers seen by this task for one request."""

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector = collector
        self.id = id
        self.followers: set[Any] = set()

    def execute(self, tuple: Tuple) -> None:
        self.followers.add(tuple[1])

    def finish_batch(self) -> None:
        self.collector.emit([self.id, len(self.followers)])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "partial-count"))


class CountAggregator(BaseBatchBolt):
    """Sum of the partial distinct counts: the reach."""

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector = collector
        self.id = id
        self.count = 0

    def execute(self, tuple: Tuple) -> None:
        self.count += tuple[1]

    def finish_batch(self) -> None:
        self.collector.emit([self.id, self.count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "reach"))


def build_reach(function: str = "reach") -> LinearDRPCTopologyBuilder:
    builder = LinearDRPCTopologyBuilder(function)
    builder.add_bolt(GetTweeters(), 4)
    builder.add_bolt(GetFollowers(), 12).shuffle_grouping()
    builder.add_bolt(PartialUniquer(), 6).fields_grouping(Fields("id", "follower"))
    builder.add_bolt(CountAggregator(), 3).fields_grouping(Fields("id"))
    return builder


topology = build_reach()
"""The reach function's builder, for ``--topology drpc.examples.reach:topology``."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandLineParser(
        prog="python -m drpc.examples.reach",
        description=(
            "Compute the reach of URLs with the storm-starter reach topology on a LocalDRPC."
        ),
    )
    parser.add_argument("urls", nargs="*", help="URLs to compute (default: the reference URLs)")
    parser.add_argument(
        "--executor", choices=("local", "spark"), default="local", help="executor (default: local)"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="per-request timeout in seconds"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    urls = args.urls or list(EXPECTED_REACH)
    with LocalDRPC(executor=args.executor, timeout=args.timeout) as drpc:
        drpc.register(build_reach())
        for url in urls:
            print(f"Reach of {url}: {drpc.execute('reach', url)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
