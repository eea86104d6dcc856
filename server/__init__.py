"""The DRPC server: Storm-compatible Thrift (3772/3773) and HTTP (3774) front ends.

``DRPCServer`` serves on an asyncio event loop and hosts topologies in-process
(``register``); ``ServerThread`` runs one in a background thread; ``main`` is
the ``drpc-server`` command line.
"""

from __future__ import annotations

from drpc.server.app import DRPCServer
from drpc.server.service import Authorizer, DRPCService
from drpc.server.threaded import ServerThread

from drpc.hosting import default_executor

__all__ = ["Authorizer", "DRPCServer", "DRPCService", "ServerThread", "default_executor"]
