"""Progress of long command-line work: a live line on a terminal, plain lines elsewhere.

Contract. ``Progress(stream)`` is updated with ``update(text)`` as often as
the caller likes. On a terminal it redraws one line at most every
``refresh`` seconds (default 0.1); anywhere else (a pipe, a CI log) it
prints a plain line at most every ``interval`` seconds (default 5), so logs
stay readable. ``close(final)`` prints the final state (``final``, else the
last text) on its own line; with nothing to show it prints nothing.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interval: float = 5.0,
        refresh: float = 0.1,
        tty: bool | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval
        self.refresh = refresh
        self._last = 0.0
        self._text = ""
        self._width = 0

    def update(self, text: str, *, force: bool = False) -> None:
        self._text = text
        now = time.monotonic()
        if not force and now - self._last < (self.refresh if self.tty else self.interval):
            return
        self._last = now
        if self.tty:
            padding = " " * max(0, self._width - len(text))
            self.stream.write("\r" + text + padding)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self, final: str | None = None) -> None:
        text = self._text if final is None else final
        if not text and not self._width:
            return  # nothing was ever shown: no empty line
        if self.tty:
            padding = " " * max(0, self._width - len(text))
            self.stream.write("\r" + text + padding + "\n")
        elif text:
            self.stream.write(text + "\n")
        self.stream.flush()
