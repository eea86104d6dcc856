"""Griffe extension: ``drpc.server`` and ``drpc.client`` for the API reference.

Contract: the repository keeps ``server/`` and ``client/`` at its top and installs them
as ``drpc.server`` and ``drpc.client`` (``[tool.setuptools.package-dir]`` in
pyproject.toml). Griffe reads packages from disk and finds neither under ``drpc/``; when
it has loaded the package ``drpc``, this extension loads each of those folders (with
their submodules) as the submodule of ``drpc`` that pyproject.toml makes it, so
``::: drpc.client`` in a page resolves, and the aliases inside them
(``from drpc.client.sync import DRPCClient``) resolve as they do at run time.
mkdocs.yml lists it under the python handler's ``extensions``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[1]


def _mapped_subpackages() -> dict[str, Path]:
    """``drpc``'s sub-packages kept outside ``drpc/``: name -> folder (from pyproject)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package_dir: dict[str, str] = project["tool"]["setuptools"]["package-dir"]
    return {
        name.split(".", 1)[1]: ROOT / folder
        for name, folder in package_dir.items()
        if name.startswith("drpc.") and name.count(".") == 1
    }


class MappedSubpackages(griffe.Extension):
    """Grafts the folders of ``_mapped_subpackages`` onto the loaded ``drpc`` package."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **_: Any) -> None:
        if pkg.path != "drpc":
            return
        for name, folder in _mapped_subpackages().items():
            if name in pkg.members:
                continue
            # What GriffeLoader does for a submodule it finds on disk (_load_submodule).
            module = loader._load_module(name, folder / "__init__.py", parent=pkg)
            pkg.set_member(name, module)
