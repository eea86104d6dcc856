"""tests/mutation/score.py on mutmut results written by hand: a run of one module judges
that module alone; a whole run judges every module."""

from __future__ import annotations

import json
from pathlib import Path

from tests.mutation.score import score

MODULES = ["drpc/semantics/acker.py", "drpc/requests.py"]
ACKER = "drpc.semantics.acker.xǁAckerǁack__mutmut_"
REQUESTS = "drpc.requests.xǁRequestsǁadd__mutmut_"


def _results(mutants: Path, path: str, codes: dict[str, int | None]) -> None:
    meta = mutants / f"{path}.meta"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes}))


def test_a_run_of_one_module_judges_that_module_alone(tmp_path: Path) -> None:
    # mutmut generated both modules' mutants but ran only the acker's
    _results(tmp_path, MODULES[0], {f"{ACKER}1": 1, f"{ACKER}2": 0, f"{ACKER}3": 0})
    _results(tmp_path, MODULES[1], {f"{REQUESTS}1": None, f"{REQUESTS}2": None})
    equivalent = {f"{ACKER}2", f"{REQUESTS}2"}  # the requests one is not stale: not run
    scores, stale = score(tmp_path, MODULES, equivalent, ["drpc.semantics.acker*"])
    [acker] = scores
    assert (acker.module, acker.killed, acker.equivalent, acker.open) == (
        "drpc.semantics.acker",
        1,
        1,
        [f"{ACKER}3"],
    )
    assert acker.percent == 50.0
    assert stale == []


def test_a_whole_run_judges_every_module_and_names_stale_equivalents(tmp_path: Path) -> None:
    _results(tmp_path, MODULES[0], {f"{ACKER}1": 1, f"{ACKER}2": 0})
    _results(tmp_path, MODULES[1], {f"{REQUESTS}1": 1, f"{REQUESTS}2": 1})
    scores, stale = score(tmp_path, MODULES, {f"{ACKER}2", f"{REQUESTS}2"})
    assert [(s.module, s.killed, s.equivalent, s.percent) for s in scores] == [
        ("drpc.semantics.acker", 1, 1, 100.0),
        ("drpc.requests", 2, 0, 100.0),
    ]
    assert stale == [f"{REQUESTS}2"]  # listed as equivalent, yet the tests kill it


def test_mutants_not_run_yet_count_against_the_module_asked_for(tmp_path: Path) -> None:
    _results(tmp_path, MODULES[0], {f"{ACKER}1": 1, f"{ACKER}2": None})
    [acker], _ = score(tmp_path, MODULES, set(), ["drpc.semantics.acker*"])
    assert (acker.unchecked, acker.percent) == (1, 50.0)
