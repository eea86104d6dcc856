"""mkdocs hook: the reference pages' generated parts, taken from the code at build time.

Contract:

- A line ``<!-- drpc:cli PROG [SUBCOMMAND ...] -->`` (alone on its line) is replaced by
  that command line's ``--help``, as argparse prints it at ``HELP_COLUMNS`` columns, in a
  ``text`` fence. PROG is a key of ``COMMANDS`` (each names the ``_parser()`` of its
  module); SUBCOMMAND walks the parser's sub-commands (``drpc-transactional run``).
- A line ``<!-- drpc:config -->`` is replaced by a Markdown table of the topology
  configuration keys of ``drpc/config.py``: for every key of ``drpc.config.DEFAULTS`` its
  constant, its default and the attribute docstring under the constant (read from the
  module's source with ``ast``, as Python keeps no attribute docstrings at run time).
- Any other ``<!-- drpc:... -->`` marker, an unknown command or sub-command, or a key of
  ``DEFAULTS`` without a documented constant raises ``ValueError``, which fails the build:
  the reference never silently drops what the code has.
- The output depends only on the code: the width is fixed and colour is off, so two
  builds of one commit give the same pages.

``cli_help``, ``cli_commands``, ``config_table`` and ``expand`` are what the tests call
(tests/test_docs_reference.py); mkdocs calls ``on_page_markdown``.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIG_SOURCE = ROOT / "drpc" / "config.py"

HELP_COLUMNS = 100
"""Width of the generated ``--help`` text (argparse reads ``COLUMNS``)."""

COMMANDS: dict[str, str] = {
    "drpc-server": "drpc.server.cli",
    "drpc-client": "drpc.client.cli",
    "drpc-runner": "drpc.runner.cli",
    "drpc-transactional": "drpc.transactional.cli",
    "drpc-topology": "drpc.topology_cli",
    "drpc-sparse": "drpc.sparse_cli",
}
"""Each console script and the module whose ``_parser()`` builds its parser."""

MARKER = re.compile(r"^<!--\s*drpc:(?P<kind>[\w-]+)(?P<args>[^>]*?)\s*-->[ \t]*$", re.MULTILINE)


@contextmanager
def _fixed_terminal() -> Iterator[None]:
    """``COLUMNS`` at ``HELP_COLUMNS`` and colour off, restored afterwards."""
    saved = {name: os.environ.get(name) for name in ("COLUMNS", "NO_COLOR", "FORCE_COLOR")}
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    os.environ["NO_COLOR"] = "1"
    os.environ.pop("FORCE_COLOR", None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-command parsers of ``parser`` by name (none for a plain command)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if isinstance(sub, argparse.ArgumentParser):
                    found[name] = sub
    return found


def parser_for(path: list[str]) -> argparse.ArgumentParser:
    """The parser of ``path``: a command of ``COMMANDS``, then sub-command names."""
    if not path or path[0] not in COMMANDS:
        raise ValueError(f"drpc:cli needs one of {sorted(COMMANDS)}, got {' '.join(path)!r}")
    module = importlib.import_module(COMMANDS[path[0]])
    parser: argparse.ArgumentParser = module._parser()
    for name in path[1:]:
        subcommands = _subcommands(parser)
        if name not in subcommands:
            raise ValueError(
                f"{parser.prog} has no sub-command {name!r} (it has {sorted(subcommands)})"
            )
        parser = subcommands[name]
    return parser


def cli_commands() -> list[list[str]]:
    """Every command line and sub-command, as marker arguments (``["drpc-transactional",
    "run"]``), in ``COMMANDS`` order."""
    paths: list[list[str]] = []

    def walk(path: list[str]) -> None:
        paths.append(path)
        for name in _subcommands(parser_for(path)):
            walk([*path, name])

    for command in COMMANDS:
        walk([command])
    return paths


def long_options(parser: argparse.ArgumentParser) -> list[str]:
    """The ``--long`` option strings of ``parser`` itself (not of its sub-commands)."""
    return [
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--")
    ]


def cli_help(path: list[str]) -> str:
    """``--help`` of the command ``path`` at ``HELP_COLUMNS`` columns, without colour."""
    parser = parser_for(path)
    with _fixed_terminal():
        return parser.format_help()


def _fence(text: str) -> str:
    return f"```text\n{text.rstrip()}\n```"


def _config_docstrings(source: str) -> dict[str, tuple[str, str]]:
    """Each module-level string constant of ``source`` followed by a docstring:
    key -> (constant name, docstring)."""
    body = ast.parse(source).body
    found: dict[str, tuple[str, str]] = {}
    for statement, following in pairwise(body):
        if not (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            continue
        if not (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            continue
        found[statement.value.value] = (statement.targets[0].id, following.value.value)
    return found


def _markdown_cell(text: str) -> str:
    """One table cell: the text on one line, ``|`` escaped, RST's ````x```` as ```x```."""
    line = " ".join(text.split())
    line = re.sub(r"``([^`]+)``", r"`\1`", line)
    return line.replace("|", "\\|")


def config_table() -> str:
    """The topology configuration keys of ``drpc.config`` as a Markdown table."""
    config = importlib.import_module("drpc.config")
    defaults: dict[str, Any] = config.DEFAULTS
    documented = _config_docstrings(CONFIG_SOURCE.read_text(encoding="utf-8"))
    rows = [
        "| key | constant (`drpc.config`) | default | meaning |",
        "|---|---|---|---|",
    ]
    for key, default in defaults.items():
        if key not in documented:
            raise ValueError(f"{key!r} of drpc.config.DEFAULTS has no constant with a docstring")
        constant, docstring = documented[key]
        rows.append(f"| `{key}` | `{constant}` | `{default!r}` | {_markdown_cell(docstring)} |")
    return "\n".join(rows)


def _replacement(match: re.Match[str]) -> str:
    kind, args = match["kind"], match["args"].split()
    if kind == "cli":
        return _fence(cli_help(args))
    if kind == "config":
        if args:
            raise ValueError(f"drpc:config takes no arguments, got {args}")
        return config_table()
    raise ValueError(f"unknown marker {match[0]!r} (drpc:cli PROG [SUB ...], drpc:config)")


def expand(markdown: str) -> str:
    """``markdown`` with every ``drpc:`` marker replaced by its generated text."""
    return MARKER.sub(_replacement, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs' event: a page's Markdown before it is rendered."""
    return expand(markdown)
