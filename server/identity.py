"""Who is calling: bearer tokens (HTTP), TLS client certificates, or nobody.

Contract:

- a caller's user name is, in order: the user a valid HTTP
  ``Authorization: Bearer <token>`` maps to; else the subject CN of the TLS
  client certificate the connection was verified with; else ``ANONYMOUS``;
- ``TokenTable`` maps tokens to users. Its file (``--tokens FILE``, YAML or
  JSON) maps each user to a token or a list of tokens, e.g.
  ``{"alice": "6f1c…", "runner": ["…", "…"]}``; a token must be at least
  ``MIN_TOKEN_LENGTH`` characters and belong to one user, else
  ``ConfigFileError``. Only SHA-256 digests of the tokens are kept, and a
  presented token is looked up by its digest, so lookup time says nothing
  about the secret;
- ``bearer_user(header, tokens)`` returns the user of an ``Authorization``
  header value, or raises ``AuthorizationException`` for a header that is
  not ``Bearer <token>``, a token that is not UTF-8, or a token nobody holds:
  a wrong token is refused, never downgraded to ``ANONYMOUS``;
- ``check_credentials(required, has_certificate, header, tokens)`` enforces
  what a port demands of every caller (``CREDENTIALS``): None lets anyone in
  (anonymous callers are the ACL's to judge); ``"certificate"`` a verified
  client certificate; ``"certificate-or-token"`` one or a valid bearer token.
  A caller without them gets ``AuthorizationException`` saying what this
  server requires ("this server requires a client certificate"), the message
  a caller sees instead of a failed TLS handshake.
- ``caller_of(identity, host)`` is whom the server holds to its per-caller
  quota: ``"user NAME"`` for an identified caller, else ``"address HOST"``
  (the client's address without its port, so new connections do not make a
  new caller).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from drpc.server.files import ConfigFileError, load_mapping

from drpc.errors import AuthorizationException

ANONYMOUS = "anonymous"
"""The user of a caller with no token and no client certificate."""

MIN_TOKEN_LENGTH = 16

CERTIFICATE = "certificate"
CERTIFICATE_OR_TOKEN = "certificate-or-token"
CREDENTIALS = (CERTIFICATE, CERTIFICATE_OR_TOKEN)
"""What a port may require of every caller (None: nothing)."""

_MISSING = {
    CERTIFICATE: "this server requires a client certificate",
    CERTIFICATE_OR_TOKEN: "this server requires a client certificate or a bearer token",
}


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenTable:
    def __init__(self, users: Mapping[str, str | Sequence[str]], source: str = "tokens") -> None:
        self._users: dict[bytes, str] = {}
        for user, tokens in users.items():
            listed = [tokens] if isinstance(tokens, str) else tokens
            if not isinstance(user, str) or not user or not isinstance(listed, Sequence):
                raise ConfigFileError(f"{source}: entry {user!r} must map a user to token(s)")
            for token in listed:
                if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH:
                    raise ConfigFileError(
                        f"{source}: a token of user {user!r} is not a string of at least "
                        f"{MIN_TOKEN_LENGTH} characters"
                    )
                holder = self._users.setdefault(_digest(token), user)
                if holder != user:
                    raise ConfigFileError(f"{source}: users {holder!r} and {user!r} share a token")

    @classmethod
    def from_file(cls, path: str | Path) -> TokenTable:
        return cls(load_mapping(path, "tokens"), f"tokens file {str(path)!r}")

    def __len__(self) -> int:
        return len(self._users)

    def user_of(self, token: str) -> str | None:
        return self._users.get(_digest(token))


def bearer_user(header: str, tokens: TokenTable | None) -> str:
    """The user an ``Authorization`` header names; ``AuthorizationException`` if none."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthorizationException("the Authorization header is not 'Bearer <token>'")
    try:
        user = tokens.user_of(token.strip()) if tokens is not None else None
    except UnicodeEncodeError:  # a header with bytes that are not UTF-8
        raise AuthorizationException("the bearer token is not UTF-8") from None
    if user is None:
        raise AuthorizationException("the bearer token is not valid")
    return user


def check_credentials(
    required: str | None,
    has_certificate: bool,
    header: str | None,
    tokens: TokenTable | None,
) -> None:
    """Refuse (``AuthorizationException``) a caller without the credentials ``required``
    (one of ``CREDENTIALS``, or None); ``has_certificate``: it presented a client
    certificate the TLS handshake verified; ``header``: its ``Authorization`` header."""
    if required is None or has_certificate:
        return
    if required == CERTIFICATE_OR_TOKEN and header is not None:
        bearer_user(header, tokens)
        return
    raise AuthorizationException(_MISSING[required])


def caller_of(identity: str | None, host: str) -> str:
    """The key of a caller's quota: its user if identified, else its address."""
    return f"user {identity}" if identity is not None else f"address {host}"
