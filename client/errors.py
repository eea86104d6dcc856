"""Exceptions a DRPC client raises; all derive from ``drpc.errors.DRPCError``.

- ``DRPCExecutionException`` (``.msg``, ``.type``) and ``AuthorizationException``
  (``.msg``): the server's answer, as in Storm;
- ``DRPCConnectionError``: no server could be reached, or a connection broke
  before the reply (also a ``ConnectionError``);
- ``DRPCTimeoutError``: the client's own ``timeout`` passed (also a ``TimeoutError``);
- ``ProtocolError``: the bytes received were not a well-formed reply, or the
  server refused the call at the Thrift level.
"""

from __future__ import annotations

from drpc.errors import AuthorizationException, DRPCError, DRPCExecutionException
from drpc.protocol.wire import ProtocolError


class DRPCConnectionError(DRPCError, ConnectionError):
    """No DRPC server could be reached, or the connection broke before the reply."""


class DRPCTimeoutError(DRPCError, TimeoutError):
    """The client-side timeout passed before the reply arrived."""


__all__ = [
    "AuthorizationException",
    "DRPCConnectionError",
    "DRPCExecutionException",
    "DRPCTimeoutError",
    "ProtocolError",
]
