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
``words_query`` is a DRPC function answering from the committed counts).
"""
