"""drpc: Storm's Distributed RPC and transactional topologies for Python.

The public API, in Storm's names (snake_case). Importing ``drpc`` does not
import pyspark; the Spark executor loads it on first use.
"""

from __future__ import annotations

# ruff: noqa: E402
# The engine's build (compiled or pure Python) is chosen before any engine module loads.
from drpc import compiled as _compiled

_compiled.guard()

from drpc.builders.coordinated_drpc import (
    CoordinatedDRPCInputDeclarer,
    CoordinatedDRPCTopologyBuilder,
)
from drpc.builders.linear_drpc import LinearDRPCInputDeclarer, LinearDRPCTopologyBuilder
from drpc.errors import (
    AuthorizationException,
    DRPCError,
    DRPCExceptionType,
    DRPCExecutionException,
    FailedException,
    Failure,
    InvalidTopologyError,
    InvalidTupleError,
    ReportedFailedException,
    UnhashableGroupingValueError,
    UnserializableValueError,
)
from drpc.model.components import (
    BaseBasicBolt,
    BaseBatchBolt,
    BaseRichBolt,
    BaseRichSpout,
    BasicOutputCollector,
    BatchOutputCollector,
    FailedIdCallback,
    FinishedCallback,
    ICommitter,
    OutputCollector,
    SpoutOutputCollector,
)
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields, Values
from drpc.model.grouping import (
    AllGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    ShuffleGrouping,
)
from drpc.model.hashing import stable_hash
from drpc.model.streams import DEFAULT_STREAM_ID, GlobalStreamId, OutputFieldsDeclarer, StreamInfo
from drpc.model.topology import CoordinatedBolt, SourceArgs, Topology, TopologyBuilder
from drpc.model.tuples import Tuple

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_STREAM_ID",
    "AllGrouping",
    "AuthorizationException",
    "BaseBasicBolt",
    "BaseBatchBolt",
    "BaseRichBolt",
    "BaseRichSpout",
    "BasicOutputCollector",
    "BatchOutputCollector",
    "CoordinatedBolt",
    "CoordinatedDRPCInputDeclarer",
    "CoordinatedDRPCTopologyBuilder",
    "DRPCError",
    "DRPCExceptionType",
    "DRPCExecutionException",
    "DirectGrouping",
    "FailedException",
    "FailedIdCallback",
    "Failure",
    "Fields",
    "FieldsGrouping",
    "FinishedCallback",
    "GlobalGrouping",
    "GlobalStreamId",
    "Grouping",
    "ICommitter",
    "InvalidTopologyError",
    "InvalidTupleError",
    "LinearDRPCInputDeclarer",
    "LinearDRPCTopologyBuilder",
    "LocalOrShuffleGrouping",
    "NoneGrouping",
    "OutputCollector",
    "OutputFieldsDeclarer",
    "ReportedFailedException",
    "ShuffleGrouping",
    "SourceArgs",
    "SpoutOutputCollector",
    "StreamInfo",
    "Topology",
    "TopologyBuilder",
    "TopologyContext",
    "Tuple",
    "UnhashableGroupingValueError",
    "UnserializableValueError",
    "Values",
    "__version__",
    "stable_hash",
]
