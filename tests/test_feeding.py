"""The fed path's two halves without Spark: the driver's ``RequestFeeder`` over an
in-process request table, and each task's ``FedInvocations``, wired by plain calls where
the resident link would carry the items (the link itself is tested with the cluster)."""

from __future__ import annotations

import pickle
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from drpc.errors import DRPCExceptionType, DRPCExecutionException, Failure
from drpc.executors.resident.feeding import (
    FedInvocations,
    FedOutcome,
    FedRequest,
    ObservedEvent,
    RequestFeeder,
    StepStarted,
)
from drpc.observe import Observer
from drpc.requests import DRPCRequest, ReturnInfo
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(30)


class Table:
    """The request table of the driver's process, as an invocations handle sees it."""

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log
        self._queue: deque[DRPCRequest] = deque()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def submit(self, request_id: str, args: str, deadline: float | None = None) -> None:
        with self._lock:
            self._queue.append(DRPCRequest("f", args, ReturnInfo(request_id), deadline))
        for listener in list(self._listeners):
            listener()

    def fetch_request(self, function: str) -> DRPCRequest | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def result(self, return_info: ReturnInfo, result: str) -> None:
        self.log.append(("result", return_info.request_id, result))

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        self.log.append(("failed", return_info.request_id, error.type, error.msg))

    def add_listener(self, function: str, callback: Callable[[], None]) -> Callable[[], None]:
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)


class Recorder(Observer):
    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log

    def step_started(self, return_info: Any, step: str, now: float) -> None:
        self.log.append(("started", return_info.request_id, step, now))

    def step_finished(
        self, return_info: Any, step: str, start: float, end: float, attrs: dict[str, Any]
    ) -> None:
        self.log.append(("finished", return_info.request_id, step, start, end, attrs))

    def state_pinned(self, return_info: Any, reads: tuple[tuple[str, int], ...]) -> None:
        self.log.append(("pinned", return_info.request_id, reads))


class Fed:
    """A feeder, its table and two tasks' handles; ``sent`` is what reached each task."""

    def __init__(self, window: int = 2, observer: Observer | None = None) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.table = Table(self.log)
        self.sent: list[tuple[int, list[str]]] = []
        self.feeder = RequestFeeder(
            self.table, "f", self.send, observer or Recorder(self.log), window=window
        )
        self.tasks = {
            worker: FedInvocations(["f"], lambda outcome: self.feeder.settle([outcome]))
            for worker in (1, 2)
        }

    def send(self, worker: int, requests: list[FedRequest]) -> bool:
        self.sent.append((worker, [request.request_id for request in requests]))
        self.tasks[worker].arrived(requests)
        return True

    @contextmanager
    def feeding(self) -> Iterator[Fed]:
        self.feeder.start([1, 2])
        try:
            yield self
        finally:
            self.feeder.stop()

    def fed_one(self, deadline: float | None = None) -> tuple[FedInvocations, DRPCRequest]:
        """Request "r1" submitted, fed to task 1 and taken there by its spout."""
        self.table.submit("r1", "x", deadline)
        wait_until(lambda: self.feeder.in_flight == 1, 5)
        request = self.tasks[1].fetch_request("f")
        assert request is not None and request.function == "f"
        return self.tasks[1], request

    def answer(self, worker: int) -> DRPCRequest:
        request = self.tasks[worker].fetch_request("f")
        assert request is not None
        self.tasks[worker].result(request.return_info, request.args.upper())
        return request


def test_requests_go_to_the_task_with_the_fewest_in_flight_up_to_the_window() -> None:
    with Fed(window=2).feeding() as fed:
        for n in range(1, 6):
            fed.table.submit(f"r{n}", f"a{n}")
        wait_until(lambda: fed.feeder.in_flight == 4, 5, "four requests out")
        assert sorted((w, r) for w, ids in fed.sent for r in ids) == [
            (1, "r1"),
            (1, "r3"),
            (2, "r2"),
            (2, "r4"),
        ]
        assert fed.table.queued == 1  # both windows full: r5 waits in the table
        assert fed.answer(1).args == "a1"
        wait_until(lambda: fed.table.queued == 0, 5, "r5 fed once task 1 had room")
        assert fed.sent[-1] == (1, ["r5"])
        assert fed.log == [("result", "r1", "A1")]


def test_an_outcome_brings_its_events_before_it_and_a_start_comes_at_once() -> None:
    with Fed().feeding() as fed:
        task, request = fed.fed_one()
        began = time.monotonic()
        task.observer.step_started(request.return_info, "bolt0", began)
        assert fed.log[0][:3] == ("started", "r1", "bolt0")  # live, before any outcome
        assert fed.log[0][3] == pytest.approx(began, abs=0.01)
        task.observer.state_pinned(request.return_info, (("/state", 7),))
        task.observer.step_finished(request.return_info, "bolt0", began, began + 0.002, {"n": 1})
        task.result(request.return_info, "X")
        assert [entry[0] for entry in fed.log] == ["started", "pinned", "finished", "result"]
        _, _, step, start, end, attrs = fed.log[2]
        assert (step, attrs) == ("bolt0", {"n": 1})
        assert start == pytest.approx(began, abs=0.01)
        assert end - start == pytest.approx(0.002, abs=1e-6)  # float time, converted twice
        assert task.observer.take("r1") == ()  # taken with the outcome


def test_fail_pending_fails_what_is_out_typed_and_a_late_outcome_is_dropped() -> None:
    fed = Fed(window=1)
    fed.feeder.start([1, 2])
    for n in range(1, 4):
        fed.table.submit(f"r{n}", "x")
    wait_until(lambda: fed.feeder.in_flight == 2, 5)
    fed.feeder.stop()
    broke = Failure(DRPCExceptionType.INTERNAL_ERROR, "Internal error: the tasks broke")
    assert fed.feeder.fail_pending(broke) == 2
    assert sorted(fed.log) == [
        ("failed", "r1", DRPCExceptionType.INTERNAL_ERROR, "Internal error: the tasks broke"),
        ("failed", "r2", DRPCExceptionType.INTERNAL_ERROR, "Internal error: the tasks broke"),
    ]
    fed.answer(1)  # the task answers after all: nothing more reaches the table
    assert len(fed.log) == 2
    assert fed.table.queued == 1  # not taken: it waits for the tasks to be back
    with fed.feeding():
        wait_until(lambda: fed.table.queued == 0, 5, "r3 fed after the restart")
        assert fed.sent[-1] == (1, ["r3"])


def test_a_failure_keeps_its_type_and_a_deadline_travels_as_seconds_left() -> None:
    with Fed().feeding() as fed:
        task, request = fed.fed_one(deadline=time.monotonic() + 5.0)
        assert request.deadline is not None
        assert request.deadline - time.monotonic() == pytest.approx(5.0, abs=1.0)
        error = DRPCExecutionException("Timed Out", DRPCExceptionType.SERVER_TIMEOUT)
        task.fail_request(request.return_info, error)
        assert fed.log == [("failed", "r1", DRPCExceptionType.SERVER_TIMEOUT, "Timed Out")]


class Broken(Observer):
    def step_finished(self, *args: Any) -> None:
        raise RuntimeError("observer bug")


def test_an_observer_that_raises_never_holds_up_an_outcome() -> None:
    with Fed(observer=Broken()).feeding() as fed:
        task, request = fed.fed_one()
        task.observer.step_finished(request.return_info, "bolt0", 1.0, 2.0, {})
        task.result(request.return_info, "X")
        assert fed.log == [("result", "r1", "X")]


def test_a_window_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        RequestFeeder(Table([]), "f", lambda worker, requests: True, Observer(), window=0)


def test_the_records_on_the_wire_travel_whole() -> None:
    """Each crosses processes as its class and its fields; the defaulted ones too."""
    event = ObservedEvent("step_finished", ("bolt0", 1.0, 2.0, {"busy_ms": 1.0}))
    records = [
        FedRequest("r1", "here", "args", 2.5, observed=True),
        FedRequest("r2", "here", "args", None),
        FedOutcome("r1", None, int(DRPCExceptionType.FAILED_REQUEST), "no", (event,)),
        StepStarted("r1", "bolt0", 3.0),
        event,
    ]
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        assert pickle.loads(pickle.dumps(records, protocol)) == records
