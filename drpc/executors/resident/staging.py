"""Data one resident task hands another for later: staged under a key, taken once.

Contract. A process's ``STAGED`` (a ``Staging``) holds payloads by key, each from one
sender:

- ``put(key, sender, payload)`` stages a payload (the same sender again replaces its
  own: a retried send counts once);
- ``take(key, senders, timeout)`` waits until every one of ``senders`` staged under
  ``key`` (at most ``timeout`` seconds, then ``StagingTimeout`` naming the ones
  missing), removes them and returns their payloads in sender order;
- ``drop(predicate)`` removes every key the predicate accepts (what no one will take:
  a batch attempt given up);
- ``keys()`` lists what is staged.

A payload arrives from another task as the control item ``Stage(key, sender, payload)``
(``drpc.executors.resident.control``), or from the same process directly. Keys are
tuples the caller chooses; they must say which deployment and which attempt they are
for, so a late payload of an attempt given up is never taken for another.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any


class StagingTimeout(Exception):
    """Not every expected sender staged its payload in time."""


class Staging:
    """Staged payloads of one process (see the module doc)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._staged: dict[Hashable, dict[Hashable, Any]] = {}

    def put(self, key: Hashable, sender: Hashable, payload: Any) -> None:
        with self._cond:
            self._staged.setdefault(key, {})[sender] = payload
            self._cond.notify_all()

    def take(self, key: Hashable, senders: Sequence[Hashable], timeout: float) -> list[Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                staged = self._staged.get(key, {})
                missing = [sender for sender in senders if sender not in staged]
                if not missing:
                    del self._staged[key]
                    return [staged[sender] for sender in senders]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StagingTimeout(
                        f"{key!r}: nothing staged by {missing} within {timeout:g} s"
                    )
                self._cond.wait(remaining)

    def drop(self, predicate: Callable[[Hashable], bool]) -> int:
        with self._cond:
            gone = [key for key in self._staged if predicate(key)]
            for key in gone:
                del self._staged[key]
            return len(gone)

    def keys(self) -> list[Hashable]:
        with self._cond:
            return list(self._staged)


STAGED = Staging()
