"""A runner's topology port (``drpc-runner --topology-port``): the plain topologies a runner
hosts answer ``drpc-topology list``, ``kill``, ``activate`` and ``deactivate`` and serve their
figures on ``/metrics`` over real HTTP, their commands allowed only to the ACL's
``nimbus.admins``, as on a server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from drpc.client import DRPCClient

from drpc.examples.word_count_topology import build_word_count
from drpc.runner import RemoteRunner
from drpc.runner.topology_port import TopologyPort
from drpc.topology_cli import main
from tests.server.helpers import HOST, exclamation, running_server, wait_until
from tests.server.test_topology_admin import ALICE_TOKEN, NAME, OPS_TOKEN, admins

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def spout_acked(runner: RemoteRunner) -> int:
    assert runner.plain is not None
    return runner.plain.get_topology_info(NAME).components["spout"].acked


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[tuple[RemoteRunner, TopologyPort, Path, Path]]:
    """A runner serving ``exclamation`` for a server and running storm-starter's word count,
    with a topology port whose ACL names ``ops`` an admin, and token files for ``ops`` and
    ``alice``."""
    ops, alice = tmp_path / "ops", tmp_path / "alice"
    ops.write_text(OPS_TOKEN + "\n")
    alice.write_text(ALICE_TOKEN)
    with running_server() as server:
        runner = RemoteRunner(
            [exclamation(), build_word_count(2, 2).create_topology(NAME)],
            f"{HOST}:{server.invocations_port}",
            executor="local",
            poll_interval=0.01,
        )
        authorizer, tokens = admins()
        port = TopologyPort(lambda: runner.plain, authorizer=authorizer, tokens=tokens)
        with runner, port:
            wait_until(lambda: "exclamation" in server.functions)
            wait_until(lambda: spout_acked(runner) > 0)
            with DRPCClient(HOST, server.port) as drpc:
                assert drpc.execute("exclamation", "hi") == "hi!"
            yield runner, port, ops, alice


def test_list_reads_the_figures_of_the_topologies_a_runner_hosts(
    hosted: tuple[RemoteRunner, TopologyPort, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, port, _, _ = hosted
    assert port.url.startswith(f"http://{HOST}:") and port.port > 0
    assert main(["list", "--server", port.url, "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert (shown["name"], shown["executor"]) == (NAME, "local")
    spout = next(c for c in shown["components"] if c["component"] == "spout")
    assert spout["acked"] > 0 and spout["complete_latency_ms"] > 0
    with urllib.request.urlopen(f"{port.url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    acked = re.search(
        rf'^drpc_topology_acked_total\{{component="spout",topology="{NAME}"\}} (\S+)$',
        text,
        re.MULTILINE,
    )
    assert acked is not None and float(acked[1]) > 0
    with urllib.request.urlopen(f"{port.url}/health", timeout=30) as answer:
        assert json.loads(answer.read()) == {"status": "ok", "topologies": [NAME]}


def test_an_admin_deactivates_activates_and_kills_a_runner_s_topology(
    hosted: tuple[RemoteRunner, TopologyPort, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    runner, port, ops, _ = hosted
    assert main(["deactivate", NAME, "--server", port.url, "--token-file", str(ops)]) == 0
    assert capsys.readouterr().out == f"{NAME} is inactive\n"
    assert main(["activate", NAME, "--server", port.url, "--token-file", str(ops)]) == 0
    assert capsys.readouterr().out == f"{NAME} is active\n"
    kill = ["kill", NAME, "-w", "0", "--server", port.url, "--token-file", str(ops)]
    assert main(kill) == 0
    assert capsys.readouterr().out == f"killed {NAME} (after 0 s for its trees in flight)\n"
    assert runner.plain is not None and runner.plain.get_topology_names() == []
    assert main(["list", "--server", port.url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_anyone_but_an_admin_is_refused_and_the_runner_s_topology_keeps_running(
    hosted: tuple[RemoteRunner, TopologyPort, Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner, port, _, alice = hosted
    monkeypatch.delenv("DRPC_TOKEN", raising=False)
    assert main(["kill", NAME, "-w", "0", "--server", port.url, "--token-file", str(alice)]) == 1
    assert main(["deactivate", NAME, "--server", port.url]) == 1  # anonymous
    assert capsys.readouterr().err.splitlines() == [
        f"drpc-topology: kill {NAME!r} at {port.url}: "
        "AuthorizationException: DRPC request 'killTopology' for 'alice' user is not authorized",
        f"drpc-topology: deactivate {NAME!r} at {port.url}: "
        "AuthorizationException: DRPC request 'deactivate' for 'anonymous' user is not authorized",
    ]
    before = spout_acked(runner)
    wait_until(lambda: spout_acked(runner) > before)  # still running, still active


def test_a_runner_without_an_acl_lets_nobody_kill(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runner = RemoteRunner(
        [build_word_count(2, 2).create_topology(NAME)], f"{HOST}:1", executor="local"
    )
    with runner, TopologyPort(lambda: runner.plain) as port:
        assert main(["kill", NAME, "-w", "0", "--server", port.url]) == 1
        assert capsys.readouterr().err.endswith(
            "AuthorizationException: DRPC request 'killTopology' for 'anonymous' user is not "
            "authorized: this runner has no ACL; list who may under nimbus.admins in an --acl "
            "file\n"
        )
        assert runner.plain is not None and runner.plain.get_topology_names() == [NAME]


def test_drpc_runner_serves_topology_commands_from_the_command_line(tmp_path: Path) -> None:
    acl, tokens, ops = tmp_path / "acl.json", tmp_path / "tokens.json", tmp_path / "ops"
    acl.write_text(json.dumps({"drpc.authorizer.acl": {}, "nimbus.admins": ["ops"]}))
    tokens.write_text(json.dumps({"ops": OPS_TOKEN}))
    ops.write_text(OPS_TOKEN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with running_server() as server:
        runner = subprocess.Popen(
            [sys.executable, "-m", "drpc.runner", "--executor", "local",
             "--servers", f"{HOST}:{server.invocations_port}", "--poll-interval", "0.02",
             "--topology", "drpc.examples.word_count_topology:topology",
             "--topology", "drpc.examples.exclamation:topology",
             "--topology-port", "0", "--acl", str(acl), "--tokens", str(tokens)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(runner.stdout or ()), daemon=True)
        reader.start()
        try:
            wait_until(lambda: "topology commands and figures at http://" in "".join(lines))
            found = re.search(r"topology commands and figures at (http://\S+)", "".join(lines))
            assert found is not None
            url = found[1]
            wait_until(lambda: "exclamation" in server.functions)
            listed = subprocess.run(
                [sys.executable, "-m", "drpc.topology_cli", "list", "--server", url, "--json"],
                capture_output=True, text=True, timeout=60, env=env,
            )  # fmt: skip
            assert listed.returncode == 0, listed.stderr
            assert [shown["name"] for shown in json.loads(listed.stdout)] == ["word-count"]
            killed = subprocess.run(
                [sys.executable, "-m", "drpc.topology_cli", "kill", "word-count", "-w", "0",
                 "--server", url, "--token-file", str(ops)],
                capture_output=True, text=True, timeout=60, env=env,
            )  # fmt: skip
            assert killed.returncode == 0, killed.stderr
            with DRPCClient(HOST, server.port) as drpc:  # its functions go on
                assert drpc.execute("exclamation", "ho") == "ho!"
        finally:
            runner.send_signal(signal.SIGTERM)
            code = runner.wait(60)
            reader.join(10)
    assert code == 0, "".join(lines)
    assert "killed topology 'word-count'" in "".join(lines)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--acl", "acl.json"], "--acl needs --topology-port"),
        (["--topology-host", "0.0.0.0"], "--topology-host needs --topology-port"),
        (["--topology-port", "70000"], "argument --topology-port: must be a port number 0-65535"),
        (["--topology-port", "0", "--acl", "missing.json"], "missing.json"),
    ],
)
def test_a_topology_port_mistake_is_one_line_and_exit_2(
    arguments: list[str], message: str, tmp_path: Path
) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "drpc.runner", "--servers", f"{HOST}:1",
         "--topology", "drpc.examples.word_count_topology:topology", *arguments],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert message in refused.stderr
    assert len(refused.stderr.splitlines()) == 1, refused.stderr


def test_a_topology_port_needs_a_plain_topology(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "drpc.runner", "--servers", f"{HOST}:1",
         "--topology", "drpc.examples.exclamation:topology", "--topology-port", "0"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "--topology-port needs a plain topology among --topology" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
