"""The words example's committed counts, answered by a DRPC function through the server."""

from __future__ import annotations

from pathlib import Path

from drpc.client import DRPCClient

from drpc.examples.transactional_words import build_words, build_words_query
from drpc.transactional import run
from tests.server.helpers import HOST, running_server


def test_the_words_function_answers_committed_counts(executor: str, tmp_path: Path) -> None:
    state_dir = str(tmp_path / "state")
    run(build_words(), state_dir=state_dir, max_spout_pending=3)
    with (
        running_server(build_words_query(state_dir), executor=executor) as server,
        DRPCClient(HOST, server.port) as client,
    ):
        answers = {word: client.execute("words", word) for word in ("cat", "dog", "apple", "zebra")}
    assert answers == {"cat": "8", "dog": "7", "apple": "2", "zebra": "0"}
