"""A replayable source: a directory of append-only partition files of JSON lines.

Contract. Each file matching ``pattern`` (sorted by name) is a partition; each
complete line (ending in a newline) is one JSON value: with one declared
field it is that field's value, with several it must be a list of that many
values. A batch takes up to ``take_per_batch`` lines per partition; its
metadata is the byte range it read (``FileLogMeta(start, end, lines)``).

- ``FileLogTransactionalSpout`` (partitioned): a new batch starts where the
  previous one ended; a replay re-reads exactly the stored byte range, so
  the same txid always emits the same tuples. It is a ``RangeSpout``
  (``drpc.transactional.ranges``): its coordinator's ``next_range`` decides
  a byte range by scanning for line ends, so on Spark its lines are read on
  the executors.
- ``OpaqueFileLogTransactionalSpout``: a batch starts where the last
  committed (or, pipelined, the previous emitted) one ended; a replay may read
  more lines than the first attempt did if more were appended.
- Lines appended later are picked up by later batches; a partly written last
  line is left until its newline arrives. The coordinator watches the directory
  (``watch``, ``drpc.transactional.watching``), so an idle run starts its next
  batch as soon as a partition file grows. A line that is not valid JSON (or
  has the wrong number of values) is skipped and logged, or fails the batch
  with ``invalid="fail"``.

``append_lines(directory, partition, values)`` appends values to a partition
file (for producers and tests).
"""

from __future__ import annotations

import json
import json.scanner
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, BinaryIO, cast

from drpc.errors import FailedException
from drpc.model.components import BatchOutputCollector, Conf
from drpc.model.context import TopologyContext
from drpc.model.fields import Fields
from drpc.model.streams import OutputFieldsDeclarer
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.ranges import RangeSpout
from drpc.transactional.spouts import BaseOpaquePartitionedTransactionalSpout
from drpc.transactional.watching import watch_files

log = logging.getLogger(__name__)

DEFAULT_PATTERN = "*.jsonl"
READ_CHUNK = 1 << 16
_DECODER = json.JSONDecoder()
# (text, index) -> (the JSON value starting there, where it ends); typeshed mistypes its argument
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(cast(Any, _DECODER))
_NO_TX: Any = object()  # parse without a tx field
_JSON_STRING_LINES = re.compile(r'(?:"[^"\\\x00-\x1f]*"\n)*')


def _json_strings(text: str) -> list[str] | None:
    """Each line's value when every line of ``text`` (complete lines) is one JSON string
    with nothing to unescape: read with one pattern match and one split, where the
    scanner would take a call per line. None otherwise."""
    if _JSON_STRING_LINES.fullmatch(text) is None:
        return None
    return text[1:-2].split('"\n"') if text else []


_COUNT_BLOCK = 4096


def _after_line(body: bytes | bytearray, lines: int) -> int:
    """The offset just past the ``lines``-th line end of ``body`` (past its last one when
    it has fewer): whole blocks are counted, only the last one searched line by line."""
    if body.count(b"\n") <= lines:
        return body.rfind(b"\n") + 1
    cut, left = 0, lines
    while (found := body.count(b"\n", cut, cut + _COUNT_BLOCK)) < left:
        left -= found
        cut += _COUNT_BLOCK
    for _ in range(left):
        cut = body.find(b"\n", cut) + 1
    return cut


@dataclass(frozen=True)
class FileLogMeta:
    start: int
    end: int
    lines: int

    @property
    def tuples(self) -> int:
        return self.lines


def partition_files(
    directory: str | os.PathLike[str], pattern: str = DEFAULT_PATTERN
) -> list[Path]:
    return sorted(Path(directory).glob(pattern))


def append_lines(
    directory: str | os.PathLike[str], partition: int, values: Iterable[Any], width: int = 4
) -> Path:
    """Append JSON values to partition file ``part-<partition>.jsonl`` (created if needed)."""
    path = Path(directory) / f"part-{partition:0{width}d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.writelines(json.dumps(value) + "\n" for value in values)
    return path


class _Reader:
    def __init__(
        self, directory: str, pattern: str, fields: Fields, take: int, invalid: str
    ) -> None:
        self.directory = directory
        self.pattern = pattern
        self.fields = fields
        self.take = take
        self.invalid = invalid
        self._files: dict[int, BinaryIO] = {}

    def number_of_partitions(self) -> int:
        return len(partition_files(self.directory, self.pattern))

    def is_ready(self) -> bool:
        return True

    def watch(self, wakeup: Callable[[], None]) -> Callable[[], None]:
        """Wake the run when a partition file grows (``drpc.transactional.watching``)."""
        return watch_files(self.directory, self.pattern, wakeup)

    def _file(self, partition: int) -> BinaryIO:
        handle = self._files.get(partition)
        if handle is None:
            files = partition_files(self.directory, self.pattern)
            handle = self._files[partition] = files[partition].open("rb")
        return handle

    def _values(self, line: bytes, partition: int, offset: int) -> list[Any] | None:
        try:
            value = json.loads(line)
            if len(self.fields) == 1:
                return [value]
            if isinstance(value, list) and len(value) == len(self.fields):
                return value
            raise ValueError(f"expected a list of {len(self.fields)} values")
        except ValueError as error:
            where = f"partition {partition} at byte {offset} of {self.directory}"
            if self.invalid == "fail":
                raise FailedException(f"invalid line in {where}: {error}") from error
            log.error("skipped an invalid line in %s: %s", where, error)
            return None

    def _complete_lines(self, handle: BinaryIO, start: int, end: int | None) -> bytes:
        """The bytes of exactly [start, end), or of up to ``take`` complete lines from start."""
        handle.seek(start)
        if end is not None:
            return handle.read(end - start)
        body = bytearray()
        found = 0
        while found < self.take:
            chunk = handle.read(READ_CHUNK)
            if not chunk:
                break
            found += chunk.count(b"\n")
            body += chunk
        return bytes(body[: _after_line(body, self.take)])

    def parse(
        self, body: bytes, partition: int, start: int, tx: Any = _NO_TX
    ) -> Iterator[list[Any]]:
        """The values of each valid line of ``body``, which starts at byte ``start``; with
        ``tx``, each list of values starts with it (an emit of the spout's stream)."""
        prefixed = tx is not _NO_TX
        if not body.isascii():  # a str offset would not be a byte offset: line by line
            position = start
            for line in body.split(b"\n")[:-1]:
                values = self._values(line, partition, position)
                position += len(line) + 1
                if values is not None:
                    yield [tx, *values] if prefixed else values
            return
        # The common case decoded once and scanned in place: a line that is exactly one JSON
        # value is read by the decoder's scanner where it starts; anything else (spaces
        # around a value, extra data, invalid JSON) goes through _values, line by line.
        scan, single, width = _SCAN, len(self.fields) == 1, len(self.fields)
        text = body.decode("ascii")
        position, size = 0, text.rfind("\n") + 1  # an incomplete last line is not read
        if single and (strings := _json_strings(text[:size])) is not None:
            yield from map(list, zip(repeat(tx), strings) if prefixed else zip(strings))
            return
        while position < size:
            end = text.index("\n", position)
            try:
                value, stop = scan(text, position)
            except (StopIteration, ValueError):
                stop = -1
            if stop == end and single:
                yield [tx, value] if prefixed else [value]
            elif stop == end and isinstance(value, list) and len(value) == width:
                yield [tx, *value] if prefixed else value
            else:
                line = text[position:end].encode()
                if (values := self._values(line, partition, start + position)) is not None:
                    yield [tx, *values] if prefixed else values
            position = end + 1

    def read(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        start: int,
        end: int | None,
    ) -> FileLogMeta:
        """Emit the lines of [start, end), or up to ``take`` new complete lines from start."""
        body = self._complete_lines(self._file(partition), start, end)
        collector.emit_many(self.parse(body, partition, start, attempt))
        return FileLogMeta(start, start + len(body), body.count(b"\n"))

    def next_range(self, partition: int, last_meta: Any) -> FileLogMeta:
        """The byte range of a new batch of ``partition`` (up to ``take`` complete lines after
        ``last_meta``): its bytes are scanned for line ends, never parsed."""
        start = 0 if last_meta is None else last_meta.end
        body = self._complete_lines(self._file(partition), start, None)
        return FileLogMeta(start, start + len(body), body.count(b"\n"))

    def exact(self, partition: int, meta: FileLogMeta) -> bytes:
        """The bytes of ``meta``'s range, all of them or ``FailedException``."""
        body = self._complete_lines(self._file(partition), meta.start, meta.end)
        if meta.start + len(body) != meta.end:
            raise FailedException(
                f"partition {partition} of {self.directory} no longer holds bytes "
                f"{meta.start}-{meta.end}: the log was truncated, a batch cannot be replayed"
            )
        return body

    def values_in(self, partition: int, meta: FileLogMeta, tx: Any = _NO_TX) -> Iterator[list[Any]]:
        """The values of the lines of ``meta``'s range (a replay reads exactly these); with
        ``tx``, each list starts with it."""
        return self.parse(self.exact(partition, meta), partition, meta.start, tx)

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


class _TransactionalEmitter(_Reader):
    def emit_partition_batch_new(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_meta: Any,
    ) -> FileLogMeta:
        start = 0 if last_meta is None else last_meta.end
        return self.read(attempt, collector, partition, start, None)

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        meta: Any,
    ) -> None:
        collector.emit_many(self.values_in(partition, meta, attempt))


class _OpaqueEmitter(_Reader):
    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_meta: Any,
    ) -> FileLogMeta:
        start = 0 if last_meta is None else last_meta.end
        return self.read(attempt, collector, partition, start, None)


class _FileLogSpout:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        fields: Fields | Iterable[str] | str = ("value",),
        take_per_batch: int = 1000,
        *,
        pattern: str = DEFAULT_PATTERN,
        invalid: str = "skip",
    ) -> None:
        if take_per_batch < 1:
            raise ValueError(f"take_per_batch must be >= 1, got {take_per_batch}")
        if invalid not in ("skip", "fail"):
            raise ValueError(f"invalid must be 'skip' or 'fail', got {invalid!r}")
        self.directory = str(directory)
        self.fields = Fields.of(fields)
        self.take_per_batch = take_per_batch
        self.pattern = pattern
        self.invalid = invalid

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("tx", *self.fields))

    def _reader(self, kind: type[_Reader]) -> _Reader:
        return kind(self.directory, self.pattern, self.fields, self.take_per_batch, self.invalid)


class FileLogTransactionalSpout(_FileLogSpout, RangeSpout):
    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        return self._reader(_TransactionalEmitter)

    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        return self._reader(_TransactionalEmitter)


class OpaqueFileLogTransactionalSpout(_FileLogSpout, BaseOpaquePartitionedTransactionalSpout):
    def get_coordinator(self, conf: Conf, context: TopologyContext) -> Any:
        return self._reader(_OpaqueEmitter)

    def get_emitter(self, conf: Conf, context: TopologyContext) -> Any:
        return self._reader(_OpaqueEmitter)
