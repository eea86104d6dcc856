"""ShellSpout over a real subprocess: next, ack and fail answered with sync."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from drpc import Fields, OutputFieldsDeclarer, TopologyBuilder, TopologyContext
from drpc.errors import ShellProcessExitedError
from drpc.model.components import SpoutOutputCollector
from drpc.multilang import ShellSpout
from tests.topologies.bolts import Identity

SPOUT = str(Path(__file__).resolve().parent / "pyspout.py")


class Words(ShellSpout):
    def __init__(self, *options: str) -> None:
        super().__init__(sys.executable, SPOUT, *options, heartbeat_timeout=2.0)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("word"))


class Recording(SpoutOutputCollector):
    def __init__(self) -> None:
        self.emitted: list[tuple[list[Any], Any]] = []
        self.errors: list[BaseException] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> list[int]:
        self.emitted.append((list(values), msg_id))
        return [2]

    def report_error(self, error: BaseException) -> None:
        self.errors.append(error)


def opened(spout: ShellSpout) -> Recording:
    builder = TopologyBuilder()
    builder.set_spout("words", spout)
    builder.set_bolt("echo", Identity()).shuffle_grouping("words")
    topology = builder.create_topology("t")
    collector = Recording()
    spout.open(
        {}, TopologyContext(topology, "words", topology.component_task_ids["words"][0]), collector
    )
    return collector


@pytest.mark.timeout(20)
def test_next_ack_and_fail(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="drpc.multilang")
    spout = Words()
    try:
        collector = opened(spout)
        for _ in range(4):
            spout.next_tuple()
        assert collector.emitted == [(["word-1"], 1), (["word-2"], 2), (["word-3"], 3)]
        spout.ack(1)
        spout.fail(2)
    finally:
        spout.close()
    logged = [r.getMessage() for r in caplog.records if r.name == "drpc.multilang.words"]
    assert "ack 1" in logged and "fail 2" in logged


@pytest.mark.timeout(20)
def test_a_crashed_spout_reports_a_typed_error_and_serves_on() -> None:
    spout = Words("--crash")
    try:
        collector = opened(spout)
        for _ in range(4):
            spout.next_tuple()
        [error] = collector.errors
        assert isinstance(error, ShellProcessExitedError)
        assert error.exit_status == 5 and "spout crashed" in error.stderr_tail
        spout.next_tuple()  # a new subprocess, which starts counting again
        assert collector.emitted[-1] == (["word-1"], 1)
    finally:
        spout.close()
