"""The in-process executor (``executor="local"``): a streaming engine in this process.

- ``executor``: ``LocalExecutor``, the engine (its contract);
- ``tasks``: bolt tasks on the shared task core, spouts, ackers;
- ``actors``, ``messages``: mailboxes on a thread pool, and what they carry;
- ``spans``: per-request spans for the observer.
"""

from __future__ import annotations

from drpc.executors.local.executor import LocalExecutor

__all__ = ["LocalExecutor"]
