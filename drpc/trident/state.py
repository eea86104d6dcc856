"""Trident map states in LMDB: which kind, what a commit writes, what a query reads.

Contract.

- ``LMDBMapState.transactional(name)``, ``.opaque(name)`` and
  ``.non_transactional(name)`` are state factories (``MapStateFactory``,
  picklable, compared by value): a named map of the run's state directory
  (``drpc.state.dir`` in the topology configuration) of that kind, with
  Storm's rules (``drpc.state.maps``): transactional stores ``{value, txid}``
  and a replayed txid is a no-op; opaque stores ``{value, prev, txid}`` and a
  replayed txid recomputes from prev (for opaque spouts, whose replays may
  differ); non-transactional stores the bare value and applies every replay.
  ``cache_size`` (default 1000) committed records per map stay in memory for
  the process that commits (``drpc.state.cache``).
- ``factory.open(env)`` gives the process's one map object of that kind and
  name in ``env`` (so its cache lives across batches).
- ``CommitMapState`` is a map inside one commit: ``multi_get(keys)`` as of the
  commit's txid, ``multi_update(updaters)``, ``multi_combine(batch, combine)`` (each
  key's value combined with its batch value, or that value when it has none),
  ``multi_put(values)`` and
  ``multi_remove(keys)`` (Storm's ``RemovableMapState``; a removed key reads
  as absent; the kind's txid rules hold through it: see ``drpc.state.maps``),
  each one pass over the batch's keys, written in the commit's LMDB
  transaction. With ``owner`` (a partition's layout and index) a read or write of a
  key another partition holds raises ``PartitionKeyError``.
- ``QueryMapState`` is a map as queries see it (``state_query``, DRPC):
  ``multi_get(keys)`` reads committed values in one read transaction; absent
  keys read as None. ``page(limit, after=, prefix=)`` lists at most ``limit``
  entries in key order (a ``MapPage``: the entries and the key the next page
  starts after, None at the end). Both read at the request's pinned version
  inside a DRPC request. ``committed_txid()`` names the global commit a partitioned
  state's reads see (the request's pinned one inside a DRPC request), so an answer can
  say which commit it read; None for a state in one partition.
- ``factory.query(env, conf)`` is the map as queries see it: the map of ``env`` (the
  run's state directory), or, when the directory's catalog says the map belongs to a
  partitioned state, a ``PartitionedMap`` reading every partition at one global
  commit (``drpc.state.partitioned``). ``factory.query_in(services, conf)`` is the
  same for a task: on a host without the directory's global record (a worker's) but
  with partitions of the state, those partitions, read at the global commit the request
  carries.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from drpc.state import (
    NonTransactionalMap,
    OpaqueMap,
    StateEnvironment,
    StateKey,
    StateTxn,
    TransactionalMap,
)
from drpc.state.maps import Combine, MapHandle, MapPage, Updater
from drpc.state.partitioned import (
    PartitionedMap,
    group_of,
    has_global_record,
    local_partitioned_map,
)
from drpc.state.topology import (
    STATE_DIR_CONF,
    STATE_SERVICE,
    Owner,
    check_owned,
    partitioned_map,
    state_for,
)

StateMapKind = type[TransactionalMap] | type[OpaqueMap] | type[NonTransactionalMap]
AnyStateMap = TransactionalMap | OpaqueMap | NonTransactionalMap

DEFAULT_CACHE_SIZE = 1000


@dataclass(frozen=True, slots=True)
class MapStateFactory:
    """A named LMDB map of one kind (see the module doc)."""

    KINDS: ClassVar[dict[str, StateMapKind]] = {
        "transactional": TransactionalMap,
        "opaque": OpaqueMap,
        "non-transactional": NonTransactionalMap,
    }

    kind: str
    name: str
    cache_size: int = DEFAULT_CACHE_SIZE

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"unknown map state kind {self.kind!r}; one of {list(self.KINDS)}")
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a map state needs a non-empty name, got {self.name!r}")

    def open(self, env: StateEnvironment) -> AnyStateMap:
        return _open_map(env, self)

    def query(
        self, env: StateEnvironment, conf: Mapping[str, Any] | None = None
    ) -> AnyStateMap | PartitionedMap:
        group = group_of(env, self.name)
        if group is None:
            return self.open(env)
        return partitioned_map(env, group, self.KINDS[self.kind], self.name, None, conf)

    def query_in(
        self, services: Mapping[str, Any], conf: Mapping[str, Any]
    ) -> AnyStateMap | PartitionedMap:
        """The map as a task's queries see it (see the module doc)."""
        directory = conf.get(STATE_DIR_CONF)
        if STATE_SERVICE not in services and directory and not has_global_record(directory):
            found = local_partitioned_map(directory, conf, self.name, self.KINDS[self.kind])
            if found is not None:
                return found
        return self.query(state_for(services, conf).env, conf)


class LMDBMapState:
    """Factories of Trident map states in the run's LMDB state directory."""

    @staticmethod
    def transactional(name: str, cache_size: int = DEFAULT_CACHE_SIZE) -> MapStateFactory:
        return MapStateFactory("transactional", name, cache_size)

    @staticmethod
    def opaque(name: str, cache_size: int = DEFAULT_CACHE_SIZE) -> MapStateFactory:
        return MapStateFactory("opaque", name, cache_size)

    @staticmethod
    def non_transactional(name: str, cache_size: int = DEFAULT_CACHE_SIZE) -> MapStateFactory:
        return MapStateFactory("non-transactional", name, cache_size)


_maps: dict[tuple[str, str, str], AnyStateMap] = {}
_maps_lock = threading.Lock()


def _open_map(env: StateEnvironment, factory: MapStateFactory) -> AnyStateMap:
    key = (env.path, factory.kind, factory.name)
    with _maps_lock:
        state_map = _maps.get(key)
        if state_map is None or state_map.env is not env:
            kind = MapStateFactory.KINDS[factory.kind]
            state_map = _maps[key] = kind(env, factory.name, cache_size=factory.cache_size)
        return state_map


class CommitMapState:
    """A map state inside the commit of one txid (see the module doc)."""

    def __init__(
        self, state_map: AnyStateMap, txn: StateTxn, txid: int, owner: Owner | None = None
    ) -> None:
        self.handle: MapHandle[Any] = state_map.handle(txn, txid)
        self.owner = owner

    def _check(self, keys: Iterable[Any]) -> None:
        if self.owner is not None:
            check_owned(self.owner, self.handle.map.name, keys)

    def multi_get(self, keys: Iterable[Any]) -> list[Any]:
        keys = list(keys)
        self._check(keys)
        return self.handle.multi_get(keys)

    def multi_update(self, updaters: Mapping[Any, Updater]) -> dict[Any, Any]:
        self._check(updaters)
        return self.handle.multi_update(updaters)

    def multi_combine(self, batch: Mapping[Any, Any], combine: Combine) -> None:
        """Each key's value becomes ``combine(value, batch[key])`` (``batch[key]`` when
        there is none): a combiner's ``persistent_aggregate`` in one pass."""
        self._check(batch)
        self.handle.multi_combine(batch, combine)

    def multi_put(self, values: Mapping[Any, Any]) -> None:
        self._check(values)
        self.handle.multi_put(values)

    def multi_remove(self, keys: Iterable[Any]) -> None:
        keys = list(keys)
        self._check(keys)
        self.handle.multi_remove(keys)


class QueryMapState:
    """A map state's committed values, for queries (see the module doc)."""

    def __init__(self, state_map: AnyStateMap | PartitionedMap) -> None:
        self.map = state_map

    def multi_get(self, keys: Iterable[Any]) -> list[Any]:
        return self.map.multi_get(list(keys), None)

    def page(
        self, limit: int, *, after: StateKey | None = None, prefix: StateKey | None = None
    ) -> MapPage:
        return self.map.page(limit, after=after, prefix=prefix)

    def committed_txid(self) -> int | None:
        """The txid of the global commit these reads see (module doc)."""
        return self.map.read_txid() if isinstance(self.map, PartitionedMap) else None
