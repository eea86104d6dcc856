"""How the server logs refused client input: one WARNING line each, at a bounded rate.

Contract. Anyone who reaches a port can make the server refuse something (a
malformed frame, a half-sent request, a connection over a limit, a bad HTTP
request line), so these lines must not let a client flood the log:

- ``RefusalLog(per_second)``: ``refuse(message, *args)`` logs one WARNING
  line on the ``drpc.server.refusals`` logger (no traceback) while fewer than ``per_second``
  lines were logged in the last second (a token bucket holding at most
  ``per_second`` lines); past it the line is counted, not logged, and the next
  line logged is preceded by one saying how many were left out. ``logged`` and
  ``left_out`` count both kinds. Thread-safe.
- ``HTTPServerLog(refusals)`` is the logger aiohttp's request handlers get
  (``AppRunner(logger=...)``): a record about a request aiohttp refused as a
  client error (``HttpProcessingError`` with a 4xx status: a malformed request
  line, header or method) becomes one refusal line ("HTTP: refused a request
  from ADDRESS: REASON", the reason cut to one line of at most 200
  characters); every other record goes to the ``aiohttp.server`` logger
  unchanged, so a server bug keeps its ERROR line and traceback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger(__name__)

MAX_REASON = 200
"""Characters of a refused HTTP request's reason kept in its log line."""


class RefusalLog:
    def __init__(
        self,
        per_second: int,
        *,
        logger: logging.Logger = log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if per_second < 1:
            raise ValueError(f"per_second must be >= 1, got {per_second!r}")
        self.logger = logger
        self.per_second = per_second
        self.logged = 0
        self.left_out = 0
        self._clock = clock
        self._tokens = float(per_second)
        self._refilled = clock()
        self._pending = 0  # left out since the last line logged
        self._lock = threading.Lock()

    def refuse(self, message: str, *args: Any) -> bool:
        """Log ``message % args`` at WARNING if the rate allows; True when it was logged."""
        with self._lock:
            now = self._clock()
            elapsed = max(0.0, now - self._refilled)
            self._refilled = now
            self._tokens = min(float(self.per_second), self._tokens + elapsed * self.per_second)
            if self._tokens < 1.0 - 1e-9:  # a whole line's time, give or take rounding
                self._pending += 1
                self.left_out += 1
                return False
            self._tokens = max(0.0, self._tokens - 1.0)
            self.logged += 1
            pending, self._pending = self._pending, 0
        if pending:
            self.logger.warning(
                "left out %d refusal line(s) (more than %d a second)", pending, self.per_second
            )
        self.logger.warning(message, *args)
        return True


class HTTPServerLog:
    """A logger for aiohttp's request handlers (see the module docstring)."""

    def __init__(self, refusals: RefusalLog, logger: str = "aiohttp.server") -> None:
        self.refusals = refusals
        self._logger = logging.getLogger(logger)

    def _refused(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        error = kwargs.get("exc_info")
        if not isinstance(error, HttpProcessingError) or not 400 <= (error.code or 0) < 500:
            return False
        remote = args[1] if len(args) > 1 else "an unknown address"
        lines = [line.strip() for line in str(error.message).splitlines() if line.strip()]
        reason = (lines[0] if lines else type(error).__name__)[:MAX_REASON]
        self.refusals.refuse("HTTP: refused a request from %s: %s %s", remote, error.code, reason)
        return True

    def exception(self, *args: Any, **kwargs: Any) -> None:
        if not self._refused(args, kwargs):
            self._logger.exception(*args, **kwargs)

    def error(self, *args: Any, **kwargs: Any) -> None:
        if not self._refused(args, kwargs):
            self._logger.error(*args, **kwargs)

    def debug(self, *args: Any, **kwargs: Any) -> None:
        if not self._refused(args, kwargs):
            self._logger.debug(*args, **kwargs)

    def warning(self, *args: Any, **kwargs: Any) -> None:
        self._logger.warning(*args, **kwargs)

    def info(self, *args: Any, **kwargs: Any) -> None:
        self._logger.info(*args, **kwargs)

    def isEnabledFor(self, level: int) -> bool:
        return self._logger.isEnabledFor(level)
