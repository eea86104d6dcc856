"""Whether a server is open to the network with nothing in the way, and the warning that says so.

Contract:

- ``is_loopback(host)`` is True for ``localhost`` and for loopback addresses
  (``127.0.0.0/8``, ``::1``); a host name is resolved and counts as loopback
  only when every address it resolves to is one; the empty host and the
  unspecified addresses (``0.0.0.0``, ``::``: every interface) are not;
- ``exposure_warning(host, acl=..., tls=...)`` is the warning a server logs
  when it listens beyond loopback with neither an ACL nor TLS (anyone who can
  reach its ports may call every function and answer every request), naming
  the host and how to close it; None when there is nothing to warn about.
  Storm's DRPC server listens that way by default, so drpc keeps the default
  and says so rather than refusing.
"""

from __future__ import annotations

import ipaddress
import socket


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if not host:
        return False
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    addresses = {entry[4][0] for entry in found}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def exposure_warning(host: str, *, acl: bool, tls: bool) -> str | None:
    if acl or tls or is_loopback(host):
        return None
    where = host or "every interface"
    return (
        f"listening on {where} with neither an ACL nor TLS: anyone who can reach these ports "
        "may call every function and answer its requests; bind 127.0.0.1 (--host) or add "
        "--acl and --tls-cert"
    )
