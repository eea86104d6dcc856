"""The multilang wire format: JSON messages, each followed by a line ``end``.

Contract (Storm's ``JsonSerializer``, both directions):

- ``encode(message)`` is the compact JSON text of ``message``, a newline, ``end`` and a
  newline, as UTF-8 bytes; it raises ``TypeError`` or ``ValueError`` when ``message``
  holds a value strict JSON cannot carry (bytes, a set, NaN, an infinity).
- ``Decoder(max_message_bytes)`` is sans-IO: ``feed(data)`` takes any chunk of a
  subprocess's output and returns the messages it completes, in order. A message is
  every line up to a line that is exactly ``end`` (a trailing ``\\r`` is dropped, so a
  client on Windows line endings works), joined with newlines and parsed as JSON.
  Blank lines between messages are skipped, as Storm's reader does for an empty message.
  Complete messages without a ``\r`` are parsed whole, one ``json.loads`` each (JSON
  reads their newlines as whitespace); the rest line by line, with the same results.
- ``WireError`` (a ``ValueError``) is raised for output that is no such message: text
  that is not JSON or not UTF-8, or a message growing past ``max_message_bytes``
  without its ``end`` line (so garbage without ``end`` cannot grow memory without
  bound). After a ``WireError`` the decoder is spent: make a new one.
"""

from __future__ import annotations

import json
from typing import Any, Final

END: Final = b"end"
DEFAULT_MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
"""The longest message a subprocess may write (bytes of JSON text before its ``end``)."""


class WireError(ValueError):
    """Output that is not a multilang message."""


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_TERMINATOR: Final = b"\nend\n"


def encode(message: Any) -> bytes:
    """``message`` as JSON followed by a line ``end``."""
    return _ENCODER.encode(message).encode() + _TERMINATOR


class Decoder:
    """Turns a subprocess's output, chunk by chunk, into messages."""

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        if max_message_bytes < 1:
            raise ValueError(f"max_message_bytes must be at least 1, got {max_message_bytes}")
        self.max_message_bytes = max_message_bytes
        self._partial = bytearray()  # an incomplete line
        self._lines: list[bytes] = []  # complete lines of the message being read
        self._size = 0  # bytes of the message so far, newlines between lines included

    def feed(self, data: bytes) -> list[Any]:
        self._partial += data
        if self._lines or b"\r" in data:
            return self._feed_lines()
        messages: list[Any] = []
        partial = self._partial
        start = 0
        while (end := partial.find(_TERMINATOR, start)) >= 0:
            if end - start > self.max_message_bytes:
                raise self._too_long()
            messages.append(_parse(bytes(partial[start:end])))
            start = end + len(_TERMINATOR)
        del partial[:start]
        return messages + self._feed_lines() if partial else messages

    def _feed_lines(self) -> list[Any]:
        messages: list[Any] = []
        start = 0
        partial = self._partial
        while True:
            newline = partial.find(b"\n", start)
            if newline < 0:
                break
            line = bytes(partial[start:newline])
            start = newline + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if line == END:
                messages.append(self._message())
                continue
            if not self._lines and not line.strip():
                continue
            self._size += len(line) + (1 if self._lines else 0)
            self._lines.append(line)
            self._check_size()
        del partial[:start]
        if self._partial:
            self._size_with_partial()
        return messages

    def _check_size(self) -> None:
        if self._size > self.max_message_bytes:
            raise self._too_long()

    def _size_with_partial(self) -> None:
        # A partial line of up to 4 bytes may still turn out to be the "end" line.
        partial = len(self._partial)
        if partial > 4 and self._size + (1 if self._lines else 0) + partial > (
            self.max_message_bytes
        ):
            raise self._too_long()

    def _too_long(self) -> WireError:
        return WireError(
            f"a message longer than max_message_bytes={self.max_message_bytes} "
            "without its 'end' line"
        )

    def _message(self) -> Any:
        text = b"\n".join(self._lines)
        self._lines = []
        self._size = 0
        return _parse(text)


def _parse(text: bytes) -> Any:
    try:
        return json.loads(text.decode())
    except UnicodeDecodeError as error:
        raise WireError(f"output that is not UTF-8: {error}") from None
    except ValueError as error:
        raise WireError(f"output that is not JSON ({error}): {_excerpt(text)}") from None


def _excerpt(text: bytes, limit: int = 200) -> str:
    shown = text[:limit].decode(errors="replace")
    return repr(shown + ("..." if len(text) > limit else ""))
