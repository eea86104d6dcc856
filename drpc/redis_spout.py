"""A reliable Redis Streams spout for plain topologies (``drpc.topologies``): at least once,
through a consumer group.

Contract. ``RedisStreamsSpout(url, stream, group, fields=("value",), *, start="0",
batch=100, claim_idle=30.0, username=None, password=None, tls=None)``:

- Every spout task is a consumer of consumer group ``group`` on ``stream`` (the group
  is made when missing, at ``start``: ``"0"`` every entry the stream holds, ``"$"``
  only new ones), named ``HOST-PID-TASK``.
- ``next_tuple`` emits, in this order: an entry whose tree failed (again, with the
  values it had); entries another consumer has held unacknowledged for ``claim_idle``
  seconds (``XAUTOCLAIM``, looked for at most every ``claim_idle / 4`` seconds: the
  entries of a spout process that died; a Redis before 6.2 cannot, which is logged once);
  up to ``batch`` new entries
  (``XREADGROUP``). Each goes out with its entry id as message id and its fields, in
  the order of ``fields`` (a field the entry lacks is None; values are text).
- ``ack`` acknowledges the entry in Redis (``XACK``); until then it stays in the
  group's pending list, so an entry leaves it only after its tree completed: nothing is
  lost when the spout's process dies, and what it held is emitted again by a live
  consumer. ``fail`` emits the entry again. Replays may come after newer entries, as
  in Storm.
- Redis away: ``next_tuple`` emits nothing, logs the outage once and reconnects on a
  later poll; an ``XACK`` that could not be sent is sent again then (an entry acked
  late may meanwhile be claimed and emitted again: at least once, never lost).
- The connection settings are ``drpc.transactional.redis_streams``'s (``redis://`` or
  ``rediss://``, a password never logged).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from drpc.model.components import BaseRichSpout, SpoutOutputCollector
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields
from drpc.model.streams import OutputFieldsDeclarer
from drpc.transactional.brokers import TLS
from drpc.transactional.redis_streams import connect, redis_settings, transient_errors

log = logging.getLogger(__name__)


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


class RedisStreamsSpout(BaseRichSpout):
    """At-least-once entries of one Redis stream (see the module doc)."""

    def __init__(
        self,
        url: str,
        stream: str,
        group: str,
        fields: Sequence[str] = ("value",),
        *,
        start: str = "0",
        batch: int = 100,
        claim_idle: float = 30.0,
        username: str | None = None,
        password: str | None = None,
        tls: TLS | None = None,
    ) -> None:
        """
        :param start: where a group made here starts: ``"0"`` (default) every entry the
            stream holds, ``"$"`` only entries added after.
        :param batch: the most new entries one poll reads (default 100).
        :param claim_idle: seconds an entry may stay unacknowledged with another consumer
            before this one claims it (default 30: above the default
            ``topology.message.timeout.secs``, so a live spout's slow tree is not taken).
        """
        if not stream or not group:
            raise ValueError("a Redis Streams spout needs a stream and a group name")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if claim_idle <= 0:
            raise ValueError(f"claim_idle must be positive, got {claim_idle}")
        if not fields:
            raise ValueError("a Redis Streams spout needs at least one field")
        self.settings = redis_settings(url, username=username, password=password, tls=tls)
        self.stream = stream
        self.group = group
        self.fields = tuple(fields)
        self.start = start
        self.batch = batch
        self.claim_idle = claim_idle

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields(*self.fields))

    def open(
        self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        self.collector = collector
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{context.this_task_id}"
        self.client: Any = None
        self.in_flight: dict[str, list[Any]] = {}
        self.failed: deque[str] = deque()
        self.unsent_acks: list[str] = []
        self.next_claim = 0.0
        self.claiming = True
        self.away_since: float | None = None
        self.errors = transient_errors()

    def _connected(self) -> Any:
        if self.client is None:
            client = connect(self.settings)
            try:
                client.xgroup_create(self.stream, self.group, id=self.start, mkstream=True)
            except Exception as error:
                if "BUSYGROUP" not in str(error):
                    client.close()
                    raise
            self.client = client
            if self.away_since is not None:
                log.info(
                    "%s is back after %.1f s",
                    self.settings.description,
                    time.monotonic() - self.away_since,
                )
                self.away_since = None
        return self.client

    def _lost(self, error: BaseException) -> None:
        if self.away_since is None:
            self.away_since = time.monotonic()
            log.warning(
                "%s is away (%s); retrying", self.settings.description, type(error).__name__
            )
        if self.client is not None:
            self.client.close()
            self.client = None

    def next_tuple(self) -> None:
        try:
            client = self._connected()
            if self.unsent_acks:
                client.xack(self.stream, self.group, *self.unsent_acks)
                self.unsent_acks = []
            if self.failed:
                entry = self.failed.popleft()
                values = self.in_flight.get(entry)
                if values is not None:
                    self.collector.emit(values, msg_id=entry)
                return
            if self.claiming and time.monotonic() >= self.next_claim:
                self.next_claim = time.monotonic() + self.claim_idle / 4
                if self._emit(self._claimed(client)):
                    return
            read = client.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=self.batch
            )
            for _, entries in read or ():
                self._emit(entries)
        except self.errors as error:
            self._lost(error)

    def _claimed(self, client: Any) -> list[Any]:
        """Entries other consumers held past ``claim_idle``, now this one's."""
        try:
            claimed = client.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                min_idle_time=int(self.claim_idle * 1000),
                start_id="0-0",
                count=self.batch,
            )
        except self.errors:
            raise
        except Exception as error:
            if "unknown command" not in str(error).lower():
                raise
            self.claiming = False  # a Redis before 6.2 has no XAUTOCLAIM
            log.warning(
                "%s cannot claim the entries of dead consumers (%s): they stay pending",
                self.settings.description,
                error,
            )
            return []
        return list(claimed[1])

    def _emit(self, entries: Iterable[Any]) -> bool:
        emitted = False
        for entry_id, entry in entries:
            if entry is None:  # deleted from the stream while pending: nothing to emit
                continue
            entry_id = _text(entry_id)
            decoded = {_text(key): _text(value) for key, value in entry.items()}
            values = [decoded.get(field) for field in self.fields]
            self.in_flight[entry_id] = values
            self.collector.emit(values, msg_id=entry_id)
            emitted = True
        return emitted

    def ack(self, msg_id: Any) -> None:
        self.in_flight.pop(msg_id, None)
        try:
            self._connected().xack(self.stream, self.group, msg_id)
        except self.errors as error:
            self.unsent_acks.append(msg_id)
            self._lost(error)

    def fail(self, msg_id: Any) -> None:
        if msg_id in self.in_flight:
            self.failed.append(msg_id)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
