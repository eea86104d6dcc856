"""Example topologies; each module's ``topology`` is what ``--topology MODULE:topology`` serves.

DRPC functions (``drpc-server --topology drpc.examples.reach:topology``):

- ``reach``: storm-starter's reach of a URL (tweeters, their followers,
  distinct count), with the reference data from the seeds;
- ``exclamation``: one basic bolt appending "!";
- ``square``: step one emits n*n tuples for argument n, a batch step counts,
  an aggregate step sums; exercises coordination including empty requests;
- ``reach_graph``: reach over a large generated graph, built with
  ``build_graph_reach(path)`` for a graph file (no ``topology``: it needs one).

Transactional topologies (``drpc-transactional run MODULE:topology``):
``transactional_global_count`` and ``transactional_words`` (whose
``words_query`` is a DRPC function answering from the committed counts);
Trident: ``trident_words`` (``words_query``), ``trident_reach``
(``reach_query``) and ``vocabulary_counts`` (``counts_query``: consistent reads,
every answer from one committed version). These read their state directory
from ``DRPC_STATE_DIR`` (``state_dir()``, default ``state``).
"""

from __future__ import annotations

import os

STATE_DIR_ENV = "DRPC_STATE_DIR"


def state_dir() -> str:
    """The state directory the examples' command-line topologies read and write."""
    return os.environ.get(STATE_DIR_ENV, "state")
