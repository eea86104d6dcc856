"""TLS on every port: who gets in, who is refused, and the command lines with every
security flag (server, runner and client over TLS, HTTP with a token file)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from drpc.client import (
    AsyncDRPCClient,
    DRPCClient,
    DRPCConnectionError,
    DRPCInvocationsClient,
    HTTPDRPCClient,
    TLSSettings,
)
from drpc.server import DRPCServer, ServerThread
from drpc.server.acl import ACL, ACLAuthorizer

from drpc.protocol.tls import TLSConfigError, server_context
from drpc.runner import RemoteRunner
from tests.server.certs import PKI
from tests.server.helpers import (
    HOST,
    closed_by_server,
    exclamation,
    raw_connection,
    server_options,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tls_server(pki: PKI) -> Iterator[DRPCServer]:
    server = DRPCServer(
        **server_options(), ssl_context=server_context(pki.server_cert, pki.server_key, pki.ca)
    )
    server.register(exclamation())
    with ServerThread(server) as running:
        yield running


def _as(pki: PKI, user: str, ca: str | None = None) -> TLSSettings:
    cert, key = pki.clients[user]
    return TLSSettings(ca=ca or pki.ca, cert=cert, key=key)


def test_a_verified_client_is_served_on_every_port(tls_server: DRPCServer, pki: PKI) -> None:
    with DRPCClient(HOST, tls_server.port, timeout=10, tls=_as(pki, "alice")) as client:
        assert client.execute("exclamation", "tls") == "tls!"
    with DRPCInvocationsClient(
        HOST, tls_server.invocations_port, timeout=10, tls=_as(pki, "runner")
    ) as invocations:
        assert invocations.fetch_request("nothing") is None
    with HTTPDRPCClient(
        f"https://{HOST}:{tls_server.http_port}", tls=_as(pki, "bob"), timeout=10
    ) as http:
        assert http.execute("exclamation", "web") == "web!"


async def test_the_async_client_speaks_tls(tls_server: DRPCServer, pki: PKI) -> None:
    async with AsyncDRPCClient(HOST, tls_server.port, timeout=10, tls=_as(pki, "alice")) as drpc:
        assert await drpc.execute("exclamation", "a") == "a!"


@pytest.mark.parametrize("who", ["no certificate", "a foreign CA's certificate"])
def test_a_client_without_a_trusted_certificate_is_refused(
    tls_server: DRPCServer, pki: PKI, who: str
) -> None:
    if who == "no certificate":
        settings = TLSSettings(ca=pki.ca)
    else:
        settings = TLSSettings(ca=pki.ca, cert=pki.foreign_client[0], key=pki.foreign_client[1])
    with (
        pytest.raises(DRPCConnectionError),
        DRPCClient(HOST, tls_server.port, timeout=10, tls=settings) as client,
    ):
        client.execute("exclamation", "x")
    with DRPCClient(HOST, tls_server.port, timeout=10, tls=_as(pki, "alice")) as client:
        assert client.execute("exclamation", "still") == "still!"


def test_a_client_refuses_a_server_its_ca_did_not_sign(tls_server: DRPCServer, pki: PKI) -> None:
    with (
        pytest.raises(DRPCConnectionError, match="CERTIFICATE_VERIFY_FAILED"),
        DRPCClient(HOST, tls_server.port, timeout=10, tls=_as(pki, "alice", pki.foreign_ca)) as c,
    ):
        c.execute("exclamation", "x")


def test_plain_bytes_on_a_tls_port_close_that_connection_only(
    tls_server: DRPCServer, pki: PKI
) -> None:
    with raw_connection(tls_server.port) as plain:
        plain.sendall(b"\x00\x00\x00\x10" + b"x" * 16)
        assert closed_by_server(plain) == b""
    with DRPCClient(HOST, tls_server.port, timeout=10, tls=_as(pki, "alice")) as client:
        assert client.execute("exclamation", "ok") == "ok!"


def test_unusable_tls_files_are_named(pki: PKI, tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match=r"missing\.pem"):
        server_context(str(tmp_path / "missing.pem"))
    with pytest.raises(TLSConfigError, match=r"client-alice\.key"):
        server_context(pki.server_cert, pki.clients["alice"][1])  # key of another certificate


def test_a_runner_over_tls_serves_as_its_certificates_user(pki: PKI) -> None:
    entry = {"client.users": ["alice"], "invocation.user": "runner"}
    acl = ACL.from_mapping({"drpc.authorizer.acl": {"exclamation": entry}})
    server = DRPCServer(
        **server_options(),
        authorizer=ACLAuthorizer(acl),
        ssl_context=server_context(pki.server_cert, pki.server_key, pki.ca),
    )
    with ServerThread(server) as running:
        target = f"{HOST}:{running.invocations_port}"
        options = {"executor": "local", "poll_interval": 0.01, "reconnect_interval": 0.05}
        with RemoteRunner([exclamation()], target, tls=_as(pki, "runner"), **options) as runner:
            wait_until(lambda: runner.invocations.connected[target])
            with DRPCClient(HOST, running.port, timeout=20, tls=_as(pki, "alice")) as client:
                assert client.execute("exclamation", "r") == "r!"
        with RemoteRunner([exclamation()], target, tls=_as(pki, "mallory"), **options) as other:
            time.sleep(0.3)  # several refused polls
            assert not other.invocations.connected[target]


LISTENING = re.compile(
    r"execute \(Thrift\) on [\d.]+:(?P<port>\d+), invocations \(Thrift\) on "
    r"[\d.]+:(?P<invocations>\d+); HTTP on https://[\d.]+:(?P<http>\d+)/drpc/"
)


@pytest.mark.slow
def test_the_command_lines_with_every_security_flag(pki: PKI, tmp_path: Path) -> None:
    acl = tmp_path / "acl.yaml"
    acl.write_text(
        "drpc.authorizer.acl:\n  exclamation: {client.users: [alice], invocation.user: runner}\n"
    )
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("alice: alice-token-0123456789\nmallory: mallory-token-0123456789\n")
    (tmp_path / "alice.token").write_text("alice-token-0123456789\n")
    (tmp_path / "mallory.token").write_text("mallory-token-0123456789\n")
    python = [sys.executable, "-m"]
    server = subprocess.Popen(
        [*python, "server", "--executor", "local", "--host", HOST, "--port", "0",
         "--invocations-port", "0", "--http-port", "0", "--acl", str(acl), "--acl-strict",
         "--tokens", str(tokens), "--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
         "--tls-ca", pki.ca, "--runner-liveness", "5", "--max-queue-depth", "100"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stderr is not None
    log: list[str] = []
    runner = None
    try:
        for line in server.stderr:
            log.append(line)
            if listening := LISTENING.search(line):
                break
        else:
            pytest.fail("the server exited without listening:\n" + "".join(log))
        runner_cert, runner_key = pki.clients["runner"]
        runner = subprocess.Popen(
            [*python, "drpc.runner", "--servers", f"{HOST}:{listening['invocations']}",
             "--topology", "drpc.examples.exclamation:topology", "--executor", "local",
             "--tls-ca", pki.ca, "--tls-cert", runner_cert, "--tls-key", runner_key],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        alice_cert, alice_key = pki.clients["alice"]

        def client(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*python, "client", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
            )

        thrift = ["--servers", f"{HOST}:{listening['port']}", "--tls-ca", pki.ca]
        alice = [*thrift, "--tls-cert", alice_cert, "--tls-key", alice_key, "--timeout", "20"]
        deadline = time.monotonic() + 30
        while (called := client(*alice, "exclamation", "cli")).returncode != 0:
            assert "is not served" in called.stderr, called.stderr  # the runner is starting
            assert time.monotonic() < deadline, called.stderr
            time.sleep(0.2)
        assert called.stdout == 'exclamation "cli" => "cli!"\n'
        # With --tls-ca the HTTP port wants a certificate too (bob's); the token names the user.
        bob_cert, bob_key = pki.clients["bob"]
        https = ["--http", f"https://{HOST}:{listening['http']}", "--tls-ca", pki.ca,
                 "--tls-cert", bob_cert, "--tls-key", bob_key]  # fmt: skip
        called = client(*https, "--token-file", str(tmp_path / "alice.token"), "exclamation", "t")
        assert (called.returncode, called.stdout) == (0, 'exclamation "t" => "t!"\n')
        called = client(*https, "--token-file", str(tmp_path / "mallory.token"), "exclamation", "t")
        assert called.returncode == 1
        assert "DRPC request 'execute' for 'mallory' user is not authorized" in called.stderr
        called = client(*thrift, "exclamation", "no certificate")
        assert called.returncode == 3  # the TLS handshake is refused
    finally:
        if runner is not None:
            runner.send_signal(signal.SIGTERM)
            runner.wait(30)
        server.send_signal(signal.SIGTERM)
        _, rest = server.communicate(timeout=30)
        log.append(rest)
    assert server.returncode == 0, "".join(log)
    text = "".join(log)
    assert "allowed execute of 'exclamation' for user 'alice'" in text
    assert "denied execute of 'exclamation' for user 'mallory'" in text
    assert "allowed fetchRequest of 'exclamation' for user 'runner'" in text
