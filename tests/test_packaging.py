"""What the package declares: its distribution name (drpc-spark: PyPI's "drpc" is an
unrelated project) under which the import name drpc installs, its licence (the text
shipped beside it), in the current pyproject form, so that building it warns about
nothing of ours."""

from __future__ import annotations

import tomllib
from importlib.metadata import metadata, packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_licence_is_declared_as_spdx_and_shipped() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"  # a string: the table form is deprecated
    assert project["project"]["license-files"] == ["LICENSE"]
    # license-files and SPDX strings need setuptools 77 (older ones warn or refuse)
    assert "setuptools>=77" in project["build-system"]["requires"]
    installed = metadata("drpc-spark")
    assert installed["License-Expression"] == "Apache-2.0"
    assert installed.get_all("License-File") == ["LICENSE"]


def test_the_distribution_is_drpc_spark_and_installs_the_import_name_drpc() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "drpc-spark"
    assert metadata("drpc-spark")["Name"] == "drpc-spark"
    assert set(packages_distributions()["drpc"]) == {"drpc-spark"}  # no stale "drpc" beside it


def test_the_licence_file_is_the_apache_license_2_0() -> None:
    text = (ROOT / "LICENSE").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines[:3] == [
        "Apache License",
        "Version 2.0, January 2004",
        "http://www.apache.org/licenses/",
    ]
    headings = [f"{n}. " for n in range(1, 10)]
    sections = [line for line in lines if any(line.startswith(h) for h in headings)]
    assert [line.split(".")[0] for line in sections] == [str(n) for n in range(1, 10)]
    for line in (
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "END OF TERMS AND CONDITIONS",
        "APPENDIX: How to apply the Apache License to your work.",
    ):
        assert line in lines


def test_every_package_of_the_tree_is_declared() -> None:
    """A package missing from [tool.setuptools] packages is left out of a wheel, and only an
    install from the wheel (not the editable one the suite runs on) would show it."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(setuptools["packages"])
    where = {"drpc": ROOT / "drpc"} | {
        name: ROOT / path for name, path in setuptools["package-dir"].items()
    }
    found = {
        ".".join([name, *init.parent.relative_to(path).parts])
        for name, path in where.items()
        for init in path.rglob("__init__.py")
    }
    assert found - declared == set()
