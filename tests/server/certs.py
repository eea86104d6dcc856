"""Test-only certificates, made at test time with the ``openssl`` command line.

``make_pki(directory, users)`` writes a throw-away CA, a server certificate for
127.0.0.1/localhost, and one client certificate per user (subject CN = the
user), each with its key, valid for one day; and a second, unrelated CA with
a client certificate, to show that a foreign certificate is refused. No key
made here leaves the test's temporary directory.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class PKI:
    ca: str
    server_cert: str
    server_key: str
    clients: dict[str, tuple[str, str]]  # user -> (cert, key)
    foreign_ca: str
    foreign_client: tuple[str, str]  # CN "alice", signed by the foreign CA


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> tuple[str, str]:
    _openssl(
        "req", "-x509", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.pem",
        "-days", "1", "-subj", f"/CN=drpc test {name}", cwd=directory,
    )  # fmt: skip
    return str(directory / f"{name}.pem"), f"{name}.key"


def _signed(directory: Path, name: str, cn: str, ca: str, extensions: str = "") -> tuple[str, str]:
    _openssl(
        "req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}",
        cwd=directory,
    )  # fmt: skip
    extra: list[str] = []
    if extensions:
        (directory / f"{name}.ext").write_text(extensions)
        extra = ["-extfile", f"{name}.ext"]
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", "1", *extra, cwd=directory,
    )  # fmt: skip
    return str(directory / f"{name}.pem"), str(directory / f"{name}.key")


def make_pki(directory: Path, users: list[str]) -> PKI:
    ca, _ = _ca(directory, "ca")
    server_cert, server_key = _signed(
        directory, "server", "127.0.0.1", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    clients = {user: _signed(directory, f"client-{user}", user, "ca") for user in users}
    foreign_ca, _ = _ca(directory, "foreign")
    foreign_client = _signed(directory, "foreign-alice", "alice", "foreign")
    return PKI(ca, server_cert, server_key, clients, foreign_ca, foreign_client)
