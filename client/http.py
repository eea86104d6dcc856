"""``HTTPDRPCClient``: call DRPC functions over the server's HTTP port, with a bearer token.

Contract:

- ``HTTPDRPCClient("http://localhost:3774", token=None, tls=None,
  timeout=None).execute(function, args)`` POSTs ``args`` (UTF-8) to
  ``/drpc/<function>`` and returns the result text;
- ``token`` is sent as ``Authorization: Bearer <token>`` (the server maps it to
  a user); ``tls`` (``https://`` URLs) verifies the server against its CA and
  may present a client certificate (the host name checked is the URL's);
- answers map back to the Thrift client's exceptions: 401 →
  ``AuthorizationException``; 503 with ``Retry-After`` → ``ServerBusyError``
  (``.retry_after`` seconds); a JSON ``{"error", "errorMessage"}`` →
  ``DRPCExecutionException`` of that type; any other status →
  ``ProtocolError`` naming it; no answer → ``DRPCConnectionError``; past
  ``timeout`` → ``DRPCTimeoutError``;
- ``execute_traced(function, args)`` asks the server for the call's trace
  (``?trace=1``) and returns a ``TracedResult``: ``result``, ``request_id``
  (the server's id of the call, as its logs show it), ``total_ms`` and
  ``trace``, a list of ``{"step", "ms", ...}`` whose ``ms`` sum to
  ``total_ms`` (see ``drpc.server.http``); a failure raises as ``execute`` does,
  with the server's trace (request id, total, steps, ``failed_in``) as the
  exception's ``trace`` attribute;
- one connection is kept and reused (HTTP keep-alive); instances are safe to
  share between threads (calls are serialized).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from drpc.client.errors import DRPCConnectionError, DRPCTimeoutError

from drpc.errors import (
    AuthorizationException,
    DRPCExceptionType,
    DRPCExecutionException,
    ServerBusyError,
)
from drpc.protocol.tls import TLSSettings
from drpc.protocol.wire import ProtocolError

DEFAULT_HTTP_URL = "http://localhost:3774"


@dataclass(frozen=True)
class TracedResult:
    """A call's result with the server's timings of it."""

    result: str
    request_id: str
    total_ms: float
    trace: list[dict[str, Any]] = field(default_factory=list)
    reads: list[dict[str, Any]] = field(default_factory=list)
    """The committed version of each state directory the call read
    (``{"state_dir", "version", "txids"}``), for functions that read state."""

    def describe(self) -> str:
        """One line per entry: step, milliseconds, and its Spark job id if any; then a
        line per state directory read: its version and each topology's txid there."""
        lines = [f"request {self.request_id}: {self.total_ms:.1f} ms"]
        for entry in self.trace:
            job = entry.get("spark_job_id")
            suffix = f"  (Spark job {job})" if job is not None else ""
            lines.append(f"  {entry['step']:<20}{entry['ms']:>10.1f} ms{suffix}")
        for read in self.reads:
            txids = ", ".join(f"{name} txid {txid}" for name, txid in read["txids"].items())
            lines.append(
                f"  read {read['state_dir']} at version {read['version']}"
                + (f" ({txids})" if txids else "")
            )
        return "\n".join(lines)


class HTTPDRPCClient:
    def __init__(
        self,
        url: str = DEFAULT_HTTP_URL,
        *,
        token: str | None = None,
        tls: TLSSettings | None = None,
        timeout: float | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"DRPC HTTP URL {url!r} is not http(s)://host[:port]")
        self.url = url
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = parsed.port or (443 if self._https else 80)
        self._prefix = parsed.path.rstrip("/")
        self._headers = {"Content-Type": "text/plain; charset=utf-8"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self._context = (tls or TLSSettings()).client_context() if self._https else None
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            if self._context is not None:
                self._connection = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self.timeout, context=self._context
                )
            else:
                self._connection = http.client.HTTPConnection(
                    self._host, self._port, timeout=self.timeout
                )
        return self._connection

    def execute(self, function: str, args: str) -> str:
        status, body, retry_after = self._call(function, args, "")
        if status == 200:
            return body.decode("utf-8")
        raise _failure(status, body, retry_after)

    def execute_traced(self, function: str, args: str) -> TracedResult:
        """Call ``function`` and return its result with the server's trace of the call."""
        status, body, retry_after = self._call(function, args, "?trace=1")
        if status != 200:
            error = _failure(status, body, retry_after)
            with contextlib.suppress(ValueError):
                error.trace = json.loads(body)  # type: ignore[attr-defined]
            raise error
        try:
            answer = json.loads(body)
            return TracedResult(
                str(answer["result"]),
                str(answer["request_id"]),
                float(answer["total_ms"]),
                list(answer["trace"]),
                list(answer.get("reads", [])),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise ProtocolError(
                f"HTTP 200 without a trace: {body[:200].decode('utf-8', 'replace')}"
            ) from error

    def _call(self, function: str, args: str, query: str) -> tuple[int, bytes, str | None]:
        path = f"{self._prefix}/drpc/{urllib.parse.quote(function, safe='')}{query}"
        with self._lock:
            connection = self._connect()
            try:
                connection.request("POST", path, args.encode("utf-8"), self._headers)
                response = connection.getresponse()
                status, body = response.status, response.read()
                retry_after = response.getheader("Retry-After")
            except TimeoutError as error:
                self._drop()
                raise DRPCTimeoutError(f"execute {function!r} on {self.url} timed out") from error
            except (OSError, http.client.HTTPException) as error:
                self._drop()
                raise DRPCConnectionError(f"{self.url}: {error}") from error
        return status, body, retry_after

    def _drop(self) -> None:  # with the lock held
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __enter__(self) -> HTTPDRPCClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _failure(status: int, body: bytes, retry_after: str | None) -> Exception:
    try:
        answer = json.loads(body)
        kind, message = str(answer["error"]), str(answer["errorMessage"])
    except (ValueError, KeyError, TypeError):
        return ProtocolError(f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}")
    if status == 401:
        return AuthorizationException(message)
    if status == 503 and retry_after is not None:
        return ServerBusyError(message, retry_after=float(retry_after))
    try:
        return DRPCExecutionException(message, DRPCExceptionType[kind])
    except KeyError:
        return ProtocolError(f"HTTP {status}: {kind}: {message}")
