"""The examples as users run them, and each one's ``topology`` for ``--topology``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drpc.examples.reach import EXPECTED_REACH
from drpc.hosting import as_drpc, as_transactional, load_topology
from drpc.testing import LocalDRPC
from drpc.transactional import run


def test_reach_demo_prints_the_reference_results() -> None:
    # The reach demo that predates the server still prints the reference results.
    out = subprocess.run(
        [sys.executable, "-m", "drpc.examples.reach"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = out.stdout.strip().splitlines()
    assert lines == [f"Reach of {url}: {reach}" for url, reach in EXPECTED_REACH.items()]


def test_reach_demo_has_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "drpc.examples.reach", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "--executor" in out.stdout


@pytest.mark.parametrize(
    ("module", "function"),
    [("reach", "reach"), ("exclamation", "exclamation"), ("square", "square")],
)
def test_each_drpc_example_serves_its_function_as_topology(module: str, function: str) -> None:
    spec = f"drpc.examples.{module}:topology"
    assert as_drpc(load_topology(spec), spec).drpc_function == function


@pytest.mark.parametrize(
    "module",
    ["transactional_global_count", "transactional_words", "trident_words", "trident_reach"],
)
def test_each_transactional_example_runs_as_topology(module: str) -> None:
    spec = f"drpc.examples.{module}:topology"
    assert as_transactional(load_topology(spec), spec).transactional is not None


def test_the_trident_example_counts_and_answers_from_the_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRPC_STATE_DIR", str(tmp_path / "state"))
    spec = "drpc.examples.trident_words:topology"
    result = run(load_topology(spec), state_dir=str(tmp_path / "state"))
    assert [commit.tuples for commit in result.commits] == [3, 2, 0]
    query = as_drpc(load_topology("drpc.examples.trident_words:words_query"), "words_query")
    with LocalDRPC() as drpc:
        drpc.register(query)
        assert drpc.execute("words", "cat the dog jumped") == "[[6]]"


def test_the_graph_baselines_read_reach_by_slices_and_deal_urls_by_cost(tmp_path: Path) -> None:
    """bench/spark_serving.py's competent baselines: one slice per tweeter gives the reach
    the block-by-block walk gives, and the urls are dealt into hands of about equal cost."""
    from drpc.examples.reach_graph import (
        deal_by_cost,
        exact_reach,
        generate_graph,
        load_graph,
        reach_cost,
        sliced_reach,
        top_urls,
    )

    graph = load_graph(
        str(generate_graph(tmp_path / "g.bin", users=2_000, edges=20_000, urls=200, tweets=3_000))
    )
    urls = [*top_urls(graph, 12), "url/not-tweeted", "no-such-url"]
    assert [sliced_reach(graph, url) for url in urls] == [exact_reach(graph, url) for url in urls]
    assert sliced_reach(graph, urls[0]) > 0
    hands = deal_by_cost(graph, urls, 2)
    assert sorted(url for hand in hands for url in hand) == sorted(urls)
    loads = [sum(reach_cost(graph, url) for url in hand) for hand in hands]
    costliest = max(reach_cost(graph, url) for url in urls)
    assert abs(loads[0] - loads[1]) <= costliest  # greedy: off by at most one url's cost


def test_the_graph_reach_topology_answers_the_exact_reach(tmp_path: Path) -> None:
    """bench/spark_serving.py's large-graph function, on a small graph: every url's answer is
    the reach computed directly, unknown urls included."""
    from drpc.examples.reach_graph import (
        build_graph_reach,
        exact_reach,
        generate_graph,
        load_graph,
        top_urls,
    )

    path = generate_graph(tmp_path / "g.bin", users=2_000, edges=20_000, urls=200, tweets=3_000)
    graph = load_graph(str(path))
    urls = [*top_urls(graph, 8), "url/not-tweeted", "no-such-url"]
    with LocalDRPC() as drpc:
        drpc.register(build_graph_reach(path, chunk=7))
        answers = [drpc.execute("reach-graph", url) for url in urls]
    assert answers == [str(exact_reach(graph, url)) for url in urls]
    assert int(answers[0]) > 0
