"""Storm's DRPC ACL (``DRPCSimpleACLAuthorizer``): who may call and who may serve each function.

Contract. The ACL file (``--acl FILE``, YAML or JSON) has Storm's shape::

    drpc.authorizer.acl:
      reach:
        client.users: [alice, bob]      # may execute
        invocation.user: runner         # may fetchRequest, result, failRequest(V2)
    drpc.authorizer.acl.strict: false   # optional; --acl-strict sets it
    nimbus.admins: [ops]                # optional; may kill, activate and deactivate

Decisions, exactly Storm's:

- ``execute`` is allowed when the user is in the function's ``drpc.client.users``;
  ``fetchRequest``, ``result`` and ``failRequest`` (V2 included) when the user
  is its ``invocation.user``; a missing key allows nobody;
- a function with no entry is open to everyone unless strict, then closed;
- an empty function name and any other operation are refused;
- ``killTopology``, ``activate`` and ``deactivate`` of a plain topology the server runs
  (Storm's Nimbus operations, named by the topology) are allowed to the users listed
  under ``nimbus.admins`` (Storm's setting of the same name), and to nobody else: a file
  without the key allows them to nobody;
- the file must name its functions as strings: YAML reads unquoted keys such
  as ``on``, ``yes``, ``null``, ``007`` or ``12:30`` as other types, and the
  function meant would have no entry (open when not strict), so a key that is
  not a string is refused naming it (quote it); a file without the
  ``drpc.authorizer.acl`` key (an empty or cut-short file) is refused too;
- a refusal raises ``AuthorizationException("DRPC request '<op>' for '<user>'
  user is not authorized")``; every decision is logged on the ``drpc.audit``
  logger with the user, operation and function: refusals at WARNING, allowed
  operations at DEBUG (they are routine: an idle runner's polls alone are
  several a second, which at INFO would bury everything else).

``ACLAuthorizer`` reloads its file when the file's modification time or size
changes (checked at most every ``reload_interval`` seconds, default 1), as
Storm re-reads its ACL; a file that no longer loads (invalid, empty, cut
short before its ``drpc.authorizer.acl`` key, a key that is not a string)
keeps the previous ACL in force and logs why at ERROR on ``drpc.audit``.
Replace the file atomically (write another, then rename it over) so a reload
never reads half of it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drpc.server.files import ConfigFileError, load_mapping
from drpc.server.identity import ANONYMOUS
from drpc.server.service import (
    ADMIN_OPERATIONS,
    EXECUTE,
    FAIL_REQUEST,
    FETCH_REQUEST,
    RESULT,
)

from drpc.errors import AuthorizationException

audit = logging.getLogger("drpc.audit")

ACL_KEY = "drpc.authorizer.acl"
STRICT_KEY = "drpc.authorizer.acl.strict"
CLIENT_USERS_KEY = "client.users"
INVOCATION_USER_KEY = "invocation.user"
ADMINS_KEY = "nimbus.admins"
INVOCATION_OPERATIONS = frozenset({FETCH_REQUEST, RESULT, FAIL_REQUEST})
DEFAULT_RELOAD_INTERVAL = 1.0


@dataclass(frozen=True, slots=True)
class FunctionACL:
    client_users: frozenset[str] = frozenset()
    invocation_user: str | None = None


@dataclass(frozen=True, slots=True)
class ACL:
    entries: Mapping[str, FunctionACL]
    strict: bool = False
    admins: frozenset[str] = frozenset()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "ACL") -> ACL:
        _check_string_keys(data, source, "top-level keys")
        unknown = set(data) - {ACL_KEY, STRICT_KEY, ADMINS_KEY}
        if unknown:
            raise ConfigFileError(
                f"{source}: unknown key(s) {sorted(unknown)}; expected {ACL_KEY!r} "
                f"and optionally {STRICT_KEY!r} and {ADMINS_KEY!r}"
            )
        strict = data.get(STRICT_KEY, False)
        if not isinstance(strict, bool):
            raise ConfigFileError(f"{source}: {STRICT_KEY!r} must be true or false")
        if ACL_KEY not in data:
            raise ConfigFileError(
                f"{source}: no {ACL_KEY!r} key (an empty or cut-short file?); write "
                f"'{ACL_KEY}: {{}}' for an ACL with no entries"
            )
        functions = data[ACL_KEY] or {}
        if not isinstance(functions, Mapping):
            raise ConfigFileError(f"{source}: {ACL_KEY!r} must map function names to entries")
        _check_string_keys(functions, source, "function names")
        admins = _users(data.get(ADMINS_KEY), source, repr(ADMINS_KEY))
        entries = {name: _entry(name, value, source) for name, value in functions.items()}
        return cls(entries, strict, admins)

    @classmethod
    def from_file(cls, path: str | Path) -> ACL:
        return cls.from_mapping(load_mapping(path, "ACL"), f"ACL file {str(path)!r}")

    def permits(self, user: str, operation: str, function: str) -> bool:
        if not function:
            return False
        if operation in ADMIN_OPERATIONS:
            return user in self.admins
        if operation != EXECUTE and operation not in INVOCATION_OPERATIONS:
            return False
        entry = self.entries.get(function)
        if entry is None:
            return not self.strict
        if operation == EXECUTE:
            return user in entry.client_users
        return entry.invocation_user is not None and user == entry.invocation_user


def _check_string_keys(data: Mapping[Any, Any], source: str, what: str) -> None:
    """Refuse keys YAML did not read as strings, naming each with the type it became."""
    odd = [key for key in data if not isinstance(key, str)]
    if odd:
        named = ", ".join(f"{key!r} ({type(key).__name__})" for key in odd)
        raise ConfigFileError(
            f"{source}: {what} must be strings, but YAML read {named}; quote them "
            "(e.g. 'on': or '007':)"
        )


def _entry(name: str, value: object, source: str) -> FunctionACL:
    if not isinstance(value, Mapping):
        raise ConfigFileError(f"{source}: the entry of function {name!r} must be a mapping")
    _check_string_keys(value, source, f"the keys of function {name!r}")
    unknown = set(value) - {CLIENT_USERS_KEY, INVOCATION_USER_KEY}
    if unknown:
        raise ConfigFileError(f"{source}: function {name!r} has unknown key(s) {sorted(unknown)}")
    clients = _users(value.get(CLIENT_USERS_KEY), source, f"{CLIENT_USERS_KEY!r} of {name!r}")
    invocation = value.get(INVOCATION_USER_KEY)
    if invocation is not None and not isinstance(invocation, str):
        raise ConfigFileError(f"{source}: {INVOCATION_USER_KEY!r} of {name!r} must be one user")
    if invocation is None:
        audit.warning(
            "%s: function %r has no %s: nobody may serve it", source, name, INVOCATION_USER_KEY
        )
    return FunctionACL(clients, invocation)


def _users(value: object, source: str, what: str) -> frozenset[str]:
    """A list of user names (one name alone is a list of one; absent: nobody)."""
    users = value or []
    if isinstance(users, str):
        users = [users]
    if (
        isinstance(users, Mapping)
        or not isinstance(users, Iterable)
        or not all(isinstance(user, str) for user in users)
    ):
        raise ConfigFileError(f"{source}: {what} must list user names")
    return frozenset(users)


def refusal(operation: str, user: str) -> AuthorizationException:
    return AuthorizationException(f"DRPC request '{operation}' for '{user}' user is not authorized")


class ACLAuthorizer:
    """The server's ``authorizer``: Storm's decisions over an ACL, reloaded when its file
    changes. ``strict`` (when not None) overrides the file's strict setting."""

    def __init__(
        self,
        acl: ACL | str | Path,
        *,
        strict: bool | None = None,
        reload_interval: float = DEFAULT_RELOAD_INTERVAL,
    ) -> None:
        self._strict = strict
        self._path = None if isinstance(acl, ACL) else Path(acl)
        self.reload_interval = reload_interval
        self._lock = threading.Lock()
        self._signature: tuple[int, int] | None = None
        self._checked = time.monotonic()
        if isinstance(acl, ACL):
            self._acl = self._apply_strict(acl)
        else:
            self._signature = _signature(self._path)
            self._acl = self._apply_strict(ACL.from_file(acl))

    @property
    def acl(self) -> ACL:
        self._maybe_reload()
        return self._acl

    def _apply_strict(self, acl: ACL) -> ACL:
        return acl if self._strict is None else dataclasses.replace(acl, strict=self._strict)

    def _maybe_reload(self) -> None:
        if self._path is None:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._checked < self.reload_interval:
                return
            self._checked = now
            signature = _signature(self._path)
            if signature == self._signature:
                return
            self._signature = signature
            try:
                self._acl = self._apply_strict(ACL.from_file(self._path))
            except ConfigFileError as error:
                audit.error("kept the previous ACL: %s", error)
                return
        audit.info("reloaded the ACL from %s", self._path)

    def __call__(self, identity: str | None, operation: str, function: str) -> None:
        user = identity or ANONYMOUS
        allowed = self.acl.permits(user, operation, function)
        if allowed:  # the rare operations that stop something are worth a line each
            level = logging.INFO if operation in ADMIN_OPERATIONS else logging.DEBUG
            audit.log(level, "allowed %s of %r for user %r", operation, function, user)
            return
        audit.warning("denied %s of %r for user %r", operation, function, user)
        raise refusal(operation, user)


def _signature(path: Path | None) -> tuple[int, int] | None:
    """The file's modification time and size: a change of either means a reload."""
    try:
        stat = os.stat(path) if path is not None else None
    except OSError:
        return None
    return None if stat is None else (stat.st_mtime_ns, stat.st_size)
