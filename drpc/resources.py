"""Large read-only resources a bolt loads once per process, never per job.

A Spark job pickles the bolts it runs; a followers table held by a bolt would
travel with every job. Hold a ``WorkerResource`` instead: it pickles as its
name and loader only, and ``get()`` loads the value at most once per process
(the driver, the local executor, each Spark Python worker, which drpc keeps
alive between jobs with worker reuse) and returns the cached value after::

    FOLLOWERS = WorkerResource("reach-followers", load_followers, "graph.bin")

    class GetFollowers(BaseBasicBolt):
        def prepare(self, conf, context):
            self.followers = FOLLOWERS.get()

Contract: the loader must be importable by reference (a module-level
function) and its arguments picklable; a name identifies one resource per
process, so registering the same name with a different loader or arguments
raises ``ValueError``; a loader that raises is retried on the next ``get()``.
``loads()`` tells how many times this process ran a resource's loader.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_values: dict[str, tuple[tuple[Any, ...], Any]] = {}
_loads: dict[str, int] = {}


class WorkerResource(Generic[T]):
    def __init__(self, name: str, loader: Callable[..., T], *args: Any, **kwargs: Any) -> None:
        if not name:
            raise ValueError("a worker resource needs a name")
        self.name = name
        self.loader = loader
        self.args = args
        self.kwargs = kwargs

    def _identity(self) -> tuple[Any, ...]:
        loader = self.loader
        return (
            getattr(loader, "__module__", None),
            getattr(loader, "__qualname__", repr(loader)),
            self.args,
            tuple(sorted(self.kwargs.items())),
        )

    def get(self) -> T:
        """The value, loaded on first use in this process."""
        identity = self._identity()
        cached = _values.get(self.name)
        if cached is not None and cached[0] == identity:
            return cached[1]
        with _lock:
            cached = _values.get(self.name)
            if cached is not None:
                if cached[0] != identity:
                    raise ValueError(
                        f"worker resource {self.name!r} is already loaded in this process "
                        "with a different loader or arguments"
                    )
                return cached[1]
            value = self.loader(*self.args, **self.kwargs)
            _values[self.name] = (identity, value)
            _loads[self.name] = _loads.get(self.name, 0) + 1
            return value

    def loaded(self) -> bool:
        return self.name in _values

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "loader": self.loader, "args": self.args, "kwargs": self.kwargs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"WorkerResource({self.name!r})"


def loads(name: str) -> int:
    """How many times this process has run the loader of resource ``name``."""
    return _loads.get(name, 0)


def unload(name: str) -> None:
    """Forget a resource in this process (tests; freeing memory)."""
    with _lock:
        _values.pop(name, None)
