"""The chaos run's topology: a Trident tally of numbered entries from Redis Streams, and
the ``chaos`` DRPC query that reads it at one commit and says which.

Contract.

- Producers append to the streams ``chaos:0`` .. ``chaos:{PARTS-1}``; each entry has
  the JSON fields ``part`` (its stream's number), ``key`` (one of ``KEYS``) and ``seq``
  (1, 2, 3 ... within its stream, in append order: the entry's stream id is
  ``{seq}-1``, so an append retried after an unknown outcome is refused as a duplicate
  instead of written twice).
- ``build(redis_url)`` declares the run: entries grouped by ``(part, key)``, each
  group's ``Tally`` (``[entries counted, highest seq]``) into the transactional map
  ``chaos-tally``, partitioned ``STATE_PARTITIONS`` ways. A stream is read in order
  and committed in txid order, so the state at any commit holds, for each stream, the
  entries up to some seq and no other: that seq is the highest seq of the stream's
  tallies, and each key's count is how many of those entries carry it.
- The DRPC stream ``chaos`` takes space-separated ``part/key`` names and answers, for
  each, ``[part, key, [count, highest seq] or null, txid]``: every row read at the
  request's pinned global commit, ``txid`` naming it (``QueryMapState.committed_txid``).
- ``counting()`` and ``query()`` are the two for the command lines (``drpc-runner
  --transactional bench.chaos_workload:counting --topology
  bench.chaos_workload:query``), reading ``CHAOS_REDIS_URL``, ``DRPC_STATE_DIR``
  and ``CHAOS_LOCAL_DIR`` (``drpc.state.local.dir``: the partitions' directories
  outlive a restart of the runner, as a worker's local disk would).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from drpc.model.fields import Fields
from drpc.model.topology import Topology
from drpc.state.partition import LOCAL_DIR_CONF
from drpc.transactional.redis_streams import RedisStreamsTransactionalSpout
from drpc.trident import (
    CombinerAggregator,
    Function,
    LMDBMapState,
    QueryFunction,
    TridentCollector,
    TridentTopology,
    TridentTuple,
    drpc_topology,
    transactional_topology,
)

PARTS = 4
KEYS = tuple(f"k{index:02d}" for index in range(8))
STREAMS = "chaos:{}"
STATE_PARTITIONS = 2
TAKE_PER_BATCH = 2_000
FUNCTION = "chaos"
TALLY = LMDBMapState.transactional("chaos-tally")
ALL_NAMES = tuple(f"{part}/{key}" for part in range(PARTS) for key in KEYS)


def entry_fields(part: int, key: str, seq: int) -> dict[str, str]:
    """The fields of one appended entry, JSON-encoded as the spout reads them."""
    return {"part": json.dumps(part), "key": json.dumps(key), "seq": json.dumps(seq)}


def entry_id(seq: int) -> str:
    return f"{seq}-1"


class Tally(CombinerAggregator[list[int]]):
    """``[entries, highest seq]`` of a group."""

    def init(self, tuple: TridentTuple) -> list[int]:
        return [1, int(tuple.get_value(0))]

    def combine(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], max(a[1], b[1])]

    def zero(self) -> list[int]:
        return [0, 0]


class SplitNames(Function):
    """``"2/k03 0/k01"`` -> ``[2, "k03"]``, ``[0, "k01"]``."""

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        for name in str(tuple.get_value(0)).split():
            part, _, key = name.partition("/")
            collector.emit([int(part), key])


class TallyAtCommit(QueryFunction):
    """Each key's tally, with the txid of the commit it was read at."""

    def batch_retrieve(self, state: Any, keys: Sequence[TridentTuple]) -> Sequence[Any]:
        values = state.multi_get([tuple(key.values) for key in keys])
        txid = state.committed_txid()
        return [(value, txid) for value in values]

    def execute(self, tuple: TridentTuple, result: Any, collector: TridentCollector) -> None:
        collector.emit(list(result))


def build(redis_url: str) -> TridentTopology:
    topology = TridentTopology()
    spout = RedisStreamsTransactionalSpout(
        redis_url, STREAMS, Fields("part", "key", "seq"), TAKE_PER_BATCH, codec="json"
    )
    tally = (
        topology.new_stream("chaos-entries", spout)
        .group_by(["part", "key"])
        .persistent_aggregate(TALLY, ["seq"], Tally(), ["tally"])
        .parallelism_hint(STATE_PARTITIONS)
    )
    (
        topology.new_drpc_stream(FUNCTION)
        .each(["args"], SplitNames(), ["part", "key"])
        .group_by(["part", "key"])
        .state_query(tally, ["part", "key"], TallyAtCommit(), ["tally", "txid"])
        .project(["part", "key", "tally", "txid"])
    )
    return topology


def _conf() -> dict[str, Any]:
    local_dir = os.environ.get("CHAOS_LOCAL_DIR")
    return {LOCAL_DIR_CONF: local_dir} if local_dir else {}


def _state_dir() -> str:
    return os.environ.get("DRPC_STATE_DIR", "state")


def _redis_url() -> str:
    return os.environ.get("CHAOS_REDIS_URL", "redis://127.0.0.1:6379")


def counting() -> Topology:
    return transactional_topology(build(_redis_url()), _state_dir(), _conf())


def query() -> Topology:
    return drpc_topology(build(_redis_url()), FUNCTION, _state_dir(), _conf())
