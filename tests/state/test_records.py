"""drpc's own records (commit records, its batch metadata): explicit bytes, earlier pickles
still read, and a crafted record refused without running anything."""

from __future__ import annotations

import pickle
import re
import struct
from pathlib import Path

import pytest

from drpc.errors import StateFormatError, StateValueError
from drpc.state import CommitRecord, CoordinatorState, StateEnvironment
from drpc.state.codec import encode_name
from drpc.state.env import COORDINATOR_DB, ROTATING_DB
from drpc.state.records import (
    ABSENT_LENGTH,
    UNDO_TAG,
    decode_commit,
    decode_plain,
    decode_undo,
    encode_commit,
    encode_plain,
    encode_undo,
)


class Touch:
    """Unpickling it would create ``marker``: what a crafted record would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (Path.touch, (self.marker,))


def crafted(marker: Path) -> list[bytes]:
    """Pickles that run code when ``pickle.loads`` reads them, whole and inside a tuple."""
    return [
        pickle.dumps(Touch(marker), protocol=5),
        pickle.dumps((1, Touch(marker)), protocol=5),
        pickle.dumps((Touch(marker), 2.0), protocol=2),
    ]


def test_commit_records_are_explicit_bytes() -> None:
    data = encode_commit(2**64 - 1, 1700000000.25)
    assert data == b"c1" + struct.pack(">Qd", 2**64 - 1, 1700000000.25)
    assert decode_commit(data) == (2**64 - 1, 1700000000.25)


def test_undo_logs_round_trip_absent_and_empty_values_included() -> None:
    sections = {
        0: {b"k1": b"old", b"k2": None, b"": b"", b"\xff" * 300: b"v" * 70_000},
        1: {b"commit": b"c1" + b"\x00" * 16},
        7: {},
    }
    data = encode_undo(1700000000.5, sections)
    assert data.startswith(UNDO_TAG)
    assert decode_undo(data) == (1700000000.5, sections)
    # the layout: tag, time, sections; then per section tag, count, lengths, keys, values
    assert data[2:10] == struct.pack(">d", 1700000000.5) and data[10] == 3
    assert data[11:16] == struct.pack(">BI", 0, 4)
    assert struct.unpack_from("<4I", data, 16 + 16)[1] == ABSENT_LENGTH


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"c1" + b"\x00" * 18,
        encode_undo(1.0, {0: {b"key": b"value"}})[:-1],  # a value cut short
        encode_undo(1.0, {0: {b"key": b"value"}}) + b"!",  # bytes after the last section
        encode_undo(1.0, {0: {b"key": b"value"}})[:14],  # a section header cut short
    ],
)
def test_a_malformed_undo_log_is_refused_typed(data: bytes) -> None:
    with pytest.raises(StateFormatError, match="undo log"):
        decode_undo(data)


def test_plain_data_round_trips_and_anything_else_is_refused() -> None:
    for value in (None, 0, 7, -3, 2.5, "x", True, [1, None], {"a": [1, 2]}):
        data = encode_plain(value, "meta")
        assert data.startswith(b"j1")
        assert decode_plain(data, "meta") == value
    assert decode_plain(encode_plain((1, 2), "meta"), "meta") == [1, 2]  # tuples as lists
    with pytest.raises(StateValueError, match="meta cannot be stored as plain data"):
        encode_plain(object(), "meta")


def test_records_drpc_wrote_as_pickles_are_still_read() -> None:
    assert decode_commit(pickle.dumps((12, 1700000000.5), protocol=5)) == (12, 1700000000.5)
    assert decode_commit(pickle.dumps((12, 1700000000), protocol=5)) == (12, 1700000000.0)
    for value in (3, None, [1, 2]):
        assert decode_plain(pickle.dumps(value, protocol=5), "meta") == value


def test_a_crafted_record_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    assert pickle.loads(crafted(marker)[0]) is None and marker.exists()  # what it would do
    marker.unlink()
    for data in crafted(marker):
        with pytest.raises(StateFormatError, match="a commit record was refused: it names "):
            decode_commit(data)
        with pytest.raises(StateFormatError, match="the meta was refused: it names "):
            decode_plain(data, "the meta")
    assert not marker.exists()
    for data, problem in [
        (b"not a record", "in no format drpc reads"),
        (b"c1" + b"\0" * 15, "in no format drpc reads"),  # one byte short
        (pickle.dumps("a string", protocol=5), "holds str, not (txid, time)"),
        (pickle.dumps((True, 1.0), protocol=5), "holds tuple, not (txid, time)"),
        (b"\x80\x05\x95", "was refused"),  # a pickle cut short
    ]:
        with pytest.raises(StateFormatError, match=re.escape(problem)):
            decode_commit(data)
    with pytest.raises(StateFormatError, match="is not valid plain data"):
        decode_plain(b"j1{", "meta")


def test_the_coordinator_writes_explicit_records_and_reads_earlier_ones(
    env: StateEnvironment, tmp_path: Path
) -> None:
    plain = CoordinatorState(env, "own", plain_batch_meta=True)
    user = CoordinatorState(env, "user")
    env.run_write(lambda txn: plain.record_commit(txn, 1, committed_at=5.0))
    assert plain.batch_meta.get_state(1, lambda txid, prev: 3) == 3
    assert user.batch_meta.get_state(1, lambda txid, prev: {"user": "data"}) == {"user": "data"}
    commit_key = encode_name("own", "topology id") + b"commit"
    meta_key = encode_name("own", "id") + encode_name("meta", "ns") + (1).to_bytes(8, "big")
    user_key = encode_name("user", "id") + encode_name("meta", "ns") + (1).to_bytes(8, "big")
    with env.read() as txn:
        assert txn.get(COORDINATOR_DB, commit_key) == encode_commit(1, 5.0)
        assert txn.get(ROTATING_DB, meta_key) == b"j13"
        assert pickle.loads(txn.get(ROTATING_DB, user_key)) == {"user": "data"}  # user data
    # A directory written before: pickled records, read the same way.
    env.run_write(lambda txn: txn.put(COORDINATOR_DB, commit_key, pickle.dumps((4, 9.0))))
    env.run_write(lambda txn: txn.put(ROTATING_DB, meta_key, pickle.dumps(6)))
    assert plain.last_commit() == CommitRecord(4, 9.0)
    assert CoordinatorState.topologies(env) == {"own": CommitRecord(4, 9.0)}
    assert plain.batch_meta.get_state(1, lambda txid, prev: 0) == 6
    # A crafted one: refused, nothing run.
    marker = tmp_path / "ran"
    env.run_write(lambda txn: txn.put(COORDINATOR_DB, commit_key, crafted(marker)[1]))
    env.run_write(lambda txn: txn.put(ROTATING_DB, meta_key, crafted(marker)[0]))
    with pytest.raises(StateFormatError):
        CoordinatorState.topologies(env)
    with pytest.raises(StateFormatError):
        plain.next_txid()
    with pytest.raises(StateFormatError):
        plain.batch_meta.get_state(1, lambda txid, prev: 0)
    assert not marker.exists()
