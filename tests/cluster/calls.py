"""The callers of the multi-host tests, run on a host of their own: ``python -m
tests.cluster.calls check|load --server ADDRESS``. Each prints one JSON line last.

- ``check``: reach of the three reference urls through the Python Thrift client, the
  dashboard's Spark UI link (``/api/status``) and whether that UI answers;
- ``load``: ``--callers`` async clients call reach without pause; once answers flow it
  prints ``loaded`` and waits for a line on stdin (the test kills something meanwhile),
  keeps the load on for ``--after`` seconds, stops, then makes 20 calls at once.
  Every outcome is a result or a typed error (its type name); nothing is retried.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import time
import urllib.request
from typing import Any

from drpc.client import AsyncDRPCClient, DRPCClient

from drpc.errors import DRPCError, DRPCExecutionException
from drpc.examples.reach import EXPECTED_REACH

URLS = ["foo.com/blog/1", "engineering.twitter.com/blog/5", "tech.backtype.com/blog/123"]


def check(server: str, port: int, http_port: int) -> dict[str, Any]:
    with DRPCClient(server, port, timeout=120) as client:
        reach = {url: client.execute("reach", url) for url in URLS}
    with urllib.request.urlopen(f"http://{server}:{http_port}/api/status", timeout=30) as reply:
        spark_ui = json.load(reply).get("spark_ui")
    page = ""
    if spark_ui:
        with urllib.request.urlopen(spark_ui, timeout=30) as reply:
            page = reply.read().decode(errors="replace")
    return {"reach": reach, "spark_ui": spark_ui, "ui_title": _title(page)}


def _title(page: str) -> str:
    start = page.find("<title>")
    return page[start + 7 : page.find("</title>", start)].strip() if start >= 0 else ""


async def _outcome(client: AsyncDRPCClient, url: str) -> tuple[str, str]:
    try:
        return "ok", await client.execute("reach", url)
    except DRPCExecutionException as error:
        return error.type.name, error.msg
    except DRPCError as error:
        return type(error).__name__, str(error)


async def load(server: str, port: int, callers: int, after: float) -> dict[str, Any]:
    phase = {"killed": False}
    outcomes: list[dict[str, Any]] = []
    stop = asyncio.Event()

    async def caller(index: int) -> None:
        async with AsyncDRPCClient(server, port, timeout=300) as client:
            n = index
            while not stop.is_set():
                n += 1
                url = URLS[n % len(URLS)]
                started_before_kill = not phase["killed"]
                outcome, value = await _outcome(client, url)
                outcomes.append(
                    {
                        "url": url,
                        "outcome": outcome,
                        "value": value[:200],
                        "across_kill": started_before_kill and phase["killed"],
                    }
                )

    tasks = [asyncio.ensure_future(caller(i)) for i in range(callers)]
    while len(outcomes) < callers:
        await asyncio.sleep(0.05)
    print("loaded", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    phase["killed"] = True
    killed_at = time.monotonic()
    await asyncio.sleep(after)
    stop.set()
    await asyncio.gather(*tasks)
    drained = time.monotonic() - killed_at
    async with AsyncDRPCClient(server, port, timeout=120) as client:
        resumed = await asyncio.gather(*(_outcome(client, URLS[i % len(URLS)]) for i in range(20)))
    wrong = [o for o in outcomes if o["outcome"] == "ok" and o["value"] != EXPECTED_REACH[o["url"]]]
    errors = {f"{o['outcome']}: {o['value']}" for o in outcomes if o["outcome"] != "ok"}
    return {
        "outcomes": dict(collections.Counter(o["outcome"] for o in outcomes)),
        "errors": sorted(errors),
        "across_kill": sum(o["across_kill"] for o in outcomes),
        "wrong": wrong,
        "resumed": [outcome == "ok" and value == EXPECTED_REACH[URLS[i % 3]]
                    for i, (outcome, value) in enumerate(resumed)],
        "seconds_after_kill": drained,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.calls")
    parser.add_argument("command", choices=["check", "load"])
    parser.add_argument("--server", required=True)
    parser.add_argument("--port", type=int, default=3772)
    parser.add_argument("--http-port", type=int, default=3774)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--after", type=float, default=5.0)
    args = parser.parse_args()
    if args.command == "check":
        report = check(args.server, args.port, args.http_port)
    else:
        report = asyncio.run(load(args.server, args.port, args.callers, args.after))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
