"""The command lines as a person runs them: drpc-server, drpc-client, drpc.runner."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from drpc.client.cli import main as client_main

from tests.server.helpers import HOST, exclamation, failing_topology, free_port, running_server

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(
    r"DRPC server serving (?P<functions>.+); execute \(Thrift\) on [\d.]+:(?P<port>\d+), "
    r"invocations \(Thrift\) on [\d.]+:(?P<invocations>\d+); "
    r"HTTP on http://[\d.]+:(?P<http>\d+)/drpc/"
)


def test_console_scripts_are_declared() -> None:
    scripts = {entry.name: entry.value for entry in entry_points(group="console_scripts")}
    assert scripts["drpc-server"] == "drpc.server.cli:main"
    assert scripts["drpc-client"] == "drpc.client.cli:main"
    assert scripts["drpc-runner"] == "drpc.runner:main"


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (
            "drpc.server",
            [
                "--topology",
                "--executor",
                "--master",
                "--port",
                "--timeout",
                "--acl",
                "--acl-strict",
                "--tokens",
                "--tls-cert",
                "--tls-key",
                "--tls-ca",
                "--max-frame-size",
                "--max-queue-depth",
                "--read-timeout",
                "--max-connections",
                "--transactional",
                "--state-dir",
                "--max-spout-pending",
                "--max-map-size",
            ],
        ),
        (
            "drpc.client",
            [
                "FUNCTION",
                "ARGS",
                "--servers",
                "--timeout",
                "--http",
                "--token-file",
                "--tls-ca",
                "--tls-cert",
                "--tls-key",
            ],
        ),
        ("drpc.runner", ["--servers", "--topology", "--executor", "--tls-ca", "--tls-cert"]),
    ],
)
def test_help(module: str, expected: list[str]) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for option in expected:
        assert option in shown


def test_the_server_cli_serves_the_examples_until_terminated() -> None:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "drpc.server",
            "--topology",
            "drpc.examples.reach:topology",
            "--topology",
            "drpc.examples.exclamation:topology",
            "--executor",
            "local",
            "--host",
            HOST,
            "--port",
            "0",
            "--invocations-port",
            "0",
            "--http-port",
            "0",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stderr is not None
    log: list[str] = []
    try:
        for line in server.stderr:
            log.append(line)
            if listening := LISTENING.search(line):
                break
        else:
            pytest.fail("the server exited without listening:\n" + "".join(log))
        assert listening["functions"] == "exclamation, reach"
        called = subprocess.run(
            [
                sys.executable,
                "-m",
                "drpc.client",
                "--servers",
                f"{HOST}:{listening['port']}",
                "reach",
                "foo.com/blog/1",
                "tech.backtype.com/blog/123",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert called.returncode == 0, called.stderr
        assert called.stdout.splitlines() == [
            'reach "foo.com/blog/1" => "16"',
            'reach "tech.backtype.com/blog/123" => "7"',
        ]
        url = f"http://{HOST}:{listening['http']}/drpc/exclamation/hello"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.read() == b"hello!"
    finally:
        server.send_signal(signal.SIGTERM)
        _, rest = server.communicate(timeout=30)
        log.append(rest)
    assert server.returncode == 0, "".join(log)
    assert "DRPC server stopped" in "".join(log)


def test_the_server_cli_refuses_an_unloadable_topology() -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "drpc.server", "--topology", "drpc.examples.reach:nothing_here"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "has no 'nothing_here'" in refused.stderr


@pytest.mark.parametrize(
    ("module", "arguments", "message"),
    [
        (
            "drpc.server",
            ["--transactional", "tests.transactional.faults:topology"],
            "needs --state-dir",
        ),
        (
            "drpc.server",
            ["--transactional", "drpc.examples.reach:topology", "--state-dir", "s"],
            "is not a transactional topology",
        ),
        (
            "drpc.server",
            ["--transactional", "drpc.examples.transactional_words:topology", "--state-dir", "s",
             "--max-spout-pending", "0"],
            "--max-spout-pending must be >= 1",
        ),
        ("drpc.server", ["--max-map-size", "lots"], "not a size: 'lots'"),
        ("drpc.server", ["--executor", "spark", "--slots", "0"], "--slots must be >= 1"),
        ("drpc.server", ["--executor", "spark-batch", "--slots", "2"], "--executor spark only"),
        ("drpc.runner", ["--servers", "h:1", "--topology", "drpc.examples.reach:topology",
                         "--executor", "local", "--master", "local[2]"],
         "--executor spark and spark-batch only"),
        ("drpc.server", ["--map-size", "1GiB", "--max-map-size", "64MiB"], "must be at least"),
        (
            "drpc.transactional.cli",
            ["run", "drpc.examples.transactional_words:topology", "--state-dir", "s",
             "--map-size", "4KiB"],
            "at least 65536 bytes",
        ),
    ],
)  # fmt: skip
def test_bad_transactional_flags_exit_2_naming_them(
    module: str, arguments: list[str], message: str, tmp_path: Path
) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", module, *arguments],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    assert message in refused.stderr
    assert not (tmp_path / "s").exists()  # refused before anything was created


def test_client_cli_output_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with running_server(exclamation(), failing_topology()) as server:
        servers = f"{HOST}:{server.port}"
        assert client_main(["--servers", servers, "exclamation", "hello", "a b"]) == 0
        assert capsys.readouterr().out.splitlines() == [
            'exclamation "hello" => "hello!"',
            'exclamation "a b" => "a b!"',
        ]
        assert client_main(["--servers", servers, "failing", "bad"]) == 1
        err = capsys.readouterr().err
        assert err.startswith('failing "bad" failed: FAILED_REQUEST: Request failed: step')
    assert client_main(["--servers", f"{HOST}:{free_port()}", "exclamation", "x"]) == 3
    assert "no DRPC server answered" in capsys.readouterr().err
    assert client_main(["--servers", "host:port", "exclamation", "x"]) == 2


def test_the_server_cli_exits_1_when_a_port_is_taken() -> None:
    with socket.create_server((HOST, 0)) as taken:
        refused = subprocess.run(
            [
                sys.executable,
                "-m",
                "drpc.server",
                "--executor",
                "local",
                "--host",
                HOST,
                "--port",
                str(taken.getsockname()[1]),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert refused.returncode == 1
    assert "cannot serve" in refused.stderr
