"""The process's one SparkSession: create or adopt it, warm it up, stop it.

Contract:

- ``get_session(master=None, conf=None)`` returns the process's SparkSession
  in classic mode (the RDD API drpc compiles to needs it). The first call
  creates it with server settings (``SERVER_CONF``: FAIR scheduling, Python
  worker reuse, Unix domain sockets for driver/worker traffic, UI off,
  loopback networking) overlaid by ``conf``, then warms it up with one RDD job
  and one DataFrame job so the first request does not pay for JVM and worker
  start-up. Later calls return the same session; asking for a different
  master than the running one raises ``ValueError`` rather than silently
  using the wrong cluster. A session created elsewhere (e.g. by a notebook) is
  adopted as is and never stopped by drpc.
- ``stop_session()`` stops the session drpc created (idempotent), after the
  callbacks registered with ``before_stop`` (a resident job ends first); it
  also runs at interpreter exit, so a script that never calls it still shuts Spark down
  cleanly instead of racing the JVM's own shutdown.
- The environment is prepared for Spark's Python workers: ``PYSPARK_PYTHON``
  defaults to this interpreter and ``SPARK_LOCAL_IP`` to 127.0.0.1 when unset.

Creating two executors in one process reuses the session.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"

SERVER_CONF: dict[str, str] = {
    "spark.api.mode": "classic",
    "spark.scheduler.mode": "FAIR",
    "spark.python.worker.reuse": "true",
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
}

_lock = threading.Lock()
_before_stop: list[Callable[[], None]] = []
_session: SparkSession | None = None
_owned = False
_master: str | None = None


def _prepare_environment() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def get_session(
    master: str | None = None, conf: Mapping[str, Any] | None = None, *, app_name: str = "drpc"
) -> SparkSession:
    """The process's SparkSession, created and warmed up on first use."""
    global _session, _owned, _master
    with _lock:
        if _session is not None and not _stopped(_session):
            if master is not None and _master is not None and master != _master:
                raise ValueError(
                    f"this process already runs a SparkSession on master {_master!r}; "
                    f"cannot also use {master!r} (one session per process)"
                )
            return _session
        _prepare_environment()
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None and not _stopped(active):
            _session, _owned = active, False
            _master = active.sparkContext.master
            log.info("adopted the running SparkSession on %s", _master)
            return active
        started = time.monotonic()
        builder = SparkSession.builder.appName(app_name).master(master or DEFAULT_MASTER)
        for key, value in {**SERVER_CONF, **(conf or {})}.items():
            builder = builder.config(key, str(value))
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        _session, _owned, _master = session, True, session.sparkContext.master
        atexit.register(stop_session)
        warm_up(session)
        log.info(
            "started SparkSession %s on %s in %.1f s (warm)",
            session.version,
            _master,
            time.monotonic() - started,
        )
        return session


def warm_up(session: SparkSession) -> None:
    """Run one RDD job and one DataFrame job so workers and codegen are ready."""
    sc = session.sparkContext
    sc.parallelize(range(sc.defaultParallelism * 2), sc.defaultParallelism).map(
        lambda x: x * 2
    ).sum()
    session.range(1000).selectExpr("sum(id)").collect()


def _stopped(session: SparkSession) -> bool:
    sc = session.sparkContext
    return sc._jsc is None


def current_session() -> SparkSession | None:
    """The session drpc uses, if one is running."""
    with _lock:
        if _session is not None and not _stopped(_session):
            return _session
        return None


def before_stop(callback: Callable[[], None]) -> None:
    """Call ``callback`` when ``stop_session`` runs, before the session stops (once)."""
    with _lock:
        _before_stop.append(callback)


def stop_session() -> None:
    """Stop the session drpc created; an adopted session is left running."""
    global _session, _owned, _master
    with _lock:
        callbacks = list(_before_stop)
        _before_stop.clear()
    for callback in callbacks:
        try:
            callback()
        except Exception:
            log.exception("a callback before the SparkSession stopped failed")
    with _lock:
        session, owned = _session, _owned
        _session, _owned, _master = None, False, None
    if session is not None and owned and not _stopped(session):
        session.stop()
        log.info("stopped the SparkSession")
