"""A multilang bolt in plain Python (standard library only), for ``bench/multilang.py``.

Contract. It speaks Storm's multilang protocol as storm.py does (JSON messages each
followed by a line ``end``; the handshake writes an empty file named by its pid into
``pidDir`` and answers ``{"pid": N}``; a ``__heartbeat`` tuple is answered with
``{"command": "sync"}``), flushing its output once per tuple as storm.py does. For every
other tuple it writes one emit anchored to the tuple, with ``"need_task_ids": false``
(so it never waits for task ids), then the tuple's ack, in one write:

- with no argument (``echo``): it emits the tuple's values unchanged;
- with ``--followers JSON`` (a JSON object: tweeter -> list of followers): for a tuple
  ``[id, tweeter]`` it emits ``[id, follower]`` for each follower of the tweeter
  (storm-starter reach's GetFollowers), then acks.

It exits when its input ends.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main() -> None:
    read = sys.stdin.buffer.readline
    write = sys.stdout.buffer.write
    flush = sys.stdout.buffer.flush
    loads = json.loads
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    followers: dict[str, list[str]] | None = None
    if "--followers" in sys.argv:
        followers = json.loads(sys.argv[sys.argv.index("--followers") + 1])

    def message() -> Any:
        lines: list[bytes] = []
        while True:
            line = read()
            if not line:
                raise SystemExit(0)  # our input ended: stop
            if line == b"end\n":
                return loads(b"".join(lines))
            lines.append(line)

    setup = message()
    open(os.path.join(setup["pidDir"], str(os.getpid())), "w").close()
    write(b'{"pid":%d}\nend\n' % os.getpid())
    flush()
    while True:
        tuple = message()
        if isinstance(tuple, list):  # task ids: never asked for, so never sent
            continue
        if tuple["stream"] == "__heartbeat":
            write(b'{"command":"sync"}\nend\n')
            flush()
            continue
        id = tuple["id"]
        values = tuple["tuple"]
        if followers is None:
            emitted = [values]
        else:
            emitted = [[values[0], follower] for follower in followers.get(values[1], ())]
        out = [
            dumps({"command": "emit", "anchors": [id], "tuple": value, "need_task_ids": False})
            for value in emitted
        ]
        out.append(dumps({"command": "ack", "id": id}))
        out.append("")
        write("\nend\n".join(out).encode())
        flush()


if __name__ == "__main__":
    main()
