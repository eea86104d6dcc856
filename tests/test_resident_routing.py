"""The driver's route of a resident deployment tells each worker a request's log fields
once while the request is in flight, and forgets what it told once the request is over."""

from __future__ import annotations

from typing import Any, cast

from drpc.executors.local.messages import TupleMessage
from drpc.executors.resident.routing import FIELDS, Route
from drpc.executors.resident.transport import Node


class _Sent:
    """Stands in for the transport: the items sent, by node."""

    def __init__(self) -> None:
        self.items: list[tuple[int, Any]] = []

    def send(self, node: int, item: Any) -> None:
        self.items.append((node, item))

    def fields(self) -> list[tuple[int, int]]:
        return [(node, item[2][0]) for node, item in self.items if item[1] == FIELDS]


def _tuple(root: int) -> TupleMessage:
    return TupleMessage("step", "default", 0, b"", {root: 1})


def test_fields_are_told_once_per_worker_and_forgotten_when_the_request_is_over() -> None:
    live: dict[int, dict[str, Any]] = {7: {"request_id": "7"}}
    sent = _Sent()
    route = Route(cast(Node, sent), "key", {1: 1, 2: 2}, log_fields=live.get)
    for task in (1, 1, 2):
        route.deliver(task, _tuple(7))
    assert sent.fields() == [(1, 7), (2, 7)]
    for root in range(100, 10_100):  # requests that end one after the other
        live[root] = {"request_id": str(root)}
        route.deliver(1, _tuple(root))
        del live[root]
    assert route.remembered <= 4  # not 10 002: only what is in flight, and a little lag
    route.deliver(1, _tuple(7))
    route.deliver(2, _tuple(7))
    assert sent.fields().count((1, 7)) == 1 and sent.fields().count((2, 7)) == 1
