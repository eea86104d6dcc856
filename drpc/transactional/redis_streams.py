"""Redis Streams as a replayable source: a partition is a stream key, a batch an id range.

Contract. ``RedisStreamsTransactionalSpout(url, keys, fields, take_per_batch)``
and ``OpaqueRedisStreamsTransactionalSpout`` (same arguments) read the
streams ``keys`` names: a format with one ``{}`` for the partition number
(``"words:{}"``: partitions ``words:0``, ``words:1``, ... as far as they exist
without a gap, as a Kafka topic numbers its partitions), or a single key (one
partition). A key created while the topology runs is a new partition from
the next batch on (``number_of_partitions`` grows; partitions never shrink:
a deleted key reads as empty).

- Each entry is one tuple: a declared field's value is the entry's field of
  that name (``codec="text"``: UTF-8, ``"json"``: JSON), as
  ``drpc.transactional.payloads`` reads it; an unreadable entry is skipped
  and logged, or fails the batch with ``invalid="fail"``.
- A batch takes up to ``take_per_batch`` entries per partition; its metadata
  is ``RedisStreamMeta(first, last, count)``: the first and last entry ids
  and how many entries it holds (an empty batch: ``first`` is "", ``last``
  where the previous batch ended).
- Transactional: a new batch starts after the previous one's last id
  (``XRANGE key (LAST + COUNT n``); a replay re-reads exactly the stored
  range (``XRANGE key FIRST LAST``) and must find the same first id, last id
  and count; if entries were trimmed (``XTRIM``) or deleted since, the batch
  fails with ``RangeTrimmedError`` naming the key and the range. It is a
  ``RangeSpout`` (``drpc.transactional.ranges``): on Spark the driver
  decides each range and the executors read the entries.
- Opaque: a batch starts after the last committed (or, pipelined, the
  previous emitted) one's last id and reads what exists: trimmed entries
  are simply gone.

How the driver decides a range (``next_range``). Redis has no "ids only"
range read, so the bounds come from a Lua script that runs ``XRANGE key
(LAST + COUNT n`` inside the server and answers only the first id, the last
id and the count. Measured on the 2-core machine (Redis 7.0, hiredis, one
stream of short words, 100 000 entries a call): the script takes 120-145 ms
of the server's time and sends 3 values; ``XRANGE ... COUNT 100000`` to the
driver takes 240-380 ms of the driver's CPU, for entries it would throw
away, on the core the executors need; ``XLEN``/``XINFO`` count a whole
stream, never the entries after an id. A server that refuses scripts
(``NOPERM``, scripting disabled) gets the ``XRANGE`` reading instead, said
once in the log. The script blocks the server for its run, like any command:
keep ``take_per_batch`` to what one batch should hold.

Watching. The coordinator watches its streams (``watch``: ``XREAD BLOCK`` on a
connection of its own), so an idle run starts its next batch as soon as an
entry is added to a partition it knows.

Connections. ``url`` is ``redis://[USER:PASSWORD@]HOST[:PORT][/DB]`` or
``rediss://`` for TLS; ``username``, ``password`` and ``tls`` (a
``drpc.transactional.brokers.TLS``) may be given beside it and win. The
password never shows in a repr, a log line or an error. A broker that
cannot be reached is retried with backoff for ``retry_for`` seconds (default
30) before the batch fails with ``BrokerUnavailableError``; meanwhile the
coordinator is not ready and the run's status says ``waiting for redis at
HOST:PORT``. Needs the ``redis`` package: ``pip install 'drpc-spark[redis]'``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from drpc.errors import BrokerError, RangeTrimmedError
from drpc.model.components import BatchOutputCollector, Conf
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.broker_spout import (
    DEFAULT_RETRY_FOR,
    BrokerReader,
    BrokerSpout,
    SourceOptions,
)
from drpc.transactional.brokers import TLS, BrokerSettings, Secret, require
from drpc.transactional.ranges import RangeSpout
from drpc.transactional.spouts import BaseOpaquePartitionedTransactionalSpout

log = logging.getLogger(__name__)

DEFAULT_PORT = 6379
READ_CHUNK = 10_000
"""Entries one ``XRANGE`` call returns at most: a long range is read in chunks."""
WATCH_BLOCK_MS = 1000
"""How long the watcher's ``XREAD`` blocks before it looks at the partitions again."""

_BOUNDS = """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
if #entries == 0 then return {} end
return {entries[1][1], entries[#entries][1], #entries}
"""

_NO_SCRIPTS = ("NOPERM", "unknown command", "disabled")
"""Words of the errors a server that refuses scripts answers with."""

Entries = list[tuple[bytes, list[bytes]]]


@dataclass(frozen=True)
class RedisStreamMeta:
    """A batch of one stream: entries ``first``..``last`` (ids), ``count`` of them."""

    first: str
    last: str
    count: int

    @property
    def tuples(self) -> int:
        return self.count


def redis_settings(
    url: str,
    *,
    username: str | None = None,
    password: str | Secret | None = None,
    tls: TLS | None = None,
    connect_timeout: float = 5.0,
) -> BrokerSettings:
    return BrokerSettings.from_url(
        url,
        kind="redis",
        default_port=DEFAULT_PORT,
        schemes=("redis",),
        tls_schemes=("rediss",),
        username=username,
        password=password,
        tls=tls,
        connect_timeout=connect_timeout,
    )


def connect(settings: BrokerSettings) -> Any:
    """A redis-py client of ``settings``, checked with ``PING``; raw replies to ``XRANGE``
    (lists, not dicts: the entries are read in Redis's own form). A login that fails is a
    ``BrokerError``, not something to retry."""
    redis = require("redis", "redis", "redis", "Redis Streams spouts")
    retry = require("redis.retry", "redis", "redis", "Redis Streams spouts")
    backoff = require("redis.backoff", "redis", "redis", "Redis Streams spouts")
    tls = settings.tls
    options: dict[str, Any] = {}
    if tls is not None:
        options = {
            "ssl": True,
            "ssl_ca_certs": tls.ca_file,
            "ssl_certfile": tls.cert_file,
            "ssl_keyfile": tls.key_file,
            "ssl_cert_reqs": "required" if tls.verify else "none",
            "ssl_check_hostname": tls.verify,
        }
    client = redis.Redis(
        host=settings.host,
        port=settings.port,
        db=settings.database,
        username=settings.username,
        password=settings.password.reveal() if settings.password is not None else None,
        socket_connect_timeout=settings.connect_timeout,
        socket_timeout=max(60.0, settings.connect_timeout),
        retry=retry.Retry(backoff.NoBackoff(), 0),  # BrokerLink retries, with backoff
        **options,
    )
    client.set_response_callback("XRANGE", lambda response, **options: response)
    try:
        client.ping()
    except (redis.AuthenticationError, redis.ResponseError) as error:
        client.close()
        raise BrokerError(
            f"{settings.description} refused the connection: "
            f"{settings.scrub(f'{type(error).__name__}: {error}')}"
        ) from None
    return client


def transient_errors() -> tuple[type[BaseException], ...]:
    redis = require("redis", "redis", "redis", "Redis Streams spouts")
    return (redis.ConnectionError, redis.TimeoutError, OSError)


def _id(value: Any) -> str:
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


class _Reader(BrokerReader[Any]):
    """Reads the streams of one spout; the coordinator and the emitters are readers."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._bounds: Any = None
        self._scripts = True

    def _connect(self) -> Any:
        return connect(self.settings)

    def _disconnect(self, client: Any) -> None:
        client.close()

    def _transient(self) -> tuple[type[BaseException], ...]:
        return transient_errors()

    def _ping(self, client: Any) -> object:
        return client.ping()

    def _exists(self, client: Any, name: str) -> bool:
        return bool(client.exists(name))

    def watch(self, wakeup: Callable[[], None]) -> Callable[[], None]:
        """Wake the run when an entry is added to a partition's stream: a thread of its own
        blocks in ``XREAD`` on every partition known (on a connection of its own; after an
        error it tries again a second later, the run's status saying what it waits for)."""
        stopped = threading.Event()

        def watching() -> None:
            last: dict[str, str] = {}
            client = None
            while not stopped.is_set():
                try:
                    if client is None:
                        client = connect(self.settings)
                    streams = {
                        key: last.get(key, "$")
                        for key in (self.name(p) for p in range(max(1, self._partitions)))
                    }
                    found = client.xread(streams, count=1, block=WATCH_BLOCK_MS)
                    for key, _ in found or ():
                        # on from the newest entry: a flood wakes the run once, not per entry
                        [(newest, _)] = client.xrevrange(key, count=1)
                        last[_id(key)] = _id(newest)
                except Exception as error:  # the broker away: the coordinator's retries say so
                    log.debug("watching %s: %s", self.settings.description, error)
                    if client is not None:
                        client.close()
                        client = None
                    stopped.wait(1.0)
                    continue
                if found:
                    wakeup()
            if client is not None:
                client.close()

        thread = threading.Thread(target=watching, name="drpc-redis-watch", daemon=True)
        thread.start()

        def stop() -> None:
            stopped.set()
            thread.join(timeout=WATCH_BLOCK_MS / 1000 + 5)

        return stop

    # -- ranges --------------------------------------------------------------------------

    def _start(self, last_meta: RedisStreamMeta | None) -> str:
        return f"({last_meta.last}" if last_meta is not None and last_meta.last else "-"

    def _empty(self, last_meta: RedisStreamMeta | None) -> RedisStreamMeta:
        return RedisStreamMeta("", last_meta.last if last_meta is not None else "", 0)

    def next_range(self, partition: int, last_meta: Any) -> RedisStreamMeta:
        """The next batch's bounds, decided in the server (see the module doc)."""
        key, start = self.name(partition), self._start(last_meta)
        if self._scripts:
            redis = require("redis", "redis", "redis", "Redis Streams spouts")
            try:
                bounds = self.link.call(
                    lambda client: self._script(client)(keys=[key], args=[start, self.take])
                )
            except redis.ResponseError as error:
                if not any(word in str(error) for word in _NO_SCRIPTS):
                    raise
                self._scripts = False
                log.warning(
                    "%s refused the bounds script (%s): batches are decided by reading their "
                    "entries on the driver",
                    self.settings.description,
                    self.settings.scrub(str(error)),
                )
            else:
                if not bounds:
                    return self._empty(last_meta)
                return RedisStreamMeta(_id(bounds[0]), _id(bounds[1]), int(bounds[2]))
        meta, _ = self.read_new(partition, last_meta)
        return meta

    def _script(self, client: Any) -> Any:
        if self._bounds is None or self._bounds.registered_client is not client:
            self._bounds = client.register_script(_BOUNDS)
        return self._bounds

    def _read(self, key: str, start: str, end: str, limit: int | None) -> Entries:
        """Entries of ``key`` from ``start`` to ``end`` (ids; ``(ID`` excludes it), at most
        ``limit``, in chunks of ``READ_CHUNK``."""

        def read(client: Any) -> Entries:
            entries: Entries = []
            first = start
            while limit is None or len(entries) < limit:
                want = READ_CHUNK if limit is None else min(READ_CHUNK, limit - len(entries))
                chunk = client.xrange(key, first, end, count=want)
                entries.extend(chunk)
                if len(chunk) < want:
                    break
                first = f"({_id(chunk[-1][0])}"
            return entries

        return self.link.call(read)

    def read_new(self, partition: int, last_meta: Any) -> tuple[RedisStreamMeta, Entries]:
        """Up to ``take`` entries after ``last_meta``, and their meta."""
        entries = self._read(self.name(partition), self._start(last_meta), "+", self.take)
        if not entries:
            return self._empty(last_meta), entries
        return RedisStreamMeta(_id(entries[0][0]), _id(entries[-1][0]), len(entries)), entries

    def exact(self, partition: int, meta: RedisStreamMeta) -> Entries:
        """The entries of ``meta``'s range, all of them or ``RangeTrimmedError``."""
        if meta.count == 0:
            return []
        key = self.name(partition)
        entries = self._read(key, meta.first, meta.last, None)
        found = (_id(entries[0][0]), _id(entries[-1][0]), len(entries)) if entries else ("", "", 0)
        if found != (meta.first, meta.last, meta.count):
            detail = (
                f"found {found[2]} of {meta.count} entries, from {found[0]} to {found[1]}"
                if entries
                else f"found none of {meta.count} entries"
            )
            raise RangeTrimmedError(
                f"{self.settings.description} stream {key!r}", meta.first, meta.last, detail
            )
        return entries

    def values_in(self, partition: int, meta: Any) -> Iterable[list[Any]]:
        return self.decoder.many_from_flat(self.exact(partition, meta))

    def _emit(
        self, attempt: TransactionAttempt, collector: BatchOutputCollector, entries: Entries
    ) -> None:
        collector.emit_many([attempt, *values] for values in self.decoder.many_from_flat(entries))


class _TransactionalEmitter(_Reader):
    def emit_partition_batch_new(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_meta: Any,
    ) -> RedisStreamMeta:
        meta, entries = self.read_new(partition, last_meta)
        self._emit(attempt, collector, entries)
        return meta

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        meta: Any,
    ) -> None:
        """Replay exactly the batch ``meta`` describes, or fail it."""
        self._emit(attempt, collector, self.exact(partition, meta))


class _OpaqueEmitter(_Reader):
    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_meta: Any,
    ) -> RedisStreamMeta:
        """A batch after ``last_meta`` of what exists now."""
        meta, entries = self.read_new(partition, last_meta)
        self._emit(attempt, collector, entries)
        return meta


class _RedisStreamsSpout(BrokerSpout):
    def __init__(
        self,
        url: str,
        keys: str,
        fields: Fields | Iterable[str] | str = ("value",),
        take_per_batch: int = 1000,
        *,
        username: str | None = None,
        password: str | Secret | None = None,
        tls: TLS | None = None,
        codec: str = "text",
        invalid: str = "skip",
        retry_for: float = DEFAULT_RETRY_FOR,
        connect_timeout: float = 5.0,
    ) -> None:
        settings = redis_settings(
            url, username=username, password=password, tls=tls, connect_timeout=connect_timeout
        )
        super().__init__(settings, keys, fields, take_per_batch, codec, invalid, retry_for)


class RedisStreamsTransactionalSpout(_RedisStreamsSpout, RangeSpout):
    """Partitioned, transactional: a replay re-reads exactly the stored id range."""

    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        return _TransactionalEmitter(self.options)

    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        return _TransactionalEmitter(self.options)


class OpaqueRedisStreamsTransactionalSpout(
    _RedisStreamsSpout, BaseOpaquePartitionedTransactionalSpout
):
    """Opaque: a replay reads on from the last committed id, whatever exists now."""

    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        return _OpaqueEmitter(self.options)

    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        return _OpaqueEmitter(self.options)
