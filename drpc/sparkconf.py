"""Spark settings as drpc resolves them, and the command-line flags that carry them.

Contract:

- ``resolve(master, explicit, user)`` is every setting a new session gets,
  lowest precedence first: drpc's defaults for the kind of master
  (``drpc_defaults``), the settings the user made outside drpc (``user``:
  ``spark-defaults.conf``, or what ``spark-submit`` passed), then the
  explicit ones (``explicit``: ``spark_conf=``, ``--spark-conf-file``,
  ``--spark-conf``), then ``master``. The master is the first of ``master``,
  ``spark.master`` in ``explicit``, in ``user``, and ``local[*]``. Values are
  strings (booleans as ``true``/``false``).
- drpc's defaults: classic mode, FAIR scheduling, Python worker reuse, Unix
  domain sockets between the JVM and Python, no console progress bars, the
  app name; on a
  ``local``/``local-cluster`` master also loopback networking
  (``spark.driver.host``/``bindAddress`` 127.0.0.1) and no Spark UI; on any
  other master no networking at all (Spark's own resolution applies) and the
  Spark UI on.
- ``user_defaults()`` reads ``spark-defaults.conf`` from ``SPARK_CONF_DIR``,
  else from ``$SPARK_HOME/conf`` (``SPARK_HOME`` defaulting to the pyspark
  package), as ``spark-submit`` does; a missing file is no settings.
- ``read_conf_file(path)`` reads Spark's properties format (``key value`` or
  ``key=value`` a line, ``#``/``!`` comments, a trailing backslash continues a
  line); ``parse_setting("KEY=VALUE")`` reads one setting. Every key must start
  with ``spark.``; bad input raises ``SparkConfError`` naming the file and line
  or the text.
- ``session_options(master, spark_conf, start_timeout)`` are the keywords every
  Spark executor takes (``drpc.hosting.Host``'s ``spark_options``).
- ``add_spark_arguments``/``spark_options`` give every command line that starts
  a session the same flags: ``--master``, ``--spark-conf KEY=VALUE``
  (repeatable), ``--spark-conf-file FILE`` (under ``--spark-conf``),
  ``--spark-ui-port PORT`` (``spark.ui.port``, over both) and
  ``--start-timeout SECONDS``; bad values exit through ``parser.error``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drpc.errors import SparkConfError

DEFAULT_MASTER = "local[*]"
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_APP_NAME = "drpc"

BASE_CONF: dict[str, str] = {
    "spark.api.mode": "classic",
    "spark.scheduler.mode": "FAIR",
    "spark.python.worker.reuse": "true",
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
}
LOCAL_CONF: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
}
CLUSTER_CONF: dict[str, str] = {"spark.ui.enabled": "true"}


def is_local_master(master: str) -> bool:
    """Whether every process of ``master`` runs on this host (``local``, ``local[N]``,
    ``local-cluster[...]``)."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def drpc_defaults(master: str, app_name: str = DEFAULT_APP_NAME) -> dict[str, str]:
    kind = LOCAL_CONF if is_local_master(master) else CLUSTER_CONF
    return {**BASE_CONF, **kind, "spark.app.name": app_name}


def conf_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def checked(conf: Mapping[str, Any] | None, source: str = "spark_conf") -> dict[str, str]:
    """``conf`` with string values; a key that is no Spark setting raises ``SparkConfError``."""
    settings: dict[str, str] = {}
    for key, value in (conf or {}).items():
        if not isinstance(key, str) or not key.startswith("spark."):
            raise SparkConfError(f"{source}: {key!r} is not a Spark setting (keys start 'spark.')")
        settings[key] = conf_value(value)
    return settings


def resolve(
    master: str | None,
    explicit: Mapping[str, Any] | None,
    user: Mapping[str, str],
    app_name: str = DEFAULT_APP_NAME,
) -> dict[str, str]:
    """Every setting of a new session (see the module doc), ``spark.master`` included."""
    given = checked(explicit)
    chosen = master or given.get("spark.master") or user.get("spark.master") or DEFAULT_MASTER
    return {**drpc_defaults(chosen, app_name), **user, **given, "spark.master": chosen}


def parse_setting(text: str, source: str = "--spark-conf") -> tuple[str, str]:
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SparkConfError(f"{source}: {text!r} is not of the form KEY=VALUE")
    checked({key: value}, source)
    return key, value.strip()


def read_conf_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The settings of a Spark properties file (``spark-defaults.conf``'s format)."""
    name = os.fspath(path)
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise SparkConfError(f"cannot read Spark settings from {name}: {error}") from None
    settings: dict[str, str] = {}
    pending, first = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith(("#", "!"))):
            continue
        if not pending:
            first = number
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        where = f"{name}, line {first}"
        key, value = _split_property(line)
        if not value:
            raise SparkConfError(f"{where}: {key!r} has no value")
        checked({key: value}, where)
        settings[key] = value
    if pending:
        raise SparkConfError(f"{name}, line {first}: the file ends inside a line")
    return settings


def _split_property(line: str) -> tuple[str, str]:
    """A properties line's key and value: the key ends at the first '=', ':' or blank, and a
    separator after blanks belongs to neither."""
    for index, char in enumerate(line):
        if char in "=:" or char.isspace():
            key, rest = line[:index], line[index + 1 :].lstrip()
            if char.isspace() and rest[:1] in ("=", ":"):
                rest = rest[1:]
            return key, rest.strip()
    return line, ""


def spark_defaults_path(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    conf_dir = environ.get("SPARK_CONF_DIR")
    if conf_dir:
        return Path(conf_dir) / "spark-defaults.conf"
    home = environ.get("SPARK_HOME") or _pyspark_home()
    return Path(home) / "conf" / "spark-defaults.conf"


def _pyspark_home() -> str:
    import pyspark  # only when a session is being set up: importing drpc does not load pyspark

    return os.path.dirname(pyspark.__file__)


def user_defaults(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    path = spark_defaults_path(environ)
    return read_conf_file(path) if path.is_file() else {}


# -- command lines ------------------------------------------------------------------------------


def _setting(text: str) -> tuple[str, str]:
    try:
        return parse_setting(text)
    except SparkConfError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--spark-conf: ")) from None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return value


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Spark (with --executor spark or spark-batch)")
    group.add_argument(
        "--master",
        help="Spark master URL, e.g. local[*], spark://host:7077, yarn (default: spark.master "
        "from spark-submit or spark-defaults.conf, else local[*])",
    )
    group.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        type=_setting,
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.executor.memory=2g (repeatable; over "
        "--spark-conf-file, spark-defaults.conf and drpc's defaults)",
    )
    group.add_argument(
        "--spark-conf-file",
        metavar="FILE",
        help="Spark settings in spark-defaults.conf's format (over spark-defaults.conf; "
        "default: none)",
    )
    group.add_argument(
        "--spark-ui-port",
        type=_port,
        metavar="PORT",
        help="port of the Spark UI, on by default for a cluster master (spark.ui.port, over "
        "--spark-conf; default Spark's 4040, the next free one if taken)",
    )
    group.add_argument(
        "--start-timeout",
        type=_positive,
        metavar="SECONDS",
        help="give up, naming the likely cause, when no executor registers with the driver "
        f"within this (default {DEFAULT_START_TIMEOUT:g})",
    )


def spark_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, executor: str
) -> dict[str, Any]:
    """Executor keywords (``master``, ``spark_conf``, ``start_timeout``) from the flags of
    ``add_spark_arguments``; none for the local executor, which must not get them."""
    given = [
        flag
        for flag, value in (
            ("--master", args.master),
            ("--spark-conf", args.spark_conf),
            ("--spark-conf-file", args.spark_conf_file),
            ("--spark-ui-port", args.spark_ui_port),
            ("--start-timeout", args.start_timeout),
        )
        if value
    ]
    if executor == "local":
        if given:
            parser.error(f"{given[0]} applies to --executor spark and spark-batch only")
        return {}
    conf: dict[str, str] = {}
    if args.spark_conf_file:
        try:
            conf.update(read_conf_file(args.spark_conf_file))
        except SparkConfError as error:
            parser.error(f"--spark-conf-file: {error}")
    conf.update(dict(args.spark_conf))
    if args.spark_ui_port is not None:
        conf["spark.ui.port"] = str(args.spark_ui_port)
    timeout = DEFAULT_START_TIMEOUT if args.start_timeout is None else args.start_timeout
    return session_options(args.master, conf, timeout)


def session_options(
    master: str | None = None,
    spark_conf: Mapping[str, Any] | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> dict[str, Any]:
    """The keywords a Spark executor (and ``drpc.runtime.get_session``) takes."""
    return {"master": master, "spark_conf": dict(spark_conf or {}), "start_timeout": start_timeout}
