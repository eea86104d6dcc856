"""What a Spark worker keeps of the topologies its tasks run (drpc.executors.spark.stages):
each unpickled once, and only the most recently used ``TOPOLOGIES_KEPT``, since a resident
task outlives the runs it serves."""

from __future__ import annotations

import gc
import pickle
import weakref
from collections.abc import Iterator

import pytest

from drpc.examples.exclamation import build_exclamation
from drpc.executors.spark import stages


class CyclicTopology:
    """Stands for a topology whose objects refer to each other: only the cycle collector
    frees it, and not while it is frozen."""

    def __init__(self) -> None:
        self.itself = self


@pytest.fixture
def fresh_worker() -> Iterator[None]:
    """This process as a worker that has loaded no topology yet (and as it was, after)."""
    kept = dict(stages._topologies)
    stages._topologies.clear()
    yield
    stages._topologies.clear()
    stages._topologies.update(kept)


def test_a_token_s_topology_is_unpickled_once_and_reused(fresh_worker: None) -> None:
    frozen = pickle.dumps(build_exclamation().create_topology())
    first = stages.loaded_topology("run-1", frozen)
    assert stages.loaded_topology("run-1", frozen) is first
    assert stages.loaded_topology("run-2", frozen) is not first


def test_only_the_most_recently_used_topologies_stay_and_a_dropped_one_is_freed(
    fresh_worker: None,
) -> None:
    frozen = pickle.dumps(build_exclamation().create_topology())
    oldest = weakref.ref(stages.loaded_topology("run-0", pickle.dumps(CyclicTopology())))
    kept_in_use = stages.loaded_topology("run-1", frozen)
    for number in range(2, stages.TOPOLOGIES_KEPT + 1):
        stages.loaded_topology(f"run-{number}", frozen)
    assert len(stages._topologies) == stages.TOPOLOGIES_KEPT  # run-0 .. run-32: one too many
    assert "run-0" not in stages._topologies
    stages.loaded_topology("run-1", frozen)  # used again: now the most recent
    stages.loaded_topology("run-extra", frozen)
    assert "run-1" in stages._topologies
    assert stages.loaded_topology("run-1", frozen) is kept_in_use
    assert "run-2" not in stages._topologies  # the least recently used went instead
    gc.collect()
    assert oldest() is None  # not held, nor left frozen, once dropped
    assert stages.loaded_topology("run-0", frozen) is not None  # unpickled again on demand
