"""The scaffolding a linear DRPC topology wraps around the user's steps.

- ``DRPCSpout`` pulls requests for one function from the runtime's
  invocations handle (``context.services["drpc.invocations"]``) and emits
  ``[args, return-info]`` with the return info as message id; a failed tree
  fails the request with the failure's type and message.
- ``PrepareRequest`` gives each request a coordination id (a small int unique
  within the runtime, distinct from the server's request id; where
  ``join-result`` has as many tasks, only ids that its task of the same index
  joins, so a spread scaffolding keeps a request on one worker) and emits
  ``[request, args]`` (default), ``[request, return-info]`` ("ret") and
  ``[request]`` ("id"). In a topology that reads a state directory
  (``drpc.state.dir`` in its configuration), unless ``drpc.state.pinned.reads``
  is False, it also pins the directory's latest committed version and makes
  the id a ``PinnedRequest`` carrying it, so every state read of the request,
  in any task, reads that one version (``drpc.state.versions``); the pin is
  held, by the request's return info, until ``release_request_pins``: the
  spout's ack or fail of the request, or the executor that ran it. With an
  observer in the services it reports ``state_pinned`` (the directory and the
  version).
- ``JoinResult`` is coordinated: once the last step has finished an id it
  joins the first result with the return info and emits ``[str(result),
  return-info]``; a step chain that emitted no result fails the request with a
  message saying so instead of leaving the caller to time out.
- ``ReturnResults`` hands the result to the invocations handle.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from drpc.errors import DRPCExceptionType, FailedException, Failure, InvalidTopologyError
from drpc.model.components import (
    CURRENT_ANCHOR,
    BaseBasicBolt,
    BaseRichBolt,
    BaseRichSpout,
    BasicOutputCollector,
    Conf,
    OutputCollector,
    SpoutOutputCollector,
)
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields
from drpc.model.grouping import FieldsGrouping
from drpc.model.streams import OutputFieldsDeclarer
from drpc.model.topology import Topology
from drpc.model.tuples import Tuple
from drpc.observe import NULL_OBSERVER, Observer, bus, observer_of
from drpc.requests import Invocations, ReturnInfo
from drpc.state import StateEnvironment
from drpc.state.partitioned import has_global_record, pinned_commits
from drpc.state.pins import Pin
from drpc.state.topology import PINNED_READS_CONF, STATE_DIR_CONF, STATE_SERVICE, state_for
from drpc.state.versions import PinnedRequest

log = logging.getLogger(__name__)

INVOCATIONS_SERVICE = "drpc.invocations"
RETURN_STREAM = "ret"
ID_STREAM = "id"


def invocations_of(context: TopologyContext) -> Invocations:
    try:
        return context.services[INVOCATIONS_SERVICE]
    except KeyError:
        raise RuntimeError(
            f"component {context.this_component_id!r} needs a DRPC invocations handle; run "
            "DRPC topologies through LocalDRPC, DRPCServer.register or drpc.runner"
        ) from None


def served_function(topology: Topology, executor: str) -> str:
    """The DRPC function ``topology`` serves; ``InvalidTopologyError`` naming ``executor``
    (which serves DRPC topologies only) when it serves none."""
    function = topology.drpc_function
    if function is None:
        raise InvalidTopologyError(
            f"topology {topology.name!r} serves no DRPC function; the {executor} serves DRPC "
            "topologies (transactional topologies run through drpc.transactional)"
        )
    return function


def required_invocations(services: dict[str, Any], executor: str) -> Invocations:
    """The invocations handle in an executor's ``services``; ``ValueError`` without one."""
    invocations: Invocations | None = services.get(INVOCATIONS_SERVICE)
    if invocations is None:
        raise ValueError(f"the {executor} needs services[{INVOCATIONS_SERVICE!r}]")
    return invocations


class DRPCSpout(BaseRichSpout):
    def __init__(self, function: str) -> None:
        self.function = function
        self._invocations: Invocations | None = None
        self._collector: SpoutOutputCollector | None = None
        self._unsubscribe: Callable[[], None] | None = None
        # with a handle that calls back on arrivals: asks for its next poll itself
        self._wakeup: Callable[[], None] | None = None
        self._has_requests: Callable[[str], bool] | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("args", "return-info"))

    def open(self, conf: Conf, context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self._invocations = invocations_of(context)
        self._collector = collector
        add_listener = getattr(self._invocations, "add_listener", None)
        if add_listener is not None:
            self._unsubscribe = add_listener(self.function, context.request_wakeup)
            self._wakeup = context.request_wakeup
            self._has_requests = getattr(self._invocations, "has_requests", None)
            context.declare_wakeups()

    def next_tuple(self) -> None:
        assert self._invocations is not None and self._collector is not None
        request = self._invocations.fetch_request(self.function)
        if request is not None:
            self._collector.emit([request.args, request.return_info], msg_id=request.return_info)
            # a spout that declared its wake-ups is not polled again after an emit: it asks
            # while requests wait (all of them, when the handle cannot tell)
            wakeup = self._wakeup
            if wakeup is not None and (
                self._has_requests is None or self._has_requests(self.function)
            ):
                wakeup()

    def ack(self, msg_id: Any) -> None:
        release_request_pins(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.fail_with(msg_id, Failure(DRPCExceptionType.FAILED_REQUEST, "Request failed"))

    def fail_with(self, msg_id: Any, failure: Failure) -> None:
        assert self._invocations is not None
        release_request_pins(msg_id)
        self._invocations.fail_request(msg_id, failure.to_exception())

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None


class PrepareRequest(BaseBasicBolt):
    state_reads = "nowhere"

    def __init__(self) -> None:
        self._ids: Iterator[int] | None = None
        self._pinning = False
        self._state: StateEnvironment | None = None
        self._observer: Observer = NULL_OBSERVER
        self._conf: Conf = {}
        self._services: dict[str, Any] = {}

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("request", "args"))
        declarer.declare_stream(RETURN_STREAM, Fields("request", "return-info"))
        declarer.declare_stream(ID_STREAM, Fields("request"))

    def prepare(self, conf: Conf, context: TopologyContext) -> None:
        self._ids = request_numbers(context)
        if conf.get(STATE_DIR_CONF) and conf.get(PINNED_READS_CONF, True):
            self._pinning = True
            self._conf, self._services = conf, context.services
            self._observer = bus(observer_of(context.services))

    def _pinned_state(self) -> StateEnvironment | None:
        """The state directory requests pin, opened at the first request (not in prepare:
        a run hosted beside this function opens it with its own options first); None
        while this host holds no such directory (never made here: a worker's host holds
        only partitions, and an empty directory would answer for them)."""
        env = self._state
        if env is not None and not env.closed:
            return env
        if STATE_SERVICE not in self._services and not has_global_record(
            str(self._conf[STATE_DIR_CONF])
        ):
            return None
        env = self._state = state_for(self._services, self._conf).env
        return env

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        assert self._ids is not None
        number = next(self._ids)
        request: int | PinnedRequest = number
        if self._pinning and (env := self._pinned_state()) is not None:
            pin = env.pin()
            REQUEST_PINS.hold(tuple[1], env, pin)
            request = PinnedRequest(number, ((env.path, pin.version), *pinned_commits(env, pin)))
            if self._observer is not NULL_OBSERVER:
                self._observer.state_pinned(tuple[1], request.reads)
        collector.emit([request, tuple[0]])
        collector.emit([request, tuple[1]], stream=RETURN_STREAM)
        collector.emit([request], stream=ID_STREAM)


def request_numbers(context: TopologyContext) -> Iterator[int]:
    """A ``PrepareRequest`` task's request ids (see the module doc): distinct from its
    other tasks'; when ``join-result`` has as many tasks, the ids its task of this task's
    index receives."""
    index, tasks = context.this_task_index, len(context.this_component_tasks)
    joins = context.this_targets().get(RETURN_STREAM, {})
    if tasks > 1 and len(joins) == 1:
        [(join, grouping)] = joins.items()
        if isinstance(grouping, FieldsGrouping) and len(context.component_tasks(join)) == tasks:
            fields = context.this_output_fields(RETURN_STREAM)
            partitioner = grouping.partitioner(fields, index, tasks, tasks)
            mine = (index,)
            return (n for n in itertools.count(1) if partitioner.choose([n, None]) == mine)
    return itertools.count(index + 1, tasks)


class _RequestPins:
    """The version pins each request in flight in this process holds, by return info."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Hashable, list[tuple[StateEnvironment, Pin]]] = {}
        self._pruned_at = 64

    def hold(self, key: Hashable, env: StateEnvironment, pin: Pin) -> None:
        with self._lock:
            self._held.setdefault(key, []).append((env, pin))
            if len(self._held) >= 2 * self._pruned_at:
                # Requests whose spout never heard of them again (an executor stopped
                # with them in flight): their pins expired, so their entries go.
                self._held = {
                    key: pins
                    for key, pins in self._held.items()
                    if not all(pin.released for _, pin in pins)
                }
                self._pruned_at = max(64, len(self._held))

    def release(self, key: Hashable) -> None:
        with self._lock:
            held = self._held.pop(key, ())
        for env, pin in held:
            if not env.closed:
                env.release(pin)

    def __len__(self) -> int:
        return len(self._held)


REQUEST_PINS = _RequestPins()


def release_request_pins(return_info: Hashable) -> None:
    """Release the version pins of the request ``return_info`` names (none: nothing)."""
    REQUEST_PINS.release(return_info)


class JoinResult(BaseRichBolt):
    """Coordinated join of the last step's result with the request's return info."""

    state_reads = "nowhere"

    def __init__(self, return_component: str, last_step: str) -> None:
        self.return_component = return_component
        self.last_step = last_step
        self._results: dict[Hashable, Any] = {}
        self._extra: dict[Hashable, int] = {}
        self._returns: dict[Hashable, ReturnInfo] = {}
        self._collector: OutputCollector | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("result", "return-info"))

    def prepare(self, conf: Conf, context: TopologyContext, collector: OutputCollector) -> None:
        self._collector = collector

    def execute(self, tuple: Tuple) -> None:
        assert self._collector is not None
        request = tuple[0]
        if tuple.source_component == self.return_component:
            # The id tuple: held by coordination until the join finishes; never acked here.
            self._returns[request] = tuple[1]
            return
        if request in self._results:
            self._extra[request] = self._extra.get(request, 0) + 1
        else:
            self._results[request] = tuple[1]
        self._collector.ack(tuple)

    def finished_id(self, id: Hashable) -> None:
        assert self._collector is not None
        return_info = self._returns.pop(id)
        extra = self._extra.pop(id, 0)
        if id not in self._results:
            raise FailedException(f"the last step {self.last_step!r} emitted no result")
        result = self._results.pop(id)
        if extra:
            log.warning(
                "step %r emitted %d results for request %s; returning the first",
                self.last_step,
                extra + 1,
                return_info.request_id,
            )
        self._collector.emit([str(result), return_info], anchors=CURRENT_ANCHOR)

    def failed_id(self, id: Hashable) -> None:
        self._returns.pop(id, None)
        self._results.pop(id, None)
        self._extra.pop(id, None)


class ReturnResults(BaseBasicBolt):
    state_reads = "nowhere"

    def __init__(self) -> None:
        self._invocations: Invocations | None = None

    def prepare(self, conf: Conf, context: TopologyContext) -> None:
        self._invocations = invocations_of(context)

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        assert self._invocations is not None
        self._invocations.result(tuple[1], tuple[0])
