"""A run's checkpoint store: named objects in a shared filesystem or an S3-compatible store.

Contract.

- ``CheckpointSettings(uri, ...)`` says where and how: ``file:///path`` (a mount every
  host shares) or ``s3://bucket/prefix`` (any S3-compatible store: ``endpoint_url``,
  ``region``, ``access_key``, ``secret_key``; unset, boto's own resolution applies, the
  ``AWS_*`` environment variables included). ``settings_from_conf(uri, conf)`` reads them
  from a run's conf (``drpc.checkpoint.*``, the names below). The settings are plain
  data, so they travel to Spark's workers; their ``repr`` and ``describe()`` never show
  the secret.
- ``CheckpointStore(settings)``: ``put(name, data)``, ``get(name)`` (None: no such
  object), ``put_file`` / ``get_file`` for big objects, ``list(prefix)`` (sorted names
  under ``prefix``), ``sizes(prefix)`` (the same, with each object's bytes) and
  ``delete(names)``. Names are ``/``-separated, relative to the URI. A reader never
  sees half an object: a file is written under a temporary name and renamed, an S3
  ``PUT`` is atomic. ``check()`` raises ``CheckpointStoreError`` at once when the store
  is misnamed (a bucket that does not exist, a path that is a file).
- **Waiting.** A call that fails for a reason that may pass (the store unreachable,
  timing out, answering 5xx) is retried with exponential backoff (``retry_initial``
  doubling to ``retry_max`` seconds) until ``retry_timeout`` seconds have passed since
  its first try; meanwhile ``waiting`` (the store's ``waiting_since``) says since when,
  for the run's status ("waiting for the checkpoint store"). Then, or at once for a
  refusal that will not pass (credentials, a missing bucket), ``CheckpointStoreError``
  names the operation, the object and the store (never the secret).

fsspec is the filesystem library: one API over ``file://`` and ``s3://`` (s3fs, on
aiobotocore), pure Python on every worker, and the one pandas, Dask and PyArrow's own
dataset code already speak. ``pyarrow.fs`` would add a 40 MB wheel to every worker for
the same two operations. s3fs's own retries and listing cache are turned off: this
module decides how long to wait, and a listing is always the store's current one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from drpc.errors import CheckpointStoreError, MissingExtraError

log = logging.getLogger(__name__)

T = TypeVar("T")

CHECKPOINT_DIR_CONF = "drpc.checkpoint.dir"
ENDPOINT_CONF = "drpc.checkpoint.s3.endpoint"
REGION_CONF = "drpc.checkpoint.s3.region"
ACCESS_KEY_CONF = "drpc.checkpoint.s3.access.key"
SECRET_KEY_CONF = "drpc.checkpoint.s3.secret.key"
RETRY_TIMEOUT_CONF = "drpc.checkpoint.retry.timeout"
SNAPSHOT_EVERY_CONF = "drpc.checkpoint.snapshot.deltas"
SNAPSHOT_MIB_CONF = "drpc.checkpoint.snapshot.mib"

DEFAULT_RETRY_TIMEOUT = 60.0
"""Seconds a store call keeps retrying before ``CheckpointStoreError``."""
DEFAULT_SNAPSHOT_EVERY = 10
"""Deltas between two snapshots of a partition (Spark's ``minDeltasForSnapshot``)."""
DEFAULT_SNAPSHOT_MIB = 64.0
"""Delta MiB between two snapshots of a partition, whichever comes first."""

SCHEMES = ("file", "s3")


@dataclass(frozen=True, slots=True)
class CheckpointSettings:
    """Where a run's checkpoint store is and how to reach it (see the module doc)."""

    uri: str
    endpoint_url: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT
    retry_initial: float = 0.05
    retry_max: float = 2.0
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    snapshot_mib: float = DEFAULT_SNAPSHOT_MIB

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.uri)
        if parsed.scheme not in SCHEMES:
            raise CheckpointStoreError(
                f"checkpoint_dir {self.uri!r}: give a file:// or s3:// URI (a shared mount: "
                "file:///mnt/shared/drpc; an S3-compatible store: s3://bucket/prefix)"
            )
        if parsed.scheme == "s3" and not parsed.netloc:
            raise CheckpointStoreError(f"checkpoint_dir {self.uri!r}: name the bucket")
        if parsed.scheme == "file" and (parsed.netloc or not parsed.path.startswith("/")):
            raise CheckpointStoreError(
                f"checkpoint_dir {self.uri!r}: a file URI takes an absolute path "
                "(file:///path, three slashes)"
            )
        if self.retry_timeout < 0:
            raise CheckpointStoreError(f"retry_timeout must be >= 0, got {self.retry_timeout}")
        if self.snapshot_every < 1:
            raise CheckpointStoreError(f"snapshot_every must be >= 1, got {self.snapshot_every}")
        if self.snapshot_mib <= 0:
            raise CheckpointStoreError(f"snapshot_mib must be > 0, got {self.snapshot_mib}")

    @property
    def scheme(self) -> str:
        return urllib.parse.urlsplit(self.uri).scheme

    def describe(self) -> str:
        """The store for a log line or an error: its URI and endpoint, no credentials."""
        endpoint = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"{self.uri}{endpoint}"


def settings_from_conf(uri: str | None, conf: Mapping[str, Any]) -> CheckpointSettings | None:
    """The settings of ``uri`` (else the conf's ``drpc.checkpoint.dir``) from a run's conf;
    None without a store."""
    uri = uri or conf.get(CHECKPOINT_DIR_CONF)
    if not uri:
        return None

    def number(key: str, default: float) -> float:
        value = conf.get(key)
        if value is None:
            return default
        try:
            return float(value)
        except (TypeError, ValueError):
            raise CheckpointStoreError(f"{key} must be a number, got {value!r}") from None

    return CheckpointSettings(
        str(uri),
        endpoint_url=conf.get(ENDPOINT_CONF),
        region=conf.get(REGION_CONF),
        access_key=conf.get(ACCESS_KEY_CONF),
        secret_key=conf.get(SECRET_KEY_CONF),
        retry_timeout=number(RETRY_TIMEOUT_CONF, DEFAULT_RETRY_TIMEOUT),
        snapshot_every=int(number(SNAPSHOT_EVERY_CONF, DEFAULT_SNAPSHOT_EVERY)),
        snapshot_mib=number(SNAPSHOT_MIB_CONF, DEFAULT_SNAPSHOT_MIB),
    )


class _Refused(Exception):
    """A store failure that retrying will not mend."""


def _passes(error: BaseException) -> bool:
    """Whether retrying ``error`` may succeed (see the module doc)."""
    if isinstance(error, (PermissionError, FileNotFoundError, IsADirectoryError, ValueError)):
        return False
    text = f"{type(error).__name__} {error}"
    refused = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket")
    return not any(word in text for word in refused)


def _replace(path: str, write: Callable[[str], object]) -> None:
    """Make the file ``path`` what ``write(temporary)`` writes, all at once: written under a
    temporary name, synced, then renamed over ``path``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{uuid.uuid4().hex}.partial"
    try:
        write(temporary)
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


class CheckpointStore:
    """A run's checkpoint store (see the module doc)."""

    def __init__(self, settings: CheckpointSettings) -> None:
        self.settings = settings
        self._root = urllib.parse.urlsplit(settings.uri)
        self._fs = self._filesystem()
        self._lock = threading.Lock()
        self._waiting: dict[int, float] = {}  # thread -> since when its call waits
        self.on_wait: Callable[[str], None] | None = None

    def __repr__(self) -> str:
        return f"<CheckpointStore {self.settings.describe()}>"

    def _filesystem(self) -> Any:
        try:
            import fsspec
        except ImportError as error:  # pragma: no cover - a dependency of drpc
            raise MissingExtraError(f"the checkpoint store needs fsspec: {error}") from error
        if self.settings.scheme == "file":
            return fsspec.filesystem("file", auto_mkdir=True)
        try:
            import s3fs  # noqa: F401  (fsspec finds it by the scheme)
        except ImportError as error:
            raise MissingExtraError(
                "an s3:// checkpoint store needs s3fs: pip install 'drpc-spark[s3]'"
            ) from error
        client: dict[str, Any] = {}
        if self.settings.endpoint_url:
            client["endpoint_url"] = self.settings.endpoint_url
        if self.settings.region:
            client["region_name"] = self.settings.region
        return fsspec.filesystem(
            "s3",
            key=self.settings.access_key,
            secret=self.settings.secret_key,
            client_kwargs=client,
            config_kwargs={
                "retries": {"max_attempts": 1, "mode": "standard"},
                "connect_timeout": 5,
                "read_timeout": 30,
            },
            use_listings_cache=False,
            skip_instance_cache=True,
        )

    def _path(self, name: str) -> str:
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise CheckpointStoreError(f"not an object name of the checkpoint store: {name!r}")
        if self.settings.scheme == "file":
            return os.path.join(self._root.path, *name.split("/"))
        base = f"{self._root.netloc}{self._root.path}".rstrip("/")
        return f"{base}/{name}"

    # -- waiting ---------------------------------------------------------------------------

    @property
    def waiting_since(self) -> float | None:
        """Since when the oldest call still retrying has waited (None: none waits)."""
        with self._lock:
            return min(self._waiting.values(), default=None)

    def _call(self, what: str, name: str, fn: Callable[[], T]) -> T:
        settings = self.settings
        started = time.monotonic()
        delay = settings.retry_initial
        me = threading.get_ident()
        try:
            while True:
                try:
                    return fn()
                except Exception as error:
                    if not _passes(error):
                        raise CheckpointStoreError(
                            f"the checkpoint store {settings.describe()} refused to {what} "
                            f"{name!r}: {type(error).__name__}: {error}"
                        ) from error
                    waited = time.monotonic() - started
                    if waited >= settings.retry_timeout:
                        raise CheckpointStoreError(
                            f"the checkpoint store {settings.describe()} could not {what} "
                            f"{name!r} for {waited:.1f} s (drpc.checkpoint.retry.timeout "
                            f"{settings.retry_timeout:g}): {type(error).__name__}: {error}"
                        ) from error
                    with self._lock:
                        first = me not in self._waiting
                        self._waiting.setdefault(me, time.time())
                    if first:
                        log.warning(
                            "waiting for the checkpoint store %s to %s %r: %s: %s",
                            settings.describe(),
                            what,
                            name,
                            type(error).__name__,
                            error,
                        )
                        if self.on_wait is not None:
                            self.on_wait(what)
                    time.sleep(min(delay, max(0.0, settings.retry_timeout - waited)))
                    delay = min(delay * 2, settings.retry_max)
        finally:
            with self._lock:
                if self._waiting.pop(me, None) is not None:
                    log.info("the checkpoint store %s answers again", settings.describe())

    # -- objects ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raise ``CheckpointStoreError`` when the store cannot hold objects at all."""
        if self.settings.scheme == "file":
            root = self._root.path
            if os.path.exists(root) and not os.path.isdir(root):
                raise CheckpointStoreError(
                    f"checkpoint_dir {self.settings.uri!r} is a file, not a directory"
                )
            self._call("create", root, lambda: os.makedirs(root, exist_ok=True))
            return
        bucket = self._root.netloc

        def found() -> bool:
            # Not fs.exists: it answers False when the store cannot be reached at all, and a
            # store away for a moment is not a bucket that does not exist.
            try:
                self._fs.info(bucket)
            except FileNotFoundError:
                return False
            return True

        if not self._call("find the bucket", bucket, found):
            raise CheckpointStoreError(
                f"the checkpoint store {self.settings.describe()}: bucket {bucket!r} does not "
                "exist (create it first; drpc does not create buckets)"
            )

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        self._call("write", name, lambda: self._put(path, data))

    def _put(self, path: str, data: bytes) -> None:
        if self.settings.scheme != "file":
            self._fs.pipe_file(path, data)
            return

        def write(temporary: str) -> None:
            with open(temporary, "wb") as out:
                out.write(data)

        _replace(path, write)

    def put_file(self, name: str, local_path: str) -> None:
        path = self._path(name)

        def put() -> None:
            if self.settings.scheme != "file":
                self._fs.put_file(local_path, path)
                return
            _replace(path, lambda temporary: shutil.copyfile(local_path, temporary))

        self._call("write", name, put)

    def get(self, name: str) -> bytes | None:
        path = self._path(name)

        def get() -> bytes | None:
            try:
                return bytes(self._fs.cat_file(path))
            except FileNotFoundError:
                return None

        return self._call("read", name, get)

    def get_file(self, name: str, local_path: str) -> bool:
        """Download ``name`` to ``local_path``; False when there is no such object."""
        path = self._path(name)

        def get() -> bool:
            try:
                self._fs.get_file(path, local_path)
                return True
            except FileNotFoundError:
                return False

        return self._call("read", name, get)

    def list(self, prefix: str) -> list[str]:
        """The names of the objects under ``prefix`` (a ``/``-ended folder name), sorted."""
        return list(self.sizes(prefix))

    def sizes(self, prefix: str) -> dict[str, int]:
        """The objects under ``prefix`` (a ``/``-ended folder name) and their sizes in bytes,
        in name order."""
        folder = self._path(prefix.rstrip("/"))

        def listed() -> dict[str, int]:
            try:
                found = self._fs.find(folder, detail=True)
            except FileNotFoundError:
                return {}
            base = folder.rstrip("/") + "/"
            return {
                prefix.rstrip("/") + "/" + path[len(base) :]: int(info.get("size") or 0)
                for path, info in sorted((str(path), info) for path, info in found.items())
                if path.startswith(base) and not path.endswith(".partial")
            }

        return self._call("list", prefix, listed)

    def delete(self, names: Iterable[str]) -> None:
        paths = [self._path(name) for name in names]
        if not paths:
            return

        def delete() -> None:
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    self._fs.rm_file(path)

        self._call("delete", f"{len(paths)} object(s)", delete)
