"""The documentation site's generated reference and its strictness.

- docs/hooks.py (the mkdocs hook) expands ``drpc:cli`` markers into every command
  line's ``--help`` and ``drpc:config`` into the table of ``drpc.config.DEFAULTS``:
  every long option of every parser and sub-parser, and every key, appears; the text
  is the same whatever the terminal's width.
- mkdocs.yml's settings fail a build on a broken link or anchor (``make docs`` runs
  ``mkdocs build --strict``): checked on a one-page site that inherits them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from drpc import config
from tests.loading import load_script

ROOT = Path(__file__).resolve().parents[1]


hooks = load_script("drpc_docs_hooks", "docs/hooks.py")


def test_every_command_and_sub_command_is_reached() -> None:
    assert hooks.cli_commands() == [
        ["drpc-server"],
        ["drpc-client"],
        ["drpc-runner"],
        ["drpc-transactional"],
        ["drpc-transactional", "run"],
        ["drpc-transactional", "status"],
        ["drpc-topology"],
        ["drpc-topology", "run"],
        ["drpc-topology", "list"],
        ["drpc-topology", "kill"],
        ["drpc-topology", "activate"],
        ["drpc-topology", "deactivate"],
        ["drpc-sparse"],
        ["drpc-sparse", "run"],
        ["drpc-sparse", "list"],
    ]


@pytest.mark.parametrize("path", [" ".join(p) for p in hooks.cli_commands()])
def test_the_cli_reference_shows_every_long_option(path: str) -> None:
    command = path.split()
    text = hooks.cli_help(command)
    assert text.startswith(f"usage: {path} ")
    options = hooks.long_options(hooks.parser_for(command))
    assert "--help" in options
    missing = [option for option in options if option not in text]
    assert missing == []
    assert all(len(line) <= hooks.HELP_COLUMNS for line in text.splitlines())


def test_the_cli_reference_does_not_depend_on_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    narrow = hooks.cli_help(["drpc-client"])
    monkeypatch.setenv("COLUMNS", "250")
    assert hooks.cli_help(["drpc-client"]) == narrow
    assert os.environ["COLUMNS"] == "250"  # restored after each


def test_the_configuration_table_has_every_default_key() -> None:
    table = hooks.config_table()
    rows = table.splitlines()[2:]
    assert len(rows) == len(config.DEFAULTS)
    for key, default in config.DEFAULTS.items():
        [row] = [row for row in rows if row.startswith(f"| `{key}` |")]
        assert f"`{default!r}`" in row
        assert row.count(" | ") == 3  # no | of a docstring split the row


def test_markers_expand_and_unknown_ones_fail() -> None:
    page = "# Reference\n\n<!-- drpc:cli drpc-transactional status -->\n\n<!-- drpc:config -->\n"
    expanded = hooks.expand(page)
    assert "```text\nusage: drpc-transactional status" in expanded
    assert "| `topology.message.timeout.secs` |" in expanded
    assert "drpc:" not in expanded
    for wrong in ("drpc:cli drpc-nothing", "drpc:cli drpc-transactional stop", "drpc:nothing"):
        with pytest.raises(ValueError):
            hooks.expand(f"<!-- {wrong} -->\n")


def _build(tmp_path: Path, page: str) -> subprocess.CompletedProcess[str]:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "index.md").write_text(page)
    (docs / "other.md").write_text("# Other\n\n## A section\n")
    # The repository's settings (strict, validation), without its nav, plugins or hook.
    (tmp_path / "mkdocs.yml").write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\n"
        "docs_dir: docs\nsite_dir: site\nhooks: []\nplugins: [search]\n"
        "nav:\n  - Home: index.md\n  - Other: other.md\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    good = _build(tmp_path, "# Home\n\n[other](other.md#a-section)\n")
    assert good.returncode == 0, good.stderr
    broken = _build(tmp_path, "# Home\n\n[other](missing.md)\n")
    assert broken.returncode != 0 and "missing.md" in broken.stderr
    anchor = _build(tmp_path, "# Home\n\n[other](other.md#no-such-section)\n")
    assert anchor.returncode != 0 and "no-such-section" in anchor.stderr
