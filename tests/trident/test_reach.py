"""Storm-starter's Trident reach over two Trident states in LMDB, filled by two spout streams,
queried over DRPC; the spout streams run on both executors of transactional runs."""

from __future__ import annotations

from pathlib import Path

from drpc.examples.reach import EXPECTED_REACH, FOLLOWERS_DB, TWEETERS_DB
from drpc.examples.trident_reach import FOLLOWERS, TWEETERS, build_trident_reach
from drpc.testing import LocalDRPC
from drpc.trident import drpc_topologies, run

from .test_word_count import committed


def test_reach_reads_the_states_its_spout_streams_committed(
    tx_executor: str, tmp_path: Path
) -> None:
    topology = build_trident_reach(take_per_batch=2)
    state_dir = tmp_path / "state"
    result = run(topology, state_dir=str(state_dir), executor=tx_executor, max_spout_pending=2)
    assert committed(state_dir, TWEETERS) == {url: sorted(set(t)) for url, t in TWEETERS_DB.items()}
    assert committed(state_dir, FOLLOWERS) == {u: sorted(set(f)) for u, f in FOLLOWERS_DB.items()}
    edges = sum(map(len, TWEETERS_DB.values())) + sum(map(len, FOLLOWERS_DB.values()))
    assert result.tuples == edges
    with LocalDRPC(timeout=60.0) as drpc:
        for compiled in drpc_topologies(topology, str(state_dir)):
            drpc.register(compiled)
        for url, reach in EXPECTED_REACH.items():
            assert drpc.execute("reach", url) == f"[[{reach}]]"
