"""Streams: what a component declares it emits, and how streams are named.

Contract: a component declares each output stream once, with its fields and
whether it is direct (receivers chosen by ``emit_direct``). Stream ids that
start with ``__`` are reserved for drpc's own bookkeeping streams.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from drpc.errors import InvalidTopologyError
from drpc.model.fields import Fields

# Final: the compiled engine inlines them instead of looking them up at each use
DEFAULT_STREAM_ID: Final = "default"
COORDINATED_STREAM_ID: Final = "__coord"
"""Direct stream on which a coordinated task tells each downstream task how many
tuples it sent it for an id: values ``[id, count]``."""

COORDINATED_STREAM_FIELDS = Fields("id", "count")

SYSTEM_COMPONENT_ID: Final = "__system"
SYSTEM_TICK_STREAM_ID: Final = "__tick"
"""Where a tick tuple comes from (Storm's ``Constants``): ``topology.tick.tuple.freq.secs``."""

TICK_FIELDS = Fields("rate_secs")


def is_tick(tuple: object) -> bool:
    """Whether ``tuple`` is a tick tuple (Storm's ``TupleUtils.isTick``)."""
    return (
        getattr(tuple, "source_component", None) == SYSTEM_COMPONENT_ID
        and getattr(tuple, "source_stream", None) == SYSTEM_TICK_STREAM_ID
    )


@dataclass(frozen=True, slots=True)
class StreamInfo:
    fields: Fields
    direct: bool = False


class GivenStreams:
    """A component whose output streams are given when it is made (``streams``: each
    stream's ``StreamInfo`` by name) rather than declared by code of its own: a
    streamparse or pystorm component (``drpc.sparse``, ``drpc.inprocess``)."""

    streams: dict[str, StreamInfo]

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for name, info in self.streams.items():
            declarer.declare_stream(name, info.fields, direct=info.direct)


@dataclass(frozen=True, slots=True, order=True)
class GlobalStreamId:
    """A stream of a component: ``GlobalStreamId("bolt0", "default")``."""

    component_id: str
    stream_id: str = DEFAULT_STREAM_ID

    def __str__(self) -> str:
        return f"{self.component_id}:{self.stream_id}"


class OutputFieldsDeclarer:
    """Collects a component's stream declarations in ``declare_output_fields``."""

    def __init__(self, component_id: str | None = None, *, allow_reserved: bool = False) -> None:
        self._component_id = component_id
        self._allow_reserved = allow_reserved
        self.streams: dict[str, StreamInfo] = {}

    def declare(self, fields: Fields | Iterable[str], direct: bool = False) -> None:
        """Declare the default stream."""
        self.declare_stream(DEFAULT_STREAM_ID, fields, direct=direct)

    def declare_stream(
        self, stream_id: str, fields: Fields | Iterable[str], direct: bool = False
    ) -> None:
        if not isinstance(stream_id, str) or not stream_id:
            raise InvalidTopologyError(
                f"stream ids must be non-empty strings, got {stream_id!r}", self._component_id
            )
        if stream_id.startswith("__") and not self._allow_reserved:
            raise InvalidTopologyError(
                f"stream id {stream_id!r} is reserved (ids starting with '__' are drpc's own)",
                self._component_id,
            )
        if stream_id in self.streams:
            raise InvalidTopologyError(f"declares stream {stream_id!r} twice", self._component_id)
        try:
            declared = Fields.of(fields)
        except (TypeError, ValueError) as error:
            raise InvalidTopologyError(
                f"stream {stream_id!r} has invalid fields: {error}", self._component_id
            ) from None
        self.streams[stream_id] = StreamInfo(declared, bool(direct))
