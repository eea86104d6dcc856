"""Spouts and bolts of the plain topology tests (importable by Spark's Python workers).

The spout runs on the driver on every executor (``drpc.topologies``), so what it sees goes
to ``EVENTS`` in this process; the bolts may run in other processes and leave markers in a
directory instead.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from typing import Any

from drpc import (
    BaseBasicBolt,
    BaseRichBolt,
    BaseRichSpout,
    BasicOutputCollector,
    FailedException,
    Fields,
    OutputCollector,
    OutputFieldsDeclarer,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from drpc.examples.word_count_topology import SplitSentence
from drpc.model.streams import is_tick
from tests.transactional.bolts import first_time

EVENTS: dict[str, dict[str, Any]] = {}
LOCK = threading.Lock()


def events(token: str) -> dict[str, Any]:
    with LOCK:
        return EVENTS.setdefault(
            token,
            {
                "acked": [],
                "failed": [],
                "max_in_flight": 0,
                "opened": 0,
                "closed": 0,
                "activated": 0,
                "deactivated": 0,
            },
        )


class ReplayingSpout(BaseRichSpout):
    """Emits sentence i with message id i, each once; a failed one is emitted again (a
    reliable spout, as Storm's guide writes one). Records acks, fails, opens, closes,
    activations, deactivations and the most trees it had in flight in ``EVENTS[token]``;
    each ``next_tuple`` that emits first works ``pause`` seconds."""

    def __init__(self, token: str, sentences: list[str], pause: float = 0.0) -> None:
        self.token = token
        self.sentences = list(sentences)
        self.pause = pause

    def open(
        self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        self.collector = collector
        self.queue = deque(range(len(self.sentences)))
        self.in_flight: set[int] = set()
        self.events = events(self.token)
        with LOCK:
            self.events["opened"] += 1

    def next_tuple(self) -> None:
        if not self.queue:
            return
        if self.pause:
            time.sleep(self.pause)
        index = self.queue.popleft()
        self.in_flight.add(index)
        with LOCK:
            self.events["max_in_flight"] = max(self.events["max_in_flight"], len(self.in_flight))
        self.collector.emit([self.sentences[index]], msg_id=index)

    def ack(self, msg_id: Any) -> None:
        self.in_flight.discard(msg_id)
        with LOCK:
            self.events["acked"].append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.in_flight.discard(msg_id)
        with LOCK:
            self.events["failed"].append(msg_id)
        self.queue.append(msg_id)

    def activate(self) -> None:
        with LOCK:
            self.events["activated"] += 1

    def deactivate(self) -> None:
        with LOCK:
            self.events["deactivated"] += 1

    def close(self) -> None:
        with LOCK:
            self.events["closed"] += 1

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("sentence"))


class WordCount(BaseBasicBolt):
    """Counts words. The first time it meets ``fail_word`` it fails that tuple; the first
    time it meets ``kill_word`` it SIGKILLs its own process (markers in ``marker_dir``,
    once across processes); ``delay`` seconds of work per tuple."""

    def __init__(
        self,
        marker_dir: str,
        fail_word: str | None = None,
        kill_word: str | None = None,
        delay: float = 0.0,
    ) -> None:
        self.marker_dir = marker_dir
        self.fail_word = fail_word
        self.kill_word = kill_word
        self.delay = delay
        self.counts: dict[str, int] = {}

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        word = tuple["word"]
        if self.delay:
            time.sleep(self.delay)
        if word == self.fail_word and first_time(self.marker_dir, f"fail-{word}"):
            raise FailedException(f"{word} fails once")
        if word == self.kill_word and first_time(self.marker_dir, f"kill-{word}"):
            with open(os.path.join(self.marker_dir, "killed"), "w") as out:
                out.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        self.counts[word] = self.counts.get(word, 0) + 1
        collector.emit([word, self.counts[word]])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("word", "count"))


class HoldsOnce(BaseRichBolt):
    """Acks every tuple but the first one of ``word``, which it never acks or fails: its
    tree can only time out."""

    def __init__(self, marker_dir: str, word: str) -> None:
        self.marker_dir = marker_dir
        self.word = word

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        if tuple["word"] == self.word and first_time(self.marker_dir, f"hold-{self.word}"):
            return
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


def word_count(
    token: str, sentences: list[str], counter: Any, *, spout_pause: float = 0.0
) -> TopologyBuilder:
    """storm-starter's word count shape: sentences, split (shuffle), count (by word)."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", ReplayingSpout(token, sentences, spout_pause))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", counter, 2).fields_grouping("split", Fields("word"))
    return builder


def redis_word_count(
    url: str, password: str, stream: str, counter: Any, *, claim_idle: float = 30.0
) -> TopologyBuilder:
    """The same word count over a Redis stream's entries (field ``sentence``)."""
    from drpc.redis_spout import RedisStreamsSpout

    spout = RedisStreamsSpout(
        url, stream, "words", ("sentence",), password=password, claim_idle=claim_idle
    )
    builder = TopologyBuilder()
    builder.set_spout("entries", spout)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("entries")
    builder.set_bolt("count", counter, 2).fields_grouping("split", Fields("word"))
    return builder


class EmitsOnTick(BaseRichBolt):
    """Acks its input; emits one unanchored ``["tick", period]`` per tick tuple it gets."""

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        if is_tick(tuple):
            self.collector.emit(["tick", tuple[0]])
            return
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("what", "period"))
