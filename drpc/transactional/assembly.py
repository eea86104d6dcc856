"""The parts a transactional run is assembled from, chosen by its executor.

Contract.

- ``processing_backend(executor, topology, info, conf, services, transactional, ...)``
  is the run's processing phase: on ``"local"`` the topology's ``local_backend``, else
  ``LocalBackend``; on ``"spark"`` its ``resident_backend``, else ``ResidentBackend``;
  on ``"spark-batch"`` the ``spark_backend`` given, else the topology's, else
  ``SparkBackend`` (``drpc.transactional.processing``).
- ``restored_driver(checkpoint, layouts, info, env)`` is the driver's side of a
  checkpoint store (``drpc.state.driver_checkpoint``), None without a store. It checks
  the store answers, and restores the driver's records into ``env`` first, so a driver
  started on another host continues. A store for a topology with no partitioned state
  raises ``InvalidTopologyError``: it would hold nothing.
- ``partitioned_commit(executor, topology, info, layouts, ...)`` commits the run's
  partitioned states (``drpc.transactional.partitions``). The partitions live on the
  resident tasks on ``"spark"`` (``ResidentPartitionHost``, lent to the topology's
  components as ``PARTITIONS_SERVICE`` in ``services``), else in this process under
  the state directory (``LocalPartitionHost``, ``partition_writers`` at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drpc.errors import InvalidTopologyError
from drpc.executors.resident.executor import resident_cluster_of
from drpc.model.topology import Topology
from drpc.state import CoordinatorState, StateEnvironment
from drpc.state.checkpoint_store import CheckpointSettings, CheckpointStore
from drpc.state.driver_checkpoint import DriverCheckpoint
from drpc.state.partition import PartitionLayout, partition_root
from drpc.transactional.builder import TransactionalInfo
from drpc.transactional.commit import CommitPhase
from drpc.transactional.local_backend import LocalBackend
from drpc.transactional.partitions import (
    CommitContext,
    LocalPartitionHost,
    PartitionedCommit,
    PartitionHost,
)
from drpc.transactional.processing import ProcessingBackend
from drpc.transactional.resident_partitions import PARTITIONS_SERVICE, ResidentPartitionHost
from drpc.transactional.spark_backend import ResidentBackend, SparkBackend
from drpc.transactional.spouts import TransactionalServices


def processing_backend(
    executor: str,
    topology: Topology,
    info: TransactionalInfo,
    conf: dict[str, Any],
    services: dict[str, Any],
    transactional: TransactionalServices,
    *,
    threads: int,
    max_spout_pending: int,
    master: str | None,
    spark_conf: dict[str, Any] | None,
    start_timeout: float,
    spark_backend: Callable[..., ProcessingBackend] | None,
) -> ProcessingBackend:
    if executor == "local":
        make_local = info.local_backend or LocalBackend
        backend: ProcessingBackend = make_local(
            topology, info, conf, services, transactional, threads
        )
        return backend
    if executor == "spark":
        make = info.resident_backend or ResidentBackend
    else:
        make = spark_backend or info.spark_backend or SparkBackend
    backend = make(
        topology,
        info,
        conf,
        services,
        transactional,
        max_spout_pending,
        master,
        spark_conf,
        start_timeout,
    )
    return backend


def restored_driver(
    checkpoint: CheckpointSettings | None,
    layouts: dict[str, PartitionLayout],
    info: TransactionalInfo,
    env: StateEnvironment,
) -> DriverCheckpoint | None:
    if checkpoint is None:
        return None
    if not layouts:
        raise InvalidTopologyError(
            f"topology {info.id!r} keeps no partitioned state, so a checkpoint store "
            f"({checkpoint.describe()}) would hold nothing of it: give its state "
            "a parallelism_hint of 2 or more, or run it without checkpoint_dir"
        )
    store = CheckpointStore(checkpoint)
    store.check()
    driver = DriverCheckpoint(store, info.id)
    driver.restore(env)  # a driver on another host continues
    return driver


def partitioned_commit(
    executor: str,
    topology: Topology,
    info: TransactionalInfo,
    layouts: dict[str, PartitionLayout],
    conf: dict[str, Any],
    services: dict[str, Any],
    commit_phase: CommitPhase,
    coordinator_state: CoordinatorState,
    *,
    state_dir: str,
    master: str | None,
    spark_conf: dict[str, Any] | None,
    start_timeout: float,
    state_options: dict[str, Any] | None,
    checkpoint: CheckpointSettings | None,
    driver_checkpoint: DriverCheckpoint | None,
    partition_writers: int,
    standby_replicas: int = 0,
) -> PartitionedCommit:
    commit_context = CommitContext(topology, conf, services, commit_phase.hints)
    host: PartitionHost
    if executor == "spark":
        host = ResidentPartitionHost(
            partition_root(state_dir, conf),
            commit_context,
            lambda: resident_cluster_of(master, spark_conf, start_timeout),
            state_options=state_options,
            checkpoint=checkpoint,
            standby_replicas=standby_replicas,
        )
        services[PARTITIONS_SERVICE] = host
    else:
        host = LocalPartitionHost(
            state_dir,
            commit_context,
            writers=partition_writers,
            state_options=state_options,
            checkpoint=checkpoint,
        )
    return PartitionedCommit(
        topology,
        info,
        layouts,
        host,
        commit_phase,
        coordinator_state,
        driver_checkpoint=driver_checkpoint,
    )
