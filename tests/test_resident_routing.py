"""How a resident deployment routes: the driver's route tells each worker a request's log
fields once while the request is in flight and forgets them once it is over; where the
workers fetch requests themselves, a root names the worker whose ackers track it, and a
spread scaffolding keeps a request on the worker that fetched it."""

from __future__ import annotations

import itertools
import logging
from typing import Any, cast

import pytest

from drpc.builders.coordinated_drpc import (
    JOIN_ID,
    PREPARE_ID,
    RETURN_ID,
    SPOUT_ID,
    spread_scaffolding,
)
from drpc.builders.drpc_components import RETURN_STREAM, request_numbers
from drpc.examples.reach import build_reach
from drpc.executors.local.messages import Ack, AckInit, Outbox, TupleMessage, decode
from drpc.executors.resident.control import Deploy, DeployFailed, Stop
from drpc.executors.resident.routing import (
    ACKER,
    CONTROL,
    DRIVER,
    FIELDS,
    Route,
    acker_roots,
    place,
    root_node,
)
from drpc.executors.resident.transport import Node
from drpc.executors.resident.worker import ResidentWorker
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields
from drpc.model.tuples import Tuple
from drpc.semantics.acker import new_root_id
from drpc.semantics.routing import OutputRouter, thaw_values
from drpc.semantics.runners import freeze


class _Sent:
    """Stands in for the transport: the items sent, by node."""

    def __init__(self) -> None:
        self.items: list[tuple[int, Any]] = []

    def send(self, node: int, item: Any) -> None:
        self.items.append((node, item))

    def fields(self) -> list[tuple[int, int]]:
        return [(node, item[2][0]) for node, item in self.items if item[1] == FIELDS]


def _tuple(root: int) -> Tuple:
    """A tuple as an engine sends it to a task in another process."""
    return Tuple(["word"], Fields("word"), "step", "default", 0, {root: 1})


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
    live[11] = {"request_id": "11"}
    route.deliver(2, TupleMessage("step", "default", 0, ("word",), {11: 1}))  # passed on
    assert sent.fields().count((2, 11)) == 1


def test_a_tuple_crosses_to_another_process_as_its_frozen_values_and_arrives_a_tuple() -> None:
    sent = _Sent()
    Route(cast(Node, sent), "key", {3: 2}).deliver(
        3, Tuple([7, ["a"]], Fields("id", "words"), "step", "default", 1, {5: 6})
    )
    [(node, (key, task, payload))] = sent.items
    assert (node, key, task) == (2, "key", 3)
    message = decode(payload)
    assert isinstance(message, TupleMessage)
    assert (message.source, message.stream, message.source_task, message.message_id) == (
        "step",
        "default",
        1,
        {5: 6},
    )
    assert thaw_values(message.payload) == [7, ["a"]]


def test_a_root_names_the_worker_whose_ackers_track_it() -> None:
    for worker in (1, 2, 3):
        modulus, residue = acker_roots(worker, 3)
        roots = [new_root_id(modulus, residue) for _ in range(2000)]
        assert all(0 < root < 2**64 for root in roots)
        assert {root_node(root, 3) for root in roots} == {worker}
        assert len(set(roots)) == len(roots)
    sent = _Sent()
    route = Route(cast(Node, sent), "key", {}, acker_modulus=3)
    route.to_acker(5, Ack(5, 1))
    route.to_acker(6, Ack(6, 1))
    assert [(node, item[1]) for node, item in sent.items] == [(3, ACKER), (1, ACKER)]
    driver_route = Route(cast(Node, sent), "key", {})
    driver_route.to_acker(5, Ack(5, 1))
    assert sent.items[-1][0] == DRIVER


def test_an_outbox_gives_up_the_acker_messages_of_roots_tracked_elsewhere() -> None:
    outbox = Outbox()
    outbox.add_acker(4, AckInit(4, 9, 1))  # 4 % 3 == 1: elsewhere
    outbox.add_acker(3, AckInit(3, 8, 1))  # 3 % 3 == 0: here
    outbox.add_ack(7, 5)  # elsewhere
    outbox.add_ack(6, 2)  # here
    outbox.add_ack(7, 1)
    foreign = outbox.split_foreign(3, 0)
    assert foreign == [(4, AckInit(4, 9, 1)), (7, Ack(7, 4))]
    assert outbox.acker_messages() == [(3, AckInit(3, 8, 1)), (6, Ack(6, 2))]
    assert outbox.split_foreign(3, 0) == []  # nothing more to give up


def test_a_spread_scaffolding_keeps_a_request_on_the_worker_that_fetched_it() -> None:
    topology = spread_scaffolding(build_reach().create_topology(), 3)
    for component in (SPOUT_ID, PREPARE_ID, JOIN_ID, RETURN_ID):
        assert topology.components[component].parallelism == 3
    node_of = place(topology, 3, scaffolding_on_workers=True)
    for component in (SPOUT_ID, PREPARE_ID, JOIN_ID, RETURN_ID):
        tasks = topology.component_task_ids[component]
        assert [node_of[task] for task in tasks] == [1, 2, 3]
    assert DRIVER not in node_of.values()
    with pytest.raises(ValueError, match="spread the scaffolding first"):
        place(build_reach().create_topology(), 3, scaffolding_on_workers=True)
    prepare_tasks = topology.component_task_ids[PREPARE_ID]
    for index, task in enumerate(prepare_tasks):
        context = TopologyContext(topology, PREPARE_ID, task)
        ids = list(itertools.islice(request_numbers(context), 50))
        spout_router = OutputRouter(
            topology, SPOUT_ID, topology.component_task_ids[SPOUT_ID][index]
        )
        # the spout hands its request to the prepare task of its index ...
        assert spout_router.targets("default", [b"args", "info"]) == [task]
        router = OutputRouter(topology, PREPARE_ID, task)
        join_tasks = topology.component_task_ids[JOIN_ID]
        # ... whose ids join-result joins on the same worker
        assert {tuple(router.targets(RETURN_STREAM, [n, "info"])) for n in ids} == {
            (join_tasks[index],)
        }
    plain = build_reach().create_topology()
    context = TopologyContext(plain, PREPARE_ID, plain.component_task_ids[PREPARE_ID][0])
    assert list(itertools.islice(request_numbers(context), 3)) == [1, 2, 3]


def test_a_worker_that_cannot_load_its_fetching_settings_answers_deploy_failed() -> None:
    """Not a broken frame that ends the task: the settings travel pickled apart, so what
    they need on the executor (drpc.runner, thrift) missing is a deployment's failure."""
    worker = ResidentWorker(1, b"t" * 32, threads=1)
    sent = _Sent()
    worker.node.send = sent.send  # type: ignore[method-assign]
    topology = build_reach().create_topology()
    worker._deploy(Deploy("reach#1", freeze(topology), {}, {}, False, 1, b"not a pickle", True))
    [(node, (_, destination, answer))] = sent.items
    assert (node, destination) == (DRIVER, CONTROL)
    assert isinstance(answer, DeployFailed) and answer.key == "reach#1"
    assert "UnpicklingError" in answer.reason
    assert worker.engines == {} and worker.fetchers == {}
    worker.node.close()


def test_a_peer_lost_warns_while_serving_and_not_once_the_driver_said_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = ResidentWorker(1, b"t" * 32, threads=1)
    try:
        with caplog.at_level(logging.DEBUG, logger="drpc.executors.resident.worker"):
            worker._on_lost(2, "the connection was closed")
            worker._control(Stop())
            worker._on_lost(3, "the connection was closed")
        levels = [(record.levelno, record.getMessage()) for record in caplog.records]
        assert levels == [
            (logging.WARNING, "resident task 1 lost resident task 2: the connection was closed"),
            (logging.DEBUG, "resident task 1 lost resident task 3: the connection was closed"),
        ]
        assert worker.reason == "stopped by the driver"
    finally:
        worker.node.close()
