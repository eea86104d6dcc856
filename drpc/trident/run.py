"""Running a Trident topology's spout stream: compile it, then run it as a transactional topology.

Contract. ``run(topology, state_dir=..., executor="local"|"spark", **options)``
compiles the spout stream (``drpc.trident.compiler.transactional_topology``)
and runs it with ``drpc.transactional.run`` (every option of that function:
``max_spout_pending``, ``max_batches``, ``until_idle``, ``stop``, ...),
returning its ``RunResult``. ``runner(...)`` gives the
``TransactionalRunner`` instead, for runs driven step by step.

On ``executor="spark"`` a topology that ``drpc.trident.fused.fused_plan``
accepts (a file log, per-tuple steps, ``group_by`` + ``persistent_aggregate``
of a combiner) runs on the compiled path (``transactional_topology``'s
``fused``): the executors read the file log and only per-key aggregates
reach the commit. ``fused=False`` keeps the general path (one emitter on
the driver).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drpc.transactional import RunResult, TransactionalRunner
from drpc.transactional import run as run_transactional
from drpc.trident.compiler import transactional_topology
from drpc.trident.stream import TridentTopology


def run(
    topology: TridentTopology,
    *,
    state_dir: str,
    conf: Mapping[str, Any] | None = None,
    fused: bool = True,
    **options: Any,
) -> RunResult:
    """Run ``topology``'s spout stream until it is idle (see the module doc)."""
    return run_transactional(
        transactional_topology(topology, str(state_dir), conf, fused=fused),
        state_dir=str(state_dir),
        **options,
    )


def runner(
    topology: TridentTopology,
    *,
    state_dir: str,
    conf: Mapping[str, Any] | None = None,
    fused: bool = True,
    **options: Any,
) -> TransactionalRunner:
    return TransactionalRunner(
        transactional_topology(topology, str(state_dir), conf, fused=fused),
        state_dir=str(state_dir),
        **options,
    )
