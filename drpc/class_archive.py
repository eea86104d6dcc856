"""A class-data archive for the Spark driver's JVM: a third off a session's start, half its CPU.

A JVM spends most of a Spark session's start loading and verifying Spark's classes.
Java's dynamic class-data sharing (JDK 13 and later) writes the classes one run
loaded to an archive file (``-XX:ArchiveClassesAtExit``); a later JVM maps that file
(``-XX:SharedArchiveFile``) instead of loading them again. Measured on a 2-core machine
(``local[2]``, a session and its warm-up job): 4.0-4.4 s instead of 6.3-7.0, and about 5
CPU-seconds of JVM less a start. A runner restarted after a crash serves that much
sooner, and a machine that starts many drivers (a test suite, a chaos run) spends that
much less.

Contract:

- ``archive_dir(environ)``: where archives live: ``DRPC_CLASS_ARCHIVE_DIR`` when set,
  else ``$XDG_CACHE_HOME/drpc/jvm``, else ``~/.cache/drpc/jvm``. ``DRPC_CLASS_ARCHIVE=off``
  turns the whole mechanism off (``enabled``).
- ``archive_path(settings, environ)``: the archive for a driver started with
  ``settings`` (a session's resolved Spark settings): its name is a hash of what decides
  the driver's class path and JVM (the ``java`` binary, pyspark's install and version,
  ``SPARK_HOME``, and the settings ``spark.driver.extraClassPath``, ``spark.jars``,
  ``spark.jars.packages``, ``spark.driver.extraJavaOptions``), so that a JVM only ever
  maps an archive made for its own class path. (The JVM checks it too, and runs without
  the archive when it does not match; the flags below keep that check quiet.)
- ``with_archive(settings, environ)`` is an ``ArchiveChoice``: the settings to launch
  the driver with, how it uses an archive (``use``) and the archive's ``path``. When the
  archive exists (``use`` ``"used"``), ``spark.driver.extraJavaOptions`` gains
  ``-XX:SharedArchiveFile=<path>`` and the flags that silence the JVM's sharing
  messages. Otherwise the settings are unchanged: ``"missing"`` (build it with
  ``build_in_background``), ``"off"``, or ``"chosen by spark.driver.extraJavaOptions"``
  when the user's own JVM options decide class sharing (``-Xshare``,
  ``-XX:SharedArchiveFile``, ``-XX:ArchiveClassesAtExit``).
- ``build_in_background(settings, path)`` starts, detached, one process that makes the
  archive at ``path``: a ``local[1]`` session on loopback with the class-path settings of
  ``settings`` (never the user's cluster) and ``-XX:ArchiveClassesAtExit``, one RDD
  job, then the JVM's exit writes the file, which is moved into place whole. At most
  one build per path runs at a time (a lock file, taken over when older than
  ``BUILD_STALE`` seconds); a build that fails leaves ``<path>.failed`` with the reason,
  and no other build of that path is tried for ``RETRY_AFTER_FAILURE`` seconds. Returns
  whether a build was started.
- The directory keeps the ``KEEP_ARCHIVES`` newest archives (about 110 MB each): a
  build that completes deletes the older ones (a JVM that maps one keeps its mapping).
- ``python -m drpc.class_archive PATH SETTINGS_JSON`` is that process (the settings
  that decide the class path, as JSON).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("drpc.runtime")

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""The JVM's own messages about class sharing (an archive it cannot use) stay off the log."""
SHARING_OPTIONS = ("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit")
"""JVM options by which the user already decides class sharing: drpc then adds nothing."""
CLASS_PATH_SETTINGS = (
    "spark.driver.extraClassPath",
    "spark.jars",
    "spark.jars.packages",
    JAVA_OPTIONS,
)
BUILD_STALE = 600.0
"""Seconds after which another build's lock file counts as left by a dead build."""
RETRY_AFTER_FAILURE = 86400.0
"""Seconds a failed build keeps others of its path from being tried."""
KEEP_ARCHIVES = 3
"""Archives a directory keeps, the newest: one per Java, Spark install and class path."""
BUILD_TIMEOUT = 300.0
"""Seconds a build's JVM may take to write the archive and exit."""
BUILD_SETTINGS = {
    "spark.master": "local[1]",
    "spark.app.name": "drpc-class-archive",
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.showConsoleProgress": "false",
}
"""What a build runs on besides the class-path settings: this host alone."""


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    return environ.get("DRPC_CLASS_ARCHIVE", "on").strip().lower() not in ("off", "0", "false")


def archive_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    chosen = environ.get("DRPC_CLASS_ARCHIVE_DIR")
    if chosen:
        return Path(chosen)
    home = environ.get("HOME") or os.path.expanduser("~")
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return Path(cache) / "drpc" / "jvm"


def _java(environ: Mapping[str, str]) -> str:
    home = environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        return "java not found"
    real = os.path.realpath(found)
    return f"{real} {os.stat(real).st_mtime_ns}"


def archive_path(settings: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    import pyspark  # only when a session is being set up

    facts = {
        "java": _java(environ),
        "pyspark": f"{os.path.dirname(pyspark.__file__)} {pyspark.__version__}",
        "spark_home": environ.get("SPARK_HOME", ""),
        **{key: settings.get(key, "") for key in CLASS_PATH_SETTINGS},
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]
    return archive_dir(environ) / f"spark-{pyspark.__version__}-{digest}.jsa"


def _decides_sharing(settings: Mapping[str, str]) -> bool:
    options = settings.get(JAVA_OPTIONS, "")
    return any(option in options for option in SHARING_OPTIONS)


def _with_options(settings: Mapping[str, str], options: str) -> dict[str, str]:
    own = settings.get(JAVA_OPTIONS, "").strip()
    return {**settings, JAVA_OPTIONS: f"{own} {options}".strip()}


@dataclass(frozen=True)
class ArchiveChoice:
    settings: dict[str, str]
    use: str
    path: Path | None = None


def with_archive(
    settings: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> ArchiveChoice:
    if not enabled(environ):
        return ArchiveChoice(dict(settings), "off")
    if _decides_sharing(settings):
        return ArchiveChoice(dict(settings), f"chosen by {JAVA_OPTIONS}")
    path = archive_path(settings, environ)
    if not path.is_file():
        return ArchiveChoice(dict(settings), "missing", path)
    options = f"-XX:SharedArchiveFile={path} {QUIET}"
    return ArchiveChoice(_with_options(settings, options), "used", path)


def _lock(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _failed(path: Path) -> Path:
    return path.with_name(path.name + ".failed")


def _failed_recently(marker: Path) -> bool:
    try:
        return time.time() - marker.stat().st_mtime < RETRY_AFTER_FAILURE
    except OSError:  # none, or a directory that cannot hold one (then the build fails too)
        return False


def _take_lock(lock: Path) -> bool:
    try:
        descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        try:
            stale = time.time() - lock.stat().st_mtime > BUILD_STALE
        except FileNotFoundError:
            return False  # the other build just ended
        if not stale:
            return False
        lock.unlink(missing_ok=True)
        return _take_lock(lock)
    os.write(descriptor, str(os.getpid()).encode())
    os.close(descriptor)
    return True


def build_in_background(settings: Mapping[str, str], path: Path) -> bool:
    if path.is_file() or _failed_recently(_failed(path)):
        return False
    lock = _lock(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not _take_lock(lock):
            return False
    except OSError as error:  # a read-only cache: sessions just start without an archive
        log.info("no class archive for the Spark driver: cannot build one at %s: %s", path, error)
        return False
    try:
        for partial in path.parent.glob(f"{path.name}.*.partial"):  # left by killed builds
            partial.unlink(missing_ok=True)
        class_path = {key: settings[key] for key in CLASS_PATH_SETTINGS if key in settings}
        # the drpc this process runs, wherever it was imported from (a script's sys.path too)
        here = str(Path(__file__).resolve().parents[1])
        python_path = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
        environ = {
            **os.environ,
            "PYTHONPATH": python_path,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }
        subprocess.Popen(
            [sys.executable, "-m", "drpc.class_archive", str(path), json.dumps(class_path)],
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as error:
        lock.unlink(missing_ok=True)
        log.info("no class archive for the Spark driver: cannot build one at %s: %s", path, error)
        return False
    log.info("building a class archive for the next Spark drivers at %s", path)
    return True


def build(path: Path, class_path: Mapping[str, str]) -> None:
    """Make the archive at ``path`` for a driver with the ``class_path`` settings (in this
    process's JVM); raises on failure."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    settings = {**BUILD_SETTINGS, **class_path}
    launch = _with_options(settings, f"-XX:ArchiveClassesAtExit={partial} {QUIET}")
    conf = SparkConf(loadDefaults=False).setAll(list(launch.items()))
    SparkContext._ensure_initialized(conf=conf)
    gateway = SparkContext._gateway
    assert gateway is not None
    session = SparkSession.builder.config(conf=conf).getOrCreate()
    try:
        session.sparkContext.parallelize(range(4), 2).map(lambda x: x + 1).collect()
    finally:
        session.stop()
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    if process is not None:
        process.stdin.close()  # the launcher's JVM exits once its stdin closes
        process.wait(BUILD_TIMEOUT)
    if not partial.is_file():
        raise RuntimeError(f"the JVM exited without writing {partial}")
    os.replace(partial, path)
    prune(path.parent)


def prune(directory: Path, keep: int = KEEP_ARCHIVES) -> list[Path]:
    """Delete all but the ``keep`` newest archives in ``directory``; return the deleted."""
    archives = sorted(directory.glob("spark-*.jsa"), key=lambda path: path.stat().st_mtime)
    old = archives[: max(len(archives) - keep, 0)]
    for path in old:
        path.unlink(missing_ok=True)
    return old


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m drpc.class_archive PATH SETTINGS_JSON", file=sys.stderr)
        return 2
    path = Path(argv[0])
    try:
        build(path, json.loads(argv[1]))
    except Exception as error:
        _failed(path).write_text(f"{type(error).__name__}: {error}\n")
        for partial in path.parent.glob(f"{path.name}.*.partial"):
            partial.unlink(missing_ok=True)
        return 1
    finally:
        _lock(path).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
