"""Reading the operator's YAML or JSON files (ACL, tokens).

Contract: ``load_mapping(path, what)`` returns the top-level mapping of a
JSON file (``.json``) or a YAML file (anything else; JSON is valid YAML, so a
JSON file under another name still loads); a missing or unreadable file, bad
syntax, or a top level that is not a mapping raises ``ConfigFileError``
naming the file and ``what`` it was meant to be.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from drpc.errors import DRPCError


class ConfigFileError(DRPCError, ValueError):
    """An ACL or tokens file cannot be used; the message names the file and the problem."""


def load_mapping(path: str | Path, what: str) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigFileError(f"cannot read the {what} file {str(path)!r}: {error}") from error
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise ConfigFileError(f"the {what} file {str(path)!r} is not valid: {error}") from error
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"the {what} file {str(path)!r} must hold a mapping, not a {type(data).__name__}"
        )
    return data
