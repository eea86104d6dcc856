"""Topology configuration keys (Storm's names) and their defaults.

Contract: configuration is a plain ``dict``. The effective configuration of a
task is ``DEFAULTS`` overlaid by the topology's conf, then the executor's, then
the component's own ``get_component_configuration()``; ``resolve`` builds it
and checks the types of the keys drpc reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TOPOLOGY_MESSAGE_TIMEOUT_SECS = "topology.message.timeout.secs"
"""Seconds a tuple tree may take before its root fails (default 30): a DRPC request then
fails with FAILED_REQUEST naming the step where it was stuck, as Storm's DRPC spout fails
it; a transactional batch is replayed. Rich bolts may ack asynchronously up to it."""

TOPOLOGY_MAX_SPOUT_PENDING = "topology.max.spout.pending"
"""Most pending roots per spout task (None: unbounded, as Storm's DRPC spout)."""

TOPOLOGY_ACKER_EXECUTORS = "topology.acker.executors"
"""Number of acker tasks (default 1)."""

TOPOLOGY_DEBUG = "topology.debug"
"""Log every emitted tuple at DEBUG level."""

TOPOLOGY_STATS_SAMPLE_RATE = "topology.stats.sample.rate"
"""The share of DRPC requests whose step spans the resident tasks report when the driver
feeds them (``drpc.executors.resident.feeding``), Storm's default 0.05: one request in
20, plus every traced request and every failure. Other paths report every request."""

TOPOLOGY_TICK_TUPLE_FREQ_SECS = "topology.tick.tuple.freq.secs"
"""Seconds between the tick tuples a bolt task gets (None, the default: none), Storm's
key: set it on a component (``add_configuration``) or a topology. A tick tuple comes from
component ``__system`` on stream ``__tick`` (``drpc.model.streams.is_tick``) with one
value, the period; it is not tracked and skips a DRPC step's coordination. A batch bolt
gets none (its instances live one batch)."""

DEFAULTS: dict[str, Any] = {
    TOPOLOGY_MESSAGE_TIMEOUT_SECS: 30.0,
    TOPOLOGY_MAX_SPOUT_PENDING: None,
    TOPOLOGY_ACKER_EXECUTORS: 1,
    TOPOLOGY_DEBUG: False,
    TOPOLOGY_STATS_SAMPLE_RATE: 0.05,
    TOPOLOGY_TICK_TUPLE_FREQ_SECS: None,
}


def resolve(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Overlay configuration layers on the defaults and validate the keys drpc reads."""
    conf = dict(DEFAULTS)
    for layer in layers:
        if layer:
            conf.update(layer)
    timeout = conf[TOPOLOGY_MESSAGE_TIMEOUT_SECS]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(
            f"{TOPOLOGY_MESSAGE_TIMEOUT_SECS} must be a positive number, got {timeout!r}"
        )
    pending = conf[TOPOLOGY_MAX_SPOUT_PENDING]
    if pending is not None and (
        isinstance(pending, bool) or not isinstance(pending, int) or pending < 1
    ):
        raise ValueError(
            f"{TOPOLOGY_MAX_SPOUT_PENDING} must be None or a positive integer, got {pending!r}"
        )
    rate = conf[TOPOLOGY_STATS_SAMPLE_RATE]
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
        raise ValueError(f"{TOPOLOGY_STATS_SAMPLE_RATE} must be a number from 0 to 1, got {rate!r}")
    ackers = conf[TOPOLOGY_ACKER_EXECUTORS]
    if isinstance(ackers, bool) or not isinstance(ackers, int) or ackers < 1:
        raise ValueError(f"{TOPOLOGY_ACKER_EXECUTORS} must be a positive integer, got {ackers!r}")
    tick = conf[TOPOLOGY_TICK_TUPLE_FREQ_SECS]
    if tick is not None and (
        isinstance(tick, bool) or not isinstance(tick, (int, float)) or not tick > 0
    ):
        raise ValueError(
            f"{TOPOLOGY_TICK_TUPLE_FREQ_SECS} must be None or a positive number, got {tick!r}"
        )
    return conf
