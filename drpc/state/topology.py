"""State maps as bolts see them: committed reads anywhere, writes only inside a commit.

Contract. ``context.state`` (a ``TopologyState`` over the run's LMDB state
directory, ``drpc.state.dir`` in the configuration) hands out named maps:
``transactional_map(name, default=None)`` (``{value, txid}``: for
transactional spouts, a replayed txid is a no-op) and ``opaque_map(name,
default=None)`` (``{value, prev, txid}``: for opaque spouts, a replayed txid
recomputes from prev); see ``drpc.state.maps`` for the rules.

- ``get``/``multi_get``/``items`` outside a commit read committed data only.
- Inside a commit (a committer's ``finish_batch``, and the bolts after it, which
  the commit phase runs in txid order), ``get`` reads as of the commit's txid
  and ``update``/``put`` write into the commit's one LMDB write transaction,
  together with every other map written by the commit and the commit record:
  a crash keeps all of it or none. Outside a commit ``update``/``put`` raise
  ``StateError``.
- Update functions run once per commit attempt, however often the map grows
  during it (``drpc.state.env``); a commit that fails is retried as a new
  attempt of the batch, so what an update does besides returning the new
  value happens once per attempt, as in Storm.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from drpc.errors import StateError
from drpc.state import OpaqueMap, StateEnvironment, TransactionalMap
from drpc.state.maps import MapHandle, Updater

STATE_SERVICE = "drpc.state"
STATE_DIR_CONF = "drpc.state.dir"
PINNED_READS_CONF = "drpc.state.pinned.reads"
"""Whether a DRPC request reads one committed version of ``drpc.state.dir`` (default
True; False reads each key at whatever was committed last, as Storm's Trident does)."""

_scope = threading.local()


@contextmanager
def commit_scope(txn: Any, txid: int) -> Iterator[None]:
    """Make ``txn`` the current commit's transaction on this thread."""
    previous = getattr(_scope, "current", None)
    _scope.current = (txn, txid)
    try:
        yield
    finally:
        _scope.current = previous


def current_commit() -> tuple[Any, int] | None:
    return getattr(_scope, "current", None)


class StateMap:
    """One named map: committed reads, and writes through the current commit."""

    def __init__(self, map: TransactionalMap | OpaqueMap) -> None:
        self.map = map
        self.name = map.name

    def __repr__(self) -> str:
        return f"StateMap({self.map!r})"

    def _handle(self, operation: str) -> MapHandle[Any] | None:
        commit = current_commit()
        if commit is None:
            if operation == "read":
                return None
            raise StateError(
                f"{operation} of map {self.name!r} outside a commit: state is written only in "
                "a committer's finish_batch (or a bolt after it), inside its commit"
            )
        txn, txid = commit
        return self.map.handle(txn, txid)

    def get(self, key: Any, default: Any = None) -> Any:
        handle = self._handle("read")
        if handle is None:
            return self.map.get(key, self.map.default if default is None else default)
        return handle.get(key)

    def multi_get(self, keys: Iterable[Any]) -> list[Any]:
        handle = self._handle("read")
        return self.map.multi_get(list(keys)) if handle is None else handle.multi_get(keys)

    def items(self) -> list[tuple[Any, Any]]:
        """Every committed key and value (also inside a commit: what was committed before it)."""
        return self.map.items()

    def update(self, key: Any, fn: Updater) -> Any:
        handle = self._handle("update")
        assert handle is not None
        return handle.update(key, fn)

    def multi_update(self, updates: Mapping[Any, Updater]) -> dict[Any, Any]:
        handle = self._handle("update")
        assert handle is not None
        return handle.multi_update(updates)

    def put(self, key: Any, value: Any) -> None:
        handle = self._handle("put")
        assert handle is not None
        handle.put(key, value)

    def multi_put(self, values: Mapping[Any, Any]) -> None:
        handle = self._handle("put")
        assert handle is not None
        handle.multi_put(values)


class TopologyState:
    """The maps of one state directory."""

    def __init__(self, env: StateEnvironment) -> None:
        self.env = env

    @classmethod
    def at(cls, directory: str) -> TopologyState:
        """The state of ``directory``: the environment this process already has open for it
        (a hosted run's, with its options), else one opened with the default options."""
        return cls(StateEnvironment.opened(directory) or StateEnvironment.open(directory))

    def transactional_map(self, name: str, default: Any = None) -> StateMap:
        return StateMap(TransactionalMap(self.env, name, default=default))

    def opaque_map(self, name: str, default: Any = None) -> StateMap:
        return StateMap(OpaqueMap(self.env, name, default=default))

    def __reduce__(self) -> tuple[Any, ...]:
        return (TopologyState.at, (self.env.path,))


_opened: dict[str, TopologyState] = {}
_opened_lock = threading.Lock()


def state_for(services: Mapping[str, Any], conf: Mapping[str, Any]) -> TopologyState:
    """The run's state: lent by the executor, or opened from ``drpc.state.dir`` once a process."""
    state = services.get(STATE_SERVICE)
    if state is not None:
        return state
    directory = conf.get(STATE_DIR_CONF)
    if not directory:
        raise StateError(
            f"no state here: set {STATE_DIR_CONF!r} in the topology configuration, or run the "
            "topology through drpc.transactional.run"
        )
    # By the real path: a relative directory names another one once the process changes its
    # working directory, and a closed environment is opened again.
    real = os.path.realpath(directory)
    with _opened_lock:
        state = _opened.get(real)
        if state is None or state.env.closed:
            state = _opened[real] = TopologyState.at(real)
        return state
