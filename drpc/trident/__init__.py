"""Trident: Storm's high-level exactly-once API, compiled onto drpc's transactional machinery.

Declare with ``TridentTopology`` (``drpc.trident.stream``), using operations
(``drpc.trident.operations``), the built-ins (``drpc.trident.builtins``) and
LMDB map states (``drpc.trident.state``), windows (``tumbling_window``,
``sliding_window``, ``window`` with a ``WindowConfig``: ``drpc.trident.windowing``,
stored by ``LMDBWindowsStoreFactory``); run the spout stream with
``drpc.trident.run`` and serve the DRPC streams with ``drpc_topologies``
(``drpc.trident.compiler``) on a ``LocalDRPC`` or the server. Storm's word
count::

    topology = TridentTopology()
    counts = (
        topology.new_stream("words", spout)
        .each(["sentence"], Split(), ["word"])
        .group_by(["word"])
        .persistent_aggregate(LMDBMapState.transactional("counts"), Count(), ["count"])
    )
    (
        topology.new_drpc_stream("words")
        .each(["args"], Split(), ["word"])
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet(), ["count"])
        .each(["count"], FilterNull())
        .aggregate(["count"], Sum(), ["sum"])
    )
"""

from __future__ import annotations

from drpc.trident.builtins import (
    Count,
    Debug,
    FilterNull,
    FirstN,
    MapGet,
    MapList,
    MapRemove,
    Max,
    Min,
    Sum,
)
from drpc.trident.compiler import drpc_topologies, drpc_topology, transactional_topology
from drpc.trident.operations import (
    Aggregator,
    CombinerAggregator,
    Consumer,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    QueryFunction,
    ReducerAggregator,
    StateUpdater,
)
from drpc.trident.pages import PageRequest
from drpc.trident.run import run, runner
from drpc.trident.state import LMDBMapState, MapStateFactory
from drpc.trident.stream import GroupedStream, Stream, TridentState, TridentTopology
from drpc.trident.tuples import TridentCollector, TridentTuple
from drpc.trident.window_store import LMDBWindowsStoreFactory
from drpc.trident.windowing import Window, WindowConfig

__all__ = [
    "Aggregator",
    "CombinerAggregator",
    "Consumer",
    "Count",
    "Debug",
    "Filter",
    "FilterNull",
    "FirstN",
    "FlatMapFunction",
    "Function",
    "GroupedStream",
    "LMDBMapState",
    "LMDBWindowsStoreFactory",
    "MapFunction",
    "MapGet",
    "MapList",
    "MapRemove",
    "MapStateFactory",
    "Max",
    "Min",
    "PageRequest",
    "QueryFunction",
    "ReducerAggregator",
    "StateUpdater",
    "Stream",
    "Sum",
    "TridentCollector",
    "TridentState",
    "TridentTopology",
    "TridentTuple",
    "Window",
    "WindowConfig",
    "drpc_topologies",
    "drpc_topology",
    "run",
    "runner",
    "transactional_topology",
]
