"""Which connection fetched which request: the bookkeeping of the "runner went away" rule.

Contract. ``FetchBindings`` is a plain state machine (no threads, no clock,
no I/O; its owner holds the lock). A *fetcher* is any hashable key naming
one connection that fetched requests (the server uses the connection's
``Peer``, unique per connection):

- ``bind(fetcher, request_id)`` records that the fetcher holds the request;
- ``settled(request_id)`` forgets it, whoever holds it (a request settled by
  its result, a failure, its deadline or shutdown); unknown ids are ignored;
- ``release(fetcher)`` forgets the fetcher and returns the ids it still held,
  oldest first: the requests its connection took away unanswered;
- ``holds(fetcher)`` says whether it holds any.

What is held is bounded by the requests outstanding: every id is forgotten
when it settles, and a fetcher is forgotten when its last id settles.
"""

from __future__ import annotations

from collections.abc import Hashable


class FetchBindings:
    """Requests held per fetcher, and the fetcher of each held request."""

    def __init__(self) -> None:
        self._held: dict[Hashable, dict[str, None]] = {}  # insertion-ordered sets
        self._fetcher_of: dict[str, Hashable] = {}

    def __len__(self) -> int:
        """Requests held by any fetcher."""
        return len(self._fetcher_of)

    def bind(self, fetcher: Hashable, request_id: str) -> None:
        self._held.setdefault(fetcher, {})[request_id] = None
        self._fetcher_of[request_id] = fetcher

    def settled(self, request_id: str) -> None:
        fetcher = self._fetcher_of.pop(request_id, None)
        if fetcher is None:
            return
        held = self._held[fetcher]
        del held[request_id]
        if not held:
            del self._held[fetcher]

    def release(self, fetcher: Hashable) -> list[str]:
        held = self._held.pop(fetcher, {})
        for request_id in held:
            del self._fetcher_of[request_id]
        return list(held)

    def holds(self, fetcher: Hashable) -> bool:
        return fetcher in self._held

    def held_by(self, fetcher: Hashable) -> int:
        return len(self._held.get(fetcher, ()))
