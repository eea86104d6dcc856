"""A multilang spout in plain Python (standard library only), for the ShellSpout tests.

``next`` emits ["word-N"] with message id N (up to 3, then nothing), ``ack``/``fail``
log what they got; the 4th ``next`` exits 5 with a line on stderr when given --crash.
"""

from __future__ import annotations

import json
import os
import sys


def read() -> object:
    lines = []
    for line in sys.stdin:
        if line.rstrip("\n") == "end":
            return json.loads("".join(lines))
        lines.append(line)
    sys.exit(0)


def send(message: object) -> None:
    sys.stdout.write(json.dumps(message) + "\nend\n")
    sys.stdout.flush()


setup = read()
assert isinstance(setup, dict)
open(os.path.join(setup["pidDir"], str(os.getpid())), "w").close()
send({"pid": os.getpid()})
emitted = 0
while True:
    command = read()
    if isinstance(command, list):
        continue  # task ids of an emit
    assert isinstance(command, dict)
    if command["command"] == "next":
        if emitted < 3:
            emitted += 1
            send({"command": "emit", "id": emitted, "tuple": [f"word-{emitted}"]})
        elif "--crash" in sys.argv:
            sys.stderr.write("spout crashed\n")
            sys.exit(5)
    elif command["command"] in ("ack", "fail"):
        send({"command": "log", "msg": f"{command['command']} {command['id']}"})
    send({"command": "sync"})
