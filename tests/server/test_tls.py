"""TLS on every port: who gets in, who is refused (an HTTP caller told what is missing), and
the command lines with every security flag (server, runner and client over TLS, HTTP with a
token file)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from drpc.client import (
    AsyncDRPCClient,
    AuthorizationException,
    DRPCClient,
    DRPCConnectionError,
    DRPCInvocationsClient,
    HTTPDRPCClient,
    TLSSettings,
)
from drpc.server import DRPCServer, ServerThread
from drpc.server.acl import ACL, ACLAuthorizer
from drpc.server.identity import TokenTable

from drpc.protocol.tls import TLSConfigError, server_context
from drpc.runner import RemoteRunner
from tests.server.certs import PKI
from tests.server.helpers import (
    EPHEMERAL_PORTS,
    HOST,
    closed_by_server,
    exclamation,
    raw_connection,
    server_options,
    server_process,
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


ALICE_TOKEN = "alice-token-0123456789"


@contextmanager
def certificates_on_thrift(pki: PKI, http_credentials: str) -> Iterator[DRPCServer]:
    """Thrift requires client certificates; the HTTP port asks for one without requiring
    it in the handshake, and requires ``http_credentials`` itself."""
    server = DRPCServer(
        **server_options(),
        ssl_context=server_context(pki.server_cert, pki.server_key, pki.ca),
        http_ssl_context=server_context(
            pki.server_cert, pki.server_key, pki.ca, require_client_cert=False
        ),
        http_credentials=http_credentials,
        tokens=TokenTable({"alice": ALICE_TOKEN}),
    )
    server.register(exclamation())
    with ServerThread(server) as running:
        yield running


def _http_status(server: DRPCServer, path: str, pki: PKI) -> tuple[int, dict[str, str]]:
    """GET ``path`` over HTTPS presenting no certificate and no token."""
    context = TLSSettings(ca=pki.ca).client_context()
    url = f"https://{HOST}:{server.http_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10, context=context) as response:
            return response.status, {}
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_an_http_caller_without_a_certificate_is_told_the_server_requires_one(pki: PKI) -> None:
    required = "this server requires a client certificate"
    with certificates_on_thrift(pki, "certificate") as server:
        url = f"https://{HOST}:{server.http_port}"
        token_only = HTTPDRPCClient(url, token=ALICE_TOKEN, tls=TLSSettings(ca=pki.ca), timeout=10)
        with token_only, pytest.raises(AuthorizationException) as refused:
            token_only.execute("exclamation", "x")
        assert refused.value.msg == required
        for path in ("/drpc/exclamation/x", "/health", "/metrics", "/"):  # every endpoint
            assert _http_status(server, path, pki) == (
                401,
                {"error": "AuthorizationException", "errorMessage": required},
            ), path
        long_name = "n" * 257  # refused before anything looks at it, credentials included
        assert _http_status(server, f"/drpc/{long_name}/x", pki) == (
            400,
            {
                "error": "FAILED_REQUEST",
                "errorMessage": "a function name of 257 bytes exceeds the limit of 256 "
                "(max_function_name)",
            },
        )
        with HTTPDRPCClient(url, tls=_as(pki, "bob"), timeout=10) as bob:
            assert bob.execute("exclamation", "web") == "web!"
        metrics = server.metrics.exposition().decode()
        assert 'drpc_requests_total{function="exclamation",outcome="unauthorized"} 2.0' in metrics


def test_http_token_auth_lets_a_token_stand_in_for_a_certificate_on_http_only(pki: PKI) -> None:
    with certificates_on_thrift(pki, "certificate-or-token") as server:
        url = f"https://{HOST}:{server.http_port}"
        with HTTPDRPCClient(url, token=ALICE_TOKEN, tls=TLSSettings(ca=pki.ca), timeout=10) as c:
            assert c.execute("exclamation", "token") == "token!"
        assert _http_status(server, "/health", pki) == (
            401,
            {
                "error": "AuthorizationException",
                "errorMessage": "this server requires a client certificate or a bearer token",
            },
        )
        wrong = HTTPDRPCClient(url, token="x" * 20, tls=TLSSettings(ca=pki.ca), timeout=10)
        with wrong, pytest.raises(AuthorizationException, match="the bearer token is not valid"):
            wrong.execute("exclamation", "x")
        with (
            pytest.raises(DRPCConnectionError),
            DRPCClient(HOST, server.port, timeout=10, tls=TLSSettings(ca=pki.ca)) as no_cert,
        ):
            no_cert.execute("exclamation", "x")
        with DRPCClient(HOST, server.port, timeout=10, tls=_as(pki, "alice")) as thrift:
            assert thrift.execute("exclamation", "cert") == "cert!"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"http_credentials": "password"}, "must be one of"),
        ({"http_credentials": "certificate-or-token"}, "needs tokens"),
        ({"http_credentials": "certificate", "tls": False}, "asks for client certificates"),
        ({"http_credentials": "certificate", "ca": False}, "asks for client certificates"),
    ],
)
def test_http_credentials_the_port_could_never_see_are_refused(
    pki: PKI, options: dict[str, object], problem: str
) -> None:
    tls = options.pop("tls", True)
    ca = pki.ca if options.pop("ca", True) else None
    context = server_context(pki.server_cert, pki.server_key, ca) if tls else None
    with pytest.raises(ValueError, match=problem):
        DRPCServer(**server_options(), ssl_context=context, **options)


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
    command = [
        *python, "drpc.server", "--executor", "local", *EPHEMERAL_PORTS, "--acl", str(acl),
        "--acl-strict", "--tokens", str(tokens), "--tls-cert", pki.server_cert, "--tls-key",
        pki.server_key, "--tls-ca", pki.ca, "--runner-liveness", "5", "--max-queue-depth", "100",
    ]  # fmt: skip
    runner = None
    with server_process(command, cwd=ROOT) as server:
        listening = server.listening
        assert listening["scheme"] == "https"
        runner_cert, runner_key = pki.clients["runner"]
        runner = subprocess.Popen(
            [*python, "drpc.runner", "--servers", f"{HOST}:{listening['invocations']}",
             "--topology", "drpc.examples.exclamation:topology", "--executor", "local",
             "--tls-ca", pki.ca, "--tls-cert", runner_cert, "--tls-key", runner_key],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            alice_cert, alice_key = pki.clients["alice"]

            def client(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [*python, "drpc.client", *args],
                    cwd=ROOT, capture_output=True, text=True, timeout=60,
                )  # fmt: skip

            thrift = ["--servers", f"{HOST}:{listening['port']}", "--tls-ca", pki.ca]
            alice = [*thrift, "--tls-cert", alice_cert, "--tls-key", alice_key, "--timeout", "20"]
            deadline = time.monotonic() + 30
            while (called := client(*alice, "exclamation", "cli")).returncode != 0:
                assert "is not served" in called.stderr, called.stderr  # the runner is starting
                assert time.monotonic() < deadline, called.stderr
                time.sleep(0.2)
            assert called.stdout == 'exclamation "cli" => "cli!"\n'
            # With --tls-ca the HTTP port wants a certificate too (bob's); the token names
            # the user.
            https = ["--http", f"https://{HOST}:{listening['http']}", "--tls-ca", pki.ca]
            bob_cert, bob_key = pki.clients["bob"]
            as_bob = [*https, "--tls-cert", bob_cert, "--tls-key", bob_key]
            called = client(
                *as_bob, "--token-file", str(tmp_path / "alice.token"), "exclamation", "t"
            )
            assert (called.returncode, called.stdout) == (0, 'exclamation "t" => "t!"\n')
            called = client(
                *as_bob, "--token-file", str(tmp_path / "mallory.token"), "exclamation", "t"
            )
            assert called.returncode == 1
            assert "DRPC request 'execute' for 'mallory' user is not authorized" in called.stderr
            # A token alone is not enough without --http-token-auth, and the caller is told so.
            called = client(
                *https, "--token-file", str(tmp_path / "alice.token"), "exclamation", "t"
            )
            assert (called.returncode, called.stderr) == (
                1,
                'exclamation "t" failed: this server requires a client certificate\n',
            )
            called = client(*thrift, "exclamation", "no certificate")
            assert called.returncode == 3  # the TLS handshake is refused
        finally:
            runner.send_signal(signal.SIGTERM)
            runner.wait(30)
    # Refusals are logged; the allowed calls and the runner's polls, routine, are not at INFO.
    assert "denied execute of 'exclamation' for user 'mallory'" in server.text
    assert "this server requires a client certificate" in server.text
    assert "allowed" not in server.text
