"""storm-starter's ``WordCountTopology`` as a plain topology: a reliable sentence spout, a
split bolt (shuffle grouping) and a count bolt (fields grouping on the word).

The spout emits sentences from a fixed list, each with a message id; a failed one is
emitted again (at least once, the way Storm's guide writes a reliable spout). Run it with
``drpc-topology run drpc.examples.word_count_topology:topology``.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from drpc import (
    BaseBasicBolt,
    BaseRichSpout,
    BasicOutputCollector,
    Fields,
    OutputFieldsDeclarer,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from drpc.config import TOPOLOGY_MAX_SPOUT_PENDING

SENTENCES = (
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
)


class SentenceSpout(BaseRichSpout):
    """Emits the sentences round and round, each with a fresh message id; replays a failed
    one before any new one."""

    def open(
        self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        self.collector = collector
        self.ids = itertools.count()
        self.in_flight: dict[int, str] = {}
        self.failed: deque[int] = deque()

    def next_tuple(self) -> None:
        if self.failed:
            msg_id = self.failed.popleft()
            sentence = self.in_flight[msg_id]
        else:
            msg_id = next(self.ids)
            sentence = SENTENCES[msg_id % len(SENTENCES)]
            self.in_flight[msg_id] = sentence
        self.collector.emit([sentence], msg_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        self.in_flight.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        if msg_id in self.in_flight:
            self.failed.append(msg_id)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("sentence"))


class SplitSentence(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple["sentence"].split():
            collector.emit([word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("word"))


class WordCount(BaseBasicBolt):
    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.counts: dict[str, int] = {}

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        word = tuple["word"]
        self.counts[word] = count = self.counts.get(word, 0) + 1
        collector.emit([word, count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("word", "count"))


def build_word_count(split: int = 8, count: int = 12) -> TopologyBuilder:
    """storm-starter's parallelism: 8 split tasks, 12 count tasks."""
    builder = TopologyBuilder()
    builder.set_spout("spout", SentenceSpout())
    builder.set_bolt("split", SplitSentence(), split).shuffle_grouping("spout")
    builder.set_bolt("count", WordCount(), count).fields_grouping("split", Fields("word"))
    return builder


topology = build_word_count().create_topology("word-count", {TOPOLOGY_MAX_SPOUT_PENDING: 1000})
"""For ``drpc-topology run drpc.examples.word_count_topology:topology`` (at most 1 000
sentences in flight: without a bound the spout emits as fast as it can)."""
