"""Storm's Trident word count from Redis Streams and from JetStream: sentences counted exactly
once into LMDB under replays in both phases, a partition added mid-run, and the ``words`` DRPC
query over the counts, on both executors of transactional runs (on Spark the transactional
broker spouts take Trident's compiled path: the executors read the entries)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from drpc.transactional.run import CommitInfo
from drpc.trident import LMDBMapState, run, transactional_topology
from drpc.trident.fused import fused_plan
from tests.brokers import Broker

from .ops import CountFailingCommits, SplitFailingOnce
from .test_word_count import SENTENCES, ask, committed, word_count


def test_a_trident_word_count_from_a_broker_and_its_drpc_query(
    broker: Broker, tx_executor: str, tmp_path: Path
) -> None:
    rows = {p: [SENTENCES[(p * 2 + i) % 5] for i in range(6 + p)] for p in range(3)}
    for partition in (0, 1):
        broker.create(partition)
        broker.append(partition, rows[partition], field="sentence")

    def add_a_partition(info: CommitInfo) -> None:
        if info.txid == 2:
            broker.create(2)
            broker.append(2, rows[2], field="sentence")

    markers = tmp_path / "markers"
    markers.mkdir()
    state = LMDBMapState.transactional("word-counts")
    topology = word_count(
        broker.spout(2, field="sentence"),
        state,
        SplitFailingOnce(str(markers)),
        CountFailingCommits(str(markers)),
    )
    state_dir = tmp_path / "state"
    assert fused_plan(transactional_topology(topology, str(state_dir))) is not None
    result = run(
        topology,
        state_dir=str(state_dir),
        executor=tx_executor,
        max_spout_pending=3,
        on_commit=add_a_partition,
    )
    words = Counter(word for part in rows.values() for line in part for word in line.split())
    assert committed(state_dir, state) == dict(words)
    assert result.tuples == sum(len(part) for part in rows.values())
    assert result.replays["processing"] > 0 and result.replays["commit"] > 0
    questions = ["the cow jumped", "to be or not to be", "zebra"]
    expected = [json.dumps([[sum(words[w] for w in q.split())]]) for q in questions]
    assert ask(topology, state_dir, "local", *questions) == expected
