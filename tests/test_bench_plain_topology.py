"""bench/plain_topology.py measures what it says: every sentence's tree acked and every word
counted, its word arithmetic, its write-out of the stream, and its CLI's refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drpc.examples.word_count_topology import SENTENCES
from tests.loading import ROOT, load_script

plain = load_script("drpc_bench_plain_topology", "bench/plain_topology.py")


def test_words_of_counts_the_round_robin_sentences() -> None:
    per_sentence = [len(sentence.split()) for sentence in SENTENCES]
    assert plain.words_of(len(SENTENCES) + 2) == sum(per_sentence) + sum(per_sentence[:2])
    assert plain.words_of(0) == 0


@pytest.mark.timeout(60)
def test_the_local_run_counts_every_word_of_every_sentence() -> None:
    result = plain.bench_drpc("local", 2_000)
    assert result["words_counted"] == plain.words_of(2_000)  # each count bolt tuple acked
    assert result["replayed"] == 0
    assert result["sentences_per_s"] > 0


def test_the_stream_holds_every_sentence_in_files_of_the_size_asked(tmp_path: Path) -> None:
    plain.write_stream(tmp_path / "stream", 7, 3)
    files = sorted((tmp_path / "stream").iterdir())
    lines = [file.read_text().splitlines() for file in files]
    assert [len(part) for part in lines] == [3, 3, 1]
    assert [line for part in lines for line in part] == [
        SENTENCES[n % len(SENTENCES)] for n in range(7)
    ]


def test_the_cli_refuses_a_count_below_one() -> None:
    ran = subprocess.run(
        [sys.executable, "bench/plain_topology.py", "--sentences", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 2
    assert "--sentences must be >= 1" in ran.stderr
