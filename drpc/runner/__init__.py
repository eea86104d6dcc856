"""The remote runner: serve DRPC topologies for DRPC servers in other processes.

``python -m drpc.runner --servers host:3773[,host:3773...] --topology module:attr``
(also ``drpc-runner``) runs each topology on an executor in this process and
feeds it from the invocations port of every listed server.

Modules, one concern each:

- ``drpc.runner.invocations``: ``RemoteInvocations``, the handle the topologies
  pull requests from (a poller per server, buffers, back-off, reconnects), and
  ``InvocationsSettings``, the picklable settings another process builds its
  own from;
- ``drpc.runner.outcomes``: each server's results and failures, sent on a
  thread and a connection of its own (``OutcomeSender``);
- ``drpc.runner.remote_runner``: ``RemoteRunner``, the topologies' executors
  and the handle started and stopped together;
- ``drpc.runner.cli``: the ``drpc-runner`` command line (``main``), and
  ``drpc.runner.topology_port`` its ``--topology-port``. Neither is imported here: a
  resident task on a worker imports this package to fetch requests, and a worker need
  not have the server's dependencies (aiohttp) that those two use.

Tracing: the executors' spans stay in this process (Storm's ``result`` call
carries only the result), so a server's trace of a request a runner served
shows its queue wait and the ``runner`` time, fetch to result. Log lines about
one request carry its ``request_id`` and ``server`` (``--log-format json``); every
module logs as ``drpc.runner``.
"""

from __future__ import annotations

from drpc.runner.invocations import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_MAX_BUFFERED,
    DEFAULT_MAX_FETCH_BATCH,
    DEFAULT_MAX_QUEUED_OUTCOMES,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_RECONNECT_INTERVAL,
    DEFAULT_STOP_TIMEOUT,
    MIN_IDLE_WAIT,
    InvocationsSettings,
    RemoteInvocations,
)
from drpc.runner.outcomes import OUTCOME_BATCH
from drpc.runner.remote_runner import RemoteRunner

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_MAX_BUFFERED",
    "DEFAULT_MAX_FETCH_BATCH",
    "DEFAULT_MAX_QUEUED_OUTCOMES",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_RECONNECT_INTERVAL",
    "DEFAULT_STOP_TIMEOUT",
    "MIN_IDLE_WAIT",
    "OUTCOME_BATCH",
    "InvocationsSettings",
    "RemoteInvocations",
    "RemoteRunner",
]
