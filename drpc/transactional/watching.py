"""Watching a directory of partition files, so a stream wakes when one grows.

Contract. ``watch_files(directory, pattern, wakeup)`` starts watching
``directory`` (not its subdirectories; created if missing) with the operating
system's file notifications (``watchdog``: inotify on Linux, FSEvents on macOS,
polling where neither exists) and calls ``wakeup()`` from the watcher's thread
whenever a file whose name matches ``pattern`` is created, written, closed after
writing or moved in. It returns a function that stops watching (calling it again
does nothing). ``wakeup`` must be cheap and must not raise; it may be called for a
change that brought no complete line, and a burst of writes may wake it once or
many times. ``watchdog`` is imported only when a watch starts: a process that only
reads a file log's ranges (a Spark executor) does not need it.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def watch_files(directory: str, pattern: str, wakeup: Callable[[], None]) -> Callable[[], None]:
    """Call ``wakeup`` when a partition file changes (see the module doc); returns ``stop``."""
    # Imported here: only the process that runs a coordinator watches, so Spark executors
    # that read a file log's ranges need no watchdog.
    from watchdog.events import (
        FileClosedEvent,
        FileCreatedEvent,
        FileModifiedEvent,
        FileMovedEvent,
        FileSystemEventHandler,
    )
    from watchdog.observers import Observer

    grows = (FileCreatedEvent, FileModifiedEvent, FileClosedEvent, FileMovedEvent)

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            if not isinstance(event, grows):
                return
            path = event.dest_path if isinstance(event, FileMovedEvent) else event.src_path
            if fnmatch.fnmatch(os.path.basename(os.fsdecode(path)), pattern):
                wakeup()

    os.makedirs(directory, exist_ok=True)
    observer = Observer()
    observer.daemon = True
    observer.schedule(Handler(), directory, recursive=False)
    observer.start()
    lock = threading.Lock()
    stopped = False

    def stop() -> None:
        nonlocal stopped
        with lock:
            if stopped:
                return
            stopped = True
        observer.stop()
        observer.join(timeout=5)
        if observer.is_alive():
            log.warning("the watcher of %s did not stop within 5 s", directory)

    return stop
