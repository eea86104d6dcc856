"""Choosing the executor, loading --topology values, and wakeup callbacks."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from drpc.examples.exclamation import build_exclamation
from drpc.hosting import Wakeups, as_drpc, as_transactional, default_executor, load_topology

ROOT = Path(__file__).resolve().parents[2]
BUILT = build_exclamation("built").create_topology()


def test_default_executor_is_spark_once_the_spark_executor_exists() -> None:
    spark_present = (ROOT / "drpc" / "executors" / "spark" / "__init__.py").exists()
    assert default_executor() == ("spark" if spark_present else "local")


@pytest.mark.parametrize(
    ("spec", "function"),
    [
        ("drpc.examples.reach:topology", "reach"),
        ("drpc.examples.exclamation:topology", "exclamation"),
        ("drpc.examples.reach:build_reach", "reach"),
        ("tests.server.test_hosting:BUILT", "built"),
    ],
)
def test_load_topology_accepts_builders_topologies_and_factories(spec: str, function: str) -> None:
    assert load_topology(spec).drpc_function == function


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("drpc.examples.reach", "not of the form"),
        ("drpc.examples.reach:", "not of the form"),
        ("no_such_module_here:x", "cannot import 'no_such_module_here'"),
        ("drpc.examples.reach:missing", "has no 'missing'"),
        ("drpc.examples.reach:EXPECTED_REACH", "is a dict, not a Topology"),
        (
            "tests.server.test_hosting:build_reach_of",
            re.escape("tests.server.test_hosting:build_reach_of needs arguments (tweeters)"),
        ),
    ],
)
def test_load_topology_refuses_with_a_reason(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_topology(spec)


def build_reach_of(tweeters: dict[str, list[str]], function: str = "reach") -> object:
    raise AssertionError("a factory that needs arguments is refused, never called")


def test_a_factory_with_only_defaulted_parameters_is_called() -> None:
    assert load_topology("drpc.examples.square:build_square").drpc_function == "square"


def test_as_drpc_and_as_transactional_say_which_kind_was_given() -> None:
    transactional = load_topology("drpc.examples.transactional_words:topology")
    with pytest.raises(ValueError, match="words is a transactional topology, not a DRPC function"):
        as_drpc(transactional, "words")
    assert as_drpc(BUILT, "built") is BUILT
    with pytest.raises(ValueError, match="built is not a transactional topology"):
        as_transactional(BUILT, "built")


def test_wakeups_call_each_callback_until_removed(caplog: pytest.LogCaptureFixture) -> None:
    wakeups = Wakeups()
    calls: list[str] = []
    remove_a = wakeups.add("f", lambda: calls.append("a"))
    wakeups.add("f", lambda: 1 / 0)
    wakeups.add("g", lambda: calls.append("g"))
    with caplog.at_level(logging.ERROR):
        wakeups.notify("f")
    assert calls == ["a"]
    assert "wakeup callback for 'f' raised" in caplog.text
    remove_a()
    remove_a()
    wakeups.notify("f")
    wakeups.notify("nobody")
    assert calls == ["a"]
