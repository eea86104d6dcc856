"""Plain topologies (``drpc.topologies``) hosted beside DRPC functions: in ``DRPCServer``
(``register_plain``, ``drpc-server --topology``) and in a remote runner, their
components' figures on ``/metrics``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from drpc.client import DRPCClient
from drpc.server import DRPCServer

from drpc.errors import DRPCError
from drpc.runner import RemoteRunner
from tests.plain_topology import WordCount, events, word_count
from tests.server.helpers import (
    EPHEMERAL_PORTS,
    HOST,
    exclamation,
    running_server,
    server_options,
    server_process,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]
SENTENCES = ["the cow jumped over the moon", "four score and seven years ago"] * 10

pytestmark = pytest.mark.timeout(120)


def metrics(http_port: int) -> str:
    with urllib.request.urlopen(f"http://{HOST}:{http_port}/metrics", timeout=30) as response:
        return str(response.read().decode())


def figure(text: str, name: str, topology: str, component: str) -> float | None:
    pattern = rf'^{name}\{{component="{component}",topology="{topology}"\}} (\S+)$'
    found = re.search(pattern, text, re.MULTILINE)
    return None if found is None else float(found[1])


def test_a_server_runs_a_plain_topology_beside_its_functions(tmp_path: Path) -> None:
    run = f"served-{id(tmp_path)}"
    with running_server(exclamation()) as server:
        name = server.register_plain(word_count(run, SENTENCES, WordCount(str(tmp_path))))
        assert name == "topology"  # TopologyBuilder.create_topology's default name
        wait_until(lambda: len(set(events(run)["acked"])) == len(SENTENCES))
        with DRPCClient(HOST, server.port) as drpc:
            assert drpc.execute("exclamation", "hi") == "hi!"
        text = metrics(server.http_port)
        assert figure(text, "drpc_topology_acked_total", name, "sentences") == len(SENTENCES)
        assert figure(text, "drpc_topology_emitted_total", name, "split") == 6 * len(SENTENCES)
        assert figure(text, "drpc_topology_failed_total", name, "count") == 0
        latency = figure(text, "drpc_topology_complete_latency_seconds", name, "sentences")
        assert latency is not None and latency > 0
        assert figure(text, "drpc_topology_complete_latency_seconds", name, "count") is None
        with pytest.raises(DRPCError, match="'topology' is already running"):
            server.register_plain(word_count(run, [], WordCount(str(tmp_path))))
    assert events(run)["closed"] == 1  # the server's stop killed it


def test_a_spark_batch_server_refuses_a_plain_topology(tmp_path: Path) -> None:
    server = DRPCServer(**server_options(executor="spark-batch"))
    with pytest.raises(DRPCError, match="run on the local or spark executor, not on this "):
        server.register_plain(word_count("refused", [], WordCount(str(tmp_path))))


def test_drpc_server_hosts_storm_starters_word_count_from_the_command_line() -> None:
    command = [sys.executable, "-m", "drpc.server", "--executor", "local",
               "--topology", "drpc.examples.word_count_topology:topology",
               "--topology", "drpc.examples.exclamation:topology", *EPHEMERAL_PORTS]  # fmt: skip
    with server_process(command, cwd=ROOT) as server:
        wait_until(
            lambda: (figure(metrics(server.http_port), "drpc_topology_acked_total",
                            "word-count", "spout") or 0) > 100
        )  # fmt: skip
        with DRPCClient(HOST, server.port) as drpc:
            assert drpc.execute("exclamation", "hi") == "hi!"
        listed = subprocess.run(
            [sys.executable, "-m", "drpc.topology_cli", "list", "--server",
             f"http://{HOST}:{server.http_port}", "--json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        (shown,) = json.loads(listed.stdout)
        assert (shown["name"], shown["executor"]) == ("word-count", "local")
        spout = next(c for c in shown["components"] if c["component"] == "spout")
        assert spout["acked"] > 100 and spout["complete_latency_ms"] > 0
    assert "topology 'word-count' running on the local executor" in server.text
    gone = subprocess.run(
        [sys.executable, "-m", "drpc.topology_cli", "list", "--server",
         f"http://{HOST}:{server.http_port}", "--timeout", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert gone.returncode == 1
    assert gone.stderr.startswith("drpc-topology: cannot read http://")


def test_a_remote_runner_runs_a_plain_topology_beside_its_functions(tmp_path: Path) -> None:
    run = f"runner-{id(tmp_path)}"
    plain = word_count(run, SENTENCES, WordCount(str(tmp_path))).create_topology("words")
    with running_server() as server:
        runner = RemoteRunner(
            [exclamation(), plain],
            f"{HOST}:{server.invocations_port}",
            executor="local",
            poll_interval=0.01,
        )
        with runner:
            wait_until(lambda: "exclamation" in server.functions)
            wait_until(lambda: len(set(events(run)["acked"])) == len(SENTENCES))
            with DRPCClient(HOST, server.port) as drpc:
                assert drpc.execute("exclamation", "hi") == "hi!"
            assert runner.plain is not None and runner.plain.get_topology_names() == ["words"]
        assert events(run)["closed"] == 1
