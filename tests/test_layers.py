"""The package layers hold: read from the source, so a new import that breaks them fails here.

- The engine (every module under ``drpc/`` but the remote runner, a host like
  the server) never imports ``drpc.server`` or ``drpc.client`` (the
  repository's ``server/`` and ``client/``, installed under ``drpc``).
- Nothing imports a top-level ``server`` or ``client``: they are not installed
  under those names.
- A module imports only modules of its own layer or below (``LAYERS``, lowest
  first), whether at module level or inside a function; imports under
  ``if TYPE_CHECKING:`` are for annotations only and do not count.
- No ``drpc`` import hides inside a function: an import that would have to
  (to dodge a cycle) means a module is in the wrong layer.
- Every ``drpc`` module is placed in a layer, so a new package must say where
  it belongs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS: list[set[str]] = [
    {
        "drpc.errors",
        "drpc.config",
        "drpc.logs",
        "drpc.progress",
        "drpc.resources",
        "drpc.observe",
        "drpc.commandline",
        "drpc.gcpolicy",
        "drpc.compiled",
        "drpc.class_archive",
    },
    {"drpc.requests", "drpc.state", "drpc.protocol"},
    {"drpc.model"},
    {"drpc.semantics"},
    {"drpc.builders"},
    {"drpc.sparkconf", "drpc.runtime", "drpc.executors"},
    {"drpc.hosting", "drpc.transactional"},
    {"drpc.trident"},
    {"drpc.testing"},
    {"drpc", "drpc.examples"},
    {"drpc.runner"},
]
HOSTS = {"drpc.runner"}
"""Packages (with their modules) outside the engine, which may import the client and the
server's parts: the runner serves topologies for remote servers, and answers topology
commands as a server does."""
OUTSIDE_THE_ENGINE = ("drpc.server", "drpc.client")


def layer_of(module: str) -> int:
    """The layer of a module: that of its longest listed prefix."""
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        prefix = ".".join(parts[:length])
        for index, layer in enumerate(LAYERS):
            if prefix in layer:
                return index
    raise AssertionError(f"{module} is in no layer; add its package to LAYERS in {__file__}")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def engine_modules() -> list[Path]:
    return sorted(
        path for path in (ROOT / "drpc").rglob("*.py") if "protocol/gen" not in path.as_posix()
    )


class Import:
    def __init__(self, target: str, line: int, lazy: bool) -> None:
        self.target, self.line, self.lazy = target, line, lazy


def imports_of(path: Path) -> Iterator[Import]:
    """The absolute imports of a module, outside ``if TYPE_CHECKING:`` blocks."""

    def visit(node: ast.AST, lazy: bool) -> Iterator[Import]:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (i for child in node.orelse for i in visit(child, lazy))
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno, lazy)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "drpc":  # from drpc import config: the module drpc.config
                for alias in node.names:
                    submodule = ROOT / "drpc" / alias.name
                    is_module = (
                        alias.name in ("server", "client")  # installed under drpc from the top
                        or submodule.is_dir()
                        or submodule.with_suffix(".py").exists()
                    )
                    yield Import(f"drpc.{alias.name}" if is_module else "drpc", node.lineno, lazy)
            else:
                yield Import(node.module, node.lineno, lazy)
        inside = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            yield from visit(child, inside)

    yield from visit(ast.parse(path.read_text()), False)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


MODULES = engine_modules()


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_imports_go_down_the_layers(path: Path) -> None:
    module = module_name(path)
    own = layer_of(module)
    problems = []
    for found in imports_of(path):
        top = found.target.split(".")[0]
        if found.target.startswith(OUTSIDE_THE_ENGINE):
            if not any(module == host or module.startswith(f"{host}.") for host in HOSTS):
                problems.append(f"line {found.line}: the engine imports {found.target}")
            continue
        if top != "drpc":
            continue
        if found.lazy:
            problems.append(f"line {found.line}: {found.target} imported inside a function")
        if layer_of(found.target) > own:
            problems.append(
                f"line {found.line}: {found.target} (layer {layer_of(found.target)}) is above "
                f"{module} (layer {own})"
            )
    assert problems == [], f"{module}:\n" + "\n".join(problems)


EVERY_MODULE = sorted(
    path
    for folder in ("drpc", "server", "client", "tests", "bench")
    for path in (ROOT / folder).rglob("*.py")
    if "protocol/gen" not in path.as_posix()
)


def test_nothing_imports_a_top_level_server_or_client() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{i.line}: {i.target}"
        for path in EVERY_MODULE
        for i in imports_of(path)
        if i.target.split(".")[0] in ("server", "client")
    ]
    assert found == []


def test_the_checker_sees_what_it_must_refuse(tmp_path: Path) -> None:
    """The rules catch each kind of breach (a checker that sees nothing passes anything)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "import drpc.client\n"
        "from drpc import executors, server\n"
        "if TYPE_CHECKING:\n"
        "    from drpc.testing import LocalDRPC\n"
        "def f():\n"
        "    from drpc.errors import DRPCError\n"
    )
    found = [(i.target, i.lazy) for i in imports_of(sample)]
    assert found == [
        ("typing", False),
        ("drpc.client", False),
        ("drpc.executors", False),
        ("drpc.server", False),
        ("drpc.errors", True),
    ]
    assert layer_of("drpc.executors.spark.stages") > layer_of("drpc.state.env")
