"""TLS for every DRPC connection: server and client contexts, and who the peer is.

Contract:

- ``server_context(cert, key, ca)`` is a TLS 1.2+ server context; with ``ca``
  the peer must present a certificate signed by it (``CERT_REQUIRED``), so a
  connection without one fails the handshake; with
  ``require_client_cert=False`` a certificate is asked for and verified when
  presented, but a peer may present none (``CERT_OPTIONAL``: the layer above
  decides, as the HTTP port does); without ``ca`` no client certificate is
  asked for;
- ``TLSSettings(ca, cert, key, server_hostname)`` is what a client (the
  Python clients, the remote runner) needs; ``client_context()`` verifies the
  server against ``ca`` (the system store when None) including its host name,
  and presents ``cert``/``key`` when given;
- ``common_name(peercert)`` is the subject CN of a verified peer certificate
  (``ssl`` ``getpeercert()`` form), or None; that CN is the peer's user name;
- unreadable or mismatched files raise ``TLSConfigError`` naming the file.
"""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass
from typing import Any

from drpc.errors import DRPCError


class TLSConfigError(DRPCError):
    """A certificate, key or CA file cannot be used; the message names it."""


def _load_chain(context: ssl.SSLContext, cert: str, key: str | None) -> None:
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as error:
        raise TLSConfigError(
            f"cannot load the certificate {cert!r} with the key {key or cert!r}: {error}"
        ) from error


def _load_ca(context: ssl.SSLContext, ca: str) -> None:
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as error:
        raise TLSConfigError(f"cannot load the CA certificates {ca!r}: {error}") from error


def server_context(
    cert: str, key: str | None = None, ca: str | None = None, *, require_client_cert: bool = True
) -> ssl.SSLContext:
    """A server context presenting ``cert``; with ``ca``, client certificates signed by it are
    required (``require_client_cert``) or verified when presented."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert, key)
    if ca is not None:
        _load_ca(context, ca)
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return context


@dataclass(frozen=True, slots=True)
class TLSSettings:
    """A client's TLS settings.

    :param ca: CA file that signed the server's certificate (None: the system store).
    :param cert: this client's certificate (its subject CN is the user name the server
        sees); None presents none.
    :param key: the certificate's private key (None: inside ``cert``).
    :param server_hostname: name to verify the server's certificate against (None: the
        host connected to).
    """

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_hostname: str | None = None

    def client_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ca is not None:
            _load_ca(context, self.ca)
        else:
            context.load_default_certs()
        if self.cert is not None:
            _load_chain(context, self.cert, self.key)
        return context


def tls_from_args(args: argparse.Namespace, force: bool = False) -> TLSSettings | None:
    """The settings of ``drpc.commandline.add_tls_arguments``'s options (None: none given
    and not ``force``, so plain TCP)."""
    if not (force or args.tls_ca or args.tls_cert):
        return None
    return TLSSettings(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key)


def common_name(peercert: dict[str, Any] | None) -> str | None:
    """The subject CN of a peer certificate as ``SSLSocket.getpeercert()`` returns it."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName" and value:
                return str(value)
    return None
