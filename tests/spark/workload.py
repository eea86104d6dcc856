"""Bolts for the Spark-specific tests (importable by Spark's Python workers)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from drpc import (
    BaseBasicBolt,
    BasicOutputCollector,
    Fields,
    OutputFieldsDeclarer,
    TopologyContext,
    Tuple,
)
from drpc.resources import WorkerResource


def load_marker(path: str) -> int:
    with open(path, "a") as log:
        log.write(f"{os.getpid()}\n")
    return os.getpid()


class CrashOn(BaseBasicBolt):
    """Kills its Python worker process for one argument."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        if tuple[1] == "crash":
            os._exit(3)
        collector.emit([tuple[0], tuple[1] + "!"])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class SlowFor(BaseBasicBolt):
    """Sleeps for the argument's number of seconds."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        time.sleep(float(tuple[1]))
        collector.emit([tuple[0], "done"])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class UsesResource(BaseBasicBolt):
    """Answers with the pid that loaded its resource."""

    def __init__(self, resource: WorkerResource[int]) -> None:
        self.resource = resource

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.loaded_by = self.resource.get()

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], str(self.loaded_by)])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class KillsItsTaskInPrepare(BaseBasicBolt):
    """Echoes; the first task of it prepared anywhere (marker ``killed-in-prepare`` in
    ``marker_dir``) SIGKILLs its own process: a resident task dies while it starts a
    deployment."""

    def __init__(self, marker_dir: str) -> None:
        self.marker_dir = marker_dir

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        marker = os.path.join(self.marker_dir, "killed-in-prepare")
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], tuple[1] + "!"])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))
