"""Score a ``make mutation`` run per module: killed / (mutants - equivalent ones).

Reads mutmut's results (``mutants/<module>.py.meta``, one exit code per mutant) for
every module in ``[tool.mutmut] only_mutate`` of pyproject.toml, and the equivalent
mutants listed in tests/mutation/SURVIVORS.md (a line starting ``- `<mutant name>` ``,
then why no test can tell it from the original). A mutant is killed when a test failed
or timed out under it; survivors and mutants no test reaches count against the score.
Prints a table and the survivors that are not listed as equivalent; exits 1 when a
module scores below ``--target`` percent (default 95), or when SURVIVORS.md lists a
mutant that does not exist any more or that the tests now kill.

``score.py PATTERN ...`` (what ``make mutation MUTMUT_ARGS=...`` passes, mutmut's own
mutant-name globs, e.g. ``drpc.semantics.acker*``) judges the mutants those patterns
name, and only them: a run of one module scores that module alone, and only its listed
equivalents can be stale. Without patterns every module is judged.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SURVIVORS = Path(__file__).with_name("SURVIVORS.md")
KILLED = {1, 3, 24, -24, 36, 152, 255}  # a failing test, a pytest error, a timeout
_LISTED = re.compile(r"^- `([^`]+)`", re.MULTILINE)


@dataclass
class Score:
    module: str
    killed: int = 0
    equivalent: int = 0
    unchecked: int = 0
    open: list[str] = field(default_factory=list)

    @property
    def counted(self) -> int:
        return self.killed + len(self.open)

    @property
    def percent(self) -> float:
        return 100.0 * self.killed / self.counted if self.counted else 100.0


def module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def _named(name: str, patterns: list[str]) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def score(
    mutants: Path, modules: list[str], equivalent: set[str], patterns: list[str] | None = None
) -> tuple[list[Score], list[str]]:
    """Each judged module's score, and the listed equivalents of the judged mutants that
    are killed or gone. With ``patterns``, only the mutants they name are judged, and a
    module none of whose mutants they name is left out."""
    patterns = patterns or []
    scores = []
    stale = {name for name in equivalent if _named(name, patterns)}
    for path in modules:
        meta = mutants / f"{path}.meta"
        if not meta.exists():
            if patterns and not any(_named(module_name(path) + ".", [p]) for p in patterns):
                continue  # not asked for: mutmut may not even have generated it
            raise SystemExit(f"no results for {path}: run `make mutation` first")
        every: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
        results = {name: code for name, code in every.items() if _named(name, patterns)}
        if not results:
            continue
        result = Score(module_name(path))
        for name, code in sorted(results.items(), key=lambda item: _natural(item[0])):
            if code in KILLED:
                result.killed += 1
            elif code is None:  # not run yet: an interrupted or partial run
                result.unchecked += 1
                result.open.append(name)
            elif name in equivalent:
                result.equivalent += 1
                stale.discard(name)
            else:
                result.open.append(name)
        scores.append(result)
    return scores, sorted(stale)


def _natural(name: str) -> tuple[str, int]:
    stem, _, number = name.rpartition("_")
    return (stem, int(number)) if number.isdigit() else (name, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=95.0)
    parser.add_argument("--mutants", type=Path, default=ROOT / "mutants")
    parser.add_argument(
        "patterns",
        nargs="*",
        metavar="PATTERN",
        help="judge only the mutants these globs name (mutmut's MUTMUT_ARGS); default: all",
    )
    args = parser.parse_args(argv)
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    equivalent = set(_LISTED.findall(SURVIVORS.read_text()))
    scores, stale = score(args.mutants, config["only_mutate"], equivalent, args.patterns)
    if not scores:
        print(f"no mutants named by {' '.join(args.patterns)}")
        return 1
    print(f"{'module':40} {'mutants':>7} {'killed':>7} {'equiv':>6} {'open':>5} {'score':>7}")
    for result in scores:
        total = result.counted + result.equivalent
        print(
            f"{result.module:40} {total:7} {result.killed:7} {result.equivalent:6} "
            f"{len(result.open):5} {result.percent:6.1f}%"
        )
    unchecked = sum(result.unchecked for result in scores)
    if unchecked:
        print(f"{unchecked} mutants not checked yet (counted as survivors)")
    failed = [result for result in scores if result.percent < args.target]
    for result in scores:
        for name in result.open:
            print(f"survived, not listed as equivalent: {name}")
    for name in stale:
        print(f"listed in {SURVIVORS.name} but killed or gone: {name}")
    if failed:
        names = ", ".join(result.module for result in failed)
        print(f"below {args.target:g}% of non-equivalent mutants killed: {names}")
    return 1 if failed or stale else 0


if __name__ == "__main__":
    sys.exit(main())
