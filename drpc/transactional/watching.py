"""Watching a directory of partition files, so a stream wakes when one grows.

Contract. ``watch_files(directory, pattern, wakeup)`` starts watching
``directory`` (not its subdirectories; created if missing) with the operating
system's file notifications (``watchdog``: inotify on Linux, FSEvents on macOS,
polling where neither exists) and calls ``wakeup()`` from the watcher's thread
whenever a file whose name matches ``pattern`` is created, written, closed after
writing or moved in. It returns a function that stops watching (calling it again
does nothing). ``wakeup`` must be cheap and must not raise; it may be called for a
change that brought no complete line, and a burst of writes may wake it once or
many times.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
from collections.abc import Callable

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

log = logging.getLogger(__name__)

_GROWS = (FileCreatedEvent, FileModifiedEvent, FileClosedEvent, FileMovedEvent)


class _Handler(FileSystemEventHandler):
    def __init__(self, pattern: str, wakeup: Callable[[], None]) -> None:
        self.pattern = pattern
        self.wakeup = wakeup

    def on_any_event(self, event: FileSystemEvent) -> None:
        if not isinstance(event, _GROWS):
            return
        path = event.dest_path if isinstance(event, FileMovedEvent) else event.src_path
        name = os.path.basename(os.fsdecode(path))
        if fnmatch.fnmatch(name, self.pattern):
            self.wakeup()


def watch_files(directory: str, pattern: str, wakeup: Callable[[], None]) -> Callable[[], None]:
    """Call ``wakeup`` when a partition file changes (see the module doc); returns ``stop``."""
    os.makedirs(directory, exist_ok=True)
    observer = Observer()
    observer.daemon = True
    observer.schedule(_Handler(pattern, wakeup), directory, recursive=False)
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
