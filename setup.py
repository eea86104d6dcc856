"""Builds drpc; with DRPC_COMPILE=1 it also compiles the engine's hot modules with mypyc.

The modules are listed once, in drpc/compiled.py, which also decides at import time whether
the compiled extensions may be used (see its docstring). `make compile` runs
`DRPC_COMPILE=1 python setup.py build_ext --inplace` in the virtualenv; a wheel built with
DRPC_COMPILE=1 (and mypy installed: `pip wheel --no-build-isolation .`) carries them too:
the in-place build's when its manifest shows it current, else compiled for the wheel.
Everything else about the package lives in pyproject.toml.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
compiled = runpy.run_path(str(ROOT / "drpc" / "compiled.py"))


class BuildCompiledEngine(build_ext):
    """build_ext that writes the manifest of compiled sources once the extensions are built.

    The manifest is removed first and written last, so a failed build never leaves
    extensions that look current; so are the extensions of an earlier build, so none of
    a module no longer compiled is left to shadow its source. A build that is not in
    place (a wheel) copies the in-place build's extensions when its manifest shows them
    current (``REUSED``): the files a compile would make, without its minute of mypyc.
    """

    def run(self) -> None:
        if not self.extensions:  # a pure-Python build leaves any compiled build as it is
            super().run()
            return
        if REUSED and self.inplace:  # e.g. an editable install: the build is current
            return
        package_dir = ROOT / "drpc" if self.inplace else Path(self.build_lib) / "drpc"
        manifest = package_dir / compiled["MANIFEST_NAME"]
        manifest.unlink(missing_ok=True)
        if package_dir.is_dir():
            for stale in compiled["extension_files"](package_dir):
                stale.unlink()
        if REUSED:
            self._copy_in_place_build(package_dir)
        else:
            super().run()
        package_dir.mkdir(parents=True, exist_ok=True)
        digests = compiled["manifest_for"](ROOT / "drpc")
        manifest.write_text(json.dumps(digests, indent=2, sort_keys=True) + "\n")

    def build_extension(self, ext: Extension) -> None:
        """Compile an extension's C files side by side, one compiler per core: mypyc writes
        the engine as a file per module (``multi_file``), which compiled one after the
        other took half a clean build's minute. The objects and the linked library are
        the same either way."""
        compile_one = self.compiler.compile

        def compile_side_by_side(sources: list[str], *args: Any, **options: Any) -> list[str]:
            if len(sources) < 2:
                return compile_one(sources, *args, **options)
            with ThreadPoolExecutor(min(len(sources), os.cpu_count() or 1)) as pool:
                parts = pool.map(lambda source: compile_one([source], *args, **options), sources)
                return [obj for part in parts for obj in part]

        self.compiler.compile = compile_side_by_side  # type: ignore[method-assign]
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = compile_one  # type: ignore[method-assign]

    def _copy_in_place_build(self, package_dir: Path) -> None:
        source_dir = ROOT / "drpc"
        for extension in compiled["extension_files"](source_dir):
            target = package_dir / extension.relative_to(source_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(extension, target)
        print("drpc: the wheel carries the engine compiled in place (its sources are unchanged)")


def _in_place_build_is_current() -> bool:
    """Whether ``drpc/`` holds a compiled build of its current sources for this
    interpreter, and this is not ``build_ext --inplace`` (``make compile`` compiles)."""
    in_place = any(arg in ("--inplace", "-i") for arg in sys.argv[1:])
    return not in_place and compiled["unusable_reason"](ROOT / "drpc") is None


ext_modules: list[Extension] = []
REUSED = False
if os.environ.get("DRPC_COMPILE") == "1":
    REUSED = _in_place_build_is_current()
    if REUSED:  # named as mypyc names them, so the wheel is tagged for this platform
        names = [compiled["GROUP"] + "__mypyc", *compiled["COMPILED_MODULES"]]
        ext_modules = [Extension(name, sources=[]) for name in names]
    else:
        from mypyc.build import mypycify

        sources = [
            str(compiled["source_path"](module, ROOT / "drpc").relative_to(ROOT))
            for module in compiled["COMPILED_MODULES"]
        ]
        ext_modules = mypycify(
            sources, opt_level="3", group_name=compiled["GROUP"], multi_file=True
        )
        # mypyc writes the group's header beside the group's own C file, under the group's
        # package, and the modules' files at the top of build/, which include it by name.
        for extension in ext_modules:
            extension.include_dirs.append(str(Path("build", *compiled["GROUP"].split(".")[:-1])))

setup(ext_modules=ext_modules, cmdclass={"build_ext": BuildCompiledEngine})
