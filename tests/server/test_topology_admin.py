"""Storm's Nimbus commands against a running server: ``drpc-topology kill``, ``activate`` and
``deactivate`` over real HTTP, allowed only to the ACL's ``nimbus.admins`` (the caller named
by its bearer token), refused to everyone on a server without an ACL."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from drpc.server import DRPCServer
from drpc.server.acl import ACL, ACLAuthorizer
from drpc.server.identity import TokenTable
from drpc.server.limits import Limits

from drpc.examples.word_count_topology import build_word_count
from drpc.topology_cli import main
from tests.server.helpers import HOST, running_server, wait_until

pytestmark = pytest.mark.timeout(120)

OPS_TOKEN = "ops-token-0123456789abcdef"
ALICE_TOKEN = "alice-token-0123456789abcdef"
NAME = "words"


def spout_emitted(server: DRPCServer) -> int:
    assert server.plain is not None
    return server.plain.get_topology_info(NAME).components["spout"].emitted


def emitting(server: DRPCServer, seconds: float = 0.3) -> bool:
    """Whether the spout emitted anything over ``seconds``."""
    before = spout_emitted(server)
    time.sleep(seconds)
    return spout_emitted(server) > before


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[DRPCServer, Path, Path]]:
    """A server running storm-starter's word count whose ACL names ``ops`` an admin, with
    token files for ``ops`` and ``alice``."""
    authorizer, tokens = admins()
    ops, alice = tmp_path / "ops", tmp_path / "alice"
    ops.write_text(OPS_TOKEN + "\n")
    alice.write_text(ALICE_TOKEN)
    with running_server(tokens=tokens, authorizer=authorizer) as server:
        server.register_plain(build_word_count(2, 2).create_topology(NAME))
        wait_until(lambda: spout_emitted(server) > 0)
        yield server, ops, alice


def admins() -> tuple[ACLAuthorizer, TokenTable]:
    """An ACL naming ``ops`` the one admin, and tokens for ``ops`` and ``alice``."""
    authorizer = ACLAuthorizer(
        ACL.from_mapping({"drpc.authorizer.acl": {}, "nimbus.admins": ["ops"]})
    )
    return authorizer, TokenTable({"ops": OPS_TOKEN, "alice": ALICE_TOKEN})


def refused_kill(server: DRPCServer, name: str, wait: str = "0") -> tuple[int, dict[str, str]]:
    """The status and body of an ops kill of ``name`` the server refuses."""
    request = urllib.request.Request(
        f"http://{HOST}:{server.http_port}/api/topologies/{name}/kill?wait_secs={wait}",
        method="POST",
        headers={"Authorization": f"Bearer {OPS_TOKEN}"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    return refused.value.code, json.loads(refused.value.read())


def command(server: DRPCServer, *argv: str) -> list[str]:
    return [*argv, "--server", f"http://{HOST}:{server.http_port}"]


def test_an_admin_deactivates_activates_and_kills_a_topology(
    guarded: tuple[DRPCServer, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    server, ops, _ = guarded
    assert main(command(server, "deactivate", NAME, "--token-file", str(ops))) == 0
    assert capsys.readouterr().out == f"{NAME} is inactive\n"
    time.sleep(0.2)  # a tuple being emitted as the command arrived
    assert not emitting(server)
    assert main(command(server, "activate", NAME, "--token-file", str(ops))) == 0
    assert capsys.readouterr().out == f"{NAME} is active\n"
    wait_until(lambda: emitting(server))
    began = time.monotonic()
    assert main(command(server, "kill", NAME, "-w", "0.5", "--token-file", str(ops))) == 0
    assert time.monotonic() - began >= 0.5  # it answers once the topology stopped
    assert capsys.readouterr().out == f"killed {NAME} (after 0.5 s for its trees in flight)\n"
    assert server.plain is not None and server.plain.get_topology_names() == []
    assert main(command(server, "list", "--json")) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_anyone_but_an_admin_is_refused_and_the_topology_keeps_running(
    guarded: tuple[DRPCServer, Path, Path],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, _, alice = guarded
    monkeypatch.delenv("DRPC_TOKEN", raising=False)
    with caplog.at_level("INFO", logger="drpc.audit"):
        assert main(command(server, "kill", NAME, "-w", "0", "--token-file", str(alice))) == 1
        assert main(command(server, "deactivate", NAME)) == 1  # anonymous
        monkeypatch.setenv("DRPC_TOKEN", OPS_TOKEN)  # the token from the environment
        assert main(command(server, "kill", "nonesuch", "-w", "0")) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"drpc-topology: kill {NAME!r} at http://{HOST}:{server.http_port}: "
        "AuthorizationException: DRPC request 'killTopology' for 'alice' user is not authorized",
        f"drpc-topology: deactivate {NAME!r} at http://{HOST}:{server.http_port}: "
        "AuthorizationException: DRPC request 'deactivate' for 'anonymous' user is not authorized",
        f"drpc-topology: kill 'nonesuch' at http://{HOST}:{server.http_port}: "
        "NotAliveError: no topology named 'nonesuch' is running",
    ]
    audited = [record.getMessage() for record in caplog.records if record.name == "drpc.audit"]
    assert f"denied killTopology of {NAME!r} for user 'alice'" in audited
    assert f"denied deactivate of {NAME!r} for user 'anonymous'" in audited
    assert "allowed killTopology of 'nonesuch' for user 'ops'" in audited
    assert emitting(server)  # still running, still active


def test_a_bad_wait_is_refused_before_anything_happens(
    guarded: tuple[DRPCServer, Path, Path],
) -> None:
    server, _, _ = guarded
    for wait in ("-1", "soon", "nan", "inf"):
        code, body = refused_kill(server, NAME, wait)
        assert code == 400
        assert body["errorMessage"] == f"wait_secs must be a number of seconds >= 0, got {wait!r}"
    assert emitting(server)


def test_a_server_without_an_acl_lets_nobody_kill(capsys: pytest.CaptureFixture[str]) -> None:
    with running_server() as server:
        server.register_plain(build_word_count(2, 2).create_topology(NAME))
        assert main(command(server, "kill", NAME, "-w", "0")) == 1
        assert capsys.readouterr().err.endswith(
            "AuthorizationException: DRPC request 'killTopology' for 'anonymous' user is not "
            "authorized: this server has no ACL; list who may under nimbus.admins in an --acl "
            "file\n"
        )
        wait_until(lambda: emitting(server))


def test_a_cli_mistake_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["kill", NAME, "--server", "localhost:3774"],
        ["kill", NAME, "-w", "-3"],
        ["activate", NAME, "--token-file", "/nonexistent/token"],
    ):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_topology_name_over_max_function_name_is_refused_before_the_acl(tmp_path: Path) -> None:
    authorizer, tokens = admins()
    with running_server(
        tokens=tokens, authorizer=authorizer, limits=Limits(max_function_name=16)
    ) as server:
        server.register_plain(build_word_count(2, 2).create_topology(NAME))
        assert refused_kill(server, "n" * 16) == (
            404,
            {
                "error": "NotAliveError",
                "errorMessage": f"no topology named {'n' * 16!r} is running",
            },
        )
        assert refused_kill(server, "n" * 17) == (
            400,
            {
                "error": "FAILED_REQUEST",
                "errorMessage": "a topology name of 17 bytes exceeds the limit of 16 "
                "(max_function_name)",
            },
        )
        assert emitting(server)
