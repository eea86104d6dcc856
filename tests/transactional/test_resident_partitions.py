"""The driver's side of partitions on the resident tasks, without a Spark job."""

from __future__ import annotations

from drpc.examples.exclamation import build_exclamation
from drpc.transactional.partitions import CommitContext
from drpc.transactional.resident_partitions import ResidentPartitionHost


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
