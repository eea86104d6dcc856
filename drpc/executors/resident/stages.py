"""A compiled plan's stages for one batch of ids, run as calls on the resident Spark tasks.

Contract. ``ResidentStages(cluster, plan, token, frozen)`` has ``SparkStages``'s
``run(job, driver_shipments, timings)`` (``drpc.executors.spark.stages``): the same
stages, each partition the same ``_run_stage`` work (every fused component's
``TaskRun`` in turn), with the same result, but no Spark job: stage by stage, in the
plan's order, partition ``i`` of a stage is a call on the ``i`` mod n-th of the n tasks
that serve (``ResidentCluster.live_workers``), fed what the driver's components sent the
stage's head and what earlier stages sent it; the driver passes the stages' pickled
blobs on without opening them and unpickles only what comes back for its own components.
Every partition of every stage runs, an empty one too (its coordinated tasks report their
zero counts).
The topology travels frozen with each call and is unpickled once per process. A call
that fails (its task raised, or the resident job broke) fails the run with
``DRPCError`` naming the cause.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from functools import partial

from drpc.executors.plan import DRIVER, SparkPlan
from drpc.executors.records import Shipment, Timing
from drpc.executors.resident.cluster import ResidentCluster
from drpc.executors.spark.stages import (
    Blob,
    Frozen,
    JobSpec,
    collect_for_driver,
    head_shipments,
    run_stage_here,
)


class ResidentStages:
    """Runs a plan's stages for one job as calls on the resident tasks (module doc)."""

    def __init__(
        self, cluster: ResidentCluster, plan: SparkPlan, token: str, frozen: bytes
    ) -> None:
        self.cluster = cluster
        self.plan = plan
        self.token = token
        self.frozen = Frozen(frozen)

    def run(
        self,
        job: JobSpec,
        driver_shipments: dict[int, list[Shipment]],
        timings: list[Timing] | None = None,
    ) -> dict[int, list[Shipment]]:
        plan, cluster = self.plan, self.cluster
        if not plan.stages:
            return {}
        workers = cluster.live_workers()
        inbox: defaultdict[str, defaultdict[int, list[Blob]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for_driver: list[tuple[str, int, bytes]] = []
        for stage in plan.stages:
            fed = head_shipments(plan, stage, driver_shipments)
            arrived = inbox.pop(stage.head, defaultdict(list))
            hints = {component: plan.hints[component] for component in stage.components}
            sink = next(iter(plan.consumers.get(stage.index, ())), None)
            run = partial(
                run_stage_here,
                token=self.token,
                broadcast=self.frozen,
                stage=stage,
                hints=hints,
                job=job,
                timing_sink=sink,
            )
            calls = []
            for index in range(stage.parallelism):
                items = list(arrived.get(index, []))
                if index in fed:
                    items.append(
                        (index, pickle.dumps(fed[index], protocol=pickle.HIGHEST_PROTOCOL))
                    )
                calls.append(cluster.call(workers[index % len(workers)], run, index, items))
            for call in calls:
                for component, index, blob in call.result():
                    if plan.placement.get(component) == DRIVER:
                        for_driver.append((component, index, blob))
                    else:
                        inbox[component][index].append((index, blob))
        return collect_for_driver(plan, for_driver, timings)
