"""DRPC clients: ``DRPCClient``, ``AsyncDRPCClient``, ``DRPCInvocationsClient``.

``DRPCClient("localhost", 3772).execute("reach", "foo.com/blog/1") -> "16"``;
failures raise ``drpc.client.DRPCExecutionException`` (``.type``, ``.msg``) or
``drpc.client.AuthorizationException`` as in Storm. ``tls=TLSSettings(...)`` speaks
TLS (a client certificate's CN is the caller's user); ``HTTPDRPCClient`` calls
the HTTP port with a bearer token, and ``execute_traced`` returns a call's
per-step timings (``TracedResult``). ``main`` is the ``drpc-client`` command line.
"""

from __future__ import annotations

from drpc.client.aio import AsyncDRPCClient
from drpc.client.errors import (
    AuthorizationException,
    DRPCConnectionError,
    DRPCExecutionException,
    DRPCTimeoutError,
    ProtocolError,
)
from drpc.client.http import HTTPDRPCClient, TracedResult
from drpc.client.sync import (
    DEFAULT_INVOCATIONS_PORT,
    DEFAULT_PORT,
    DRPCClient,
    DRPCInvocationsClient,
)

from drpc.errors import DRPCExceptionType, ServerBusyError
from drpc.protocol.tls import TLSSettings
from drpc.protocol.wire import MAX_FRAME_SIZE

__all__ = [
    "DEFAULT_INVOCATIONS_PORT",
    "DEFAULT_PORT",
    "MAX_FRAME_SIZE",
    "AsyncDRPCClient",
    "AuthorizationException",
    "DRPCClient",
    "DRPCConnectionError",
    "DRPCExceptionType",
    "DRPCExecutionException",
    "DRPCInvocationsClient",
    "DRPCTimeoutError",
    "HTTPDRPCClient",
    "ProtocolError",
    "ServerBusyError",
    "TLSSettings",
    "TracedResult",
]
