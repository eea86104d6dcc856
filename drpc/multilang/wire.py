"""The multilang wire format: JSON messages, each followed by a line ``end``.

Contract (Storm's ``JsonSerializer``, both directions):

- ``encode(message)`` is the compact JSON text of ``message``, a newline, ``end`` and a
  newline, as UTF-8 bytes; it raises ``TypeError`` or ``ValueError`` when ``message``
  holds a value strict JSON cannot carry (bytes, a set, NaN, an infinity, a list that
  holds itself). ``encode_tuple(id, comp, stream, task, values)`` is
  ``encode({"id": id, "comp": comp, "stream": stream, "task": task, "tuple": values})``,
  byte for byte, with only ``values`` encoded anew (the rest is cached by ``comp``,
  ``stream`` and ``task``): a bolt's every tuple goes out this way.
- ``Decoder(max_message_bytes)`` is sans-IO: ``feed(data)`` takes any chunk of a
  subprocess's output and returns the messages it completes, in order. A message is
  every line up to a line that is exactly ``end`` (a trailing ``\\r`` is dropped, so a
  client on Windows line endings works), joined with newlines and parsed as JSON.
  Blank lines between messages are skipped, as Storm's reader does for an empty message.
  Complete messages without a ``\r`` are parsed whole (JSON reads their newlines as
  whitespace): a message that starts right after the previous one's ``end`` line and
  ends right before its own is scanned in place, as most clients write them; others are
  cut out and parsed. Messages still partial, or with a ``\r``, go line by line. Every
  way gives the same results.
- ``WireError`` (a ``ValueError``) is raised for output that is no such message: text
  that is not JSON or not UTF-8, or a message growing past ``max_message_bytes``
  without its ``end`` line (so garbage without ``end`` cannot grow memory without
  bound). After a ``WireError`` the decoder is spent: make a new one.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any, Final

END: Final = b"end"
DEFAULT_MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
"""The longest message a subprocess may write (bytes of JSON text before its ``end``)."""


class WireError(ValueError):
    """Output that is not a multilang message."""


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_TERMINATOR: Final = b"\nend\n"
_TEXT_TERMINATOR: Final = "\nend\n"


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_chunks: Final = (
    None
    if c_make_encoder is None  # an interpreter without the C accelerator
    else c_make_encoder(
        None, _not_serializable, encode_basestring, None, ":", ",", False, False, False
    )
)
"""``_ENCODER``'s work without ``JSONEncoder``'s set-up a call: the C encoder, made once.
It keeps no markers (they would be shared by every thread), so a value that holds itself
raises ``RecursionError``, which ``_to_json`` turns into ``ValueError`` as the markers
would."""


def _to_json(value: Any) -> str:
    if _chunks is None:
        return _ENCODER.encode(value)
    try:
        return "".join(_chunks(value, 0))
    except RecursionError:
        raise ValueError("Circular reference detected (or nesting too deep)") from None


def encode(message: Any) -> bytes:
    """``message`` as JSON followed by a line ``end``."""
    return (_to_json(message) + _TEXT_TERMINATOR).encode()


_tuple_heads: dict[tuple[str | None, str, int], str] = {}
_MAX_TUPLE_HEADS: Final = 4096


def encode_tuple(id: str, comp: str | None, stream: str, task: int, values: list[Any]) -> bytes:
    """A tuple message, as ``encode`` writes it (see the module doc); ``id`` is one of the
    machines' own ids (decimal digits), which JSON needs no escapes for."""
    key = (comp, stream, task)
    head = _tuple_heads.get(key)
    if head is None:
        head = _tuple_head(comp, stream, task)
    return ('{"id":"' + id + head + _to_json(values) + "}" + _TEXT_TERMINATOR).encode()


def _tuple_head(comp: str | None, stream: str, task: int) -> str:
    head = f'","comp":{_to_json(comp)},"stream":{_to_json(stream)},"task":{_to_json(task)},"tuple":'
    if len(_tuple_heads) >= _MAX_TUPLE_HEADS:
        _tuple_heads.clear()
    _tuple_heads[(comp, stream, task)] = head
    return head


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
        partial = self._partial
        last = partial.rfind(_TERMINATOR)
        if last < 0:
            return self._feed_lines()
        whole = len(partial) if last + len(_TERMINATOR) == len(partial) else last + len(_TERMINATOR)
        try:
            text = partial[:whole].decode()
        except UnicodeDecodeError as error:
            raise WireError(f"output that is not UTF-8: {error}") from None
        del partial[:whole]
        messages = self._complete(text, checked=whole <= self.max_message_bytes)
        return messages + self._feed_lines() if partial else messages

    def _complete(self, text: str, *, checked: bool) -> list[Any]:
        """The messages of ``text``, every one of them ended by its ``end`` line.
        ``checked``: ``text`` is no longer than a message may be, so none is too long."""
        messages: list[Any] = []
        scan = _scan
        size = len(text)
        start = 0
        while start < size:
            try:
                message, end = scan(text, start)
            except (StopIteration, ValueError):  # not JSON right at the start: see below
                end = -1
            if end < 0 or not text.startswith(_TEXT_TERMINATOR, end):
                end = text.find(_TEXT_TERMINATOR, start)
                message = _parse_text(text[start:end])
            if not checked:
                self._check_length(text[start:end])
            messages.append(message)
            start = end + len(_TEXT_TERMINATOR)
        return messages

    def _check_length(self, message: str) -> None:
        # A character is 1 to 4 bytes: count the bytes only when the characters could.
        if len(message) * 4 > self.max_message_bytes and (
            len(message) > self.max_message_bytes or len(message.encode()) > self.max_message_bytes
        ):
            raise self._too_long()

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


_scan: Final[Callable[[str, int], tuple[Any, int]]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""``(value, end)`` of the JSON value that starts exactly at an index of a text (what
``json.loads`` runs after skipping whitespace); ``StopIteration`` when none starts there."""


def _parse(text: bytes) -> Any:
    try:
        decoded = text.decode()
    except UnicodeDecodeError as error:
        raise WireError(f"output that is not UTF-8: {error}") from None
    return _parse_text(decoded)


def _parse_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise WireError(f"output that is not JSON ({error}): {_excerpt(text)}") from None


def _excerpt(text: str, limit: int = 200) -> str:
    return repr(text[:limit] + ("..." if len(text) > limit else ""))
