"""Exposure by default: ``make serve`` binds loopback, and a server open beyond loopback with
neither an ACL nor TLS says so in its log."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from drpc.server.acl import ACL, ACLAuthorizer
from drpc.server.exposure import exposure_warning, is_loopback

from tests.server.helpers import exclamation, running_server, server_process

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    assert exposure_warning(host, acl=False, tls=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.7", "2001:db8::7"])
def test_every_interface_and_other_addresses_are_exposed(host: str) -> None:
    assert not is_loopback(host)
    warning = exposure_warning(host, acl=False, tls=False)
    assert warning is not None
    assert warning.startswith(
        f"listening on {host or 'every interface'} with neither an ACL nor TLS"
    )
    assert "--host" in warning
    assert exposure_warning(host, acl=True, tls=False) is None
    assert exposure_warning(host, acl=False, tls=True) is None


def test_the_cli_keeps_storms_default_and_warns(tmp_path: Path) -> None:
    """``drpc-server`` without ``--host`` listens on 0.0.0.0, as Storm's server does, and warns.
    It runs in a network namespace of its own (``unshare --net``, as root), whose only
    interface is its own loopback: every interface there reaches nothing outside the test."""
    script = Path(sys.executable).parent / "drpc-server"
    command = [
        "unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", str(script),
        "--executor", "local", "--port", "0", "--invocations-port", "0", "--http-port", "0",
        "--topology", "drpc.examples.exclamation:topology",
    ]  # fmt: skip
    with server_process(command, cwd=tmp_path) as server:
        assert "execute (Thrift) on 0.0.0.0:" in server.listening[0]
    [warning] = [line for line in server.log if "neither an ACL nor TLS" in line]
    assert " WARNING drpc.server.app: listening on 0.0.0.0 with neither an ACL nor TLS" in warning


def test_a_server_on_loopback_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="drpc.server.app")
    with running_server(exclamation()):
        pass
    with running_server(exclamation(), authorizer=ACLAuthorizer(ACL({}))):
        pass
    messages = [r.getMessage() for r in caplog.records if r.name == "drpc.server.app"]
    assert any(m.startswith("DRPC server serving") for m in messages)
    assert not any("neither an ACL nor TLS" in m for m in messages)


@pytest.mark.parametrize(("variables", "host"), [([], "127.0.0.1"), (["HOST=0.0.0.0"], "0.0.0.0")])
def test_make_serve_binds_loopback_unless_told(variables: list[str], host: str) -> None:
    planned = subprocess.run(
        ["make", "--dry-run", "serve", *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    [serve] = [line for line in planned.splitlines() if "-m drpc.server" in line]
    assert f"--host {host} " in serve
