"""Logging set-up shared by every drpc command line: readable text or one JSON object a line.

Contract. ``configure_logging(level, format="text", stream=None)`` configures
the root logger for the process (replacing the handler an earlier call
installed; like ``logging.basicConfig`` it leaves a root logger with handlers
of someone else's alone) and returns its handler:

- ``"text"`` (the default): ``TIME LEVEL LOGGER: message``, followed by the
  record's extra fields as ``[key=value ...]`` (``[request_id=12 function=reach]``);
  control characters in the message and the fields (a newline in a function
  name or a failure message sent by a client, a carriage return, an ANSI
  escape) are written escaped (``\\n``, ``\\r``, ``\\x1b``…), so a record is
  one line and input cannot forge another; a traceback or stack follows on
  lines of its own, each indented by two spaces (a line of the log that
  starts at its first column always starts a record);
- ``"json"``: one JSON object per line with ``time`` (UTC, ISO 8601 with
  milliseconds), ``level``, ``logger``, ``message`` and every extra field the
  record carries (``request_id``, ``function``, ``txid``, ``job``, ... given
  as ``extra=`` or by the context below; values that are not JSON become their
  ``repr``); an exception is serialized as ``exception`` (type, message and
  the formatted traceback as one string) and a stack as ``stack``; whatever
  else the process (or a child, such as the Spark JVM) writes to its stderr
  becomes one such object per line too, logger ``stderr``, level WARNING.

Context. ``log_context(request_id=..., function=...)`` sets fields for every
record logged in the current thread or asyncio task until the block ends
(``contextvars``); fields passed as ``extra=`` win over the context
(``push_context``/``pop_context`` do the same without a ``with`` block). The
local executor puts ``request_id`` and ``function`` there while a step
handles a request's tuple, so a bolt's own log lines carry them too.
``request_extra(request_id, function)`` is the ``extra=`` dict of a log line
about one request.

Spark workers. ``worker_settings()`` is the (format, level) the driver
configured, or None; the Spark executor ships it with each job and a Python
worker calls ``configure_worker_logging(format, level)``, which gives the
worker's root logger (if nobody configured it) the same format on its stderr.
The tasks put the fields of the id a tuple belongs to (``request_id`` and
``function``; ``topology``, ``txid`` and ``attempt_id`` in a transactional
run) in the context, so a bolt's log lines carry them on Spark too. A
worker's JSON line that reaches the driver's wrapped stderr passes through
as it is, not wrapped a second time.

``LOG_FORMATS`` lists the formats for ``--log-format`` and ``LOG_LEVELS`` the
levels ``--log-level`` takes (``log_level`` refuses any other name, so a typo is
a usage error, not a traceback); ``add_logging_arguments`` adds both options to
a parser.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import contextvars
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_CONTEXT: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "drpc_log_context", default=None
)

# Attributes every LogRecord has; anything else on a record is an extra field.
_STANDARD = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def request_extra(request_id: str, function: str | None = None) -> dict[str, Any]:
    """``extra=`` fields of a log line about one request."""
    if function is None:
        return {"request_id": request_id}
    return {"request_id": request_id, "function": function}


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every record logged in this thread or task inside the block."""
    current = _CONTEXT.get()
    token = _CONTEXT.set({**current, **fields} if current else fields)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current_context() -> Mapping[str, Any] | None:
    """The fields ``log_context`` set for this thread or task, if any."""
    return _CONTEXT.get()


def push_context(fields: Mapping[str, Any]) -> contextvars.Token[Mapping[str, Any] | None]:
    """``log_context`` for hot paths: set ``fields`` (replacing the current context);
    hand the token to ``pop_context`` when done."""
    return _CONTEXT.set(fields)


def pop_context(token: contextvars.Token[Mapping[str, Any] | None]) -> None:
    _CONTEXT.reset(token)


class ContextFilter(logging.Filter):
    """Copies the ``log_context`` fields onto each record (``extra=`` fields win)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _CONTEXT.get()
        if context:
            for key, value in context.items():
                if key not in record.__dict__:
                    record.__dict__[key] = value
        return True


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields of a record beyond the standard ones, in the order they were set."""
    return {
        key: value
        for key, value in record.__dict__.items()
        if key not in _STANDARD and not key.startswith("_")
    }


def _escapes() -> dict[int, str]:
    table = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]}
    table.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
    table.update({0x2028: "\\u2028", 0x2029: "\\u2029"})  # Unicode line breaks
    return table


_ESCAPES = _escapes()


def escape_controls(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1, U+2028/2029) written escaped."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: message [key=value ...]``, one line; control characters
    escaped; a traceback or stack after it, indented."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        fields = extra_fields(record)
        if fields:
            context = " ".join(f"{key}={value}" for key, value in fields.items())
            text = f"{text} [{escape_controls(context)}]"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        details = [record.exc_text] if record.exc_text else []
        if record.stack_info:
            details.append(self.formatStack(record.stack_info))
        for detail in details:
            for line in detail.splitlines():
                text += "\n  " + escape_controls(line)
        return text


class JSONFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, _jsonable(value))
        if record.exc_info and record.exc_info[0] is not None:
            error = record.exc_info[1]
            entry["exception"] = {
                "type": record.exc_info[0].__name__,
                "message": str(error),
                "traceback": self.formatException(record.exc_info),
            }
        elif record.exc_text:
            entry["exception"] = {"traceback": record.exc_text}
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=repr)


def _iso_time(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return repr(value)


_installed: logging.Handler | None = None
_stderr: TextIO | None = None
_settings: tuple[str, int] | None = None
STDERR_LOGGER = "stderr"


def worker_settings() -> tuple[str, int] | None:
    """The (format, level) ``configure_logging`` set up in this process, if it did."""
    return _settings


def configure_logging(
    level: str | int = "INFO", format: str = "text", stream: TextIO | None = None
) -> logging.Handler | None:
    """Log to ``stream`` (default stderr) at ``level`` in ``format`` ("text" or "json").

    Like ``logging.basicConfig``, it leaves a root logger that already has handlers
    someone else installed (a test harness, an embedding application) alone and
    returns None; a handler installed by an earlier call is replaced. In "json" to
    the process's stderr, whatever else writes to file descriptor 2 (the Spark JVM
    and its Python workers, a traceback the interpreter prints) is wrapped too: one
    object per line, logger "stderr", level WARNING."""
    global _installed, _settings
    if format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {format!r}; choose one of {', '.join(LOG_FORMATS)}")
    root = logging.getLogger()
    if any(handler is not _installed for handler in root.handlers):
        return None
    if stream is None:
        stream = _capture_stderr() if format == "json" else (_stderr or sys.stderr)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter() if format == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    if _installed is not None:
        root.removeHandler(_installed)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    _installed = handler
    _settings = (format, root.level)
    logging.captureWarnings(format == "json")
    return handler


def configure_worker_logging(format: str, level: int) -> None:
    """In a Spark Python worker: log to its stderr in ``format`` at ``level``, once per
    process, unless someone else already configured the root logger. Never touches file
    descriptor 2 (the worker's stderr already goes wherever Spark sends it)."""
    if _settings == (format, level) or format not in LOG_FORMATS:
        return
    root = logging.getLogger()
    if any(handler is not _installed for handler in root.handlers):
        return
    configure_logging(level, format, stream=sys.stderr)


def _capture_stderr() -> TextIO:
    """Point file descriptor 2 at a pipe whose lines are logged as JSON; returns a stream
    on the real stderr for the log handler. Done once per process."""
    global _stderr
    if _stderr is not None:
        return _stderr
    try:
        sys.stderr.flush()
        original = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
    except OSError:  # no usable descriptor 2: log to whatever sys.stderr is
        return sys.stderr
    _stderr = os.fdopen(original, "w", buffering=1, encoding="utf-8", errors="replace")
    pump = threading.Thread(
        target=_pump_stderr, args=(read_end,), name="drpc-stderr-json", daemon=True
    )
    pump.start()

    def drain() -> None:  # at exit: stop writing into the pipe, log what is left in it
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
            os.dup2(original, 2)
        pump.join(1.0)

    atexit.register(drain)
    return _stderr


def _pump_stderr(read_end: int) -> None:
    logger = logging.getLogger(STDERR_LOGGER)
    with os.fdopen(read_end, "rb") as pipe:
        for raw in pipe:
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            if text:
                handler = _installed
                if handler is None:
                    continue
                if isinstance(handler, logging.StreamHandler) and _is_log_line(text):
                    with handler.lock or contextlib.nullcontext():
                        handler.stream.write(text + "\n")
                        handler.flush()
                    continue
                handler.handle(
                    logger.makeRecord(STDERR_LOGGER, logging.WARNING, "", 0, text, (), None)
                )


def _is_log_line(text: str) -> bool:
    """Whether ``text`` is already one of our JSON log lines (from a Spark worker)."""
    if not (text.startswith('{"time": ') and text.endswith("}")):
        return False
    try:
        entry = json.loads(text)
    except ValueError:
        return False
    return isinstance(entry, dict) and {"time", "level", "logger", "message"} <= entry.keys()


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    """``--log-level``'s type: a level name of ``LOG_LEVELS``, any case, returned upper case."""
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r}; choose one of {', '.join(LOG_LEVELS)}"
        )
    return level


def add_logging_arguments(parser: argparse.ArgumentParser, *, default_level: str = "INFO") -> None:
    """``--log-level`` (a name of ``LOG_LEVELS``) and ``--log-format`` (text or json)."""
    parser.add_argument(
        "--log-level",
        type=log_level,
        default=default_level,
        metavar="LEVEL",
        help=f"{', '.join(LOG_LEVELS)} (default %(default)s)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text: readable lines; json: one JSON object per line (default %(default)s)",
    )
