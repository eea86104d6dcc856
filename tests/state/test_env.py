"""StateEnvironment: open once per process, durability knobs, reads and writes, limits."""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from drpc.errors import (
    DRPCError,
    StateClosedError,
    StateError,
    StateForkError,
    StateFullError,
    StateInUseError,
    StateKeyError,
)
from drpc.state import (
    DEFAULT_MAP_SIZE,
    MIN_MAP_SIZE,
    CoordinatorState,
    StateEnvironment,
    StateTxn,
    TransactionalMap,
)
from drpc.state.env import MAPS_DB
from drpc.state.topology import STATE_DIR_CONF, TopologyState, state_for
from tests.state.processes import expect_line, kill, kill_writer_mid_publish, spawn

KIB = 1024


def fill(txn: StateTxn, count: int, size: int = 1000, tag: bytes = b"k") -> None:
    for i in range(count):
        txn.put(MAPS_DB, tag + b"%06d" % i, b"x" * size)


def stored_keys(env: StateEnvironment, tag: bytes = b"k") -> int:
    with env.read() as txn:
        return sum(1 for _ in txn.scan(MAPS_DB, tag))


# -- open once per process ---------------------------------------------------------------


def test_open_returns_the_same_object_for_the_same_directory(
    env: StateEnvironment, state_dir: Path, tmp_path: Path
) -> None:
    assert StateEnvironment.open(state_dir) is env
    assert StateEnvironment.open(str(state_dir)) is env
    assert StateEnvironment.open(tmp_path / "other" / ".." / "state") is env
    link = tmp_path / "link"
    link.symlink_to(state_dir)
    assert StateEnvironment.open(link) is env


def test_other_directories_get_other_environments(env: StateEnvironment, tmp_path: Path) -> None:
    other = StateEnvironment.open(tmp_path / "other")
    try:
        assert other is not env
        other.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"other"))
        with env.read() as txn:
            assert txn.get(MAPS_DB, b"k") is None
    finally:
        other.close()


def test_reopening_with_other_options_is_refused_naming_them(
    env: StateEnvironment, state_dir: Path
) -> None:
    with pytest.raises(StateError, match=r"other options.*'sync': \(True, False\)"):
        StateEnvironment.open(state_dir, sync=False)
    assert StateEnvironment.open(state_dir, sync=True, map_size=DEFAULT_MAP_SIZE) is env


def test_opened_finds_the_open_environment_whatever_its_options(tmp_path: Path) -> None:
    directory = tmp_path / "sized"
    assert StateEnvironment.opened(directory) is None
    env = StateEnvironment.open(directory, map_size=MIN_MAP_SIZE, sync=False)
    try:
        assert StateEnvironment.opened(tmp_path / "sized" / ".." / "sized") is env
        assert TopologyState.at(str(directory)).env is env  # not refused for its options
    finally:
        env.close()
    assert StateEnvironment.opened(directory) is None


def test_the_constructor_is_not_the_way_to_open() -> None:
    with pytest.raises(TypeError, match=r"StateEnvironment\.open"):
        StateEnvironment(object(), "somewhere", None)  # type: ignore[arg-type]


def test_close_ends_use_and_a_later_open_is_a_new_object_with_the_data(state_dir: Path) -> None:
    env = StateEnvironment.open(state_dir)
    env.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"v"))
    env.close()
    env.close()  # closing twice is harmless
    assert env.closed
    with pytest.raises(StateClosedError, match="is closed"), env.read():
        pass
    with pytest.raises(StateClosedError):
        env.run_write(lambda txn: None)
    again = StateEnvironment.open(state_dir)
    try:
        assert again is not env
        with again.read() as txn:
            assert txn.get(MAPS_DB, b"k") == b"v"
    finally:
        again.close()


def test_create_false_refuses_a_directory_without_state(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="missing' does not exist"):
        StateEnvironment.open(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(StateError, match="empty' is not a drpc state directory"):
        StateEnvironment.open(tmp_path / "empty", create=False)
    assert list((tmp_path / "empty").iterdir()) == []
    StateEnvironment.open(tmp_path / "present").close()
    StateEnvironment.open(tmp_path / "present", create=False).close()


def test_state_errors_are_drpc_errors() -> None:
    assert issubclass(StateFullError, StateError)
    assert issubclass(StateError, DRPCError)
    error = StateFullError("/state", 1024, 2048)
    again = pickle.loads(pickle.dumps(error))
    assert (again.path, again.map_size, again.max_map_size) == ("/state", 1024, 2048)
    assert str(again) == str(error)


# -- durability knobs ----------------------------------------------------------------------


def test_commits_are_synced_by_default(env: StateEnvironment) -> None:
    flags = env.lmdb_flags()
    assert flags["sync"] is True
    assert flags["metasync"] is True
    assert env.options.sync and env.options.metasync


def test_sync_can_be_turned_off_and_flushed_on_demand(tmp_path: Path) -> None:
    env = StateEnvironment.open(tmp_path / "fast", sync=False, metasync=False)
    try:
        flags = env.lmdb_flags()
        assert flags["sync"] is False
        assert flags["metasync"] is False
        env.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"v"))
        env.sync()
    finally:
        env.close()
    reopened = StateEnvironment.open(tmp_path / "fast", sync=False, metasync=False)
    try:
        with reopened.read() as txn:
            assert txn.get(MAPS_DB, b"k") == b"v"
    finally:
        reopened.close()


def test_a_returned_commit_survives_the_process_being_killed(state_dir: Path) -> None:
    child = spawn("commit-then-wait", state_dir, "50")
    try:
        expect_line(child, "committed 1")
    finally:
        kill(child)
    env = StateEnvironment.open(state_dir)
    try:
        counts = TransactionalMap(env, "counts")
        assert counts.multi_get(range(50)) == [1] * 50
    finally:
        env.close()


def test_a_commit_whose_writer_died_before_publishing_it_is_read_after_recovery(
    state_dir: Path,
) -> None:
    env = StateEnvironment.open(state_dir)
    try:
        kill_writer_mid_publish(env, state_dir, "commit-then-hold", "5")
        coordinator = CoordinatorState(env, "crash-test")
        assert coordinator.next_txid() == 1  # LMDB's readers: the commit is not published
        env.recover_crashed_writer()
        assert coordinator.next_txid() == 2
        assert TransactionalMap(env, "counts").multi_get(range(5)) == [1] * 5
    finally:
        env.close()


# -- reads and writes ----------------------------------------------------------------------


def test_run_write_commits_and_returns_what_fn_returned(env: StateEnvironment) -> None:
    def body(txn: StateTxn) -> str:
        txn.put(MAPS_DB, b"k", b"v")
        assert txn.get(MAPS_DB, b"k") == b"v"  # a write sees its own writes
        return "done"

    assert env.run_write(body) == "done"
    with env.read() as txn:
        assert txn.get(MAPS_DB, b"k") == b"v"


def test_an_exception_in_a_write_aborts_it(env: StateEnvironment) -> None:
    env.run_write(lambda txn: txn.put(MAPS_DB, b"kept", b"1"))

    def body(txn: StateTxn) -> None:
        txn.put(MAPS_DB, b"lost", b"1")
        txn.delete(MAPS_DB, b"kept")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        env.run_write(body)
    with env.read() as txn:
        assert txn.get(MAPS_DB, b"lost") is None
        assert txn.get(MAPS_DB, b"kept") == b"1"


def test_reads_during_an_open_write_see_only_committed_data(env: StateEnvironment) -> None:
    env.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"old"))
    seen: dict[str, bytes | None] = {}

    def read_elsewhere() -> None:
        with env.read() as txn:
            seen["thread"] = txn.get(MAPS_DB, b"k")

    def body(txn: StateTxn) -> None:
        txn.put(MAPS_DB, b"k", b"new")
        txn.put(MAPS_DB, b"added", b"1")
        with env.read() as snapshot:
            seen["same thread"] = snapshot.get(MAPS_DB, b"k")
            seen["added"] = snapshot.get(MAPS_DB, b"added")
        reader = threading.Thread(target=read_elsewhere)
        reader.start()
        reader.join()

    env.run_write(body)
    assert seen == {"same thread": b"old", "added": None, "thread": b"old"}
    with env.read() as txn:
        assert txn.get(MAPS_DB, b"k") == b"new"


def test_a_read_transaction_is_a_snapshot(env: StateEnvironment) -> None:
    env.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"1"))
    with env.read() as before:
        env.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"2"))
        assert before.get(MAPS_DB, b"k") == b"1"
    with env.read() as after:
        assert after.get(MAPS_DB, b"k") == b"2"


def test_a_read_transaction_cannot_write_and_an_ended_one_cannot_be_used(
    env: StateEnvironment,
) -> None:
    with env.read() as txn, pytest.raises(StateError, match="cannot write in a read transaction"):
        txn.put(MAPS_DB, b"k", b"v")
    with pytest.raises(StateError, match="transaction has ended"):
        txn.get(MAPS_DB, b"k")


def test_a_write_inside_a_write_on_the_same_thread_is_refused(env: StateEnvironment) -> None:
    def body(txn: StateTxn) -> None:
        txn.put(MAPS_DB, b"outer", b"1")
        env.run_write(lambda inner: inner.put(MAPS_DB, b"inner", b"1"))

    with pytest.raises(StateError, match="inside another write"):
        env.run_write(body)
    with env.read() as txn:
        assert txn.get(MAPS_DB, b"outer") is None


def test_writes_from_many_threads_are_serialized(env: StateEnvironment) -> None:
    def increment(txn: StateTxn) -> None:
        current = int(txn.get(MAPS_DB, b"n") or b"0")
        time.sleep(0.0005)  # widen the window a lost update would need
        txn.put(MAPS_DB, b"n", b"%d" % (current + 1))

    def worker() -> None:
        for _ in range(25):
            env.run_write(increment)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with env.read() as txn:
        assert txn.get(MAPS_DB, b"n") == b"100"


def test_keys_up_to_lmdbs_limit_are_stored_and_longer_ones_refused(env: StateEnvironment) -> None:
    longest = b"k" * env.max_key_size
    env.run_write(lambda txn: txn.put(MAPS_DB, longest, b"v"))
    with env.read() as txn:
        assert txn.get(MAPS_DB, longest) == b"v"
    with pytest.raises(StateKeyError, match=f"longer than LMDB's limit of {env.max_key_size}"):
        env.run_write(lambda txn: txn.put(MAPS_DB, longest + b"k", b"v"))


def test_one_bad_key_among_many_is_refused_by_every_bulk_operation(env: StateEnvironment) -> None:
    good = {b"k%d" % n: b"v" for n in range(100)}
    too_long = b"k" * (env.max_key_size + 1)
    with pytest.raises(StateKeyError, match=f"longer than LMDB's limit of {env.max_key_size}"):
        env.run_write(lambda txn: txn.put_many(MAPS_DB, {**good, too_long: b"v"}))
    with pytest.raises(StateKeyError, match="empty key"):
        env.run_write(lambda txn: txn.put_many(MAPS_DB, {**good, b"": b"v"}))
    with env.read() as txn, pytest.raises(StateKeyError, match="longer than LMDB's limit"):
        txn.get_many(MAPS_DB, [*good, too_long])
    env.run_write(lambda txn: txn.put_many(MAPS_DB, good))
    with env.read() as txn:
        assert txn.get_many(MAPS_DB, [*good, b"absent"]) == [b"v"] * 100 + [None]


# -- full map: grow and retry, or fail typed ------------------------------------------------


def test_map_size_below_the_minimum_is_refused_and_the_minimum_works(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_MAP_SIZE}"):
        StateEnvironment.open(tmp_path / "tiny", map_size=MIN_MAP_SIZE - 4096)
    env = StateEnvironment.open(tmp_path / "tiny", map_size=MIN_MAP_SIZE)
    try:
        assert env.map_size == MIN_MAP_SIZE
        env.run_write(lambda txn: fill(txn, 5))
        assert stored_keys(env) == 5
    finally:
        env.close()


def test_max_map_size_below_map_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_map_size"):
        StateEnvironment.open(tmp_path / "s", map_size=256 * KIB, max_map_size=128 * KIB)


def test_a_full_map_grows_and_the_write_is_applied_again_without_running_fn_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = StateEnvironment.open(tmp_path / "s", map_size=MIN_MAP_SIZE, max_map_size=64 * 1024 * KIB)
    runs = []

    def body(txn: StateTxn) -> None:
        runs.append(1)
        fill(txn, 1000)  # about 1 MB: several doublings of 64 KiB

    try:
        with caplog.at_level("INFO", logger="drpc.state.env"):
            env.run_write(body, what="the test's fill")
        assert runs == [1]
        assert env.resizes >= 4
        grew = [r.getMessage() for r in caplog.records if "grew the map" in r.getMessage()]
        assert len(grew) == env.resizes
        assert all(line.endswith("for the test's fill") for line in grew)
        assert env.map_size == MIN_MAP_SIZE * 2**env.resizes
        assert stored_keys(env) == 1000
    finally:
        env.close()


def test_growth_may_reach_max_map_size_exactly(tmp_path: Path) -> None:
    env = StateEnvironment.open(tmp_path / "s", map_size=MIN_MAP_SIZE, max_map_size=512 * KIB)
    try:
        env.run_write(lambda txn: fill(txn, 300))  # needs more than 256 KiB
        assert env.map_size == 512 * KIB
        assert stored_keys(env) == 300
    finally:
        env.close()


def test_past_max_map_size_the_write_fails_typed_and_the_next_write_succeeds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s"
    env = StateEnvironment.open(path, map_size=MIN_MAP_SIZE, max_map_size=256 * KIB)
    try:
        env.run_write(lambda txn: fill(txn, 10, tag=b"a"))
        with pytest.raises(StateFullError) as caught:
            env.run_write(lambda txn: fill(txn, 1000, tag=b"b"))
        error = caught.value
        assert error.path == str(path.resolve())
        assert (error.map_size, error.max_map_size) == (256 * KIB, 256 * KIB)
        assert str(path.resolve()) in str(error) and "262144" in str(error)
        assert stored_keys(env, b"b") == 0  # nothing of the failed write
        env.run_write(lambda txn: fill(txn, 10, tag=b"c"))
        assert (stored_keys(env, b"a"), stored_keys(env, b"c")) == (10, 10)
    finally:
        env.close()


def test_fn_never_sees_a_full_map_so_hiding_errors_cannot_break_a_write(tmp_path: Path) -> None:
    env = StateEnvironment.open(tmp_path / "s", map_size=MIN_MAP_SIZE)
    attempts = []

    def careless(txn: StateTxn) -> None:
        attempts.append(1)
        with suppress(Exception):  # user code hiding errors must not commit a broken txn
            fill(txn, 200)

    try:
        env.run_write(careless)
        assert attempts == [1]
        assert env.resizes >= 1
        assert stored_keys(env) == 200
    finally:
        env.close()


# -- buffered writes: fn's own reads see them, nothing reaches LMDB before fn returns -------


def test_reads_in_a_write_see_its_own_puts_and_deletes(env: StateEnvironment) -> None:
    env.run_write(lambda txn: [txn.put(MAPS_DB, b"k%d" % i, b"old") for i in range(4)])
    seen: dict[str, Any] = {}

    def body(txn: StateTxn) -> None:
        txn.put(MAPS_DB, b"k1", b"new")
        txn.put(MAPS_DB, b"k9", b"added")
        seen["deleted k2"] = txn.delete(MAPS_DB, b"k2")
        seen["deleted k2 again"] = txn.delete(MAPS_DB, b"k2")
        seen["deleted absent"] = txn.delete(MAPS_DB, b"nothing")
        seen["deleted a fresh put"] = (txn.put(MAPS_DB, b"k7", b"x"), txn.delete(MAPS_DB, b"k7"))[1]
        seen["k1"], seen["k2"], seen["k9"] = (txn.get(MAPS_DB, k) for k in (b"k1", b"k2", b"k9"))
        seen["forward"] = list(txn.scan(MAPS_DB, b"k"))
        seen["reverse"] = list(txn.scan(MAPS_DB, b"k", reverse=True))
        seen["from k1"] = [key for key, _ in txn.scan(MAPS_DB, b"k", start=b"1")]
        seen["below k3"] = [key for key, _ in txn.scan(MAPS_DB, b"k", start=b"3", reverse=True)]
        with env.read() as other:  # another snapshot sees none of it yet
            seen["outside"] = other.get(MAPS_DB, b"k1")

    env.run_write(body)
    assert seen["deleted k2"] is True and seen["deleted k2 again"] is False
    assert seen["deleted absent"] is False and seen["deleted a fresh put"] is True
    assert (seen["k1"], seen["k2"], seen["k9"]) == (b"new", None, b"added")
    expected = [(b"k0", b"old"), (b"k1", b"new"), (b"k3", b"old"), (b"k9", b"added")]
    assert seen["forward"] == expected
    assert seen["reverse"] == expected[::-1]
    assert seen["from k1"] == [b"k1", b"k3", b"k9"]
    assert seen["below k3"] == [b"k1", b"k0"]
    assert seen["outside"] == b"old"
    with env.read() as txn:
        assert list(txn.scan(MAPS_DB, b"k")) == expected


def test_a_write_that_raises_leaves_nothing_and_its_txn_cannot_be_used_later(
    env: StateEnvironment,
) -> None:
    kept: list[StateTxn] = []

    def body(txn: StateTxn) -> None:
        kept.append(txn)
        txn.put(MAPS_DB, b"k", b"v")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        env.run_write(body)
    assert stored_keys(env) == 0
    with pytest.raises(StateError, match="the transaction has ended"):
        kept[0].get(MAPS_DB, b"k")
    env.run_write(lambda txn: kept.append(txn))
    with pytest.raises(StateError, match="the transaction has ended"):
        kept[1].put(MAPS_DB, b"k", b"v")


def test_an_empty_key_is_refused_where_it_is_written(env: StateEnvironment) -> None:
    with pytest.raises(StateKeyError, match="empty key"):
        env.run_write(lambda txn: txn.put(MAPS_DB, b"", b"v"))


def test_a_grown_write_refuses_to_apply_over_another_writers_commit(tmp_path: Path) -> None:
    """fn's bytes are applied again only onto the state fn read: if another process
    committed while the map grew, the write is refused whole."""
    path = tmp_path / "s"
    env = StateEnvironment.open(path, map_size=MIN_MAP_SIZE, resize_timeout=30.0)
    children: list[Any] = []

    def body(txn: StateTxn) -> None:
        fill(txn, 200)  # does not fit in 64 KiB
        # Its commit waits for LMDB's writer lock, free once this write aborts to grow.
        children.append(spawn("grow", path, "1000"))

    try:
        env.run_write(lambda txn: fill(txn, 5))
        # A read of this process holds the resize back until the other process committed.
        with read_in_another_thread(env) as (release, _):

            def release_after_the_child_committed() -> None:
                while not children:
                    time.sleep(0.01)
                expect_line(children[0], "done")
                release.set()

            watcher = threading.Thread(target=release_after_the_child_committed)
            watcher.start()
            with pytest.raises(StateError, match="another writer committed while the 200 values"):
                env.run_write(body, what="the 200 values")
            watcher.join(30)
        assert stored_keys(env) == 5  # nothing of the refused write
        assert stored_keys(env, b"g") == 1  # the other process's commit
        env.run_write(lambda txn: fill(txn, 200, tag=b"again"))  # the next write is fine
        assert stored_keys(env, b"again") == 200
    finally:
        for child in children:
            kill(child)
        env.close()


@contextmanager
def read_in_another_thread(env: StateEnvironment) -> Iterator[tuple[threading.Event, list[Any]]]:
    """A thread holds a read transaction until the yielded event is set, then reads b"k000000"."""
    opened, release = threading.Event(), threading.Event()
    seen: list[Any] = []

    def reader() -> None:
        with env.read() as txn:
            opened.set()
            release.wait(10)
            seen.append(txn.get(MAPS_DB, b"k000000"))

    thread = threading.Thread(target=reader)
    thread.start()
    opened.wait(10)
    try:
        yield release, seen
    finally:
        release.set()
        thread.join(10)


def test_a_resize_waits_for_reads_of_other_threads_to_end(tmp_path: Path) -> None:
    env = StateEnvironment.open(tmp_path / "s", map_size=MIN_MAP_SIZE, resize_timeout=10.0)
    try:
        with read_in_another_thread(env) as (release, seen):
            threading.Timer(0.3, release.set).start()
            started = time.monotonic()
            env.run_write(lambda txn: fill(txn, 200))
            assert time.monotonic() - started >= 0.25
        assert seen == [None]  # the reader kept its snapshot until it ended
        assert stored_keys(env) == 200
    finally:
        env.close()


def test_a_resize_gives_up_after_resize_timeout_and_the_env_stays_usable(tmp_path: Path) -> None:
    env = StateEnvironment.open(tmp_path / "s", map_size=MIN_MAP_SIZE, resize_timeout=0.2)
    try:
        with (
            read_in_another_thread(env),
            pytest.raises(StateError, match=r"1 read transaction\(s\) .* stayed open for 0.2 s"),
        ):
            env.run_write(lambda txn: fill(txn, 200))
        env.run_write(lambda txn: fill(txn, 200))
        assert stored_keys(env) == 200
    finally:
        env.close()


def test_a_thread_holding_a_read_cannot_resize_and_is_told_at_once(tmp_path: Path) -> None:
    env = StateEnvironment.open(tmp_path / "s", map_size=MIN_MAP_SIZE, resize_timeout=30.0)
    try:
        with env.read():
            started = time.monotonic()
            with pytest.raises(StateError, match="holds an open read transaction"):
                env.run_write(lambda txn: fill(txn, 200))
            assert time.monotonic() - started < 5
        env.run_write(lambda txn: fill(txn, 200))
        assert stored_keys(env) == 200
    finally:
        env.close()


def test_a_map_grown_by_another_process_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "s"
    env = StateEnvironment.open(path, map_size=MIN_MAP_SIZE)
    try:
        env.run_write(lambda txn: fill(txn, 5))
        child = spawn("grow", path, "4000000")  # 4000 values of 1000 bytes
        try:
            expect_line(child, "done")
        finally:
            kill(child)
        assert stored_keys(env, b"g") == 4000  # read beyond this process's old map
        env.run_write(lambda txn: fill(txn, 5, tag=b"after"))
        assert stored_keys(env, b"after") == 5
        assert env.map_size >= 4_000_000
    finally:
        env.close()


def test_readers_killed_mid_read_neither_pin_the_file_nor_keep_their_slots(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s"
    env = StateEnvironment.open(path, max_readers=4, sync=False, metasync=False)
    counts = TransactionalMap(env, "counts", default=0)
    readers = []
    try:
        env.run_write(lambda txn: counts.handle(txn, 1).multi_put(dict.fromkeys(range(100), 1)))
        readers = [spawn("read-and-wait", path) for _ in range(4)]  # every reader slot
        for reader in readers:
            expect_line(reader, "reading")
        for reader in readers:
            kill(reader)  # SIGKILL inside the read transaction: the slot stays behind
        for txid in range(2, 1502):
            env.run_write(
                lambda txn, txid=txid: counts.handle(txn, txid).multi_update(
                    dict.fromkeys(range(100), lambda value: value + 1)
                )
            )
        # Pinned at the dead readers' snapshot, 1 500 commits of 100 keys would have grown
        # the file by several MiB; reused pages keep it at a few hundred KiB.
        assert os.path.getsize(path / "data.mdb") < 1024 * KIB
        assert env.stale_readers_cleared == 4
        assert counts.get(7) == 1501  # a new reader of this process
        reader = spawn("read", path, "7")  # and of a new process
        readers.append(reader)
        expect_line(reader, "read 1501")
    finally:
        for reader in readers:
            kill(reader)
        env.close()


def test_a_read_that_finds_every_slot_taken_by_dead_readers_frees_them(tmp_path: Path) -> None:
    path = tmp_path / "s"
    env = StateEnvironment.open(path, max_readers=2)
    readers = []
    try:
        env.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"v"))
        readers = [spawn("read-and-wait", path) for _ in range(2)]
        for reader in readers:  # both inside their read before either dies (an open of
            expect_line(reader, "reading")  # drpc state frees the slots of dead readers)
        for reader in readers:
            kill(reader)
        with env.read() as txn:  # no write in between: the read itself frees the slots
            assert txn.get(MAPS_DB, b"k") == b"v"
        assert env.stale_readers_cleared == 2
    finally:
        for reader in readers:
            kill(reader)
        env.close()


# -- one writer per directory -------------------------------------------------------------


def test_a_directory_another_process_writes_is_refused_naming_its_pid(
    env: StateEnvironment, state_dir: Path
) -> None:
    holder = spawn("claim", state_dir, "global-count")
    try:
        expect_line(holder, "claimed")
        with pytest.raises(StateInUseError) as refused:
            env.claim_writer("words")
        assert (refused.value.pid, refused.value.holders) == (holder.pid, ("global-count",))
        assert f"process {holder.pid} (running 'global-count')" in str(refused.value)
        with env.read() as txn:  # reading needs no claim
            assert txn.get(MAPS_DB, b"k") is None
    finally:
        kill(holder)
    with env.claim_writer("words") as claim:  # the kernel dropped the dead holder's lock
        assert env.writers() == ("words",)
    assert claim.released and env.writers() == ()


def test_claims_of_one_process_coexist_per_holder_and_the_last_release_frees_the_directory(
    env: StateEnvironment, state_dir: Path
) -> None:
    first = env.claim_writer("global-count")
    second = env.claim_writer("words")
    with pytest.raises(StateInUseError, match=f"process {os.getpid()} .*'words'"):
        env.claim_writer("words")
    first.release()
    first.release()  # harmless
    contender = spawn("claim", state_dir, "other")
    try:
        assert contender.wait(timeout=60) != 0  # refused while "words" is held
        assert "StateInUseError" in (contender.stderr.read() if contender.stderr else "")
    finally:
        kill(contender)
    second.release()
    assert_another_process_can_claim(state_dir)


def test_close_releases_the_claims(state_dir: Path) -> None:
    env = StateEnvironment.open(state_dir)
    env.claim_writer("global-count")
    env.close()
    assert_another_process_can_claim(state_dir)


def assert_another_process_can_claim(state_dir: Path) -> None:
    contender = spawn("claim", state_dir, "other")
    try:
        expect_line(contender, "claimed")
    finally:
        kill(contender)


# -- fork and pickling ---------------------------------------------------------------------


def test_a_forked_child_cannot_use_or_reopen_the_parents_environment(
    env: StateEnvironment, state_dir: Path
) -> None:
    env.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"parent"))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report each outcome, never return into pytest
        outcomes = []
        try:
            for attempt in (
                lambda: env.read().__enter__(),
                lambda: env.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"child")),
                lambda: env.map_size,
                lambda: env.close(),
                lambda: StateEnvironment.open(state_dir),
            ):
                try:
                    attempt()
                    outcomes.append("ok")
                except StateForkError as error:
                    outcomes.append("fork" if str(os.getppid()) in str(error) else "fork?")
                except BaseException as error:
                    outcomes.append(type(error).__name__)
            os.write(write_end, ",".join(outcomes).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_end) as pipe:
        outcomes = pipe.read()
    assert status == 0
    assert outcomes == "fork,fork,fork,fork,fork"
    with env.read() as txn:  # the parent's environment is intact and unchanged
        assert txn.get(MAPS_DB, b"k") == b"parent"
    env.run_write(lambda txn: txn.put(MAPS_DB, b"k", b"parent again"))


def test_a_pickled_map_reopens_its_directory_in_another_process(
    env: StateEnvironment, state_dir: Path
) -> None:
    counts = TransactionalMap(env, "counts", default=0)
    env.run_write(lambda txn: counts.handle(txn, 1).multi_put({"cat": 8, "dog": 7}))
    assert pickle.loads(pickle.dumps(counts)).env is env  # same process: same environment
    child = spawn("read-pickled", state_dir)
    try:
        assert child.stdin is not None
        child.stdin.buffer.write(pickle.dumps(counts))  # type: ignore[attr-defined]
        child.stdin.close()
        expect_line(child, "[('cat', 8), ('dog', 7)]")
    finally:
        kill(child)


def test_a_topology_s_state_dir_is_its_real_path_wherever_the_process_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two directories named ``state`` relative to two working directories are two states,
    and a closed environment is opened again (a stale one answered every query with the
    other directory's maps)."""
    states = []
    for where in ("first", "second"):
        (tmp_path / where).mkdir()
        monkeypatch.chdir(tmp_path / where)
        states.append(state_for({}, {STATE_DIR_CONF: "state"}))
    assert [Path(state.env.path) for state in states] == [
        (tmp_path / "first" / "state").resolve(),
        (tmp_path / "second" / "state").resolve(),
    ]
    states[1].env.close()
    reopened = state_for({}, {STATE_DIR_CONF: "state"})
    assert not reopened.env.closed and reopened.env.path == states[1].env.path
    for env in (states[0].env, reopened.env):
        env.close()
