"""pystorm components run inside the task, without a subprocess (``drpc-sparse --in-process``).

Contract. ``InProcessBolt(target, streams, path=None)`` and ``InProcessSpout(...)`` run the
pystorm ``Bolt``/``BatchingBolt`` or ``Spout`` class ``target`` (``"MODULE.CLASS"``,
imported with ``path`` first on ``sys.path``, as streamparse's ``src/``) in the task's own
process. The component runs its own pystorm code: each tuple (or spout command) is handed
to its ``_run`` as if it had read it from Storm, so auto-anchoring, auto-acking, tick
handling and batching are pystorm's; what it would write to Storm is translated instead:

- ``emit`` goes to the task's collector (anchored to the tuples whose ids it names; a
  ``task`` is a direct emit; a spout's ``id`` is its message id), and the task ids a
  ``need_task_ids`` emit asks for are handed straight back;
- ``ack`` and ``fail`` settle the tuple (a fail after an ``error`` report carries that
  error's last line, as over the multilang protocol); ``log`` goes to drpc's logging with
  the component's name; ``error`` to ``report_error``; ``sync`` and ``metrics`` to nothing.

It differs from the subprocess in one way: an exception from the component's code is
handled by the component's ``_handle_run_exception`` (pystorm reports it and fails the
tuple), and the component goes on, where pystorm's ``run`` would exit and its subprocess
be restarted. pystorm's own logging set-up (a handler on the root logger writing to Storm)
is not made: the component's ``logger`` is a drpc logger named after it.
"""

from __future__ import annotations

import importlib
import io
import itertools
import logging
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

from drpc.errors import ShellReportedError
from drpc.model.components import (
    BaseRichBolt,
    BaseRichSpout,
    OutputCollector,
    SpoutOutputCollector,
)
from drpc.model.context import TopologyContext
from drpc.model.streams import GivenStreams, StreamInfo
from drpc.model.tuples import Tuple
from drpc.multilang.bolt_protocol import reported_error
from drpc.multilang.component import logger_for
from drpc.multilang.handshake import context_message, jsonable_conf
from drpc.transactional.brokers import require

LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING}


def load_component(target: str, path: str | None) -> type:
    """The class ``target`` (``"MODULE.CLASS"``), ``path`` first on ``sys.path``."""
    if path is not None and path not in sys.path:
        sys.path.insert(0, path)
    module_name, _, class_name = target.rpartition(".")
    return getattr(importlib.import_module(module_name), class_name)


def made(cls: type) -> Any:
    """An instance of pystorm component ``cls`` that never touches this process's stdin or
    stdout: pystorm wraps the streams it is given in text wrappers of their buffers, whose
    collection would close the real ones. No signal handler either."""
    return cls(input_stream=io.BytesIO(), output_stream=io.BytesIO(), rdb_signal=None)


class _Translator:
    """What a pystorm component writes to Storm, done here (see the module doc)."""

    def __init__(self, name: str) -> None:
        self.log = logger_for(name)
        self.task_ids: deque[list[int]] = deque()
        self.reported: str | None = None

    def attach(self, component: Any, conf: dict[str, Any], context: TopologyContext) -> None:
        component.send_message = self.message
        component.read_task_ids = self.task_ids.popleft
        component.topology_name = conf.get("topology.name", "")
        component.task_id = context.this_task_id
        component.component_name = context.this_component_id
        component.debug = bool(conf.get("topology.debug", False))
        component.storm_conf = jsonable_conf(conf)
        component.context = context_message(context)
        component.logger = logger_for(context.this_component_id)
        component.initialize(component.storm_conf, component.context)

    def message(self, message: dict[str, Any]) -> None:
        command = message.get("command")
        if command == "emit":
            self.emit(message)
        elif command in ("ack", "fail"):
            reported, self.reported = self.reported, None
            self.settle(command, message.get("id"), reported)
        elif command == "log":
            self.log.log(LEVELS.get(message.get("level", 2), logging.ERROR), "%s", message["msg"])
        elif command == "error":
            self.reported = str(message.get("msg"))
            self.report(ShellReportedError(f"Shell Process Exception: {self.reported}"))

    def emit(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def settle(self, command: str, id: Any, reported: str | None) -> None:
        raise NotImplementedError

    def report(self, error: BaseException) -> None:
        raise NotImplementedError


class _InProcess(GivenStreams):
    """What both sides share: the target, its streams and where it is imported from."""

    def __init__(self, target: str, streams: dict[str, StreamInfo], path: str | None) -> None:
        self.target = target
        self.streams = streams
        self.path = path


class InProcessBolt(_InProcess, BaseRichBolt):
    """A pystorm bolt run in the task (see the module doc)."""

    def prepare(
        self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        require("pystorm", "pystorm", "streamparse", "in-process pystorm components")
        from pystorm.component import Tuple as PystormTuple

        self.pystorm_tuple = PystormTuple
        self.collector = collector
        self.ids: Iterator[int] = itertools.count(1)
        self.in_flight: dict[str, Tuple] = {}
        cls = load_component(self.target, self.path)
        self.component = component = made(cls)
        self.translator = translator = _BoltTranslator(self, context)
        self.next_tuple: Any = None
        component.read_tuple = self._read_tuple
        translator.attach(component, conf, context)

    def _read_tuple(self) -> Any:
        return self.next_tuple

    def execute(self, tuple: Tuple) -> None:
        id = str(next(self.ids))
        self.in_flight[id] = tuple
        self.next_tuple = self.pystorm_tuple(
            id, tuple.source_component, tuple.source_stream, tuple.source_task, list(tuple.values)
        )
        component = self.component
        try:
            component._run()
        except Exception as error:
            component._handle_run_exception(error)
        finally:
            component._current_tups = []

    def cleanup(self) -> None:
        self.in_flight.clear()


class _BoltTranslator(_Translator):
    def __init__(self, bolt: InProcessBolt, context: TopologyContext) -> None:
        super().__init__(context.this_component_id)
        self.bolt = bolt

    def emit(self, message: dict[str, Any]) -> None:
        bolt = self.bolt
        anchors = message.get("anchors") or []
        if not isinstance(anchors, list):
            anchors = [anchors]
        held = [bolt.in_flight[str(id)] for id in anchors if str(id) in bolt.in_flight]
        values = list(message["tuple"])
        stream = message.get("stream") or "default"
        task = message.get("task")
        if task:
            bolt.collector.emit_direct(task, values, held, stream)
            targets = [task]
        else:
            targets = bolt.collector.emit(values, held, stream)
        if message.get("need_task_ids", True) and not task:
            self.task_ids.append(targets)

    def settle(self, command: str, id: Any, reported: str | None) -> None:
        tuple = self.bolt.in_flight.pop(str(id), None)
        if tuple is None:
            return  # a tick tuple's, or already settled
        if command == "ack":
            self.bolt.collector.ack(tuple)
        else:
            self.bolt.collector.fail(
                tuple, reported_error(reported) if reported is not None else "the bolt failed it"
            )

    def report(self, error: BaseException) -> None:
        self.bolt.collector.report_error(error)


class InProcessSpout(_InProcess, BaseRichSpout):
    """A pystorm spout run in the task (see the module doc)."""

    def open(
        self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        require("pystorm", "pystorm", "streamparse", "in-process pystorm components")
        self.collector = collector
        cls = load_component(self.target, self.path)
        self.component = component = made(cls)
        self.command: dict[str, Any] = {}
        component.read_command = lambda: self.command
        translator = _SpoutTranslator(self, context)
        translator.attach(component, conf, context)

    def _run(self, command: dict[str, Any]) -> None:
        self.command = command
        try:
            self.component._run()
        except Exception as error:
            self.component._handle_run_exception(error)

    def next_tuple(self) -> None:
        self._run({"command": "next"})

    def ack(self, msg_id: Any) -> None:
        self._run({"command": "ack", "id": msg_id})

    def fail(self, msg_id: Any) -> None:
        self._run({"command": "fail", "id": msg_id})


class _SpoutTranslator(_Translator):
    def __init__(self, spout: InProcessSpout, context: TopologyContext) -> None:
        super().__init__(context.this_component_id)
        self.spout = spout

    def emit(self, message: dict[str, Any]) -> None:
        values = list(message["tuple"])
        stream = message.get("stream") or "default"
        task = message.get("task")
        msg_id = message.get("id")
        if task:
            self.spout.collector.emit_direct(task, values, msg_id, stream)
            return
        targets = self.spout.collector.emit(values, msg_id, stream)
        if message.get("need_task_ids", True):
            self.task_ids.append(targets)

    def settle(self, command: str, id: Any, reported: str | None) -> None:
        self.spout.collector.report_error(
            ShellReportedError(f"a spout sent {command!r} for {id!r}, which only bolts send")
        )

    def report(self, error: BaseException) -> None:
        self.spout.collector.report_error(error)
