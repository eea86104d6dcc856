"""The command lines as a person runs them: drpc-server, drpc-client, drpc.runner."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from drpc.client.cli import main as client_main
from drpc.server.cli import main as server_main

from tests.server.helpers import (
    EPHEMERAL_PORTS,
    HOST,
    exclamation,
    failing_topology,
    free_port,
    running_server,
    server_process,
)

ROOT = Path(__file__).resolve().parents[2]


def test_console_scripts_are_declared() -> None:
    scripts = {entry.name: entry.value for entry in entry_points(group="console_scripts")}
    assert scripts["drpc-server"] == "drpc.server.cli:main"
    assert scripts["drpc-client"] == "drpc.client.cli:main"
    assert scripts["drpc-runner"] == "drpc.runner.cli:main"
    assert scripts["drpc-transactional"] == "drpc.transactional.cli:main"
    assert scripts["drpc-topology"] == "drpc.topology_cli:main"
    assert scripts["drpc-sparse"] == "drpc.sparse_cli:main"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ["drpc.server"],
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
                "--version-retention",
                "--http-token-auth",
                "the working directory first",
            ],
        ),
        (
            ["drpc.client"],
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
                "exit status:\n  0  every call returned a result\n  1  a call failed",
                "2  a usage error",
                "3  no server could be reached",
            ],
        ),
        (
            ["drpc.runner"],
            [
                "usage: drpc-runner",
                "--servers",
                "--topology",
                "--executor",
                "--tls-ca",
                "--tls-cert",
                "the working directory first",
            ],
        ),
        (["drpc.transactional.cli", "run"], ["--state-dir", "the working directory first"]),
    ],
    ids=["server", "client", "runner", "transactional"],
)
def test_help(command: list[str], expected: list[str]) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", *command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    shown_flat = " ".join(shown.split())
    for option in expected:
        assert option in shown or " ".join(option.split()) in shown_flat, option


def test_the_server_cli_serves_the_examples_until_terminated() -> None:
    command = [sys.executable, "-m", "drpc.server", "--topology", "drpc.examples.reach:topology",
               "--topology", "drpc.examples.exclamation:topology", "--executor", "local",
               *EPHEMERAL_PORTS]  # fmt: skip
    with server_process(command, cwd=ROOT) as server:
        assert server.listening["functions"] == "exclamation, reach"
        called = subprocess.run(
            [sys.executable, "-m", "drpc.client", "--servers",
             f"{HOST}:{server.listening['port']}", "reach", "foo.com/blog/1",
             "tech.backtype.com/blog/123"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert called.returncode == 0, called.stderr
        assert called.stdout.splitlines() == [
            'reach "foo.com/blog/1" => "16"',
            'reach "tech.backtype.com/blog/123" => "7"',
        ]
        url = f"http://{HOST}:{server.listening['http']}/drpc/exclamation/hello"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.read() == b"hello!"
    assert "DRPC server stopped" in server.text


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
        ("drpc.server", ["--version-retention", "0"], "must be a positive number of seconds"),
        (
            "drpc.transactional.cli",
            ["run", "drpc.examples.transactional_words:topology", "--state-dir", "s",
             "--version-retention", "soon"],
            "not a number of seconds: 'soon'",
        ),
        (
            "drpc.transactional.cli",
            ["run", "drpc.examples.transactional_words:topology", "--state-dir", "s",
             "--checkpoint-dir", "/shared/drpc"],
            "--checkpoint-dir: checkpoint_dir '/shared/drpc': give a file:// or s3:// URI",
        ),
        (
            "drpc.server",
            ["--transactional", "drpc.examples.transactional_words:topology", "--state-dir", "s",
             "--checkpoint-dir", "ftp://host/drpc"],
            "--checkpoint-dir: checkpoint_dir 'ftp://host/drpc'",
        ),
        (
            "drpc.transactional.cli",
            ["run", "drpc.examples.transactional_words:topology", "--state-dir", "s",
             "--executor", "spark", "--standby-replicas", "1"],
            "--standby-replicas needs --checkpoint-dir: standbys apply its deltas",
        ),
        (
            "drpc.transactional.cli",
            ["run", "drpc.examples.transactional_words:topology", "--state-dir", "s",
             "--checkpoint-dir", "file:///shared/drpc", "--standby-replicas", "1"],
            "--standby-replicas needs --executor spark (standbys live on other resident "
            "tasks), not local",
        ),
        (
            "drpc.server",
            ["--transactional", "drpc.examples.transactional_words:topology", "--state-dir", "s",
             "--standby-replicas", "-1"],
            "--standby-replicas must be >= 0",
        ),
        ("drpc.server", ["--executor", "spark", "--slots", "0"], "--slots must be >= 1"),
        ("drpc.server", ["--executor", "spark-batch", "--slots", "2"], "--executor spark only"),
        ("drpc.runner", ["--servers", "h:1", "--topology", "drpc.examples.reach:topology",
                         "--executor", "local", "--master", "local[2]"],
         "--executor spark and spark-batch only"),
        ("drpc.runner", ["--servers", "h:1", "--topology", "drpc.examples.reach:topology",
                         "--executor", "local", "--one-copy"],
         "--request-path and --one-copy apply to --executor spark only"),
        ("drpc.runner", ["--servers", "h:1", "--topology", "drpc.examples.reach:topology",
                         "--executor", "spark", "--request-path", "driver", "--one-copy"],
         "--one-copy applies to the tasks path"),
        ("drpc.runner", ["--servers", "h:1", "--topology", "drpc.examples.reach:topology",
                         "--request-path", "workers"],
         "argument --request-path: invalid choice: 'workers'"),
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
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
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
        http_port = f"{HOST}:{server.http_port}"
        assert client_main(["--servers", http_port, "exclamation", "x"]) == 1
        assert capsys.readouterr().err.splitlines() == [
            f'exclamation "x" failed: {http_port} answered in HTTP: it is an HTTP port, not a '
            "Thrift one (a drpc server serves Thrift execute calls on 3772, invocations on 3773 "
            "and HTTP on 3774 by default; call an HTTP port with HTTPDRPCClient or drpc-client "
            "--http URL)"
        ]
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


USER_MODULE = """
from drpc import BaseBasicBolt, Fields, LinearDRPCTopologyBuilder


class Shout(BaseBasicBolt):
    def execute(self, tuple, collector):
        collector.emit([tuple[0], tuple[1].upper()])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "result"))


shout = LinearDRPCTopologyBuilder("shout")
shout.add_bolt(Shout(), 2)


def needs(count):
    return shout
"""


def _script(name: str) -> str:
    """An installed console script of this environment, as a user runs it."""
    return str(Path(sys.executable).parent / name)


def _as_a_user(directory: Path) -> dict[str, str]:
    """The environment of a user in ``directory``: nothing on PYTHONPATH, ``mytopos.py``
    (a module of their own) beside them."""
    (directory / "mytopos.py").write_text(USER_MODULE)
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


@pytest.mark.parametrize(
    ("script", "arguments", "message"),
    [
        (
            "drpc-server",
            ["--topology", "drpc.examples.transactional_words:topology"],
            "drpc.examples.transactional_words:topology is a transactional topology, not a DRPC "
            "function: run it with --transactional (drpc-server) or drpc-transactional run",
        ),
        ("drpc-server", ["--topology", "mytopos:needs"], "mytopos:needs needs arguments (count)"),
        ("drpc-server", ["--log-level", "verbose"], "unknown log level 'verbose'"),
        (
            "drpc-server",
            ["--max-connections", "64", "--max-connections-per-address", "64"],
            "max_connections_per_address (64) must be below max_connections (64)",
        ),
        ("drpc-server", ["--max-connections", "0"], "max_connections must be positive, got 0"),
        ("drpc-client", ["--log-level", "verbose", "f", "x"], "unknown log level 'verbose'"),
        (
            "drpc-runner",
            ["--servers", f"{HOST}:1", "--topology", "mytopos:needs"],
            "mytopos:needs needs arguments (count)",
        ),
        (
            "drpc-transactional",
            ["run", "mytopos:shout", "--state-dir", "s"],
            "mytopos:shout is not a transactional topology",
        ),
        (
            "drpc-transactional",
            ["status", "--state-dir", "typo"],
            "state directory 'typo' does not exist",
        ),
        ("drpc-topology", ["run", "mytopos:needs"], "mytopos:needs needs arguments (count)"),
        (
            "drpc-topology",
            ["run", "mytopos:shout"],
            "mytopos:shout serves DRPC function 'shout': serve it with drpc-server",
        ),
        (
            "drpc-topology",
            ["list", "--server", "localhost:3774"],
            "--server must be an http:// or https:// URL, got 'localhost:3774'",
        ),
        (
            "drpc-topology",
            ["run", "mytopos:shout", "--seconds", "0"],
            "argument --seconds: must be a positive number of seconds, got '0'",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and value.startswith("drpc-") else None,
)
def test_a_cli_mistake_is_one_line_and_exit_2(
    script: str, arguments: list[str], message: str, tmp_path: Path
) -> None:
    refused = subprocess.run(
        [_script(script), *arguments],
        cwd=tmp_path,
        env=_as_a_user(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith(f"{script}")
    assert ": error: " in lines[0]
    assert message in lines[0]
    assert lines[0].endswith("--help)")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mytopos.py"]  # nothing made


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["--executor", "nope"],
            "argument --executor: invalid choice: 'nope' "
            "(choose from 'local', 'spark', 'spark-batch')",
        ),
        (["--http-token-auth"], "--http-token-auth needs --tls-ca and --tokens"),
        (["--tls-ca", "ca.pem"], "--tls-key and --tls-ca need --tls-cert"),
        (
            ["--executor", "local", "--request-path", "driver"],
            "--request-path applies to --executor spark only",
        ),
    ],
)
def test_the_server_cli_refuses_flags_that_cannot_work_together(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # In-process (the one-line form is shown on real processes above): nothing starts.
    with pytest.raises(SystemExit) as exited:
        server_main(arguments)
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"drpc-server: error: {message} (see drpc-server --help)\n"


def test_the_installed_server_serves_a_topology_module_beside_the_user(tmp_path: Path) -> None:
    command = [_script("drpc-server"), "--topology", "mytopos:shout", "--executor", "local",
               *EPHEMERAL_PORTS]  # fmt: skip
    with server_process(command, cwd=tmp_path, env=_as_a_user(tmp_path)) as server:
        assert server.listening["functions"] == "shout"
        url = f"http://{HOST}:{server.listening['http']}/drpc/shout/hello"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.read() == b"HELLO"
    assert "neither an ACL nor TLS" not in server.text  # 127.0.0.1: nothing to warn about


def test_slots_go_to_served_functions_and_not_to_a_hosted_transactional_run() -> None:
    from drpc.server.cli import _parser

    from drpc.hosting import hosting_setup, job_options

    parser = _parser()
    args = parser.parse_args(["--executor", "spark", "--slots", "2", "--master", "local[2]"])
    _, options = hosting_setup(parser, args)
    assert options["slots"] == 2
    options["request_path"] = "driver"  # what --request-path adds, for served functions only
    transactional = job_options(options)
    assert "slots" not in transactional and "request_path" not in transactional
    assert transactional["master"] == "local[2]"
    assert transactional == {
        name: options[name] for name in options if name not in ("slots", "request_path")
    }
