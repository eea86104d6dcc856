"""``drpc.progress.Progress``: a redrawn line on a terminal, plain periodic lines elsewhere."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from drpc.progress import Progress

pytestmark = pytest.mark.timeout(30)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_one_line_is_redrawn_in_place() -> None:
    screen = Terminal()
    progress = Progress(screen, refresh=60.0)
    assert progress.tty
    progress.update("txid 1, 10 batches/s")
    for i in range(100):  # well within the refresh: not drawn
        progress.update(f"txid {i}")
    progress.update("txid 7", force=True)  # shorter: padded over the longer text
    progress.close("done: 9 batches")
    assert screen.getvalue() == (
        "\rtxid 1, 10 batches/s\rtxid 7" + " " * len(", 10 batches/s") + "\rdone: 9 batches\n"
    )
    assert "\n" not in screen.getvalue()[:-1]  # one line, redrawn


def test_elsewhere_plain_lines_at_most_every_interval() -> None:
    log = io.StringIO()
    progress = Progress(log, interval=60.0)
    assert not progress.tty
    progress.update("0 requests")
    for i in range(100):
        progress.update(f"{i} requests")
    progress.close()
    assert log.getvalue() == "0 requests\n99 requests\n"
    assert "\r" not in log.getvalue()


def test_lines_come_again_once_the_interval_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("drpc.progress.time", SimpleNamespace(monotonic=lambda: now[0]))
    log = io.StringIO()
    progress = Progress(log, interval=5.0)
    progress.update("first")
    now[0] += 4.9
    progress.update("too soon")
    now[0] += 0.1
    progress.update("second")
    assert log.getvalue().splitlines() == ["first", "second"]


def test_closing_with_nothing_shown_prints_nothing() -> None:
    for stream in (io.StringIO(), Terminal()):
        Progress(stream).close()
        assert stream.getvalue() == ""
