"""``CURRENT_ANCHOR``: the sentinel that anchors an emit to the input being processed.

A collector passes it where an emit names its anchors; the executor replaces it with
whatever input its task is executing (or finishing) at that moment. It is a singleton
that pickles by name, so it keeps its identity across processes.
"""

from __future__ import annotations


class _CurrentAnchor:
    """Sentinel: anchor to whatever input the task is processing right now."""

    _instance: _CurrentAnchor | None = None

    def __new__(cls) -> _CurrentAnchor:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "CURRENT_ANCHOR"

    def __reduce__(self) -> str:
        return "CURRENT_ANCHOR"


CURRENT_ANCHOR = _CurrentAnchor()
