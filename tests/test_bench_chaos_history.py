"""The chaos run's checker (``bench/chaos_history.py``): histories in, exact anomalies out.

Each anomaly kind is shown by the smallest history that has it, beside the same history
without the fault, which must check clean: the checker neither misses a violation nor
invents one.
"""

from __future__ import annotations

from bench.chaos_history import (
    Anomaly,
    Append,
    Call,
    Fault,
    Row,
    check,
    down_windows,
    settle_repairs,
)

# Stream 0: seqs 1..4 with keys a, b, a, b; stream 1: seqs 1..2 with key a.
APPENDS = [
    Append(0, 1, "a"),
    Append(0, 2, "b"),
    Append(0, 3, "a"),
    Append(0, 4, "b"),
    Append(1, 1, "a"),
    Append(1, 2, "a"),
]


def call(
    rows: list[Row],
    *,
    invoked: float = 0.0,
    completed: float = 0.1,
    outcome: str = "ok",
    client: str = "c",
    audit: bool = False,
) -> Call:
    return Call(
        client,
        "thrift",
        tuple(f"{row.part}/{row.key}" for row in rows),
        invoked,
        completed,
        outcome,
        10.0,
        tuple(rows) if outcome == "ok" else (),
        audit=audit,
    )


def kinds(anomalies: list[Anomaly]) -> list[tuple[str, str]]:
    return [(anomaly.kind, anomaly.message) for anomaly in anomalies]


def test_a_consistent_history_checks_clean() -> None:
    calls = [
        call([Row(0, "a", 1, 1, 5), Row(0, "b", None, None, 5)], invoked=0, completed=1),
        call([Row(0, "a", 2, 3, 9), Row(0, "b", 1, 2, 9)], invoked=2, completed=3),
        call([Row(1, "a", None, None, None)], invoked=0, completed=0.5),
        call(
            [Row(0, "a", 2, 3, 12), Row(0, "b", 2, 4, 12), Row(1, "a", 2, 2, 12)],
            invoked=4,
            completed=5,
            audit=True,
        ),
    ]
    assert check(APPENDS, calls) == []


def test_a_double_count_and_an_unknown_seq_are_not_exactly_once() -> None:
    double = call([Row(0, "a", 3, 3, 7)])
    unknown = call([Row(0, "b", 1, 3, 7)])  # seq 3 was appended with key a
    assert kinds(check(APPENDS, [double, unknown])) == [
        ("not-exactly-once", "0/a counts 3 entries up to seq 3; 2 were appended"),
        ("not-exactly-once", "0/b names seq 3, never appended with that key"),
    ]


def test_rows_of_one_answer_naming_two_txids_are_mixed() -> None:
    mixed = call([Row(0, "a", 1, 1, 4), Row(0, "b", 1, 2, 5)])
    assert kinds(check(APPENDS, [mixed])) == [("mixed", "one answer names txids [4, 5]")]
    # Before the first commit a task may read the state as one map (no txid) and another
    # as partitioned at txid 0: both say nothing was committed.
    before_any_commit = call([Row(0, "a", None, None, None), Row(0, "b", None, None, 0)])
    assert check(APPENDS, [before_any_commit]) == []
    assert before_any_commit.txid == 0
    counts_without_commit = call([Row(0, "a", 1, 1, None)])
    assert kinds(check(APPENDS, [counts_without_commit])) == [
        ("mixed", "an answer with counts names no commit")
    ]


def test_two_answers_that_cannot_both_be_one_commit_are_a_wrong_version() -> None:
    # At txid 6 one answer saw stream 0 up to seq 3 (key a), the other saw key b stop at
    # seq 2 with seq 4 not yet in: the prefix is 3 in both. Clean:
    agreeing = [
        call([Row(0, "a", 2, 3, 6)], client="x"),
        call([Row(0, "b", 1, 2, 6)], client="y"),
    ]
    assert check(APPENDS, agreeing) == []
    # The second one saw seq 4 (key b) at the same txid, the first saw key a stop at 3
    # with nothing of a after it, so no bound; make it disagree with a null instead:
    first = call([Row(0, "b", None, None, 6)], client="x")  # stream 0 below seq 2
    second = call([Row(0, "a", 2, 3, 6)], client="y")  # stream 0 holds seq 3
    found = check(APPENDS, [first, second])
    assert kinds(found) == [
        (
            "wrong-version",
            "txid 6: stream 0 holds seq 3 in one answer and stops below 2 in another",
        )
    ]
    assert found[0].calls == (second, first)


def test_a_later_commit_holding_less_is_a_wrong_version() -> None:
    earlier = call([Row(0, "a", 2, 3, 6)], client="x")
    later = call([Row(0, "b", None, None, 7)], client="y")
    assert kinds(check(APPENDS, [earlier, later])) == [
        (
            "wrong-version",
            "stream 0 held seq 3 at txid 6 but stops below 2 at the later txid 7",
        )
    ]


def test_a_call_that_starts_after_a_newer_answer_and_reads_older_is_stale() -> None:
    newer = call([Row(1, "a", 2, 2, 9)], invoked=0, completed=1, client="x")
    stale = call([Row(1, "a", 2, 2, 8)], invoked=2, completed=3, client="y")
    found = check(APPENDS, [newer, stale])
    assert kinds(found) == [
        ("stale-read", "a call started after txid 9 was returned and read txid 8")
    ]
    assert found[0].calls == (newer, stale)
    overlapping = call([Row(1, "a", 2, 2, 8)], invoked=0.5, completed=3, client="y")
    assert check(APPENDS, [newer, overlapping]) == []


def test_untyped_failures_and_calls_past_their_timeout() -> None:
    typed = [
        call([], outcome="DRPCExecutionException:FAILED_REQUEST"),
        call([], outcome="DRPCConnectionError"),
        call([], outcome="DRPCTimeoutError", completed=10.5),
    ]
    assert check(APPENDS, typed) == []
    untyped = call([], outcome="ConnectionResetError")
    hung = call([], outcome="DRPCTimeoutError", completed=11.5)
    assert kinds(check(APPENDS, [untyped, hung])) == [
        ("untyped", "a call ended in ConnectionResetError"),
        ("hang", "a call took 11.50 s, past its 10 s"),
    ]


def test_an_audit_short_of_the_appends_is_lost() -> None:
    short = call([Row(0, "a", 2, 3, 12), Row(0, "b", 1, 2, 12), Row(1, "a", 2, 2, 12)], audit=True)
    assert kinds(check(APPENDS, [short])) == [
        ("lost", "stream 0: 4 entries appended, the final state counts 3 up to seq 3")
    ]
    refused = call([], outcome="DRPCConnectionError", audit=True)
    assert kinds(check(APPENDS, [refused])) == [("lost", "the final audit was not answered")]


def test_an_anomaly_describes_its_slice() -> None:
    stale = check(
        APPENDS,
        [
            call([Row(1, "a", 2, 2, 9)], invoked=0, completed=1, client="x"),
            call([Row(1, "a", 2, 2, 8)], invoked=2, completed=3, client="y"),
        ],
    )[0]
    assert stale.describe().splitlines() == [
        "stale-read: a call started after txid 9 was returned and read txid 8",
        "  x thrift [0.000, 1.000] ok txid=9: 1/a=2@2",
        "  y thrift [2.000, 3.000] ok txid=8: 1/a=2@2",
    ]


def test_the_down_windows_are_the_runner_s_its_workers_and_both_servers_at_once() -> None:
    faults = [
        Fault("runner", "runner", 10.0, 19.0),
        Fault("pause", "runner", 30.0, 42.0),
        Fault("link", "runner", 50.0, None),  # not repaired by the end
        Fault("server", "server0", 60.0, 61.0),
        Fault("pause", "server1", 60.5, 72.0),  # overlaps server0's kill: both down
        Fault("server", "server1", 80.0, 81.0),  # alone: the other server serves
        Fault("redis", "redis", 85.0, 85.5),
        Fault("worker", "pid 7", 90.0, 93.0, until=90.01),  # the resident job restarts
    ]
    assert down_windows(faults, 100.0) == [
        (10.0, 19.0),
        (30.0, 42.0),
        (50.0, 100.0),
        (60.5, 61.0),
        (90.0, 93.0),
    ]


def test_with_standbys_every_runner_s_faults_are_down_windows() -> None:
    """``--standbys 2``: the runner killed or stopped is whichever served, named
    ``runner``, ``standby`` or ``standby2``; each window ends when another took over."""
    faults = [
        Fault("runner", "runner", 10.0, 10.4),
        Fault("runner", "standby", 20.0, 29.0),  # the killed runner was not warm yet
        Fault("pause", "standby", 40.0, 52.0),
        Fault("server", "server0", 60.0, 61.0),
        Fault("runner", "standby2", 70.0, 70.3),
    ]
    assert down_windows(faults, 100.0) == [
        (10.0, 10.4),
        (20.0, 29.0),
        (40.0, 52.0),
        (70.0, 70.3),
    ]


def test_a_fault_nobody_waited_for_is_repaired_at_the_first_answer_after_it() -> None:
    answered = [
        call([Row(1, "a", 2, 2, 9)], invoked=1.0, completed=2.0),
        call([Row(1, "a", 2, 2, 9)], invoked=4.0, completed=6.0),
    ]
    refused = [call([], invoked=6.5, completed=7.0, outcome="DRPCConnectionError")]
    runner = Fault("runner", "runner", 2.5, until=3.0)
    link = Fault("link", "runner", 5.0, until=6.5)  # restored after the last answer
    server = Fault("server", "server0", 1.0, 1.5)
    settle_repairs([runner, link, server], [*answered, *refused], 10.0)
    assert (runner.repaired, link.repaired, server.repaired) == (6.0, 10.0, 1.5)
