"""The deployment protocol between the driver and its resident Spark tasks.

Control items travel as wire items ``(None, CONTROL, message)``
(``drpc.executors.resident.routing``):

- a worker connects to the driver and says ``Joined(node, host, port)``: where it
  listens; the driver answers ``Peers(addresses)``, every other task that joined before
  it and is still there, ``(node, host, port)`` each. The worker connects to each (a
  later task connects to an earlier one, so every pair is connected once) and says
  ``Ready(node, engine_build)`` (``engine_build``: ``"compiled"`` or ``"pure"``, see
  ``drpc.compiled``). A task that comes back after it was lost joins the same way;
- the driver sends ``Deploy(key, topology, conf, node_of, observed, workers,
  fetching, replicated)`` (the topology frozen with cloudpickle, so bolts defined in
  ``__main__`` travel; ``fetching``: the ``InvocationsSettings``, pickled apart so a
  worker that cannot load them answers ``DeployFailed``, that each worker builds
  its own invocations handle from when the workers run the DRPC scaffolding and
  fetch requests themselves, else None; ``replicated``: each worker runs a whole
  copy of the topology, every task of it, instead of the tasks ``node_of``
  gives it) and each worker answers
  ``Deployed(key, node)`` once its share runs, or ``DeployFailed(key, node,
  reason)``;
- ``Undeploy(key)`` stops a worker's share; ``Stop()`` ends the worker, and
  with it its Spark task;
- ``Call(call_id, work)`` runs a function on a worker (``work``: the function and
  its arguments frozen with cloudpickle) on a thread of its own, and the worker
  answers ``CallDone(call_id, node, result, error)``: what it returned (pickled),
  or why it raised (``error``, then ``result`` is None), to the node that asked
  (``reply_to``: the driver, or a worker calling a peer). Transactional runs on the
  resident tasks process their batches through calls;
- ``Stage(key, sender, payload)``, from one worker to another: a payload the receiver
  keeps under ``key`` until a call takes it (``drpc.executors.resident.staging``): what a
  batch's processing task hands the task that owns a partition of its state, without
  passing through the driver;
- ``Placed(root, group, owners)``, from the driver to every worker: where the partitions
  of a partitioned state live (``drpc.executors.resident.partition_reads``), so a task
  reads one that is not on its host from its owner.
"""

from __future__ import annotations

import pickle
from concurrent.futures import Future
from typing import Any, NamedTuple

from drpc.errors import DRPCError


class Joined(NamedTuple):
    node: int
    host: str
    port: int


class Peers(NamedTuple):
    addresses: tuple[tuple[int, str, int], ...]  # (node, host, port) of each earlier task


class Ready(NamedTuple):
    node: int
    engine_build: str


class Deploy(NamedTuple):
    key: str
    topology: bytes
    conf: dict[str, Any]
    node_of: dict[int, int]
    observed: bool  # ship step spans to the driver
    workers: int
    fetching: bytes | None = None  # pickled InvocationsSettings, or None: the driver fetches
    replicated: bool = False  # a whole copy of the topology on each worker


class Deployed(NamedTuple):
    key: str
    node: int


class DeployFailed(NamedTuple):
    key: str
    node: int
    reason: str


class Undeploy(NamedTuple):
    key: str


class Stop(NamedTuple):
    pass


class Call(NamedTuple):
    call_id: int
    work: bytes  # freeze((function, args))
    reply_to: int = 0  # the node that asked (0: the driver; a worker calls a peer too)


class CallDone(NamedTuple):
    call_id: int
    node: int
    result: bytes | None  # pickled
    error: str | None


def settle(future: Future[Any], done: CallDone) -> None:
    """Complete the future of a call with its answer: what it returned, or ``DRPCError``
    saying why it raised."""
    if done.error is not None or done.result is None:
        future.set_exception(DRPCError(f"a call on resident task {done.node} raised {done.error}"))
    else:
        future.set_result(pickle.loads(done.result))


class Stage(NamedTuple):
    key: Any
    sender: Any
    payload: Any


class Placed(NamedTuple):
    """Where each partition of a partitioned state lives: its owner node, by index."""

    root: str
    group: str
    owners: tuple[int, ...]


Control = (
    Joined
    | Peers
    | Ready
    | Deploy
    | Deployed
    | DeployFailed
    | Undeploy
    | Stop
    | Call
    | CallDone
    | Stage
    | Placed
)
