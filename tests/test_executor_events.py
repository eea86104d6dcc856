"""Both executors report observation events: a span per step per request before its
outcome, where a request failed, and on Spark the jobs, batches and Spark job ids."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from drpc import DRPCExecutionException, LinearDRPCTopologyBuilder, runtime
from drpc.examples.reach import EXPECTED_REACH, build_reach
from drpc.observe import Observer
from drpc.requests import ReturnInfo
from drpc.testing import LocalDRPC

from .topologies import bolts

REACH_STEPS = ["prepare-request", "bolt0", "bolt1", "bolt2", "bolt3", "join-result"]
SPARK_ONLY = {"coalesce", "spark-job"}

pytestmark = pytest.mark.timeout(120)


class Recorder(Observer):
    """Records every event; notes whether a request was still outstanding at each span."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.drpc: LocalDRPC | None = None
        self.events: list[tuple[Any, ...]] = []
        self.spans: dict[str, list[tuple[str, float, float, dict[str, Any]]]] = defaultdict(list)
        self.late_spans: list[tuple[str, str]] = []
        self.started: dict[str, list[str]] = defaultdict(list)
        self.started_at: dict[tuple[str, str], float] = {}  # when the event arrived
        self.failed_in: dict[str, tuple[str, str]] = {}

    def step_started(self, return_info: ReturnInfo, step: str, now: float) -> None:
        with self.lock:
            self.started[return_info.request_id].append(step)
            self.started_at[return_info.request_id, step] = time.monotonic()

    def step_finished(
        self, return_info: ReturnInfo, step: str, start: float, end: float, attrs: dict[str, Any]
    ) -> None:
        assert self.drpc is not None
        outstanding = self.drpc._table.get(return_info.request_id) is not None
        with self.lock:
            self.spans[return_info.request_id].append((step, start, end, attrs))
            if not outstanding:
                self.late_spans.append((return_info.request_id, step))

    def request_failed_in(self, return_info: ReturnInfo, step: str, reason: str) -> None:
        with self.lock:
            self.failed_in[return_info.request_id] = (step, reason)

    def job_started(self, function: str, job: str, request_count: int, now: float) -> None:
        with self.lock:
            self.events.append(("job_started", function, job, request_count))

    def job_finished(self, function: str, job: str, ok: bool, seconds: float) -> None:
        with self.lock:
            self.events.append(("job_finished", function, job, ok))

    def batch_coalesced(self, function: str, size: int) -> None:
        with self.lock:
            self.events.append(("batch_coalesced", function, size))


EVERY_REQUEST = {"topology.stats.sample.rate": 1.0}
"""On the resident tasks the steps of one request in 20 are reported by default (Storm's
stats sampling): these tests look at every request's."""


def observed(executor: str, recorder: Recorder) -> LocalDRPC:
    drpc = LocalDRPC(executor=executor, timeout=30.0, observer=recorder, conf=EVERY_REQUEST)
    recorder.drpc = drpc
    return drpc


def test_every_request_gets_a_span_per_step_before_its_outcome(executor: str) -> None:
    recorder = Recorder()
    with observed(executor, recorder) as drpc:
        drpc.register(build_reach())
        urls = list(EXPECTED_REACH) * 2
        futures = [drpc.submit("reach", url) for url in urls]
        assert [f.result(60) for f in futures] == [EXPECTED_REACH[url] for url in urls]
    assert recorder.late_spans == []
    assert len(recorder.spans) == len(urls)
    for request_id, spans in recorder.spans.items():
        steps = [step for step, *_ in spans]
        assert len(steps) == len(set(steps)), f"request {request_id}: a step twice: {steps}"
        expected = set(REACH_STEPS) | {"return-results"}
        if executor == "spark-batch":
            expected |= SPARK_ONLY
        assert set(steps) == expected
        by_step = {step: (start, end, attrs) for step, start, end, attrs in spans}
        for step, (start, end, _) in by_step.items():
            assert start <= end, f"{step}: {start} > {end}"
        ends = [by_step[step][1] for step in [*REACH_STEPS, "return-results"]]
        assert ends == sorted(ends), f"request {request_id}: steps finished out of order"
        assert recorder.started[request_id][0] == (
            "coalesce" if executor == "spark-batch" else steps[0]
        )
        bolt1 = by_step["bolt1"][2]
        assert bolt1["tasks"] >= 1 and bolt1["busy_ms"] > 0
        if executor == "spark-batch":
            assert isinstance(bolt1["spark_job_id"], int)
            assert bolt1["spark_job_id"] == by_step["spark-job"][2]["spark_job_id"]
            job_start, job_end, _ = by_step["spark-job"]
            for step in ("bolt0", "bolt1", "bolt2", "bolt3"):
                start, end, _ = by_step[step]
                # worker wall-clock spans converted to the driver's clock fall inside the job
                assert job_start - 0.05 <= start <= end <= job_end + 0.05, step
            assert by_step["prepare-request"][1] <= job_start <= by_step["join-result"][0]


def test_failure_names_the_step_and_other_requests_still_answer(executor: str) -> None:
    builder = LinearDRPCTopologyBuilder("fails")
    builder.add_bolt(bolts.Identity(), 2)
    builder.add_bolt(bolts.FailOn("bad"), 2).shuffle_grouping()
    recorder = Recorder()
    with observed(executor, recorder) as drpc:
        drpc.register(builder)
        good, bad = drpc.submit("fails", "good"), drpc.submit("fails", "bad")
        assert good.result(60) == "good!"
        with pytest.raises(DRPCExecutionException, match="cannot handle"):
            bad.result(60)
    assert recorder.late_spans == []
    [(bad_id, (step, reason))] = recorder.failed_in.items()
    assert step == "bolt1"
    assert reason.startswith("FAILED_REQUEST: ") and "cannot handle 'bad'" in reason
    steps = {s for s, *_ in recorder.spans[bad_id]}  # the spans so far were reported
    if executor != "spark-batch":  # streaming: the steps the request reached
        assert {"prepare-request", "bolt0", "bolt1"} <= steps
        assert "return-results" not in steps
    else:  # its job's driver steps ran before the failure was handed over at its end
        assert {"coalesce", "prepare-request", "bolt0", "bolt1", "spark-job"} <= steps
    assert len(recorder.spans) == 2


@pytest.mark.usefixtures("spark_session")
def test_the_resident_tasks_report_the_steps_of_a_sample_and_every_failure() -> None:
    """Fed by the driver, the resident tasks measure and report the steps of one request
    in 1 / ``topology.stats.sample.rate`` (the first, the 21st, ...: every reported event
    crosses to the driver), and the step every failure was in."""
    builder = LinearDRPCTopologyBuilder("fails")
    builder.add_bolt(bolts.Identity(), 2)
    builder.add_bolt(bolts.FailOn("bad"), 2).shuffle_grouping()
    recorder = Recorder()
    with LocalDRPC(executor="spark", timeout=30.0, observer=recorder) as drpc:
        recorder.drpc = drpc
        drpc.register(builder)
        assert [drpc.execute("fails", str(n)) for n in range(41)] == [f"{n}!" for n in range(41)]
        with pytest.raises(DRPCExecutionException, match="cannot handle"):
            drpc.execute("fails", "bad")
    assert len(recorder.spans) == 3  # requests 1, 21 and 41; the failure's were not measured
    [(step, reason)] = recorder.failed_in.values()
    assert step == "bolt1" and "cannot handle 'bad'" in reason


@pytest.mark.usefixtures("spark_session")
def test_spark_reports_batches_and_jobs_with_real_job_ids() -> None:
    recorder = Recorder()
    with observed("spark-batch", recorder) as drpc:
        drpc.register(build_reach())
        futures = [drpc.submit("reach", url) for url in list(EXPECTED_REACH) * 3]
        for future in futures:
            future.result(60)
    coalesced = [e for e in recorder.events if e[0] == "batch_coalesced"]
    started = [e for e in recorder.events if e[0] == "job_started"]
    finished = [e for e in recorder.events if e[0] == "job_finished"]
    assert sum(size for _, _, size in coalesced) == len(futures)
    assert [e[3] for e in started] == [size for _, _, size in coalesced]
    assert {e[2] for e in finished} == {e[2] for e in started}
    assert all(ok for *_, ok in finished)
    tracker = runtime.current_session().sparkContext.statusTracker()
    job_ids = {
        attrs["spark_job_id"]
        for spans in recorder.spans.values()
        for step, _, _, attrs in spans
        if step == "spark-job"
    }
    assert len(job_ids) == len(started)
    for job_id in job_ids:
        info = tracker.getJobInfo(job_id)
        assert info is not None and info.status == "SUCCEEDED"


def test_without_an_observer_nothing_is_measured(executor: str) -> None:
    with LocalDRPC(executor=executor, timeout=30.0) as drpc:
        runtime_ = drpc.register(build_reach())
        assert drpc.execute("reach", "foo.com/blog/1") == "16"
        if executor == "local":
            assert runtime_.spans is None and runtime_.recorder is None
        elif executor == "spark":  # the driver only feeds; the resident tasks do not record
            assert runtime_.engine is None and runtime_.deployment.feeder is not None
            assert runtime_.deployment.observed is False
        else:
            assert runtime_._observing is False


class Broken(Observer):
    def step_started(self, *args: Any) -> None:
        raise RuntimeError("observer bug")

    def step_finished(self, *args: Any) -> None:
        raise RuntimeError("observer bug")

    def batch_coalesced(self, *args: Any) -> None:
        raise RuntimeError("observer bug")


def test_a_broken_observer_never_breaks_serving(executor: str) -> None:
    with LocalDRPC(executor=executor, timeout=30.0, observer=Broken()) as drpc:
        drpc.register(build_reach())
        for url, reach in EXPECTED_REACH.items():
            assert drpc.execute("reach", url) == reach


def test_a_step_is_reported_started_while_it_works(executor: str) -> None:
    builder = LinearDRPCTopologyBuilder("slow")
    builder.add_bolt(bolts.SleepThenEcho(), 1)
    recorder = Recorder()
    with observed(executor, recorder) as drpc:
        drpc.register(builder)
        assert drpc.execute("slow", "0.6") == "slept"
    [(request_id, spans)] = recorder.spans.items()
    [(start, end)] = [(start, end) for step, start, end, _ in spans if step == "bolt0"]
    assert end - start >= 0.6
    # live: the dashboard shows the step while it sleeps, not once it is done
    assert recorder.started_at[request_id, "bolt0"] < end - 0.4
