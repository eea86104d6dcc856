"""A multilang bolt in plain Python (standard library only), for the ShellBolt tests.

It speaks Storm's protocol as storm.py does. Each tuple's last value chooses what it
does: "crash" (exits 3 after a line on stderr), "hang" (stops reading and writing),
"garbage" (writes text that is not JSON), "fail" (fails the tuple), "log" (logs at
every level), "error" (reports an error), "metrics", "sleep:S" (answers after S
seconds), "direct:T" (emits directly to task T), anything else: emits
[first value, last value + "!"] anchored to the tuple, then acks it; "then-exit" does
that too, then exits 0 at once. Options:
--silent-start (never answers the handshake), --start-delay S, --exit-at-start,
--pid-only-answer X (answers the handshake with X instead of its pid).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import deque

pending_commands: deque[object] = deque()
pending_task_ids: deque[list[int]] = deque()


def read_message() -> object:
    lines = []
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)  # our parent closed our input: stop
        if line.rstrip("\n") == "end":
            return json.loads("".join(lines))
        lines.append(line)


def send(message: object) -> None:
    sys.stdout.write(json.dumps(message) + "\nend\n")
    sys.stdout.flush()


def read_command() -> object:
    if pending_commands:
        return pending_commands.popleft()
    while True:
        message = read_message()
        if isinstance(message, list):
            pending_task_ids.append(message)
        else:
            return message


def read_task_ids() -> list[int]:
    if pending_task_ids:
        return pending_task_ids.popleft()
    while True:
        message = read_message()
        if isinstance(message, list):
            return message
        pending_commands.append(message)


def handshake() -> dict:
    setup = read_message()
    assert isinstance(setup, dict)
    options = sys.argv[1:]
    if "--silent-start" in options:
        time.sleep(3600)
    if "--exit-at-start" in options:
        sys.stderr.write("cannot start: no configuration\n")
        sys.exit(2)
    if "--start-delay" in options:
        time.sleep(float(options[options.index("--start-delay") + 1]))
    if "--pid-only-answer" in options:
        send(options[options.index("--pid-only-answer") + 1])
        return setup
    open(os.path.join(setup["pidDir"], str(os.getpid())), "w").close()
    send({"pid": os.getpid()})
    return setup


def process(tuple: dict) -> None:
    value = tuple["tuple"][-1] if tuple["tuple"] else ""
    first = tuple["tuple"][0] if tuple["tuple"] else None
    if value == "crash":
        sys.stderr.write("about to crash on purpose\n")
        sys.stderr.flush()
        sys.exit(3)
    if value == "hang":
        time.sleep(3600)
    if value == "garbage":
        sys.stdout.write("this is not json\nend\n")
        sys.stdout.flush()
        return
    if value == "fail":
        send({"command": "fail", "id": tuple["id"]})
        return
    if value == "log":
        for level in range(5):
            send({"command": "log", "msg": f"level {level}", "level": level})
        send({"command": "log", "msg": "no level"})
    if value == "error":
        send({"command": "error", "msg": "something went wrong"})
    if value == "metrics":
        send({"command": "metrics", "name": "calls", "params": 1})
    if isinstance(value, str) and value.startswith("sleep:"):
        time.sleep(float(value.split(":", 1)[1]))
    if isinstance(value, str) and value.startswith("direct:"):
        task = int(value.split(":", 1)[1])
        send({"command": "emit", "anchors": [tuple["id"]], "task": task, "tuple": [first, value]})
    else:
        send({"command": "emit", "anchors": [tuple["id"]], "tuple": [first, f"{value}!"]})
        read_task_ids()
    send({"command": "ack", "id": tuple["id"]})
    if value == "then-exit":
        sys.exit(0)


def main() -> None:
    handshake()
    while True:
        tuple = read_command()
        assert isinstance(tuple, dict)
        if tuple["stream"] == "__heartbeat":
            send({"command": "sync"})
            continue
        process(tuple)


if __name__ == "__main__":
    main()
