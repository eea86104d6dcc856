"""The Spark executor (``executor="spark"``): DRPC topologies on a persistent SparkSession.

- ``executor``: ``SparkExecutor``, coalescing requests into jobs, deadlines and
  tree timeouts, per-request failures and observation;
- ``stages``: a compiled plan's Spark stages run as one job (also used by
  transactional runs), ``JobSpec``, ``tagged_job``; ``describe_spark_error`` (from
  ``drpc.runtime``) turns a Spark failure into one line;
- ``trace``: the spans a traced job reports per request.

``explain(topology)`` prints the stage plan (``drpc.executors.plan``).
"""

from __future__ import annotations

from drpc.executors.plan import explain
from drpc.executors.spark.executor import SparkExecutor, SparkExecutorStats
from drpc.executors.spark.stages import JobSpec, SparkStages, tagged_job
from drpc.runtime import describe_spark_error

__all__ = [
    "JobSpec",
    "SparkExecutor",
    "SparkExecutorStats",
    "SparkStages",
    "describe_spark_error",
    "explain",
    "tagged_job",
]
