"""Bolts (and a spout) used by the topology tests (module-level so every executor can
pickle them)."""

from __future__ import annotations

import threading
import time
from typing import Any

from drpc import (
    BaseBasicBolt,
    BaseBatchBolt,
    BaseRichBolt,
    BaseRichSpout,
    BasicOutputCollector,
    BatchOutputCollector,
    FailedException,
    Fields,
    OutputCollector,
    OutputFieldsDeclarer,
    TopologyContext,
    Tuple,
)


class Silent(BaseRichSpout):
    """A spout of [id, i] tuples that emits none: a topology's source when a test drives
    its bolts by hand or only inspects its wiring."""

    def next_tuple(self) -> None:
        pass

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "i"))


class EmitN(BaseBasicBolt):
    """[id, "n"] -> n tuples [id, i]."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for i in range(int(tuple[1])):
            collector.emit([tuple[0], i])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "i"))


class Identity(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit(tuple.values)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "i"))


class DoneWhenAllArrived(BaseBatchBolt):
    """Finishes with "done" only if it saw exactly the n tuples the request implies."""

    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector, self.id, self.seen = collector, id, set()

    def execute(self, tuple: Tuple) -> None:
        self.seen.add(tuple[1])

    def finish_batch(self) -> None:
        expected = set(range(max(self.seen, default=-1) + 1))
        self.collector.emit(
            [self.id, "done" if self.seen == expected else f"saw {sorted(self.seen)}"]
        )

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class CountPerRequest(BaseBatchBolt):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector, self.id, self.count = collector, id, 0

    def execute(self, tuple: Tuple) -> None:
        self.count += 1

    def finish_batch(self) -> None:
        self.collector.emit([self.id, self.count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


class FailInFinish(CountPerRequest):
    def finish_batch(self) -> None:
        raise FailedException("the batch is incomplete")


class FailOn(BaseBasicBolt):
    """Passes [id, arg] through, but raises for one argument."""

    def __init__(self, bad: str) -> None:
        self.bad = bad

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        if tuple[1] == self.bad:
            raise ValueError(f"cannot handle {tuple[1]!r}")
        collector.emit([tuple[0], tuple[1] + "!"])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class SleepThenEcho(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        time.sleep(float(tuple[1]))
        collector.emit([tuple[0], "slept"])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class EmitUnpicklable(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], lambda: None])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class EmitWrongArity(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0]])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class RichUpper(BaseRichBolt):
    """A rich bolt that anchors and acks explicitly; fails arguments starting with "!"."""

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        if tuple[1].startswith("!"):
            self.collector.fail(tuple, "arguments may not start with '!'")
            return
        self.collector.emit([tuple[0], tuple[1].upper()], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class RichForgetsToAck(BaseRichBolt):
    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        self.collector.emit([tuple[0], "never acked"], anchors=tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class EmitTwice(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], "first"])
        collector.emit([tuple[0], "second"])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class EmitNothing(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        pass

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


class DirectToEveryTask(BaseRichBolt):
    """Emits one tuple directly to each task of the next step, tagged with the task id."""

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector
        targets = context.this_targets()["default"]
        [(next_step, _)] = targets.items()
        self.tasks = context.component_tasks(next_step)

    def execute(self, tuple: Tuple) -> None:
        for task in self.tasks:
            self.collector.emit_direct(task, [tuple[0], task], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "task"), direct=True)


class RecordTask(BaseBasicBolt):
    """Checks a direct tuple reached the task it was addressed to."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.task_id = context.this_task_id

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], int(tuple[1] == self.task_id)])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "hit"))


class SumField(BaseBatchBolt):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector, self.id, self.total = collector, id, 0

    def execute(self, tuple: Tuple) -> None:
        self.total += tuple[1]

    def finish_batch(self) -> None:
        self.collector.emit([self.id, self.total])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "total"))


class TaskIndexOf(BaseBasicBolt):
    """Emits [id, this task's index]: shows where a grouping sent the tuple."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.index = context.this_task_index

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], self.index])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "index"))


class CollectSorted(BaseBatchBolt):
    def prepare(
        self,
        conf: dict[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: Any,
    ) -> None:
        self.collector, self.id, self.values = collector, id, []

    def execute(self, tuple: Tuple) -> None:
        self.values.append(tuple[1])

    def finish_batch(self) -> None:
        self.collector.emit([self.id, ",".join(str(v) for v in sorted(self.values))])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "values"))


class AckFromAThread(BaseRichBolt):
    """Emits each input (anchored) and acks it from a timer thread after ``execute``
    returned, as a bolt handing work to a pool of its own does (Storm allows it);
    declares ``fields`` (its input's)."""

    def __init__(self, fields: tuple[str, ...] = ("id", "i"), seconds: float = 0.05) -> None:
        self.fields, self.seconds = fields, seconds

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        threading.Timer(self.seconds, self.finish, [tuple]).start()

    def finish(self, tuple: Tuple) -> None:
        self.collector.emit(tuple.values, anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields(*self.fields))


class Scale(BaseBasicBolt):
    """[id, i] -> [id, i * factor]."""

    def __init__(self, factor: int) -> None:
        self.factor = factor

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple[0], tuple[1] * self.factor])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "i"))
