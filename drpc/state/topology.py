"""State maps as bolts see them: committed reads anywhere, writes only inside a commit.

Contract. ``context.state`` (a ``TopologyState`` over the run's LMDB state
directory, ``drpc.state.dir`` in the configuration) hands out named maps:
``transactional_map(name, default=None)`` (``{value, txid}``: for
transactional spouts, a replayed txid is a no-op) and ``opaque_map(name,
default=None)`` (``{value, prev, txid}``: for opaque spouts, a replayed txid
recomputes from prev); see ``drpc.state.maps`` for the rules.

- A process that opens the directory itself (no run lends it, e.g. a DRPC query on a
  resident task) opens it with ``drpc.state.version.retention`` from the
  configuration, when set, as its ``version_retention``; a directory this process has
  open already (a hosted run's) keeps its own options.
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
- **Partitioned states** (``drpc.state.partitioned``). A committer task of a partitioned
  state gets ``TopologyState(partition env, owner=(layout, index))``: its maps are its
  partition's, and reading or writing a key another partition owns raises
  ``PartitionKeyError`` (its partition would answer the default, not the value).
  Elsewhere a map the directory's catalog says is partitioned is read across its
  partitions (those under this host's partition root), at the request's pinned global
  commit or the latest; it cannot be written outside its committer's commit.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from drpc.errors import PartitionKeyError, StateError
from drpc.state import OpaqueMap, StateEnvironment, TransactionalMap
from drpc.state.coordinator import CoordinatorState
from drpc.state.keygroups import partition_of
from drpc.state.maps import MapHandle, Updater
from drpc.state.partition import PartitionLayout
from drpc.state.partitioned import PartitionedMap, group_of, layouts, local_partitions

STATE_SERVICE = "drpc.state"
STATE_DIR_CONF = "drpc.state.dir"
PINNED_READS_CONF = "drpc.state.pinned.reads"
VERSION_RETENTION_CONF = "drpc.state.version.retention"
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


Owner = tuple[PartitionLayout, int]
"""A partition (its layout and index) whose committer task holds the state."""


def check_owned(owner: Owner, name: str, keys: Iterable[Any]) -> None:
    """Raise ``PartitionKeyError`` unless partition ``owner`` holds every one of ``keys``."""
    layout, index = owner
    for key in keys:
        found = partition_of(key, layout.partitions, layout.key_groups)
        if found != index:
            raise PartitionKeyError(
                f"map {name!r}: key {key!r:.60} belongs to partition {found} of "
                f"{layout.group!r}, not to partition {index}, whose task used it; group "
                "the committer's input by the key it uses (fields_grouping)"
            )


class StateMap:
    """One named map: committed reads, and writes through the current commit."""

    def __init__(
        self,
        map: TransactionalMap | OpaqueMap | PartitionedMap,
        owner: Owner | None = None,
        partitioned: Callable[[], PartitionedMap | None] | None = None,
    ) -> None:
        """:param partitioned: the map as a partitioned state's, once the directory's
        catalog says it is one (asked at reads until it does: a run records it at its
        first commit)."""
        self.map: TransactionalMap | OpaqueMap | PartitionedMap = map
        self.name = map.name
        self.owner = owner
        self._partitioned = partitioned

    def _reading(self) -> TransactionalMap | OpaqueMap | PartitionedMap:
        if self._partitioned is not None:
            found = self._partitioned()
            if found is not None:
                self.map, self._partitioned = found, None
        return self.map

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
        state_map = self._reading()
        if isinstance(state_map, PartitionedMap):
            if operation == "read":
                return None
            raise StateError(
                f"{operation} of map {self.name!r}: it is a partitioned state's map, written "
                f"only by the tasks of its committer ({state_map.layout.group!r})"
            )
        txn, txid = commit
        return state_map.handle(txn, txid)

    def _check(self, keys: Iterable[Any]) -> None:
        if self.owner is not None:
            check_owned(self.owner, self.name, keys)

    def get(self, key: Any, default: Any = None) -> Any:
        handle = self._handle("read")
        if handle is None:
            [value] = self._committed([key], self.map.default if default is None else default)
            return value
        self._check((key,))
        return handle.get(key)

    def multi_get(self, keys: Iterable[Any]) -> list[Any]:
        handle = self._handle("read")
        if handle is None:
            return self._committed(list(keys), self.map.default)
        keys = list(keys)
        self._check(keys)
        return handle.multi_get(keys)

    def _committed(self, keys: list[Any], default: Any) -> list[Any]:
        """Committed values, from the partitions once the map is a partitioned state's."""
        state_map = self.map
        if self._partitioned is None or isinstance(state_map, PartitionedMap):
            return state_map.multi_get(keys, default)
        with state_map.env.read() as txn:  # one snapshot: the catalog, then the values
            if group_of(state_map.env, self.name, txn) is None:
                return state_map.multi_get(keys, default, txn=txn)
        return self._reading().multi_get(keys, default)

    def items(self) -> list[tuple[Any, Any]]:
        """Every committed key and value (also inside a commit: what was committed before it)."""
        return self._reading().items()

    def update(self, key: Any, fn: Updater) -> Any:
        handle = self._handle("update")
        assert handle is not None
        self._check((key,))
        return handle.update(key, fn)

    def multi_update(self, updates: Mapping[Any, Updater]) -> dict[Any, Any]:
        handle = self._handle("update")
        assert handle is not None
        self._check(updates)
        return handle.multi_update(updates)

    def put(self, key: Any, value: Any) -> None:
        handle = self._handle("put")
        assert handle is not None
        self._check((key,))
        handle.put(key, value)

    def multi_put(self, values: Mapping[Any, Any]) -> None:
        handle = self._handle("put")
        assert handle is not None
        self._check(values)
        handle.multi_put(values)


class TopologyState:
    """The maps of one state directory (or, with ``owner``, of one partition)."""

    def __init__(self, env: StateEnvironment, owner: Owner | None = None) -> None:
        self.env = env
        self.owner = owner

    @classmethod
    def at(cls, directory: str, **options: Any) -> TopologyState:
        """The state of ``directory``: the environment this process already has open for it
        (a hosted run's, with its options), else one opened with ``options``."""
        opened = StateEnvironment.opened(directory)
        return cls(opened or StateEnvironment.open(directory, **options))

    def _map(
        self, kind: type[TransactionalMap] | type[OpaqueMap], name: str, default: Any
    ) -> StateMap:
        if self.owner is not None:
            return StateMap(kind(self.env, name, default=default), self.owner)
        env = self.env

        def partitioned() -> PartitionedMap | None:
            group = group_of(env, name)
            return None if group is None else partitioned_map(env, group, kind, name, default)

        found = partitioned()
        if found is not None:
            return StateMap(found)
        return StateMap(kind(env, name, default=default), partitioned=partitioned)

    def transactional_map(self, name: str, default: Any = None) -> StateMap:
        return self._map(TransactionalMap, name, default)

    def opaque_map(self, name: str, default: Any = None) -> StateMap:
        return self._map(OpaqueMap, name, default)

    def __reduce__(self) -> tuple[Any, ...]:
        if self.owner is not None:
            raise StateError(f"the state of a partition's commit ({self.env.path!r}) stays there")
        return (TopologyState.at, (self.env.path,))


def partitioned_map(
    env: StateEnvironment,
    group: str,
    kind: Any,
    name: str,
    default: Any,
    conf: Mapping[str, Any] | None = None,
) -> PartitionedMap:
    """Map ``name`` of partitioned state ``group`` of the directory ``env`` is the global
    record of, read through this host's partitions (one object per process: a state keeps
    its layout)."""
    key = (env.path, group, kind, name, default if isinstance(default, Hashable) else id(default))
    with _partitioned_lock:
        found = _partitioned.get(key)
    if found is not None and found.env_of is env:
        return found
    layout = layouts(env)[group]
    state = CoordinatorState(env, layout.topology)

    def latest() -> int:
        record = state.last_commit()
        return 0 if record is None else record.txid

    found = PartitionedMap(
        local_partitions(env.path, conf),
        layout,
        kind,
        name,
        default,
        state_dir=env.path,
        latest_txid=latest,
    )
    found.env_of = env
    with _partitioned_lock:
        _partitioned[key] = found
    return found


_partitioned: dict[tuple[Any, ...], PartitionedMap] = {}
_partitioned_lock = threading.Lock()


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
    retention = conf.get(VERSION_RETENTION_CONF)
    options = {} if retention is None else {"version_retention": float(retention)}
    with _opened_lock:
        state = _opened.get(real)
        if state is None or state.env.closed:
            state = _opened[real] = TopologyState.at(real, **options)
        return state
