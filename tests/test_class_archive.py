"""The Spark driver's class-data archive (drpc.class_archive): chosen, keyed, built once."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from drpc import class_archive
from drpc.class_archive import JAVA_OPTIONS
from tests import ahead


def environ(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"DRPC_CLASS_ARCHIVE_DIR": str(tmp_path), "PATH": os.environ["PATH"], **more}


def test_a_missing_archive_leaves_the_settings_and_names_the_path_to_build(tmp_path: Path) -> None:
    settings = {"spark.master": "local[2]"}
    choice = class_archive.with_archive(settings, environ(tmp_path))
    assert choice.use == "missing"
    assert choice.settings == settings
    assert choice.path is not None and choice.path.parent == tmp_path
    assert choice.path.name.startswith("spark-") and choice.path.suffix == ".jsa"


def test_an_archive_there_is_mapped_and_the_users_own_options_are_kept(tmp_path: Path) -> None:
    settings = {"spark.master": "local[2]", JAVA_OPTIONS: "-Dlevel=7"}
    path = class_archive.archive_path(settings, environ(tmp_path))
    path.write_bytes(b"archive")
    choice = class_archive.with_archive(settings, environ(tmp_path))
    assert choice.use == "used" and choice.path == path
    options = choice.settings[JAVA_OPTIONS].split()
    assert options[0] == "-Dlevel=7"
    assert f"-XX:SharedArchiveFile={path}" in options
    assert "-Xlog:cds=off" in options


@pytest.mark.parametrize(
    "options", ["-Xshare:off", "-XX:SharedArchiveFile=/elsewhere.jsa", "-XX:ArchiveClassesAtExit=a"]
)
def test_jvm_options_that_decide_class_sharing_are_left_alone(tmp_path: Path, options: str) -> None:
    settings = {JAVA_OPTIONS: options}
    class_archive.archive_path(settings, environ(tmp_path)).write_bytes(b"archive")
    choice = class_archive.with_archive(settings, environ(tmp_path))
    assert choice.use == f"chosen by {JAVA_OPTIONS}"
    assert choice.settings == settings


@pytest.mark.parametrize("off", ["off", "0", "false", "OFF"])
def test_off_turns_it_off(tmp_path: Path, off: str) -> None:
    env = environ(tmp_path, DRPC_CLASS_ARCHIVE=off)
    choice = class_archive.with_archive({}, env)
    assert (choice.use, choice.path) == ("off", None)
    assert class_archive.enabled(environ(tmp_path))


def test_each_class_path_gets_an_archive_of_its_own(tmp_path: Path) -> None:
    env = environ(tmp_path)
    plain = class_archive.archive_path({"spark.master": "local[1]"}, env)
    assert plain == class_archive.archive_path({"spark.master": "local[8]"}, env)
    for key in class_archive.CLASS_PATH_SETTINGS:
        assert class_archive.archive_path({key: "x.jar"}, env) != plain, key
    assert class_archive.archive_path({}, {**env, "SPARK_HOME": "/opt/spark"}) != plain


def test_the_default_directory_is_the_users_cache() -> None:
    assert class_archive.archive_dir({"HOME": "/home/u"}) == Path("/home/u/.cache/drpc/jvm")
    assert class_archive.archive_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/drpc/jvm")
    assert class_archive.archive_dir({"DRPC_CLASS_ARCHIVE_DIR": "/a"}) == Path("/a")


def test_one_build_at_a_time_and_none_again_soon_after_one_failed(tmp_path: Path) -> None:
    path = tmp_path / "a.jsa"
    lock = tmp_path / "a.jsa.lock"
    lock.write_text("4242")  # a build under way
    assert not class_archive.build_in_background({}, path)
    old = time.time() - class_archive.BUILD_STALE - 1
    os.utime(lock, (old, old))  # left by a build that died
    assert class_archive._take_lock(lock)
    assert lock.read_text() == str(os.getpid())
    lock.unlink()
    failed = tmp_path / "a.jsa.failed"
    failed.write_text("RuntimeError: no JVM\n")
    assert not class_archive.build_in_background({}, path)
    assert not lock.exists()
    path.write_bytes(b"archive")
    failed.unlink()
    assert not class_archive.build_in_background({}, path)  # there already


def test_a_directory_it_cannot_write_means_no_build_and_no_error(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the directory should be")
    assert not class_archive.build_in_background({}, tmp_path / "cache" / "jvm" / "a.jsa")


def test_a_directory_keeps_the_newest_archives_only(tmp_path: Path) -> None:
    for age, name in enumerate(["spark-a.jsa", "spark-b.jsa", "spark-c.jsa", "spark-d.jsa"]):
        path = tmp_path / name
        path.write_bytes(b"archive")
        os.utime(path, (1000 - age * 100, 1000 - age * 100))  # a is the newest
    (tmp_path / "spark-e.jsa.lock").write_text("1")
    deleted = class_archive.prune(tmp_path, keep=class_archive.KEEP_ARCHIVES)
    assert [path.name for path in deleted] == ["spark-d.jsa"]
    left = sorted(path.name for path in tmp_path.iterdir())
    assert left == ["spark-a.jsa", "spark-b.jsa", "spark-c.jsa", "spark-e.jsa.lock"]
    assert class_archive.prune(tmp_path, keep=3) == []


def test_the_build_command_line_takes_a_path_and_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert class_archive.main([]) == 2
    assert "usage: python -m drpc.class_archive PATH SETTINGS_JSON" in capsys.readouterr().err


def _two_starts(workdir: Path) -> ahead.Command:
    return ahead.Command([sys.executable, "-m", "tests.class_archive_run", str(workdir)])


TWO_STARTS = ahead.register("class-archive", _two_starts, timeout=400)
"""Two driver starts and a build between them, beside the other tests (tests/ahead.py)."""


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(460)
@pytest.mark.ahead(TWO_STARTS.name)
def test_the_first_start_builds_the_archive_and_the_next_one_maps_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    out = TWO_STARTS.finish(tmp_path_factory)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    first, second = report["first"], report["second"]
    assert "class archive being built for the next start" in first["log"][0]
    assert first["mapped"] is False
    archives = [name for name in report["held"] if name.endswith(".jsa")]
    assert len(archives) == 1 and report["held"] == archives, report["held"]  # no lock, no part
    assert second is not None
    assert "class archive used" in second["log"][0]
    assert second["mapped"] is True
