"""The chaos run's history and its checker: pure records in, anomalies out.

Contract. A history is what the run saw, and nothing it was told by the system under
test beyond the answers themselves:

- ``Append(part, seq, key)``: an entry the producers know Redis holds (an append
  whose outcome was unknown was retried until Redis held it or refused it as a
  duplicate, so every append is known);
- ``Fault(kind, target, started, repaired, detail, until)``: one fault the nemesis
  injected;
- ``Call(...)``: one DRPC call: who made it and over what, the names it asked,
  ``invoked``/``completed`` (seconds on one monotonic clock), ``outcome`` (``"ok"``
  or the error's type, ``"DRPCExecutionException:FAILED_REQUEST"`` for a typed DRPC
  failure) and its ``rows`` (``Row(part, key, count, highest, txid)``: count and
  highest None for a key the state does not hold, txid the commit the row was read at).

``check(appends, calls, timeout_slack=...)`` returns every ``Anomaly`` (``kind``,
``message``, ``calls``: the smallest slice of the history that shows it):

- ``untyped``: a call that ended in an error that is not one of ``TYPED_OUTCOMES``;
- ``hang``: a call that took longer than its own timeout plus the slack;
- ``mixed``: an answer whose rows name different txids, or that holds counts and names
  no commit (txid 0, or None: a state no commit made partitioned yet; such an answer
  must hold nothing);
- ``not-exactly-once``: a row whose count is not the number of appended entries of
  its key up to its highest seq (an entry counted twice, or lost below it), or that
  names a seq never appended;
- ``wrong-version``: answers naming the same txid that cannot both be that commit (a
  stream's committed prefix bounded above by one and below by the other), or a later
  txid whose prefix is shorter than an earlier one's;
- ``stale-read``: a call that started after another had returned txid t and read an
  older txid;
- ``lost``: the final audit (``Call.audit``) does not hold every appended entry
  exactly once.

``down_windows(faults, end)`` are the spans when the only runner or every server was
down; ``settle_repairs(faults, calls, end)`` gives a fault the nemesis did not wait for
its repair: the first answer after its injection ended.

The committed state at txid t is a prefix of each stream (module doc of
``bench.chaos_workload``); an answer bounds each stream's prefix at its txid: at least
the highest seq it saw, and below the next seq of each key it read after that key's
highest. Answers naming one txid must leave a non-empty range for every stream.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

TYPED_OUTCOMES = frozenset(
    {
        "ok",
        "DRPCConnectionError",
        "DRPCTimeoutError",
        "ServerBusyError",
        "AuthorizationException",
    }
)
"""Outcomes a caller can act on; ``DRPCExecutionException:<type>`` is typed as well."""
UNBOUNDED = 1 << 62


@dataclass(frozen=True)
class Append:
    part: int
    seq: int
    key: str


@dataclass(frozen=True)
class Row:
    part: int
    key: str
    count: int | None
    highest: int | None
    txid: int | None


@dataclass(frozen=True)
class Call:
    client: str
    transport: str
    names: tuple[str, ...]
    invoked: float
    completed: float
    outcome: str
    timeout: float
    rows: tuple[Row, ...] = ()
    detail: str = ""
    audit: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def txid(self) -> int | None:
        """The commit the answer names (0: none yet), None without one answer."""
        txids = {row.txid or 0 for row in self.rows}
        return txids.pop() if len(txids) == 1 else None

    def describe(self) -> str:
        answer = (
            " ".join(f"{row.part}/{row.key}={row.count}@{row.highest}" for row in self.rows)
            if self.ok
            else self.detail
        )
        return (
            f"{self.client} {self.transport} [{self.invoked:.3f}, {self.completed:.3f}] "
            f"{self.outcome} txid={self.txid}: {answer}"
        )


@dataclass(frozen=True)
class Anomaly:
    kind: str
    message: str
    calls: tuple[Call, ...] = ()

    def describe(self) -> str:
        return "\n".join(
            [f"{self.kind}: {self.message}", *(f"  {call.describe()}" for call in self.calls)]
        )


def is_typed(outcome: str) -> bool:
    return outcome in TYPED_OUTCOMES or outcome.startswith("DRPCExecutionException:")


class AppendIndex:
    """The appended entries by stream and key, for counting what a prefix holds."""

    def __init__(self, appends: Iterable[Append]) -> None:
        seqs: dict[tuple[int, str], list[int]] = defaultdict(list)
        self.last: dict[int, int] = defaultdict(int)
        self.keys: dict[tuple[int, int], str] = {}
        for append in appends:
            seqs[(append.part, append.key)].append(append.seq)
            self.last[append.part] = max(self.last[append.part], append.seq)
            self.keys[(append.part, append.seq)] = append.key
        self.seqs = {name: sorted(found) for name, found in seqs.items()}

    def count_up_to(self, part: int, key: str, seq: int) -> int:
        return bisect.bisect_right(self.seqs.get((part, key), []), seq)

    def next_after(self, part: int, key: str, seq: int) -> int:
        """The first seq of ``key`` in ``part`` above ``seq`` (UNBOUNDED: none)."""
        found = self.seqs.get((part, key), [])
        at = bisect.bisect_right(found, seq)
        return found[at] if at < len(found) else UNBOUNDED


@dataclass
class _Bound:
    """One stream's committed prefix at one txid, as the answers bound it."""

    low: int = 0
    low_call: Call | None = None
    high: int = UNBOUNDED
    high_call: Call | None = None


@dataclass
class _Commits:
    bounds: dict[int, dict[int, _Bound]] = field(default_factory=lambda: defaultdict(dict))

    def bound(self, txid: int, part: int) -> _Bound:
        return self.bounds[txid].setdefault(part, _Bound())


def check(
    appends: Sequence[Append], calls: Sequence[Call], *, timeout_slack: float = 1.0
) -> list[Anomaly]:
    index = AppendIndex(appends)
    anomalies: list[Anomaly] = []
    commits = _Commits()
    for call in calls:
        anomalies.extend(_outcome(call, timeout_slack))
        if call.ok:
            anomalies.extend(_answer(call, index, commits))
    anomalies.extend(_versions(commits))
    anomalies.extend(_stale_reads(calls))
    for call in calls:
        if call.audit:
            anomalies.extend(_audit(call, index))
    return anomalies


def _outcome(call: Call, slack: float) -> list[Anomaly]:
    found = []
    if not is_typed(call.outcome):
        found.append(Anomaly("untyped", f"a call ended in {call.outcome}", (call,)))
    took = call.completed - call.invoked
    if took > call.timeout + slack:
        found.append(
            Anomaly("hang", f"a call took {took:.2f} s, past its {call.timeout:g} s", (call,))
        )
    return found


def _answer(call: Call, index: AppendIndex, commits: _Commits) -> list[Anomaly]:
    txids = {row.txid or 0 for row in call.rows}  # None: a state nobody committed to yet
    if len(txids) > 1:
        return [Anomaly("mixed", f"one answer names txids {sorted(txids)}", (call,))]
    found = []
    txid = txids.pop() if txids else None
    if txid == 0 and any(row.count is not None for row in call.rows):
        found.append(Anomaly("mixed", "an answer with counts names no commit", (call,)))
    for row in call.rows:
        if row.count is None or row.highest is None:
            low, high = 0, index.next_after(row.part, row.key, 0) - 1
        else:
            if (row.part, row.highest) not in index.keys or index.keys[
                (row.part, row.highest)
            ] != row.key:
                found.append(
                    Anomaly(
                        "not-exactly-once",
                        f"{row.part}/{row.key} names seq {row.highest}, never appended with "
                        "that key",
                        (call,),
                    )
                )
                continue
            expected = index.count_up_to(row.part, row.key, row.highest)
            if row.count != expected:
                found.append(
                    Anomaly(
                        "not-exactly-once",
                        f"{row.part}/{row.key} counts {row.count} entries up to seq "
                        f"{row.highest}; {expected} were appended",
                        (call,),
                    )
                )
            low, high = row.highest, index.next_after(row.part, row.key, row.highest) - 1
        if txid is None:
            continue
        bound = commits.bound(txid, row.part)
        if low > bound.low:
            bound.low, bound.low_call = low, call
        if high < bound.high:
            bound.high, bound.high_call = high, call
    return found


def _versions(commits: _Commits) -> list[Anomaly]:
    found = []
    highest_low: dict[int, tuple[int, int, Call | None]] = {}
    for txid in sorted(commits.bounds):
        for part, bound in sorted(commits.bounds[txid].items()):
            if bound.low > bound.high:
                found.append(
                    Anomaly(
                        "wrong-version",
                        f"txid {txid}: stream {part} holds seq {bound.low} in one answer and "
                        f"stops below {bound.high + 1} in another",
                        _calls(bound.low_call, bound.high_call),
                    )
                )
            earlier = highest_low.get(part)
            if earlier is not None and earlier[1] > bound.high:
                found.append(
                    Anomaly(
                        "wrong-version",
                        f"stream {part} held seq {earlier[1]} at txid {earlier[0]} but stops "
                        f"below {bound.high + 1} at the later txid {txid}",
                        _calls(earlier[2], bound.high_call),
                    )
                )
            if earlier is None or bound.low > earlier[1]:
                highest_low[part] = (txid, bound.low, bound.low_call)
    return found


def _calls(*calls: Call | None) -> tuple[Call, ...]:
    seen: list[Call] = []
    for call in calls:
        if call is not None and call not in seen:
            seen.append(call)
    return tuple(seen)


def _stale_reads(calls: Sequence[Call]) -> list[Anomaly]:
    answered = sorted(
        (call for call in calls if call.ok and call.txid is not None), key=lambda c: c.completed
    )
    ends = [call.completed for call in answered]
    newest: list[Call] = []  # newest[i]: the call of highest txid among answered[: i + 1]
    for call in answered:
        if not newest or call.txid > newest[-1].txid:  # type: ignore[operator]
            newest.append(call)
        else:
            newest.append(newest[-1])
    found = []
    for call in answered:
        before = bisect.bisect_left(ends, call.invoked)
        if before == 0:
            continue
        seen = newest[before - 1]
        if seen.txid > call.txid:  # type: ignore[operator]
            found.append(
                Anomaly(
                    "stale-read",
                    f"a call started after txid {seen.txid} was returned and read txid {call.txid}",
                    (seen, call),
                )
            )
    return found


def _audit(call: Call, index: AppendIndex) -> list[Anomaly]:
    if not call.ok:
        return [Anomaly("lost", "the final audit was not answered", (call,))]
    found = []
    highest: dict[int, int] = defaultdict(int)
    counted: dict[int, int] = defaultdict(int)
    for row in call.rows:
        highest[row.part] = max(highest[row.part], row.highest or 0)
        counted[row.part] += row.count or 0
    for part, last in sorted(index.last.items()):
        if highest[part] != last or counted[part] != last:
            found.append(
                Anomaly(
                    "lost",
                    f"stream {part}: {last} entries appended, the final state counts "
                    f"{counted[part]} up to seq {highest[part]}",
                    (call,),
                )
            )
    return found


@dataclass
class Fault:
    """One injected fault: ``started`` when it was injected, ``until`` when the injection
    itself ended (a cut link restored, a killed runner started again), ``repaired`` when
    the deployment was whole again (``bench.chaos.Nemesis``)."""

    kind: str
    target: str
    started: float
    repaired: float | None = None
    detail: str = ""
    until: float | None = None


Window = tuple[float, float]


def is_runner(name: str) -> bool:
    """Whether a fault's target is a runner: ``runner``, or with ``--standbys`` one of
    ``standby``, ``standby2``, ..."""
    return name == "runner" or name.startswith("standby")


def down_windows(faults: list[Fault], end: float) -> list[Window]:
    """When the only runner was down (killed, or cut off: to the first answer after;
    stopped: to its SIGCONT), or every server was (both killed or stopped at once). With a
    standby runner (``--standbys``) a fault's target is whichever runner served then,
    ``runner`` or a ``standby``: its window ends when another took over. A resident
    worker killed takes the runner down too, to the first answer after: its calls in
    flight fail at once by design (``INTERNAL_ERROR``, as when the runner dies), and the
    runner's resident job, one barrier stage, serves nothing until all of it is back."""

    def spans(kind: str, targets: Callable[[str], bool]) -> list[Window]:
        return [
            (fault.started, fault.repaired or end)
            for fault in faults
            if targets(fault.target) and fault.kind in (kind, "pause", "link")
        ]

    windows = spans("runner", is_runner)
    workers = [fault for fault in faults if fault.kind == "worker"]
    windows += [(fault.started, fault.repaired or end) for fault in workers]
    for first_start, first_end in spans("server", "server0".__eq__):
        for second_start, second_end in spans("server", "server1".__eq__):
            start, stop = max(first_start, second_start), min(first_end, second_end)
            if start < stop:
                windows.append((start, stop))
    return sorted(windows)


def settle_repairs(faults: list[Fault], calls: list[Call], end: float) -> None:
    """A fault not repaired by the nemesis itself is repaired at the first answer that
    completed after its injection ended (``end`` when none did)."""
    answered = sorted(call.completed for call in calls if call.ok)
    for fault in faults:
        if fault.repaired is None:
            after = bisect.bisect_left(answered, fault.until or fault.started)
            fault.repaired = answered[after] if after < len(answered) else end
