"""The process's one SparkSession: create or adopt it, check that it can serve, warm it up, stop it.

Contract:

- ``get_session(master=None, conf=None, *, start_timeout=120)`` returns the
  process's SparkSession in classic mode (the RDD API drpc compiles to needs
  it). The first call creates it with the settings ``drpc.sparkconf.resolve``
  gives: drpc's defaults for the kind of master, under the user's own
  settings (``spark-defaults.conf``; under ``spark-submit``, the submitted
  master and conf, which drpc adopts instead of overriding), under ``conf``
  and ``master``. Then, before it returns:

  - once this process's JVM runs (launched with those settings, or
    spark-submit's), the rest of the start is bounded by ``start_timeout``
    seconds: creating the context (a standalone master that cannot answer the
    driver blocks it for a minute; a session that arrives after the timeout is
    stopped at once) and, on a master with executors of their own (anything
    but ``local[...]``), the first executor registering. When that does not
    happen, or the master gives up on the application, ``SparkStartError``
    names the master, the driver address the executors were given
    (``spark.driver.host``:``spark.driver.port``, the host alone while Spark
    has not reported the port) and the likely cause;
  - it warms up with one RDD job whose tasks import drpc (executors that
    cannot, because drpc was not shipped to them, fail the start with
    ``SparkStartError`` saying how to ship it), so the first request does not
    pay for worker start-up. drpc runs no DataFrame jobs, so none warms up
    Spark SQL: that took 2.7 s of every start, for nothing drpc serves;
  - it logs the master, the driver's address, what Python and which drpc the
    executors run, whether the driver's JVM mapped a class archive, and the
    Spark UI's URL (``ui_url()``; the UI is on by default for a cluster master,
    off for ``local[...]``).

  A JVM that drpc launches maps the class-data archive made for its class path
  (``drpc.class_archive``), which takes about a third off its start and half its
  CPU; when there is none yet, one is built in the background for the next start.

  Later calls return the same session; asking for a different master than the
  running one raises ``ValueError`` rather than silently using the wrong
  cluster. A session created elsewhere (e.g. by a notebook) is adopted as is
  and never stopped by drpc.
- ``stop_session()`` stops the session drpc created (idempotent), after the
  callbacks registered with ``before_stop`` (a resident job ends first); it
  also runs at interpreter exit, so a script that never calls it still shuts Spark down
  cleanly instead of racing the JVM's own shutdown.
- The environment of Spark's Python processes: the executors run
  ``spark.pyspark.python`` if set (as ``spark-submit`` does), else
  ``PYSPARK_PYTHON``, else this interpreter; on a ``local``/``local-cluster``
  master ``SPARK_LOCAL_IP`` defaults to 127.0.0.1, on any other it is left to
  Spark.
- ``describe_spark_error`` turns a Spark failure into its telling line;
  ``context_usable(sc)`` says whether a SparkContext can still run jobs.

Creating two executors in one process reuses the session.
"""

from __future__ import annotations

import atexit
import logging
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from drpc import class_archive
from drpc.errors import SparkStartError
from drpc.sparkconf import (
    DEFAULT_APP_NAME,
    DEFAULT_START_TIMEOUT,
    is_local_master,
    resolve,
    user_defaults,
)

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_lock = threading.Lock()
_before_stop: list[Callable[[], None]] = []
_session: SparkSession | None = None
_owned = False
_master: str | None = None

_LOOPBACK = ("127.", "localhost", "::1", "[::1]")


def get_session(
    master: str | None = None,
    conf: Mapping[str, Any] | None = None,
    *,
    app_name: str = DEFAULT_APP_NAME,
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> SparkSession:
    """The process's SparkSession, created, checked and warmed up on first use."""
    global _session, _owned, _master
    if not start_timeout > 0:
        raise ValueError(f"start_timeout must be positive, got {start_timeout!r}")
    with _lock:
        if _session is not None and not _stopped(_session):
            if master is not None and _master is not None and master != _master:
                raise ValueError(
                    f"this process already runs a SparkSession on master {_master!r}; "
                    f"cannot also use {master!r} (one session per process)"
                )
            return _session
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None and not _stopped(active):
            _session, _owned = active, False
            _master = active.sparkContext.master
            log.info("adopted the running SparkSession on %s", _master)
            return active
        started = time.monotonic()
        submitted = _submitted_settings()
        user = user_defaults() if submitted is None else submitted
        settings = resolve(master, conf, user, app_name)
        _prepare_environment(settings)
        choice = class_archive.ArchiveChoice(dict(settings), "chosen by spark-submit")
        if submitted is None:
            choice = class_archive.with_archive(settings)
            settings = choice.settings
        _launch_gateway(settings)  # a local JVM: its start-up is not the cluster's to explain
        deadline = time.monotonic() + start_timeout
        builder = SparkSession.builder
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = _create_within(builder, start_timeout)
        if session is None:
            raise SparkStartError(_start_failure(settings, start_timeout))
        sc = session.sparkContext
        sc.setLogLevel("ERROR")
        try:
            _await_executors(sc, deadline, start_timeout)
            reports = warm_up(session)
        except BaseException:
            session.stop()
            raise
        _session, _owned, _master = session, True, sc.master
        atexit.register(stop_session)
        archive = choice.use
        if choice.use == "missing" and choice.path is not None:  # now: not beside this start
            building = class_archive.build_in_background(settings, choice.path)
            archive = "being built for the next start" if building else "none"
        log.info(
            "started SparkSession %s %r on %s in %.1f s (warm, class archive %s): driver at %s, "
            "%s; executors run %s",
            session.version,
            sc.appName,
            _master,
            time.monotonic() - started,
            archive,
            _driver_address(sc),
            f"Spark UI at {sc.uiWebUrl}" if sc.uiWebUrl else "Spark UI off",
            "; ".join(reports),
        )
        return session


def _launch_gateway(settings: Mapping[str, str]) -> None:
    """Start this process's Spark JVM with ``settings`` (they include what must be set at
    launch, such as ``spark.driver.memory``), unless one runs already."""
    from pyspark import SparkConf, SparkContext

    launch = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        launch.set(key, value)
    SparkContext._ensure_initialized(conf=launch)


def _create_within(builder: Any, seconds: float) -> SparkSession | None:
    """``builder.getOrCreate()``, or None if it has not returned within ``seconds`` (a
    standalone master that never confirms the application blocks it for a minute). A
    session that arrives after that is stopped at once: nobody is waiting for it."""
    lock = threading.Lock()
    outcome: list[Any] = []
    done = threading.Event()
    abandoned = False

    def create() -> None:
        try:
            created = builder.getOrCreate()
        except BaseException as error:
            created = error
        with lock:
            if abandoned:
                if not isinstance(created, BaseException):
                    created.stop()
                return
            outcome.append(created)
        done.set()

    threading.Thread(target=create, name="drpc-spark-start", daemon=True).start()
    done.wait(seconds)
    with lock:
        if not outcome:
            abandoned = True
            return None
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _submitted_settings() -> dict[str, str] | None:
    """The settings of the JVM already running for this process (``spark-submit``'s, or a
    session's before), or None when drpc is about to launch one."""
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" not in os.environ and SparkContext._gateway is None:
        return None
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


def _prepare_environment(settings: Mapping[str, str]) -> None:
    python = settings.get("spark.pyspark.python")
    if python:
        os.environ["PYSPARK_PYTHON"] = python
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local_master(settings["spark.master"]):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _has_own_executors(master: str) -> bool:
    return not (master == "local" or master.startswith("local["))


def _await_executors(sc: SparkContext, deadline: float, timeout: float) -> None:
    if not _has_own_executors(str(sc.master)):
        return
    jsc = sc._jsc.sc()
    while jsc.getExecutorMemoryStatus().size() <= 1:  # the driver's own block manager counts
        stopped = bool(jsc.isStopped())
        if stopped or time.monotonic() >= deadline:
            settings = dict(sc.getConf().getAll())
            accepted = str(sc.applicationId).startswith("app-")
            raise SparkStartError(_start_failure(settings, timeout, stopped, accepted))
        time.sleep(0.2)


def _driver_address(sc: SparkContext) -> str:
    conf = sc.getConf()
    return f"{conf.get('spark.driver.host')}:{conf.get('spark.driver.port')}"


def _advertised_driver(settings: Mapping[str, str]) -> str:
    """The driver address the executors are told while the SparkContext still starts (Spark
    does not tell the port it picked before the context is up)."""
    host = settings.get("spark.driver.host") or os.environ.get("SPARK_LOCAL_IP")
    port = settings.get("spark.driver.port")
    if host is None:
        return "an address Spark picked (spark.driver.host and SPARK_LOCAL_IP are unset)"
    return f"{host}:{port}" if port else f"{host} (spark.driver.host; port not reported yet)"


def _start_failure(
    settings: Mapping[str, str],
    timeout: float,
    stopped: bool = False,
    accepted: bool | None = None,
) -> str:
    """Why no executor registered (see the module doc): the master, the driver address the
    executors were given and the likely cause."""
    master = settings["spark.master"]
    host = settings.get("spark.driver.host")
    if accepted is None:
        driver = _advertised_driver(settings)
        host = host or os.environ.get("SPARK_LOCAL_IP")
        if master.startswith("spark://"):
            accepted = False  # still starting: the standalone master has not confirmed it
    else:
        driver = f"{host}:{settings.get('spark.driver.port')} (spark.driver.host:spark.driver.port)"
    head = (
        f"the Spark master {master} gave up on the application before any executor registered"
        if stopped
        else f"no Spark executor registered within {timeout:g} s on master {master}"
    )
    told = f"the executors were told to reach the driver at {driver}"
    if host is not None and host.startswith(_LOOPBACK):
        cause = (
            f"{host} is a loopback address, which executors on other hosts cannot reach: set "
            "spark.driver.host to an address of this host the workers can reach (--spark-conf "
            "spark.driver.host=ADDRESS), or leave it and SPARK_LOCAL_IP unset so Spark picks one"
        )
    elif stopped or accepted is False:
        cause = (
            "the master has not accepted the application: is a master running, and reachable "
            "from this host, at that address?"
        )
    else:
        cause = (
            "the executors cannot connect back to the driver at that address (a firewall, or "
            "an address the workers cannot route to: set spark.driver.host, spark.driver.port "
            "and spark.blockManager.port), or no worker has the free cores and memory the "
            "application asks for (spark.executor.cores, spark.executor.memory, "
            "spark.cores.max); the master's web UI and the workers' logs say which"
        )
    return f"{head}; {told}. Likely cause: {cause}"


def executor_report(_: object) -> str:
    """What runs drpc in a Spark Python worker (called there by the warm-up job)."""
    where = os.path.dirname(os.path.abspath(__file__))
    return f"Python {platform.python_version()} ({sys.executable}) with drpc from {where}"


def warm_up(session: SparkSession) -> list[str]:
    """Run one RDD job that imports drpc on the executors, so the Python workers are up;
    returns what the executors reported (``executor_report``)."""
    sc = session.sparkContext
    slots = sc.defaultParallelism
    try:
        reports = sc.parallelize(range(slots * 2), slots).map(executor_report).distinct().collect()
    except Exception as error:
        raise SparkStartError(_warm_up_failure(sc, error)) from error
    return sorted(reports)


def _warm_up_failure(sc: SparkContext, error: BaseException) -> str:
    text = str(getattr(error, "java_exception", None) or error)
    missing = next(
        (line.strip() for line in text.splitlines() if "ModuleNotFoundError" in line), None
    )
    if missing is not None:
        return (
            f"the executors of {sc.master} cannot import drpc ({missing}; Python "
            f"{os.environ.get('PYSPARK_PYTHON')}): ship drpc and your topologies' modules to "
            "them, as a packed environment (spark.archives) or a zip (spark.submit.pyFiles), "
            "see docs/how-to/cluster.md, 'Getting the code to the executors'"
        )
    return f"the warm-up job on {sc.master} failed: {describe_spark_error(error)}"


def describe_spark_error(error: BaseException) -> str:
    """The line of a Spark failure that says what happened (a Python worker that exited,
    the Python exception, or Spark's own), at most 400 characters."""
    text = str(getattr(error, "java_exception", None) or error)
    for marker in ("Python worker exited unexpectedly", "PythonException", "SparkException"):
        position = text.find(marker)
        if position >= 0:
            text = text[position:]
            break
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return first[:400]


def context_usable(sc: Any) -> bool:
    """Whether ``sc`` can still run jobs: not stopped, and its JVM answers (a JVM that shut
    down, as on a SIGTERM to the driver's whole process group, or died leaves a
    SparkContext whose every call fails)."""
    if sc._jsc is None:
        return False
    try:
        return not sc._jsc.sc().isStopped()
    except Exception:
        return False


def _stopped(session: SparkSession) -> bool:
    sc = session.sparkContext
    return sc._jsc is None


def current_session() -> SparkSession | None:
    """The session drpc uses, if one is running."""
    with _lock:
        if _session is not None and not _stopped(_session):
            return _session
        return None


def ui_url() -> str | None:
    """The Spark UI of the running session, None when there is none or its UI is off."""
    session = current_session()
    return None if session is None else session.sparkContext.uiWebUrl


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
        from py4j.protocol import Py4JError

        try:
            session.stop()
        except (Py4JError, ConnectionError) as error:  # its JVM went away first (e.g. a
            # signal to the whole process group): nothing is left to stop
            log.info(
                "the SparkSession's JVM was gone already (%s: %s)", type(error).__name__, error
            )
            return
        log.info("stopped the SparkSession")
