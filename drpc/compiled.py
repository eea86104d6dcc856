"""The engine's compiled build: which modules mypyc compiles, and when they may be used.

Contract:

- ``COMPILED_MODULES`` is the one list of the modules the compiled build (``make compile``,
  or ``DRPC_COMPILE=1`` when building a wheel; see ``setup.py``) turns into C extensions.
  They are the engine's hot path: routing, partitioning, acking, coordination, tuples,
  the collectors bolts emit through, the engine's value records, the local
  executor's actors, tasks (bolts, spouts, ackers) and messages, and a ShellBolt's
  multilang wire codec, protocol machine and shell (two messages parsed per tuple).
  The sources stay the reference; a compiled module behaves as its source does, only
  faster.
- The build writes ``MANIFEST`` (``drpc/_compiled_sources.json``) last, holding the
  SHA-256 of each module's source as it was compiled.
- ``guard()`` runs when ``drpc`` is imported, before any of those modules is. It decides
  all or nothing, because compiled modules call each other directly rather than through
  Python, so a mix of compiled and source modules would hold two copies of a class:

  * the compiled modules are used when every one has its extension next to its source,
    the manifest matches every source, no other module has an extension (one an earlier
    build compiled: its code is gone from the shared library), and ``DRPC_PURE_PYTHON``
    is not set to ``1``;
  * otherwise every one of them, and any such other module, loads from its ``.py``
    source. When extensions are present but unusable (a source edited since the build, a
    missing extension or manifest, one left by an earlier build), a ``RuntimeWarning``
    says which and how to rebuild; a tree with no extensions at all is the plain
    pure-Python install and says nothing.

- ``engine_build()`` tells which build this process runs: ``"compiled"`` or ``"pure"``.

This module imports nothing from drpc and only the standard library, so ``setup.py`` and
the Makefile can run it as a script: ``python drpc/compiled.py`` prints the source paths.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

COMPILED_MODULES: tuple[str, ...] = (
    "drpc.model.hashing",
    "drpc.model.partitioners",
    "drpc.model.tuples",
    "drpc.model.collectors",
    "drpc.semantics.values",
    "drpc.semantics.acker",
    "drpc.semantics.coordination",
    "drpc.semantics.routing",
    "drpc.semantics.runners",
    "drpc.executors.task",
    "drpc.executors.task_collector",
    "drpc.executors.local.messages",
    "drpc.executors.local.gathering",
    "drpc.executors.local.tasks",
    "drpc.executors.local.spouts",
    "drpc.executors.local.ackers",
    "drpc.executors.local.mutex",
    "drpc.executors.local.actors",
    "drpc.executors.local.calls",
    "drpc.executors.local.executor",
    "drpc.multilang.wire",
    "drpc.multilang.bolt_protocol",
    "drpc.multilang.bolt_shell",
)

GROUP = "drpc._engine"
"""mypyc's group of the compiled modules: their shared library is ``drpc/_engine__mypyc``."""
MANIFEST_NAME = "_compiled_sources.json"
PURE_PYTHON_ENV = "DRPC_PURE_PYTHON"
PACKAGE_DIR = Path(__file__).resolve().parent
MANIFEST = PACKAGE_DIR / MANIFEST_NAME

_build: str | None = None


def source_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path:
    """The ``.py`` file of ``module`` (a name under ``drpc.``) inside ``package_dir``."""
    parts = module.split(".")
    if parts[0] != "drpc" or len(parts) < 2:
        raise ValueError(f"{module!r} is not a module under drpc")
    return package_dir.joinpath(*parts[1:]).with_suffix(".py")


def extension_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The compiled extension of ``module`` next to its source, or None when there is none."""
    source = source_path(module, package_dir)
    stem = source.with_suffix("")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = stem.parent / (stem.name + suffix)
        if candidate.exists():
            return candidate
    return None


def extension_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Every extension module file under ``package_dir``. drpc has none but the compiled
    build's, so a build removes these first: a module taken off ``COMPILED_MODULES``
    must not leave an extension behind, which Python would import instead of its source
    (and fail, as its code is gone from the build's shared library)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return sorted(path for path in package_dir.rglob("*") if path.name.endswith(suffixes))


def stray_extensions(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """The modules with an extension under ``package_dir`` that the build does not list
    (left by an earlier build), each with its source path."""
    library = GROUP.rpartition(".")[2] + "__mypyc."
    listed = set(COMPILED_MODULES)
    strays: dict[str, Path] = {}
    for path in extension_files(package_dir):
        stem = path.name.split(".", 1)[0]
        if path.parent == package_dir and path.name.startswith(library):
            continue
        parts = path.parent.relative_to(package_dir.parent).parts
        module = ".".join((*parts, stem))
        if module not in listed:
            strays[module] = path.with_name(stem + ".py")
    return strays


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_for(package_dir: Path = PACKAGE_DIR) -> dict[str, str]:
    """What the build writes: each compiled module's name and the digest of its source."""
    return {module: source_digest(source_path(module, package_dir)) for module in COMPILED_MODULES}


def unusable_reason(package_dir: Path = PACKAGE_DIR) -> str | None:
    """Why the compiled modules in ``package_dir`` must not be used; None when they may."""
    missing = [m for m in COMPILED_MODULES if extension_path(m, package_dir) is None]
    if missing:
        return f"no compiled extension for {', '.join(missing)}"
    strays = stray_extensions(package_dir)
    if strays:
        return f"{', '.join(strays)} is no longer compiled, but an extension of it is left"
    manifest = package_dir / MANIFEST_NAME
    try:
        recorded = json.loads(manifest.read_text())
    except FileNotFoundError:
        return f"{MANIFEST_NAME} is missing (the build did not finish)"
    except ValueError as error:
        return f"{MANIFEST_NAME} is not valid JSON ({error})"
    changed = [
        module
        for module in COMPILED_MODULES
        if not isinstance(recorded, dict)
        or recorded.get(module) != source_digest(source_path(module, package_dir))
    ]
    if changed:
        names = ", ".join(
            str(source_path(m, package_dir).relative_to(package_dir.parent)) for m in changed
        )
        return f"{names} changed since the compiled build"
    return None


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Loads the listed modules from their ``.py`` sources even where an extension sits beside."""

    def __init__(self, sources: dict[str, Path]) -> None:
        self._sources = sources

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self._sources.get(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def guard() -> str:
    """Choose this process's build (see the module doc) and return it; idempotent."""
    global _build
    if _build is not None:
        return _build
    present = any(extension_path(m) is not None for m in COMPILED_MODULES)
    if not present:
        _build = "pure"
        return _build
    reason: str | None
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        reason = None
        _build = "pure"
    else:
        reason = unusable_reason()
        _build = "pure" if reason else "compiled"
    if _build == "pure":
        already = [m for m in COMPILED_MODULES if m in sys.modules]
        if already:
            raise RuntimeError(f"drpc.compiled.guard() ran after {', '.join(already)} was imported")
        sources = {m: source_path(m) for m in COMPILED_MODULES}
        sources.update(stray_extensions())
        sys.meta_path.insert(0, _SourceFinder(sources))
        if reason:
            warnings.warn(
                f"drpc runs its pure-Python engine: {reason}. Rebuild it with `make compile`, "
                "or remove the stale extensions with `make clean-compiled`.",
                RuntimeWarning,
                stacklevel=2,
            )
    return _build


def engine_build() -> str:
    """``"compiled"`` or ``"pure"``: which engine this process runs."""
    return guard()


if __name__ == "__main__":
    print(" ".join(os.path.relpath(source_path(m)) for m in COMPILED_MODULES))
