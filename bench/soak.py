"""Soak: 1 000 concurrent callers against a DRPC server on Spark, bounded in time.

The server runs in its own process (``python -m drpc.server``, Spark executor,
``local[2]`` by default) serving reach, exclamation and ``soakfail`` (always
fails), with ``--wait-for-unserved`` so calls to ``soakheld`` (served by
nobody) wait for the server's deadline. The callers, in this process, each
loop until the time is up:

- good: reach (the four reference urls) and exclamation over Thrift
  (``AsyncDRPCClient``, several callers per connection), every answer checked;
- good over HTTP (aiohttp), every answer checked;
- failing: ``soakfail`` over Thrift, expecting FAILED_REQUEST;
- timeouts: ``soakheld`` over Thrift, expecting SERVER_TIMEOUT at the deadline;
- slow clients: raw sockets that send each request frame in three pieces with
  pauses and read the reply in two, within the server's read deadline.

Each soak runs on a server of its own, started fresh: a warm-up at the same
concurrency comes first, long enough for every kind of call to complete
twice (``WARMUP``: 45 s, more than twice the server's 20 s deadline that
the timeout calls wait out; with 20 s the server had not yet reached the
memory its steady load holds, and the soak's growth over the warm-up
counted that as growth); the server's RSS after it and after the soak are
compared, each read once every call has drained, the server's fds are back
to their count (every client connection closed) and one interval of its
memory trimmer (``drpc.server.trim``) has passed. Then, unless
``--no-abuse``, the same soak runs again on a second fresh server with the
abusive clients of ``bench/abusers.py`` beside the good ones (in a process
of their own, from other loopback addresses: reply amplification, clients
that never read, pipelined calls abandoned by closing, idle sockets at the
per-address cap, churning runner names, /metrics scrapes, malformed HTTP;
``--attacks`` picks some): the good calls' p99 is reported as a ratio to the
soak without them (target 1.5x at most) and the server's RSS after it
against the RSS after the soak without them (target 10 % more at most). A
server per phase, so neither what the first soak leaves behind nor the order
of the phases counts against the abusers.
Reported: throughput, p50/p99 per kind, outcome counts by type, peak RSS (the
server's Python process and its Spark JVM), open fds at start and end, and the
machine's 1-minute load average during each soak (lowest, highest) and the
abusers' own CPU seconds: other work on the machine moves every figure. Exit
status 1 when an outcome the mix does not ask for occurred in either soak (a
wrong answer, a connection error, INTERNAL_ERROR, "server busy"...), memory
grew by more than 10 % or a good p99 with the abusers passed 1.5x.

Usage: ``python bench/soak.py [--callers 1000] [--duration 60] [--warmup 45]
[--master local[2]] [--no-abuse] [--attacks amplify,idle,...]
[--out bench/results/soak.json]``. Progress (calls so far, their rate,
unexpected outcomes) shows on stderr: a live line on a terminal, plain lines
every few seconds otherwise (``drpc.progress``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from drpc.client import AsyncDRPCClient, DRPCExecutionException  # noqa: E402
from drpc.client.calls import execute_call  # noqa: E402

from bench import procs  # noqa: E402
from bench.abusers import ATTACKS  # noqa: E402
from drpc.examples.reach import EXPECTED_REACH  # noqa: E402
from drpc.progress import Progress  # noqa: E402
from drpc.protocol.wire import decode_message, from_wire_execution_error  # noqa: E402

HOST = "127.0.0.1"
SERVER_TIMEOUT = 20.0
WARMUP = 2 * SERVER_TIMEOUT + 5.0
"""Default warm-up seconds: the timeout calls complete twice within it."""
CALLERS_PER_CONNECTION = 10
MIX = {"good": 0.50, "http": 0.15, "failing": 0.15, "timeout": 0.10, "slow": 0.10}
EXPECTED = {
    "good": {"ok"},
    "http": {"ok"},
    "failing": {"FAILED_REQUEST"},
    "timeout": {"SERVER_TIMEOUT"},
    "slow": {"ok"},
}


@dataclass
class Tally:
    outcomes: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    latencies: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    examples: dict[tuple[str, str], str] = field(default_factory=dict)
    recording: bool = False
    calls: int = 0
    unexpected: int = 0

    def record(self, kind: str, outcome: str, started: float, detail: str = "") -> None:
        self.calls += 1
        if outcome not in EXPECTED[kind]:
            self.unexpected += 1
        if not self.recording:
            return
        self.outcomes[kind, outcome] += 1
        self.latencies[kind].append(time.monotonic() - started)
        if outcome not in EXPECTED[kind]:
            self.examples.setdefault((kind, outcome), detail[:200])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


# -- callers ------------------------------------------------------------------------------


async def _thrift_caller(
    kind: str, client: AsyncDRPCClient, index: int, stop: float, tally: Tally
) -> None:
    urls = list(EXPECTED_REACH)
    n = 0
    while time.monotonic() < stop:
        n += 1
        if kind == "good":
            function, args = (
                ("reach", urls[n % len(urls)]) if n % 2 else ("exclamation", f"{index}.{n}")
            )
            expected = EXPECTED_REACH[args] if function == "reach" else args + "!"
        else:
            function = "soakfail" if kind == "failing" else "soakheld"
            args, expected = f"{index}.{n}", ""
        started = time.monotonic()
        try:
            answer = await client.execute(function, args)
        except DRPCExecutionException as error:
            tally.record(kind, error.type.name, started, error.msg)
            continue
        except Exception as error:  # counted as an outcome the mix does not ask for
            tally.record(kind, type(error).__name__, started, str(error))
            await asyncio.sleep(0.1)
            continue
        tally.record(kind, "ok" if answer == expected else "WRONG", started, answer)


async def _http_caller(
    session: aiohttp.ClientSession, base: str, index: int, stop: float, tally: Tally
) -> None:
    n = 0
    while time.monotonic() < stop:
        n += 1
        args = f"h{index}.{n}"
        started = time.monotonic()
        try:
            async with session.post(f"{base}/drpc/exclamation", data=args.encode()) as response:
                text = await response.text()
                if response.status != 200:
                    tally.record("http", f"HTTP {response.status}", started, text)
                    continue
        except Exception as error:
            tally.record("http", type(error).__name__, started, str(error))
            await asyncio.sleep(0.1)
            continue
        tally.record("http", "ok" if text == args + "!" else "WRONG", started, text)


async def _slow_caller(port: int, index: int, stop: float, tally: Tally) -> None:
    n = 0
    reader = writer = None
    while time.monotonic() < stop:
        n += 1
        args = f"s{index}.{n}"
        started = time.monotonic()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(HOST, port)
            assert reader is not None
            data = execute_call("exclamation", args).encode(n)
            for piece in (data[:3], data[3:20], data[20:]):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.2)
            header = await reader.readexactly(4)
            await asyncio.sleep(0.2)
            reply = decode_message(await reader.readexactly(int.from_bytes(header, "big")))
            result = execute_call("exclamation", args).check_reply(reply, n)
            if result.e is not None:  # an error reply (a timeout...), not a wrong answer
                error = from_wire_execution_error(result.e)
                tally.record("slow", error.type.name, started, error.msg)
                continue
            answer = result.success
        except Exception as error:
            tally.record("slow", type(error).__name__, started, str(error))
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.1)
            continue
        tally.record("slow", "ok" if answer == args + "!" else "WRONG", started, str(answer))
    if writer is not None:
        writer.close()


async def _report(label: str, seconds: float, stop: float, tally: Tally) -> None:
    progress = Progress(sys.stderr)
    began = time.monotonic()
    try:
        while (now := time.monotonic()) < stop:
            rate = tally.calls / max(now - began, 1e-9)
            progress.update(
                f"{label}: {now - began:.0f}/{seconds:.0f} s, {tally.calls} calls "
                f"({rate:.0f}/s), {tally.unexpected} unexpected outcomes"
            )
            await asyncio.sleep(0.25)
    finally:
        progress.close(
            f"{label}: {tally.calls} calls, {tally.unexpected} unexpected outcomes; "
            "waiting for the calls still out"
        )


async def _load(
    ports: dict[str, int], callers: int, seconds: float, tally: Tally, label: str
) -> None:
    counts = {kind: round(share * callers) for kind, share in MIX.items()}
    counts["good"] += callers - sum(counts.values())
    stop = time.monotonic() + seconds
    clients: list[AsyncDRPCClient] = []
    tasks = []
    index = 0
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=counts["http"])
    ) as session:
        for kind in ("good", "failing", "timeout"):
            for i in range(counts[kind]):
                if i % CALLERS_PER_CONNECTION == 0:
                    clients.append(
                        AsyncDRPCClient(HOST, ports["port"], timeout=SERVER_TIMEOUT + 30)
                    )
                index += 1
                tasks.append(_thrift_caller(kind, clients[-1], index, stop, tally))
        base = f"http://{HOST}:{ports['http']}"
        tasks += [_http_caller(session, base, i, stop, tally) for i in range(counts["http"])]
        tasks += [_slow_caller(ports["port"], i, stop, tally) for i in range(counts["slow"])]
        report = asyncio.create_task(_report(label, seconds, stop, tally))
        async with asyncio.timeout(seconds + SERVER_TIMEOUT + 60):  # bounded, whatever happens
            await asyncio.gather(*tasks)
        await report
        for client in clients:
            await client.close()


# -- the run ------------------------------------------------------------------------------


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else 0.0


def _start_server(master: str, ports: dict[str, int], log: IO[str]) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    env.setdefault("SPARK_LOCAL_IP", HOST)
    return subprocess.Popen(
        [sys.executable, "-m", "drpc.server", "--executor", "spark", "--master", master,
         "--host", HOST, "--port", str(ports["port"]), "--invocations-port",
         str(ports["invocations"]), "--http-port", str(ports["http"]),
         "--timeout", str(SERVER_TIMEOUT), "--wait-for-unserved", "--log-level", "WARNING",
         "--topology", "drpc.examples.reach:topology",
         "--topology", "drpc.examples.exclamation:topology",
         "--topology", "bench.soak_topologies:failing"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True,
    )  # fmt: skip


def _wait_until_serving(
    server: subprocess.Popen[str], port: int, timeout: float, log: IO[str]
) -> None:
    async def probe() -> bool:
        try:
            async with AsyncDRPCClient(HOST, port, timeout=30) as client:
                return await client.execute("exclamation", "up") == "up!"
        except Exception:
            return False

    deadline = time.monotonic() + timeout
    while not asyncio.run(probe()):
        if server.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            raise SystemExit(f"the server did not start: {log.read()[-4000:]}")
        time.sleep(1)


SETTLE_TIMEOUT = 60.0
TRIM_INTERVAL = 10.0  # drpc.server.trim.DEFAULT_INTERVAL


def _settle(pid: int, fds: int) -> int:
    """After a phase: wait (up to ``SETTLE_TIMEOUT``) until the server's open fds are back
    to ``fds`` (every client connection closed), then one memory-trimmer interval and a
    margin, so the RSS read next is what the server holds, not what it has yet to give
    back. Returns the open fds then."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while procs.open_fds(pid) > fds and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(TRIM_INTERVAL + 2)
    return procs.open_fds(pid)


class _RSSSampler:
    """The largest RSS of a process seen since ``reset``, and the machine's 1-minute load
    average (lowest, highest), sampled every half second."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self.load: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, procs.status_kib(self.pid, "VmRSS"))
            self.load.append(os.getloadavg()[0])

    def reset(self) -> tuple[int, list[float]]:
        """The peak RSS and the load average range since the last reset."""
        peak, self.peak = self.peak, procs.status_kib(self.pid, "VmRSS")
        load, self.load = self.load, []
        return peak, [min(load, default=0.0), max(load, default=0.0)]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _phase(
    ports: dict[str, int], callers: int, seconds: float, label: str, attacks: tuple[str, ...]
) -> tuple[Tally, float, dict[str, Any] | None]:
    """One recorded soak; with ``attacks`` those abusive clients (``bench/abusers.py``) run
    beside the good ones in a process of their own, for as long."""
    abusers = None
    if attacks:
        abusers = subprocess.Popen(
            [sys.executable, str(HERE / "abusers.py"), "--port", str(ports["port"]),
             "--invocations-port", str(ports["invocations"]), "--http-port",
             str(ports["http"]), "--duration", str(seconds), "--attacks", ",".join(attacks)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
    tally = Tally(recording=True)
    began = time.monotonic()
    asyncio.run(_load(ports, callers, seconds, tally, label))
    elapsed = time.monotonic() - began
    report = None
    if abusers is not None:
        out, _ = abusers.communicate(timeout=120)
        report = json.loads(out) if abusers.returncode == 0 else {"exit": abusers.returncode}
    return tally, elapsed, report


def _kind_report(tally: Tally, elapsed: float) -> dict[str, Any]:
    total = sum(tally.outcomes.values())
    unexpected = {
        f"{kind}: {outcome}": count
        for (kind, outcome), count in tally.outcomes.items()
        if outcome not in EXPECTED[kind]
    }
    return {
        "seconds": round(elapsed, 1),
        "calls": total,
        "throughput_per_s": round(total / elapsed, 1),
        "latency_ms": {
            kind: {
                "n": len(samples),
                "p50": round(_percentile(samples, 50) * 1000),
                "p99": round(_percentile(samples, 99) * 1000),
            }
            for kind, samples in sorted(tally.latencies.items())
        },
        "outcomes": {
            f"{kind}: {outcome}": n for (kind, outcome), n in sorted(tally.outcomes.items())
        },
        "unexpected": unexpected,
        "unexpected_examples": {f"{k}: {o}": d for (k, o), d in tally.examples.items()},
    }


GOOD_KINDS = ("good", "http", "slow")
P99_TARGET = 1.5
RSS_TARGET = 0.10


def run(
    callers: int, seconds: float, warmup: float, master: str, attacks: tuple[str, ...]
) -> dict[str, Any]:
    phases = {"soak": _server_phase(callers, seconds, warmup, master, "soak", ())}
    if attacks:
        phases["soak with abusers"] = _server_phase(
            callers, seconds, warmup, master, "soak with abusers", attacks
        )
    return _report_phases(callers, master, phases)


def _server_phase(
    callers: int,
    seconds: float,
    warmup: float,
    master: str,
    label: str,
    attacks: tuple[str, ...],
) -> dict[str, Any]:
    """One phase on a server of its own: start it, warm it up, soak it, read what it holds
    after each, stop it. A fresh server per phase, so the phases compare under the same
    conditions: what one leaves behind (and the order they run in) cannot count against
    the other."""
    with tempfile.TemporaryFile("w+") as log:  # the server's stderr: never a full pipe
        ports = {"port": _free_port(), "invocations": _free_port(), "http": _free_port()}
        server = _start_server(master, ports, log)
        try:
            _wait_until_serving(server, ports["port"], 180, log)
            jvm = procs.jvm(server.pid)
            print(f"{label}: server pid {server.pid} (Spark JVM {jvm}); warm-up {warmup:g} s",
                  flush=True)  # fmt: skip
            idle_fds = procs.open_fds(server.pid)
            asyncio.run(_load(ports, callers, warmup, Tally(), f"{label}: warm-up"))
            start = {
                "fds": _settle(server.pid, idle_fds),
                "rss_kib": procs.status_kib(server.pid, "VmRSS"),
            }
            if jvm:
                start["jvm_rss_kib"] = procs.status_kib(jvm, "VmRSS")
            print(f"{label}: after warm-up {start}; {seconds:g} s with {callers} callers",
                  flush=True)  # fmt: skip
            sampler = _RSSSampler(server.pid)
            tally, elapsed, abusers = _phase(ports, callers, seconds, label, attacks)
            fds_after = _settle(server.pid, start["fds"])
            phase = _kind_report(tally, elapsed)
            phase["server_peak_rss_kib"], phase["load_average"] = sampler.reset()
            sampler.close()
            phase["after_warmup"] = start
            phase["after"] = {"rss_kib": procs.status_kib(server.pid, "VmRSS"), "fds": fds_after}
            phase["peak"] = {"server_rss_kib": procs.status_kib(server.pid, "VmHWM")}
            if jvm:
                phase["after"]["jvm_rss_kib"] = procs.status_kib(jvm, "VmRSS")
                phase["peak"]["jvm_rss_kib"] = procs.status_kib(jvm, "VmHWM")
            if abusers is not None:
                phase["abusers"] = abusers
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
            log.seek(0)
            phase_log = log.read()
    phase["server_log_lines"] = len(phase_log.splitlines())
    phase["growth_after_warmup"] = round(
        (phase["after"]["rss_kib"] - start["rss_kib"]) / start["rss_kib"], 4
    )
    return phase


def _report_phases(callers: int, master: str, phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    clean = phases["soak"]
    report: dict[str, Any] = {
        "callers": callers,
        "master": master,
        "mix": MIX,
        **{
            key: clean[key]
            for key in ("seconds", "calls", "throughput_per_s", "latency_ms", "load_average")
        },
        **{key: clean[key] for key in ("outcomes", "unexpected", "unexpected_examples")},
        "after_warmup": clean["after_warmup"],
        "after_soak": clean["after"],
        "peak": clean["peak"],
        "server_rss_growth": clean["growth_after_warmup"],
        "server_log_lines": clean["server_log_lines"],
    }
    ok = not clean["unexpected"] and clean["growth_after_warmup"] <= RSS_TARGET
    abused = phases.get("soak with abusers")
    if abused is not None:
        ratios = {
            kind: round(
                abused["latency_ms"][kind]["p99"] / max(1, clean["latency_ms"][kind]["p99"]), 2
            )
            for kind in GOOD_KINDS
            if kind in abused["latency_ms"] and kind in clean["latency_ms"]
        }
        end = clean["after"]["rss_kib"]
        abuse_growth = (abused["after"]["rss_kib"] - end) / end
        report["with_abusers"] = abused
        report["good_p99_ratio_with_abusers"] = ratios
        report["server_rss_growth_with_abusers"] = round(abuse_growth, 4)
        report["targets"] = {
            f"good p99 with abusers within {P99_TARGET}x": all(
                r <= P99_TARGET for r in ratios.values()
            ),
            f"server RSS after the abusers within {RSS_TARGET:.0%}": abuse_growth <= RSS_TARGET,
        }
        ok = ok and not abused["unexpected"] and all(report["targets"].values())
    report["ok"] = ok
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--callers", type=int, default=1000, help="concurrent callers (default %(default)s)"
    )
    parser.add_argument(
        "--duration", type=float, default=60.0, help="soak seconds (default %(default)g)"
    )
    parser.add_argument(
        "--warmup", type=float, default=WARMUP, help="warm-up seconds (default %(default)g)"
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default %(default)s)")
    parser.add_argument(
        "--out", default=str(HERE / "results" / "soak.json"), help="JSON report file"
    )
    parser.add_argument(
        "--no-abuse",
        action="store_true",
        help="skip the second soak, the one with the abusive clients beside the good ones",
    )
    parser.add_argument(
        "--attacks",
        default=",".join(ATTACKS),
        help="the abusive clients of the second soak, comma-separated (default: all of "
        "bench/abusers.py's)",
    )
    args = parser.parse_args()
    attacks = () if args.no_abuse else tuple(a for a in args.attacks.split(",") if a)
    if unknown := set(attacks) - set(ATTACKS):
        parser.error(f"unknown attacks: {', '.join(sorted(unknown))}")
    report = run(args.callers, args.duration, args.warmup, args.master, attacks)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
