"""Storm's Trident tutorial: a word count into LMDB, and its ``words`` DRPC query.

``build_trident_words()`` declares it: sentences from a transactional spout,
split into words, grouped by word, ``persistent_aggregate`` with ``Count``
into the transactional map ``trident-word-counts``; the DRPC stream
``words`` splits its argument, reads each word's committed count
(``state_query`` with ``MapGet``), drops the unknown ones (``FilterNull``)
and sums them (``Sum``): ``"cat the dog jumped"`` -> ``"[[6]]"`` over
``SENTENCES``.

For the command lines, reading the state directory ``DRPC_STATE_DIR``
(default ``state``): ``topology()`` is the spout stream compiled for
``drpc-transactional run`` and ``drpc-server --transactional``;
``words_query()`` is the ``words`` function for ``drpc-server --topology``.
"""

from __future__ import annotations

from drpc.examples import state_dir
from drpc.model.fields import Fields
from drpc.model.topology import Topology
from drpc.transactional import MemoryTransactionalSpout
from drpc.trident import (
    Count,
    FilterNull,
    Function,
    LMDBMapState,
    MapGet,
    Sum,
    TridentCollector,
    TridentTopology,
    TridentTuple,
    drpc_topology,
    transactional_topology,
)

SENTENCES = {
    0: [["the cow jumped over the moon"], ["the man went to the store and bought some candy"]],
    1: [["four score and seven years ago"], ["how many apples can you eat"]],
    2: [["to be or not to be the person"]],
}
WORD_COUNTS = LMDBMapState.transactional("trident-word-counts")


class Split(Function):
    """One output tuple per word of the sentence (the tutorial's ``Split``)."""

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        for word in tuple.get_value(0).split():
            collector.emit([word])


def build_trident_words(sentences: dict[int, list[list[str]]] | None = None) -> TridentTopology:
    topology = TridentTopology()
    spout = MemoryTransactionalSpout(
        SENTENCES if sentences is None else sentences, Fields("sentence"), 1
    )
    word_counts = (
        topology.new_stream("trident-words", spout, parallelism=3)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(WORD_COUNTS, Count(), ["count"])
    )
    (
        topology.new_drpc_stream("words")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(word_counts, ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .aggregate(["count"], Sum(), ["sum"])
    )
    return topology


def topology() -> Topology:
    return transactional_topology(build_trident_words(), state_dir())


def words_query() -> Topology:
    return drpc_topology(build_trident_words(), "words", state_dir())
