"""DRPC clients: ``DRPCClient``, ``AsyncDRPCClient``, ``DRPCInvocationsClient``.

``DRPCClient("localhost", 3772).execute("reach", "foo.com/blog/1") -> "16"``;
failures raise ``client.DRPCExecutionException`` (``.type``, ``.msg``) or
``client.AuthorizationException`` as in Storm. ``main`` is the ``drpc-client``
command line.
"""

from __future__ import annotations

from client.aio import AsyncDRPCClient
from client.errors import (
    AuthorizationException,
    DRPCConnectionError,
    DRPCExecutionException,
    DRPCTimeoutError,
    ProtocolError,
)
from client.sync import DEFAULT_INVOCATIONS_PORT, DEFAULT_PORT, DRPCClient, DRPCInvocationsClient
from drpc.errors import DRPCExceptionType
from drpc.wire import MAX_FRAME_SIZE

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
    "ProtocolError",
]
