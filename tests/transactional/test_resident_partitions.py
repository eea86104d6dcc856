"""The driver's side of partitions on the resident tasks, without a Spark job."""

from __future__ import annotations

import pytest

from drpc.examples.exclamation import build_exclamation
from drpc.state.checkpoint_store import CheckpointSettings
from drpc.transactional.global_commit import PartitionRef
from drpc.transactional.partitions import CommitContext
from drpc.transactional.resident_partitions import (
    STANDBY_RETENTION_LAG,
    ResidentPartitionHost,
    StandbyCopy,
)


def _unused_cluster() -> object:
    raise AssertionError("no resident job is needed to build a host")


def test_every_host_names_its_topology_apart_even_at_a_reused_address() -> None:
    """The resident tasks cache each run's topology by the host's token and outlive the
    run: a later run's host must never get an earlier run's token, even when it is
    allocated where the freed one was (which an ``id()``-based token would repeat)."""
    context = CommitContext(build_exclamation().create_topology(), {}, {}, {})
    tokens = []
    for _ in range(50):
        host = ResidentPartitionHost("unused-root", context, _unused_cluster)  # type: ignore[arg-type]
        tokens.append(host.token)
        del host
    assert len(set(tokens)) == len(tokens)


def test_a_given_token_is_kept() -> None:
    context = CommitContext(build_exclamation().create_topology(), {}, {}, {})
    host = ResidentPartitionHost("unused-root", context, _unused_cluster, token="mine")  # type: ignore[arg-type]
    assert host.token == "mine"


def _standby_host(replicas: int = 1) -> ResidentPartitionHost:
    context = CommitContext(build_exclamation().create_topology(), {}, {}, {})
    return ResidentPartitionHost(
        "unused-root",
        context,
        _unused_cluster,  # type: ignore[arg-type]
        checkpoint=CheckpointSettings("file:///unused-store"),
        standby_replicas=replicas,
    )


REFS = [PartitionRef("counts", index) for index in range(4)]


def test_a_standby_goes_to_another_host_first_then_to_the_least_loaded_task() -> None:
    host = _standby_host()
    owners = {REFS[0]: 1, REFS[1]: 2, REFS[2]: 1, REFS[3]: 2}
    hosts = {1: "a", 2: "a", 3: "b"}
    chosen = host._choose_standbys(owners, [1, 2, 3], hosts, {})
    # task 3 is the only other host for every partition; nothing balances against that
    assert all([c.task for c in chosen[ref]] == [3] for ref in REFS)
    one_host = host._choose_standbys(owners, [1, 2, 3], dict.fromkeys([1, 2, 3], "a"), {})
    # one host: the task with the fewest standby copies so far that does not own the
    # partition, the lowest first
    assert [one_host[ref][0].task for ref in REFS] == [2, 1, 3, 1]


def test_a_standby_stays_where_it_was_while_it_lives_and_knows_what_its_copy_holds() -> None:
    host = _standby_host()
    owners = {REFS[0]: 1, REFS[1]: 2}
    hosts = dict.fromkeys([1, 2, 3], "a")
    host._standbys = {REFS[0]: [StandbyCopy(3, "a", 7)], REFS[1]: [StandbyCopy(3, "a", 7)]}
    copies = {REFS[0]: {3: 7}, REFS[1]: {3: 6}}
    chosen = host._choose_standbys(owners, [1, 2, 3], hosts, copies)
    assert [(c.task, c.txid) for c in chosen[REFS[0]]] == [(3, 7)]
    assert [(c.task, c.txid) for c in chosen[REFS[1]]] == [(3, 6)]
    # its task lost: another takes it, with no copy yet
    lost = host._choose_standbys(owners, [1, 2], hosts, copies)
    assert [(c.task, c.txid) for c in lost[REFS[0]]] == [(2, None)]
    assert lost[REFS[1]] and lost[REFS[1]][0].task == 1
    # one task left: no standby at all
    assert host._choose_standbys({REFS[0]: 1}, [1], hosts, copies) == {REFS[0]: []}


def test_the_store_keeps_the_deltas_of_standbys_at_most_the_retention_lag_behind() -> None:
    host = _standby_host()
    host._standbys = {
        REFS[0]: [StandbyCopy(2, "a", 40)],
        REFS[1]: [StandbyCopy(1, "a", 50 - STANDBY_RETENTION_LAG)],
        REFS[2]: [StandbyCopy(1, "a", 50 - STANDBY_RETENTION_LAG - 1)],  # too far behind
        REFS[3]: [StandbyCopy(2, "a", None)],  # not built yet
    }
    assert host.standby_floor(50) == 50 - STANDBY_RETENTION_LAG
    host._standbys = {REFS[0]: [StandbyCopy(2, "a", None)]}
    assert host.standby_floor(50) == 50


def test_standby_replicas_need_a_checkpoint_store() -> None:
    context = CommitContext(build_exclamation().create_topology(), {}, {}, {})
    with pytest.raises(ValueError, match="set checkpoint_dir"):
        ResidentPartitionHost("unused-root", context, _unused_cluster, standby_replicas=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="standby_replicas must be >= 0"):
        _standby_host(-1)
