"""What a traced Spark job reports of its requests: per-request spans and failures.

Contract. ``JobTrace(observer, job)`` collects the spans of one job's
requests (driver steps with ``begin``/``finish``, Spark steps from the tasks'
``Timing`` records, the job's own ``spark-job`` span) and reports them per
request when it settles (``settle``), before its outcome goes out;
``failed`` reports the step a request failed in. ``RecordingInvocations``
is the job's view of the invocations handle: it remembers which requests
got an outcome and settles each request's trace first. Used by the job's
thread only; times are this process's ``time.monotonic()``, worker wall
clocks are assumed in sync with the driver's.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from drpc.errors import DRPCExecutionException, Failure
from drpc.executors.records import Timing
from drpc.observe import Observer
from drpc.requests import DRPCRequest, Invocations, ReturnInfo

if TYPE_CHECKING:
    from drpc.executors.spark.executor import Job


class RecordingInvocations:
    """The job's view of the invocations handle: remembers which requests got results,
    and reports a request's spans (``trace``) before its outcome goes out."""

    def __init__(self, invocations: Invocations, trace: JobTrace | None = None) -> None:
        self._invocations = invocations
        self._trace = trace
        self.delivered: set[str] = set()

    def fetch_request(self, function: str) -> DRPCRequest | None:
        return None

    def result(self, return_info: ReturnInfo, result: str) -> None:
        if self._trace is not None:
            self._trace.settle(return_info)
        self._invocations.result(return_info, result)
        self.delivered.add(return_info.request_id)

    def fail_request(self, return_info: ReturnInfo, error: DRPCExecutionException) -> None:
        if self._trace is not None:
            self._trace.settle(return_info)
        self._invocations.fail_request(return_info, error)
        self.delivered.add(return_info.request_id)


SPARK_JOB_STEP = "spark-job"
"""The Spark job's own span (submitted until its output was collected), and the step a
request failed in when its whole job failed or was cancelled."""
COALESCE_STEP = "coalesce"


class JobTrace:
    """The spans of one job's requests, reported per request when it settles.

    Used by the job's thread only. Spans shared by every request of the job are
    kept once; ``busy`` holds per-id seconds of Spark steps."""

    def __init__(self, observer: Observer, job: Job) -> None:
        self.observer = observer
        self.job = job
        self.common = {"job": job.tag, "batch_size": len(job.requests)}
        self.spans: list[tuple[str, float, float, dict[str, Any]]] = []
        self.busy: dict[str, dict[Hashable, float]] = {}
        self.ids: dict[ReturnInfo, Hashable] = {}
        self.current: tuple[str, float] | None = None
        self.reported: set[ReturnInfo] = set()

    def started(self, step: str, now: float) -> None:
        """A step began for every request of the job (reported live)."""
        for request in self.job.requests:
            self.observer.step_started(request.return_info, step, now)

    def begin(self, step: str) -> float:
        now = time.monotonic()
        self.current = (step, now)
        self.started(step, now)
        return now

    def finish(self) -> None:
        assert self.current is not None
        step, start = self.current
        self.spans.append((step, start, time.monotonic(), self.common))
        self.current = None

    def add_spark_steps(self, timings: list[Timing], attrs: dict[str, Any]) -> None:
        """Spark steps from their tasks' timings (worker wall clock to monotonic)."""
        offset = time.time() - time.monotonic()
        steps: dict[str, list[Any]] = {}
        for component, _, began, ended, busy in timings:
            step = steps.get(component)
            if step is None:
                steps[component] = [began, ended, 1]
            else:
                step[0], step[1], step[2] = min(step[0], began), max(step[1], ended), step[2] + 1
            if busy:
                per_id = self.busy.setdefault(component, {})
                for id, seconds in busy.items():
                    per_id[id] = per_id.get(id, 0.0) + seconds
        for component, (began, ended, tasks) in sorted(steps.items(), key=lambda i: i[1][1]):
            self.spans.append(
                (
                    component,
                    began - offset,
                    ended - offset,
                    {**attrs, **self.common, "tasks": tasks},
                )
            )

    def failed(self, return_info: ReturnInfo, failure: Failure) -> None:
        step = failure.component
        if step is None:
            step = self.current[0] if self.current is not None else SPARK_JOB_STEP
        reason = f"{failure.type.name}: {failure.message}"
        self.observer.request_failed_in(return_info, step, reason)

    def settle(self, return_info: ReturnInfo) -> None:
        """Report the request's spans so far (the running step ends now)."""
        if return_info in self.reported:
            return
        self.reported.add(return_info)
        job, observer = self.job, self.observer
        fetched = job.fetched.get(return_info, job.started)
        observer.step_finished(
            return_info,
            COALESCE_STEP,
            fetched,
            job.started,
            self.common,
        )
        id = self.ids.get(return_info)
        for step, start, end, attrs in self.spans:
            busy = self.busy.get(step)
            if busy is not None:
                attrs = {**attrs, "busy_ms": round(busy.get(id, 0.0) * 1000.0, 3)}
            observer.step_finished(return_info, step, start, end, attrs)
        if self.current is not None:
            step, start = self.current
            end = time.monotonic()
            observer.step_finished(return_info, step, start, end, self.common)
