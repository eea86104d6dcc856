"""Log brokers behind spouts: connection settings, reconnecting with backoff, what a run waits for.

Contract.

- ``Secret(value)`` holds a password or token: its ``repr`` and ``str`` are
  ``'***'``, ``reveal()`` gives the value. It pickles with its value: a spout
  travels to Spark executors with its settings, as any Spark closure does.
- ``TLS(ca_file=None, cert_file=None, key_file=None, verify=True)``: TLS of a
  broker connection (``context()`` is the ``ssl.SSLContext``).
- ``BrokerSettings.from_url(url, kind=..., ...)``: a broker's address,
  TLS and credentials. Credentials written in the URL
  (``redis://user:password@host:port/0``, ``nats://token@host:port``) are
  taken out of it into ``username`` and ``password`` or ``token``; arguments
  given beside the URL win. ``description`` is ``KIND at HOST:PORT``; the
  ``repr`` shows no secret, and ``scrub(text)`` replaces any secret found in a
  text (an error message about to be logged or raised) by ``***``.
- ``BrokerLink(settings, connect, disconnect, transient, retry_for=...)`` is
  one client of one broker, connected on first use. ``call(operation)`` runs
  ``operation(client)``; a ``transient`` failure (refused, reset, timed out)
  drops the client and retries with ``Backoff`` delays (0.05 s doubling up
  to 2 s) for up to ``retry_for`` seconds, then raises
  ``BrokerUnavailableError`` naming the broker and the last failure.
  ``probe(check)`` tries at most once per backoff delay and says whether the
  broker answered (a coordinator's ``is_ready``: it never blocks longer than
  one connection attempt). The first failure of an outage is logged as a
  warning, the recovery as info.
- ``waiting_for(description)`` is ``"waiting for KIND at HOST:PORT"`` while a
  link of this process to that broker is failing, else None: the hook a
  coordinator's ``waiting_for()`` answers with, which the transactional
  runner's ``status()`` and the server's dashboard show.
- ``require(module, package, extra, feature)`` imports an optional client
  library, or raises ``MissingExtraError`` naming the extra that installs it.
"""

from __future__ import annotations

import collections
import importlib
import logging
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar
from urllib.parse import unquote, urlsplit

from drpc.errors import BrokerUnavailableError, MissingExtraError

log = logging.getLogger(__name__)

C = TypeVar("C")
T = TypeVar("T")

REDACTED = "***"


class Secret:
    """A password or token that never shows in a repr, a str or a log line."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"'{REDACTED}'"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[object, ...]:
        return (Secret, (self._value,))


def _secret(value: str | Secret | None) -> Secret | None:
    return value if value is None or isinstance(value, Secret) else Secret(value)


@dataclass(frozen=True)
class TLS:
    """TLS of a broker connection: a CA bundle to verify the broker with, a client
    certificate and key to present, or ``verify=False`` (encrypted, not authenticated)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


@dataclass(frozen=True, repr=False)
class BrokerSettings:
    """Where a broker is and how to log in (see the module doc)."""

    kind: str
    host: str
    port: int
    tls: TLS | None = None
    username: str | None = None
    password: Secret | None = None
    token: Secret | None = None
    database: int = 0
    credentials_file: str | None = None  # a NATS .creds file (its path, not a secret)
    connect_timeout: float = 5.0

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        kind: str,
        default_port: int,
        tls_schemes: tuple[str, ...],
        schemes: tuple[str, ...],
        username: str | None = None,
        password: str | Secret | None = None,
        token: str | Secret | None = None,
        tls: TLS | None = None,
        credentials_file: str | None = None,
        connect_timeout: float = 5.0,
    ) -> BrokerSettings:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in (*schemes, *tls_schemes) or not parts.hostname:
            accepted = ", ".join(f"{s}://HOST:PORT" for s in (*schemes, *tls_schemes))
            # the URL is not echoed: it may hold a password
            raise ValueError(f"a {kind} URL must look like {accepted}")
        url_user = unquote(parts.username) if parts.username else None
        url_password = unquote(parts.password) if parts.password is not None else None
        if url_password is None and url_user and kind == "nats":  # nats://TOKEN@host
            url_token, url_user = url_user, None
        else:
            url_token = None
        database = 0
        path = parts.path.strip("/")
        if path:
            if not path.isdigit():
                raise ValueError(f"a {kind} URL's path must be a database number, got {path!r}")
            database = int(path)
        if tls is None and scheme in tls_schemes:
            tls = TLS()
        return cls(
            kind=kind,
            host=parts.hostname,
            port=parts.port or default_port,
            tls=tls,
            username=username if username is not None else url_user,
            password=_secret(password if password is not None else url_password),
            token=_secret(token if token is not None else url_token),
            database=database,
            credentials_file=credentials_file,
            connect_timeout=connect_timeout,
        )

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def description(self) -> str:
        return f"{self.kind} at {self.address}"

    def scrub(self, text: str) -> str:
        """``text`` with every secret of these settings replaced by ``***``."""
        for secret in (self.password, self.token):
            if secret is not None and secret.reveal():
                text = text.replace(secret.reveal(), REDACTED)
        return text

    def with_timeout(self, connect_timeout: float) -> BrokerSettings:
        return replace(self, connect_timeout=connect_timeout)

    def __repr__(self) -> str:
        shown = [self.description]
        if self.tls is not None:
            shown.append(f"tls={self.tls!r}")
        if self.username is not None:
            shown.append(f"username={self.username!r}")
        if self.password is not None:
            shown.append(f"password={self.password!r}")
        if self.token is not None:
            shown.append(f"token={self.token!r}")
        if self.database:
            shown.append(f"database={self.database}")
        return f"BrokerSettings({', '.join(shown)})"


@dataclass(frozen=True)
class Backoff:
    """Delays between tries: ``initial``, times ``factor`` after each failure, at most
    ``maximum`` seconds."""

    initial: float = 0.05
    maximum: float = 2.0
    factor: float = 2.0

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row (1 for the first)."""
        return float(min(self.maximum, self.initial * self.factor ** max(0, failures - 1)))


_waiting_lock = threading.Lock()
_waiting: collections.Counter[str] = collections.Counter()


def waiting_for(description: str) -> str | None:
    """``"waiting for DESCRIPTION"`` while a link of this process to that broker fails."""
    with _waiting_lock:
        return f"waiting for {description}" if _waiting[description] > 0 else None


class BrokerLink(Generic[C]):
    """One client of one broker, reconnected with backoff (see the module doc)."""

    def __init__(
        self,
        settings: BrokerSettings,
        connect: Callable[[], C],
        disconnect: Callable[[C], None],
        transient: tuple[type[BaseException], ...],
        *,
        retry_for: float,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if retry_for < 0:
            raise ValueError(f"retry_for must be >= 0, got {retry_for!r}")
        self.settings = settings
        self._connect = connect
        self._disconnect = disconnect
        self.transient = transient
        self.retry_for = retry_for
        self.backoff = backoff or Backoff()
        self._clock = clock
        self._sleep = sleep
        self._client: C | None = None
        self._failures = 0
        self._next_try = 0.0
        self._lock = threading.RLock()

    @property
    def description(self) -> str:
        return self.settings.description

    def _connected(self) -> C:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                self._disconnect(client)
            except Exception:  # a dead connection may fail to close: it is gone either way
                log.debug("closing a failed connection to %s failed", self.description)

    def _failed(self, error: BaseException) -> float:
        self._drop()
        self._failures += 1
        if self._failures == 1:
            with _waiting_lock:
                _waiting[self.description] += 1
            log.warning(
                "waiting for %s: %s; retrying with backoff",
                self.description,
                self.describe(error),
            )
        return self.backoff.delay(self._failures)

    def _stop_waiting(self) -> bool:
        """Forget the outage in progress, if any; whether there was one."""
        if not self._failures:
            return False
        self._failures = 0
        with _waiting_lock:
            _waiting[self.description] -= 1
            if _waiting[self.description] <= 0:
                del _waiting[self.description]
        return True

    def _recovered(self) -> None:
        if self._stop_waiting():
            log.info("%s answers again", self.description)
        self._next_try = 0.0

    def describe(self, error: BaseException) -> str:
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        return self.settings.scrub(text)

    def call(self, operation: Callable[[C], T]) -> T:
        """``operation(client)``, retried on transient failures for ``retry_for`` seconds."""
        with self._lock:
            deadline: float | None = None
            while True:
                try:
                    result = operation(self._connected())
                except self.transient as error:
                    delay = self._failed(error)
                    now = self._clock()
                    deadline = now + self.retry_for if deadline is None else deadline
                    if now >= deadline:
                        raise BrokerUnavailableError(
                            f"{self.description} is unreachable: {self.describe(error)} "
                            f"(retried for {self.retry_for:g} s)"
                        ) from None
                    self._sleep(min(delay, deadline - now))
                    continue
                self._recovered()
                return result

    def probe(self, check: Callable[[C], object]) -> bool:
        """Whether ``check(client)`` passed now; no try before the backoff delay is over."""
        with self._lock:
            now = self._clock()
            if now < self._next_try:
                return False
            try:
                check(self._connected())
            except self.transient as error:
                self._next_try = now + self._failed(error)
                return False
            self._recovered()
            return True

    def close(self) -> None:
        with self._lock:
            self._drop()
            self._stop_waiting()  # a closed link waits for nothing


def require(module: str, package: str, extra: str, feature: str) -> Any:
    """Import ``module`` or raise ``MissingExtraError`` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(
            f"{feature} needs the {package!r} package, which is not installed: "
            f"pip install 'drpc-spark[{extra}]'"
        ) from error
