"""The file-log source: exact replays, appended lines, partial and invalid lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from drpc import FailedException, Fields
from drpc.model.components import BatchOutputCollector, OutputCollector
from drpc.transactional.attempt import TransactionAttempt
from drpc.transactional.filelog import (
    FileLogMeta,
    FileLogTransactionalSpout,
    OpaqueFileLogTransactionalSpout,
    _json_strings,
    append_lines,
)


class Capture(OutputCollector):
    def __init__(self) -> None:
        self.emitted: list[list[Any]] = []

    def emit(self, values: Any, anchors: Any = None, stream: str = "default") -> list[int]:
        self.emitted.append(list(values))
        return []


def emitter(spout: Any) -> Any:
    return spout.get_emitter({}, None)


ATTEMPT = TransactionAttempt(1, 1)


def batch(spout_emitter: Any, method: str, partition: int, meta: Any) -> tuple[list[Any], Any]:
    capture = Capture()
    result = getattr(spout_emitter, method)(ATTEMPT, BatchOutputCollector(capture), partition, meta)
    return [values[1:] for values in capture.emitted], result


def test_new_batches_continue_and_replays_are_exact(tmp_path: Path) -> None:
    append_lines(tmp_path, 0, ["a", "b", "c", "d", "e"])
    source = emitter(FileLogTransactionalSpout(tmp_path, Fields("word"), 2))
    first, meta1 = batch(source, "emit_partition_batch_new", 0, None)
    second, meta2 = batch(source, "emit_partition_batch_new", 0, meta1)
    assert (first, second) == ([["a"], ["b"]], [["c"], ["d"]])
    assert meta1 == FileLogMeta(0, 8, 2) and meta2.start == 8
    append_lines(tmp_path, 0, ["f"])  # appended lines do not change a replay
    replay, _ = batch(source, "emit_partition_batch", 0, meta2)
    assert replay == second
    third, meta3 = batch(source, "emit_partition_batch_new", 0, meta2)
    assert third == [["e"], ["f"]]
    assert batch(source, "emit_partition_batch_new", 0, meta3)[0] == []


def test_a_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = append_lines(tmp_path, 0, ["a"])
    with path.open("a") as out:
        out.write('"b')
    source = emitter(FileLogTransactionalSpout(tmp_path, Fields("word"), 10))
    lines, meta = batch(source, "emit_partition_batch_new", 0, None)
    assert lines == [["a"]]
    with path.open("a") as out:
        out.write('"\n')
    assert batch(source, "emit_partition_batch_new", 0, meta)[0] == [["b"]]


def test_invalid_lines_are_skipped_or_fail_the_batch(tmp_path: Path) -> None:
    path = append_lines(tmp_path, 0, [["a", 1]])
    with path.open("a") as out:
        out.write("{not json\n" + json.dumps(["b"]) + "\n" + json.dumps(["c", 3]) + "\n")
    fields = Fields("word", "n")
    lines, meta = batch(
        emitter(FileLogTransactionalSpout(tmp_path, fields, 10)),
        "emit_partition_batch_new",
        0,
        None,
    )
    assert lines == [["a", 1], ["c", 3]] and meta.lines == 4
    strict = emitter(FileLogTransactionalSpout(tmp_path, fields, 10, invalid="fail"))
    with pytest.raises(FailedException, match="invalid line in partition 0 at byte 9"):
        batch(strict, "emit_partition_batch_new", 0, None)


def test_each_line_is_read_as_json_loads_reads_it_alone(tmp_path: Path) -> None:
    lines = ['"a"', ' "b" ', "1,2", "[1,", "2]", "", '{"k": [1, "x"]}', "tru", "7.5e1", '"c"']
    with (tmp_path / "partition-0000.jsonl").open("w") as out:
        out.write("".join(line + "\n" for line in lines))

    def alone(line: str) -> list[Any]:
        try:
            return [[json.loads(line)]]
        except ValueError:
            return []

    expected = [values for line in lines for values in alone(line)]
    assert expected == [["a"], ["b"], [{"k": [1, "x"]}], [75.0], ["c"]]
    read, meta = batch(
        emitter(FileLogTransactionalSpout(tmp_path, Fields("word"), 100)),
        "emit_partition_batch_new",
        0,
        None,
    )
    assert read == expected and meta.lines == len(lines)
    strict = emitter(FileLogTransactionalSpout(tmp_path, Fields("word"), 100, invalid="fail"))
    # the first invalid line, "1,2", starts after 4 + 6 bytes
    with pytest.raises(FailedException, match=r"at byte 10 of .*: Extra data"):
        batch(strict, "emit_partition_batch_new", 0, None)


@pytest.mark.parametrize(
    ("lines", "one_match"),
    [
        (['"a"', '"b c"', '""', '"~\x7f"', '"a"'], True),  # plain strings: one match, one split
        (['"a"', '"b\\"c"'], False),  # an escape: the scanner unescapes it
        (['"a"', '"b\\u00e9"'], False),
        (['"a"', '"tab\there"'], False),  # a raw control character is invalid JSON
        (['"a"', ' "b"'], False),  # a space around the value
        (['"a"', '"b" "c"'], False),  # extra data
        (['"a"', ""], False),  # an empty line
        (['"a"', "7"], False),  # not a string
    ],
)
def test_a_log_of_plain_json_strings_reads_as_line_by_line(
    tmp_path: Path, lines: list[str], one_match: bool
) -> None:
    body = "".join(line + "\n" for line in lines)
    (tmp_path / "partition-0000.jsonl").write_text(body + '"partial')  # no newline: not read
    assert (_json_strings(body) is not None) is one_match

    def alone(line: str) -> list[Any]:
        try:
            return [[json.loads(line)]]
        except ValueError:
            return []

    read, meta = batch(
        emitter(FileLogTransactionalSpout(tmp_path, Fields("word"), 100)),
        "emit_partition_batch_new",
        0,
        None,
    )
    assert read == [values for line in lines for values in alone(line)]
    assert meta.lines == len(lines)
    assert all(type(values) is list for values in read)


def test_a_truncated_log_cannot_be_replayed(tmp_path: Path) -> None:
    path = append_lines(tmp_path, 0, ["a", "b"])
    source = emitter(FileLogTransactionalSpout(tmp_path, Fields("word"), 10))
    _, meta = batch(source, "emit_partition_batch_new", 0, None)
    path.write_text('"a"\n')
    source = emitter(FileLogTransactionalSpout(tmp_path, Fields("word"), 10))
    with pytest.raises(FailedException, match="truncated"):
        batch(source, "emit_partition_batch", 0, meta)


def test_opaque_batches_start_from_the_given_meta(tmp_path: Path) -> None:
    append_lines(tmp_path, 0, ["a", "b", "c"])
    source = emitter(OpaqueFileLogTransactionalSpout(tmp_path, Fields("word"), 2))
    first, meta = batch(source, "emit_partition_batch", 0, None)
    assert first == [["a"], ["b"]]
    assert batch(source, "emit_partition_batch", 0, meta)[0] == [["c"]]


@pytest.mark.parametrize("options", [{"take_per_batch": 0}, {"invalid": "ignore"}])
def test_settings_are_checked(tmp_path: Path, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        FileLogTransactionalSpout(tmp_path, Fields("word"), **{"take_per_batch": 5, **options})


@pytest.mark.parametrize("seed", range(20))
def test_the_cut_after_n_lines_matches_a_line_by_line_search(seed: int) -> None:
    import random

    from drpc.transactional import filelog

    rng = random.Random(seed)
    lines = [b"x" * rng.choice((0, 1, 7, 300, 5000)) for _ in range(rng.randint(0, 60))]
    body = b"\n".join(lines) + rng.choice((b"", b"\n", b"\npartial"))
    for wanted in (1, 2, 5, 17, 59, 60, 61, 1000):
        cut, found = 0, 0
        while found < wanted and (newline := body.find(b"\n", cut)) >= 0:
            cut, found = newline + 1, found + 1
        assert filelog._after_line(body, wanted) == cut
        assert filelog._after_line(bytearray(body), wanted) == cut
