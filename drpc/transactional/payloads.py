"""A broker entry's bytes as a spout tuple's values.

Contract. ``PayloadDecoder(fields, codec="text"|"json", invalid="skip"|"fail",
source=...)`` reads the values of the spout's declared ``fields``:

- ``from_fields(where, entry)``: a Redis Streams entry (a map of field name
  to bytes): each declared field's value is the entry's field of that name;
  ``many_from_flat(entries)`` reads many in Redis's reply form;
- ``from_payload(where, data)``: a message payload (JetStream): with one
  declared field it is that field's value; with several the payload must be
  a JSON list of that many values (``codec="json"``).

``codec="text"`` decodes UTF-8 (a str per value), ``"json"`` parses JSON. An
entry that cannot be read (a field missing, bytes that are not UTF-8 or not
JSON, a list of the wrong length) is skipped and logged with ``where`` (the
source and the entry's id), or fails the batch with ``FailedException`` when
``invalid="fail"``, as the file log does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from drpc.errors import FailedException
from drpc.model.fields import Fields

log = logging.getLogger(__name__)

CODECS = ("text", "json")
INVALID = ("skip", "fail")


def _text(data: bytes) -> Any:
    return data.decode("utf-8")


def check_options(codec: str, invalid: str) -> None:
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
    if invalid not in INVALID:
        raise ValueError(f"invalid must be one of {', '.join(INVALID)}, got {invalid!r}")


class PayloadDecoder:
    def __init__(self, fields: Fields, codec: str, invalid: str, source: str) -> None:
        check_options(codec, invalid)
        if codec == "text" and len(fields) > 1:
            raise ValueError(
                f"{source}: several fields ({', '.join(fields)}) need codec='json' for a "
                "payload (a JSON list); entries with a field per value may use either codec"
            )
        self.fields = fields
        self.codec = codec
        self.invalid = invalid
        self.source = source
        self._decode: Callable[[bytes], Any] = _text if codec == "text" else json.loads
        self._keys = [name.encode("utf-8") for name in fields]

    def _skip(self, where: str, error: BaseException) -> None:
        message = f"invalid entry {where} of {self.source}: {type(error).__name__}: {error}"
        if self.invalid == "fail":
            raise FailedException(message) from error
        log.error("skipped an %s", message)

    def from_fields(self, where: str, entry: Mapping[bytes, bytes]) -> list[Any] | None:
        try:
            return [self._decode(entry[key]) for key in self._keys]
        except (KeyError, ValueError) as error:
            self._skip(where, error)
            return None

    def many_from_flat(self, entries: Sequence[tuple[Any, Sequence[bytes]]]) -> list[list[Any]]:
        """The values of each readable entry of ``(id, [name, value, name, value ...])``
        pairs (Redis's own reply form), in order."""
        decode, keys = self._decode, self._keys
        if len(keys) == 1:
            (key,) = keys
            if all(len(flat) == 2 and flat[0] == key for _, flat in entries):
                try:  # the common case: exactly the one field, every value readable
                    return [[decode(flat[1])] for _, flat in entries]
                except ValueError:
                    pass  # read again entry by entry, skipping (or failing on) the bad ones
        rows = []
        for id, flat in entries:
            values = self.from_fields(_id_text(id), dict(zip(flat[::2], flat[1::2], strict=True)))
            if values is not None:
                rows.append(values)
        return rows

    def from_payload(self, where: str, data: bytes) -> list[Any] | None:
        try:
            value = self._decode(data)
            if len(self.fields) == 1:
                return [value]
            if isinstance(value, list) and len(value) == len(self.fields):
                return value
            raise ValueError(f"expected a JSON list of {len(self.fields)} values")
        except ValueError as error:
            self._skip(where, error)
            return None


def _id_text(id: Any) -> str:
    return id.decode("ascii", "replace") if isinstance(id, bytes) else str(id)
