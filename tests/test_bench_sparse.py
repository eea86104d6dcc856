"""bench/sparse.py measures what it says: it makes streamparse's quickstart project with
streamparse's own quickstart and counts the words its count bolt processed, both ways."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loading import load_script

sparse = load_script("drpc_bench_sparse", "bench/sparse.py")


@pytest.mark.timeout(120)
def test_both_ways_count_words_of_the_quickstart_project(tmp_path: Path) -> None:
    project = sparse.quickstart(tmp_path)
    assert (project / "topologies" / "wordcount.py").is_file()
    for in_process in (False, True):
        assert sparse.words_per_second(project, in_process, "local", 0.3) > 0


def test_the_plain_python_limit_counts_words() -> None:
    assert sparse.plain_python_words_per_second(0.05) > 10_000
