"""The compiled engine (drpc/compiled.py): when its extensions are used, and when not.

The rules are tested on copies of the package in a temporary directory, in fresh
interpreters, so the checkout's own build is never touched: a copy as built runs
compiled, an edited source or a missing manifest or extension falls back to the
pure-Python engine as a whole (with a warning naming why), DRPC_PURE_PYTHON=1 forces
it, and a tree that never had a build runs pure without a word. ``make test`` sets
DRPC_EXPECT_BUILD=compiled, and the suite checks that this process, and a resident
Spark task (tests/spark/test_resident.py), run that build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from drpc import compiled

REPO = Path(compiled.__file__).resolve().parents[1]
EXPECTED = os.environ.get("DRPC_EXPECT_BUILD")

needs_build = pytest.mark.skipif(
    compiled.unusable_reason() is not None and EXPECTED != "compiled",
    reason="no current compiled build in this checkout (`make compile` makes one)",
)

PROBE = """
import json, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import drpc
    from drpc.semantics import acker
    from drpc.executors.local import executor
print(json.dumps({
    "build": drpc.compiled.engine_build(),
    "files": [acker.__file__, executor.__file__],
    "warnings": [str(w.message) for w in caught if w.category is RuntimeWarning],
}))
"""


def probe(root: Path, **env: str) -> dict[str, Any]:
    """Import drpc from ``root`` in a fresh interpreter; its build, files and warnings."""
    return probe_path(str(root), root, **env)


def probe_path(path: str, cwd: Path, **env: str) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if k != compiled.PURE_PYTHON_ENV}
    environment.update(env, PYTHONPATH=path)
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout.splitlines()[-1])


def copy_package(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(REPO / "drpc", root / "drpc", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_build_this_run_expects_is_the_one_it_runs() -> None:
    if EXPECTED is None:
        pytest.skip("DRPC_EXPECT_BUILD is not set (make test sets it)")
    assert compiled.engine_build() == EXPECTED, compiled.unusable_reason()


@needs_build
def test_a_copy_as_built_runs_compiled(tmp_path: Path) -> None:
    seen = probe(copy_package(tmp_path))
    assert seen["build"] == "compiled"
    assert all(not str(f).endswith(".py") for f in seen["files"])
    assert seen["warnings"] == []


@needs_build
def test_an_edited_source_makes_every_engine_module_pure_and_says_which(tmp_path: Path) -> None:
    root = copy_package(tmp_path)
    edited = root / "drpc" / "semantics" / "acker.py"
    edited.write_text(edited.read_text() + "\n# edited after the build\n")
    seen = probe(root)
    assert seen["build"] == "pure"
    # executor.py is unchanged, yet it loads from source too: all or nothing.
    assert all(str(f).endswith(".py") for f in seen["files"])
    [warning] = seen["warnings"]
    assert "drpc/semantics/acker.py changed since the compiled build" in warning
    assert "make compile" in warning


@needs_build
def test_a_missing_manifest_means_an_unfinished_build(tmp_path: Path) -> None:
    root = copy_package(tmp_path)
    (root / "drpc" / compiled.MANIFEST_NAME).unlink()
    seen = probe(root)
    assert seen["build"] == "pure"
    assert seen["warnings"] == [
        f"drpc runs its pure-Python engine: {compiled.MANIFEST_NAME} is missing (the build did "
        "not finish). Rebuild it with `make compile`, or remove the stale extensions with "
        "`make clean-compiled`."
    ]


@needs_build
def test_a_missing_extension_makes_the_whole_engine_pure(tmp_path: Path) -> None:
    root = copy_package(tmp_path)
    extension = compiled.extension_path("drpc.semantics.routing", root / "drpc")
    assert extension is not None
    extension.unlink()
    seen = probe(root)
    assert seen["build"] == "pure"
    assert "no compiled extension for drpc.semantics.routing" in seen["warnings"][0]


@needs_build
def test_an_extension_left_by_an_earlier_build_is_not_imported(tmp_path: Path) -> None:
    """A module taken off the list keeps its old extension in a tree built before; its code
    is gone from the shared library, so importing it would fail: it loads from source."""
    root = copy_package(tmp_path)
    package = root / "drpc"
    extension = compiled.extension_path("drpc.model.hashing", package)
    assert extension is not None
    left = package / "model" / extension.name.replace("hashing", "grouping")
    shutil.copy(extension, left)
    assert compiled.stray_extensions(package) == {
        "drpc.model.grouping": package / "model" / "grouping.py"
    }
    seen = probe(root)  # imports drpc, and so drpc.model.grouping
    assert seen["build"] == "pure"
    [warning] = seen["warnings"]
    assert "drpc.model.grouping is no longer compiled, but an extension of it is left" in warning


@needs_build
def test_drpc_pure_python_forces_the_pure_engine_quietly(tmp_path: Path) -> None:
    seen = probe(copy_package(tmp_path), **{compiled.PURE_PYTHON_ENV: "1"})
    assert seen["build"] == "pure"
    assert all(str(f).endswith(".py") for f in seen["files"])
    assert seen["warnings"] == []


def test_a_tree_without_a_build_runs_pure_without_a_word(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    shutil.copytree(
        REPO / "drpc",
        root / "drpc",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", compiled.MANIFEST_NAME),
    )
    seen = probe(root)
    assert seen == {
        "build": "pure",
        "files": [
            str(root / "drpc" / "semantics" / "acker.py"),
            str(root / "drpc" / "executors" / "local" / "executor.py"),
        ],
        "warnings": [],
    }


def test_drpc_in_a_zip_runs_pure_without_a_word(tmp_path: Path) -> None:
    """As executors given drpc through spark.submit.pyFiles run it: a zip cannot hold
    extensions, even when the build's files are in it."""
    archive = tmp_path / "drpc.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted((REPO / "drpc").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, path.relative_to(REPO).as_posix())
    seen = probe_path(str(archive), tmp_path)
    assert seen == {
        "build": "pure",
        "files": [
            f"{archive}/drpc/semantics/acker.py",
            f"{archive}/drpc/executors/local/executor.py",
        ],
        "warnings": [],
    }


def test_the_build_finds_every_extension_to_remove_first(tmp_path: Path) -> None:
    """What a build removes before it compiles: any extension under the package, so one of
    a module no longer compiled cannot shadow its source."""
    package = tmp_path / "drpc"
    (package / "model").mkdir(parents=True)
    suffix = compiled.importlib.machinery.EXTENSION_SUFFIXES[0]
    stale = package / "model" / f"grouping{suffix}"
    library = package / f"_engine__mypyc{suffix}"
    for path in (stale, library, package / "model" / "grouping.py", package / "notes.txt"):
        path.write_bytes(b"")
    assert compiled.extension_files(package) == sorted([library, stale])
    assert compiled.extension_files(tmp_path / "absent") == []


def test_unusable_reason_reads_the_manifest_against_each_source(tmp_path: Path) -> None:
    package = tmp_path / "drpc"
    suffix = compiled.importlib.machinery.EXTENSION_SUFFIXES[0]
    for module in compiled.COMPILED_MODULES:
        source = compiled.source_path(module, package)
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"NAME = {module!r}\n")
    first = compiled.COMPILED_MODULES[0]
    assert compiled.unusable_reason(package) == (
        f"no compiled extension for {', '.join(compiled.COMPILED_MODULES)}"
    )
    for module in compiled.COMPILED_MODULES:
        source = compiled.source_path(module, package)
        (source.parent / (source.stem + suffix)).write_bytes(b"")
    assert compiled.unusable_reason(package) == (
        f"{compiled.MANIFEST_NAME} is missing (the build did not finish)"
    )
    manifest = package / compiled.MANIFEST_NAME
    manifest.write_text("{not json")
    assert compiled.MANIFEST_NAME + " is not valid JSON" in str(compiled.unusable_reason(package))
    manifest.write_text(json.dumps(compiled.manifest_for(package)))
    assert compiled.unusable_reason(package) is None
    compiled.source_path(first, package).write_text("NAME = 'changed'\n")
    assert (
        compiled.unusable_reason(package)
        == "drpc/model/hashing.py changed since the compiled build"
    )
    manifest.write_text("[]")
    assert str(compiled.unusable_reason(package)).endswith("changed since the compiled build")


def test_source_path_refuses_a_module_outside_drpc() -> None:
    with pytest.raises(ValueError, match=r"^'thrift\.Thrift' is not a module under drpc$"):
        compiled.source_path("thrift.Thrift")
    assert compiled.source_path("drpc.semantics.acker") == REPO / "drpc" / "semantics" / "acker.py"


def test_every_compiled_module_exists_and_the_script_lists_their_sources() -> None:
    printed = subprocess.run(
        [sys.executable, str(REPO / "drpc" / "compiled.py")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert printed == [
        str(compiled.source_path(m).relative_to(REPO)) for m in compiled.COMPILED_MODULES
    ]
    assert all((REPO / path).is_file() for path in printed)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_wheel_built_compiled_installs_an_engine_that_runs_compiled(tmp_path: Path) -> None:
    """The README's route to executors: ``make compile``, ``DRPC_COMPILE=1 pip wheel``,
    then the wheel into a fresh environment; drpc's dependencies come from this one (on
    PYTHONPATH). The wheel carries the in-place build when it is current, as the
    checkout's is under ``make test``; a checkout without one makes the wheel compile."""
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__")
    for tree in ("drpc", "server", "client"):
        shutil.copytree(REPO / tree, source / tree, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    environment = {**os.environ, "DRPC_COMPILE": "1"}
    wheel = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", "dist", "."]
    subprocess.run(wheel, cwd=source, env=environment, check=True, timeout=540)
    [built] = (source / "dist").glob("drpc_spark-*.whl")  # the distribution drpc-spark
    if compiled.unusable_reason() is None:  # carried over, byte for byte, not compiled
        library = compiled.extension_path("drpc.semantics.acker")
        assert library is not None
        shared = next(REPO.joinpath("drpc").glob("_engine__mypyc*"))
        with zipfile.ZipFile(built) as archive:
            for extension in (library, shared):
                packed = str(extension.relative_to(REPO))
                assert archive.read(packed) == extension.read_bytes(), packed
    target = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    install = [*pip, "--python", str(python), "install", "--no-deps", str(built)]
    # Not with the checkout on PYTHONPATH (tests/conftest.py puts it there for Spark's
    # workers): pip would find its drpc_spark.egg-info and call the wheel installed.
    outside = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    subprocess.run(install, check=True, timeout=120, env=outside)
    site_packages = [p for p in sys.path if p.endswith("site-packages")]
    call = (
        "import sys, importlib.metadata, drpc, drpc.semantics.acker as acker\n"
        "from drpc.examples.reach import build_reach\n"
        "from drpc.testing import LocalDRPC\n"
        "with LocalDRPC() as server:\n"
        "    server.register(build_reach())\n"
        "    answer = server.execute('reach', 'foo.com/blog/1')\n"
        "installed = acker.__file__.startswith(sys.prefix) and acker.__file__.endswith('.so')\n"
        "print(drpc.compiled.engine_build(), installed, answer)\n"
        "print(importlib.metadata.metadata('drpc-spark')['Name'], drpc.__version__)\n"
        "print(importlib.metadata.distribution('drpc-spark').read_text('top_level.txt'))\n"
    )
    ran = subprocess.run(
        [str(python), "-W", "error::RuntimeWarning", "-c", call],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(site_packages)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # installed under its distribution name (PyPI's "drpc" is another project), importing
    # as drpc, at the version drpc reports
    named = ["drpc-spark", metadata.version("drpc-spark"), "drpc"]
    assert ran.stdout.split() == ["compiled", "True", "16", *named], ran.stderr
