"""Compile a topology into Spark stages; ``explain`` prints the plan.

Contract. ``compile_plan(topology)`` places every component on the driver
(spouts, the DRPC scaffolding, anything marked driver-side) or on Spark (the
user's bolts) and groups the Spark components into stages:

- a component's number of tasks is its number of partitions;
- a component joins its upstream's stage (no repartitioning, one fused
  ``mapPartitionsWithIndex``) when its only data input is that one upstream,
  with the same number of tasks, through groupings that keep the task index,
  and nothing else consumes the upstream;
- otherwise it starts a stage whose input is repartitioned by target task
  (one shuffle, whatever the number of inputs), or, when it is fed only by
  the driver, parallelized with exactly one slice per task (no shuffle);
- an id stream that carries nothing but the id (the last DRPC step's) is not
  shipped: each task counts the ids it owns as received;
- count reports of 0 are implied, not shipped (see ``drpc.executors.batch``),
  for every coordinated component, Spark- or driver-side (``hints``);
- a stage read by two or more consumers is persisted for the job.

Reach compiles to 3 shuffles. No pyspark import here.
"""

from __future__ import annotations

from dataclasses import dataclass

from drpc.builders.coordinated_drpc import CoordinatedDRPCTopologyBuilder
from drpc.builders.linear_drpc import LinearDRPCTopologyBuilder
from drpc.executors.batch import TaskHints
from drpc.model.streams import COORDINATED_STREAM_ID, GlobalStreamId
from drpc.model.topology import Topology

DRIVER = "driver"
SPARK = "spark"


@dataclass(frozen=True)
class StagePlan:
    index: int
    components: tuple[str, ...]
    parallelism: int
    spark_inputs: tuple[int, ...]  # upstream stage indexes
    driver_inputs: tuple[str, ...]  # driver components feeding the first component

    @property
    def head(self) -> str:
        return self.components[0]

    @property
    def shuffles(self) -> bool:
        return bool(self.spark_inputs)


@dataclass
class SparkPlan:
    topology: Topology
    placement: dict[str, str]
    stages: list[StagePlan]
    synthesized_streams: set[GlobalStreamId]
    stage_of: dict[str, int]
    consumers: dict[int, list[str]]  # stage -> consuming components (spark heads or driver)
    hints: dict[str, TaskHints]  # every component's, Spark- or driver-side

    @property
    def shuffles(self) -> int:
        return sum(1 for stage in self.stages if stage.shuffles)

    def driver_components(self) -> list[str]:
        return [c for c in _topological_order(self.topology) if self.placement[c] == DRIVER]

    def after_spark(self, component: str) -> bool:
        """True when a driver component depends, directly or not, on Spark output."""
        pending = [stream.component_id for stream in self.topology.components[component].inputs]
        seen: set[str] = set()
        while pending:
            source = pending.pop()
            if source in seen:
                continue
            seen.add(source)
            if self.placement[source] == SPARK:
                return True
            pending.extend(s.component_id for s in self.topology.components[source].inputs)
        return False

    def persisted(self, stage: StagePlan) -> bool:
        return len(self.consumers.get(stage.index, [])) > 1

    def explain(self) -> str:
        topology = self.topology
        lines = [
            f"Spark plan for topology {topology.name!r}: {len(self.stages)} stages, "
            f"{self.shuffles} shuffles"
        ]
        drivers = self.driver_components()
        upstream = [c for c in drivers if not self.after_spark(c)]
        if upstream:
            lines.append(f"  driver: {', '.join(upstream)}")
        for stage in self.stages:
            steps = " -> ".join(topology.components[c].describe() for c in stage.components)
            sources: list[str] = []
            for index in stage.spark_inputs:
                groupings = sorted(
                    {
                        grouping.describe()
                        for stream, grouping in topology.components[stage.head].inputs.items()
                        if stream.stream_id != COORDINATED_STREAM_ID
                        and stream.component_id in self.stages[index].components
                    }
                )
                sources.append(f"shuffle of stage {index + 1} by {', '.join(groupings)}")
            if stage.driver_inputs:
                sources.append(f"parallelized from the driver ({', '.join(stage.driver_inputs)})")
            notes = []
            for component in stage.components[1:]:
                notes.append(f"{component} fused, no repartitioning")
            for component in stage.components:
                if self.hints[component].synthesize_ids:
                    notes.append(f"{component}'s id stream counted locally")
            persisted = " [persisted]" if self.persisted(stage) else ""
            lines.append(f"  stage {stage.index + 1}: {steps}{persisted}")
            lines.append(f"    input: {'; '.join(sources) or 'none'}")
            if notes:
                lines.append(f"    note: {'; '.join(notes)}")
        downstream = [c for c in drivers if c not in upstream]
        if downstream:
            lines.append(f"  driver: {', '.join(downstream)} (collected)")
        return "\n".join(lines)


def _topological_order(topology: Topology) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()

    def visit(component: str, path: tuple[str, ...]) -> None:
        if component in seen:
            return
        if component in path:
            raise ValueError(f"topology {topology.name!r} has a cycle through {component!r}")
        for stream in topology.components[component].inputs:
            if stream.component_id != component:
                visit(stream.component_id, (*path, component))
        seen.add(component)
        order.append(component)

    for component in sorted(topology.components):
        visit(component, ())
    return order


def default_placement(topology: Topology) -> dict[str, str]:
    placement: dict[str, str] = {}
    steps = set(topology.drpc_steps)
    for component_id, spec in topology.components.items():
        if spec.kind == "spout" or (
            topology.drpc_function is not None and component_id not in steps
        ):
            placement[component_id] = DRIVER
        else:
            placement[component_id] = SPARK
    return placement


def compile_plan(topology: Topology, placement: dict[str, str] | None = None) -> SparkPlan:
    placement = placement or default_placement(topology)
    order = _topological_order(topology)
    consumers_of: dict[str, set[str]] = {c: set() for c in topology.components}
    for component_id, spec in topology.components.items():
        for stream in spec.inputs:
            consumers_of[stream.component_id].add(component_id)

    synthesized: set[GlobalStreamId] = set()
    hints: dict[str, TaskHints] = {}
    for component_id, spec in topology.components.items():
        coordination = spec.coordination
        if coordination is None:
            hints[component_id] = TaskHints()
            continue
        implied = tuple(
            (source, 1 if args.single else topology.components[source].parallelism)
            for source, args in sorted(coordination.sources.items())
        )
        synthesize_ids = False
        id_stream = coordination.id_stream
        if (
            id_stream is not None
            and placement[component_id] == SPARK
            and placement[id_stream.component_id] == DRIVER
            and len(topology.output_fields(id_stream.component_id, id_stream.stream_id)) == 1
        ):
            synthesized.add(id_stream)
            synthesize_ids = True
        hints[component_id] = TaskHints(synthesize_ids, implied, omit_zero_reports=True)

    stages: list[StagePlan] = []
    stage_of: dict[str, int] = {}
    for component_id in order:
        if placement[component_id] != SPARK:
            continue
        spec = topology.components[component_id]
        data_sources: dict[str, list[GlobalStreamId]] = {}
        for stream in spec.inputs:
            if stream.stream_id != COORDINATED_STREAM_ID and stream not in synthesized:
                data_sources.setdefault(stream.component_id, []).append(stream)
        fuse_with = _fusable_upstream(topology, placement, component_id, data_sources, consumers_of)
        if fuse_with is not None:
            upstream_stage = stages[stage_of[fuse_with]]
            stages[upstream_stage.index] = StagePlan(
                upstream_stage.index,
                (*upstream_stage.components, component_id),
                upstream_stage.parallelism,
                upstream_stage.spark_inputs,
                upstream_stage.driver_inputs,
            )
            stage_of[component_id] = upstream_stage.index
            continue
        spark_inputs = sorted(
            {stage_of[source] for source in data_sources if placement[source] == SPARK}
        )
        driver_inputs = tuple(sorted(s for s in data_sources if placement[s] == DRIVER))
        stage = StagePlan(
            len(stages), (component_id,), spec.parallelism, tuple(spark_inputs), driver_inputs
        )
        stages.append(stage)
        stage_of[component_id] = stage.index

    consumers: dict[int, list[str]] = {}
    for component_id, spec in topology.components.items():
        for stream in spec.inputs:
            source = stream.component_id
            if placement.get(source) != SPARK or stream in synthesized:
                continue
            source_stage = stage_of[source]
            if stage_of.get(component_id) == source_stage:
                continue
            if component_id not in consumers.setdefault(source_stage, []):
                consumers[source_stage].append(component_id)
    return SparkPlan(topology, placement, stages, synthesized, stage_of, consumers, hints)


def _fusable_upstream(
    topology: Topology,
    placement: dict[str, str],
    component_id: str,
    data_sources: dict[str, list[GlobalStreamId]],
    consumers_of: dict[str, set[str]],
) -> str | None:
    if len(data_sources) != 1:
        return None
    [(source, streams)] = data_sources.items()
    if placement[source] != SPARK or consumers_of[source] != {component_id}:
        return None
    spec = topology.components[component_id]
    source_tasks = topology.components[source].parallelism
    if source_tasks != spec.parallelism:
        return None
    for stream in streams:
        if not spec.inputs[stream].keeps_task_index(source_tasks, spec.parallelism):
            return None
    return source


def explain(
    topology: Topology | LinearDRPCTopologyBuilder | CoordinatedDRPCTopologyBuilder,
) -> str:
    """Print and return the Spark stage plan of a topology or builder."""
    if not isinstance(topology, Topology):
        topology = topology.create_topology()
    text = compile_plan(topology).explain()
    print(text)
    return text
