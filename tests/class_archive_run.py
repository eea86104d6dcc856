"""Two Spark driver starts on an empty class-archive directory, for tests/test_class_archive.py.

``python -m tests.class_archive_run WORKDIR``: the first start finds no archive and has one
built in the background; once it is there, a second start maps it. Prints one JSON object:
each start's log line and whether its JVM mapped the archive, and what the directory held.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

START = """
import json, logging, os, subprocess, sys
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
from drpc import runtime
session = runtime.get_session("local[1]")
launcher = session.sparkContext._gateway.proc.pid
pids = [str(launcher), *subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True,
                                        text=True).stdout.split()]
maps = "".join(open(f"/proc/{pid}/maps").read() for pid in pids
               if os.path.exists(f"/proc/{pid}/maps"))
print(json.dumps({"mapped": os.environ["DRPC_CLASS_ARCHIVE_DIR"] in maps}))
"""


def start(archives: Path) -> dict[str, object]:
    env = {**os.environ, "DRPC_CLASS_ARCHIVE_DIR": str(archives), "DRPC_CLASS_ARCHIVE": "on"}
    done = subprocess.run(
        [sys.executable, "-c", START], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "started SparkSession" in line]
    return {"log": lines, **json.loads(done.stdout.strip().splitlines()[-1])}


def main() -> None:
    archives = Path(sys.argv[1]) / "archives"
    first = start(archives)
    deadline = time.monotonic() + 240
    while not list(archives.glob("*.jsa")) and time.monotonic() < deadline:
        time.sleep(0.5)
    while list(archives.glob("*.lock")) and time.monotonic() < deadline:
        time.sleep(0.2)
    held = sorted(path.name for path in archives.iterdir())
    second = start(archives) if list(archives.glob("*.jsa")) else None
    print(json.dumps({"first": first, "second": second, "held": held}))


if __name__ == "__main__":
    main()
