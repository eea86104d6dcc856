"""The page argument of a listing query (``MapList``): which entries of a map a caller asks for.

Contract. ``page_request(argument)`` reads the argument of one listing request
into a ``PageRequest(after, prefix, limit)``, every part optional:

- ``after``: list the keys after this one (None: from the first key);
- ``prefix``: only keys starting with it (a ``str``/``bytes`` prefix of keys of
  that type; a tuple: tuple keys whose first elements are these);
- ``limit``: at most this many entries (an int >= 1; None: the query's own
  limit, which also caps it).

The argument is a ``PageRequest``, a dict of those names, or text: ``""``
(the first page) or JSON of such an object, as a DRPC caller sends it, e.g.
``{"after": "cow", "limit": 10}``. JSON has no tuples: a list stands for a tuple
key, so the ``next`` an answer carries (a tuple key as a JSON list) goes back
as ``after`` unchanged. Keys are ``str``, ``int`` or tuples of these (``bytes``
too when not sent as JSON). Anything else raises ``InvalidQueryError`` naming
the part and what was wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drpc.errors import InvalidQueryError
from drpc.state import StateKey

PARTS = ("after", "prefix", "limit")
EXAMPLE = '{"after": "cow", "limit": 10}'


@dataclass(frozen=True, slots=True)
class PageRequest:
    """Which page of a map's entries a listing request asks for (see the module doc)."""

    after: StateKey | None = None
    prefix: StateKey | None = None
    limit: int | None = None


def page_request(argument: Any) -> PageRequest:
    """The ``PageRequest`` that ``argument`` stands for (see the module doc)."""
    if isinstance(argument, PageRequest):
        parts: Mapping[str, Any] = {name: getattr(argument, name) for name in PARTS}
    elif argument is None or argument == "":
        return PageRequest()
    elif isinstance(argument, str):
        parts = _parsed(argument)
    elif isinstance(argument, Mapping):
        parts = argument
    else:
        raise InvalidQueryError(
            f"a page argument is a JSON object such as {EXAMPLE}, a dict or a PageRequest, "
            f"got {type(argument).__name__} {argument!r:.60}"
        )
    unknown = sorted(str(name) for name in parts if name not in PARTS)
    if unknown:
        raise InvalidQueryError(
            f"a page argument has the parts {', '.join(PARTS)}; got unknown {', '.join(unknown)}"
        )
    limit = parts.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidQueryError(f"a page's limit is an int >= 1, got {limit!r:.60}")
    return PageRequest(
        _key(parts.get("after"), "after"), _key(parts.get("prefix"), "prefix"), limit
    )


def _parsed(text: str) -> Mapping[str, Any]:
    try:
        parts = json.loads(text)
    except ValueError:
        parts = None
    if not isinstance(parts, dict):
        raise InvalidQueryError(
            f"a page argument is empty or a JSON object such as {EXAMPLE}, got {text!r:.60}"
        )
    return parts


def _key(value: Any, part: str) -> StateKey | None:
    """``value`` as a state key (a list as a tuple), or None."""
    if value is None:
        return None
    key = _as_key(value)
    if key is None:
        raise InvalidQueryError(
            f"a page's {part} is a key (str, int, bytes or a list of these), got "
            f"{type(value).__name__} {value!r:.60}"
        )
    return key


def _as_key(value: Any) -> StateKey | None:
    if isinstance(value, str | bytes) or type(value) is int:
        return value
    if isinstance(value, list | tuple):
        elements: list[StateKey] = []
        for element in value:
            key = _as_key(element)
            if key is None:
                return None
            elements.append(key)
        return tuple(elements)
    return None
