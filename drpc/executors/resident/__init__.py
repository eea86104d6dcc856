"""The resident Spark executor (``executor="spark"``): long-lived tasks, millisecond calls.

- ``executor``: ``ResidentExecutor`` (its contract) and the process's resident job;
- ``cluster``: the driver side of the job: start, deploy, faults, restarts;
- ``worker``: one resident Spark task;
- ``routing``: where each task runs, and how messages reach it;
- ``control``: the deployment protocol;
- ``transport``: batched frames over TCP between the deployment's processes.
"""

from __future__ import annotations

from drpc.executors.resident.executor import ResidentExecutor, current_cluster

__all__ = ["ResidentExecutor", "current_cluster"]
