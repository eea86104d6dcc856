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
- one connection is kept and reused (HTTP keep-alive); instances are safe to
  share between threads (calls are serialized).
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse

from client.errors import DRPCConnectionError, DRPCTimeoutError
from drpc.errors import (
    AuthorizationException,
    DRPCExceptionType,
    DRPCExecutionException,
    ServerBusyError,
)
from drpc.tls import TLSSettings
from drpc.wire import ProtocolError

DEFAULT_HTTP_URL = "http://localhost:3774"


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
        path = f"{self._prefix}/drpc/{urllib.parse.quote(function, safe='')}"
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
        if status == 200:
            return body.decode("utf-8")
        raise _failure(status, body, retry_after)

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
