"""Builds drpc; with DRPC_COMPILE=1 it also compiles the engine's hot modules with mypyc.

The modules are listed once, in drpc/compiled.py, which also decides at import time whether
the compiled extensions may be used (see its docstring). `make compile` runs
`DRPC_COMPILE=1 python setup.py build_ext --inplace` in the virtualenv; a wheel built with
DRPC_COMPILE=1 (and mypy installed: `pip wheel --no-build-isolation .`) carries them too.
Everything else about the package lives in pyproject.toml.
"""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
compiled = runpy.run_path(str(ROOT / "drpc" / "compiled.py"))


class BuildCompiledEngine(build_ext):
    """build_ext that writes the manifest of compiled sources once the extensions are built.

    The manifest is removed first and written last, so a failed build never leaves
    extensions that look current; so are the extensions of an earlier build, so none of
    a module no longer compiled is left to shadow its source.
    """

    def run(self) -> None:
        if not self.extensions:  # a pure-Python build leaves any compiled build as it is
            super().run()
            return
        package_dir = ROOT / "drpc" if self.inplace else Path(self.build_lib) / "drpc"
        manifest = package_dir / compiled["MANIFEST_NAME"]
        manifest.unlink(missing_ok=True)
        if package_dir.is_dir():
            for stale in compiled["extension_files"](package_dir):
                stale.unlink()
        super().run()
        package_dir.mkdir(parents=True, exist_ok=True)
        digests = compiled["manifest_for"](ROOT / "drpc")
        manifest.write_text(json.dumps(digests, indent=2, sort_keys=True) + "\n")


ext_modules = []
if os.environ.get("DRPC_COMPILE") == "1":
    from mypyc.build import mypycify

    sources = [
        str(compiled["source_path"](module, ROOT / "drpc").relative_to(ROOT))
        for module in compiled["COMPILED_MODULES"]
    ]
    ext_modules = mypycify(sources, opt_level="3", group_name=compiled["GROUP"])

setup(ext_modules=ext_modules, cmdclass={"build_ext": BuildCompiledEngine})
