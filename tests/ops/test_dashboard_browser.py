"""The dashboard in a real headless Chromium against a real server: it loads without console
errors and shows the calls the test sent, the hosted run's state directory and the figures
of a plain topology's components; the run
leaves a screenshot in
``test-artifacts/dashboard.png`` (and in the test's tmp dir)."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path

import pytest
from drpc.client import DRPCClient, DRPCExecutionException, HTTPDRPCClient
from drpc.server import DRPCServer, ServerThread
from drpc.server.dashboard import Dashboard

from drpc.errors import DRPCExceptionType
from tests.ops.cdp import Chromium, find_chromium
from tests.plain_topology import WordCount, events
from tests.plain_topology import word_count as plain_word_count
from tests.server.helpers import HOST, exclamation, failing_topology, server_options, wait_until
from tests.server.test_transactional_hosting import append_words
from tests.transactional.faults import word_count

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WIDTH = 1360
RESOLUTION = 1.0
TOPOLOGY = "fault-words"
PLAIN = "word-count"
SENTENCES = ["the cow jumped over the moon", "four score and seven years ago"] * 10


def _cell(function: str, selector: str) -> str:
    return (
        f"(document.querySelector('#functions tr[data-function=\"{function}\"] {selector}')"
        " || {}).textContent"
    )


def _topology_cell(selector: str) -> str:
    return (
        f"(document.querySelector('#transactional tr[data-topology=\"{TOPOLOGY}\"] {selector}')"
        " || {}).textContent"
    )


def _plain_cell(component: str, selector: str) -> str:
    return (
        f'(document.querySelector(\'#topologies tr[data-topology="{PLAIN}"]'
        f'[data-component="{component}"] {selector}\') || {{}}).textContent'
    )


def _state_row() -> str:
    """The cells of the State row that lists ``TOPOLOGY``'s committed txid, or null."""
    return (
        "(cell => cell && [cell.querySelector('b').textContent]"
        ".concat(['.version', '.pins', '.undo-logs']"
        ".map(selector => cell.closest('tr').querySelector(selector).textContent)))"
        f"(document.querySelector('#state tbody .txid[data-topology=\"{TOPOLOGY}\"]'))"
    )


def _send_calls(server: DRPCServer) -> None:
    """exclamation: 8 ok; failing: 3 ok, 1 failed; spread over a few chart slots."""
    with DRPCClient(HOST, server.port, timeout=20) as client:
        for i in range(6):
            assert client.execute("exclamation", f"call {i}") == f"call {i}!"
            if i % 2:
                time.sleep(RESOLUTION)
        for args in ("a", "b", "c"):
            assert client.execute("failing", args) == f"{args}!"
        with pytest.raises(DRPCExecutionException) as failed:
            client.execute("failing", "bad")
        assert failed.value.type is DRPCExceptionType.FAILED_REQUEST
    with HTTPDRPCClient(f"http://{HOST}:{server.http_port}", timeout=20) as http:
        assert http.execute("exclamation", "over http") == "over http!"
        assert http.execute("exclamation", "again") == "again!"


def _hold_one(server: DRPCServer) -> threading.Thread:
    """A call to a function nobody serves, queued until the server stops (in flight)."""

    def call() -> None:
        with DRPCClient(HOST, server.port, timeout=60) as client:
            try:
                client.execute("held", "waiting")
            except DRPCExecutionException as error:
                assert error.type is DRPCExceptionType.SERVER_SHUTDOWN

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    wait_until(lambda: server.service.queue_depth("held") == 1)
    return thread


async def _look(executable: str, url: str, profile: Path, shot: Path) -> list[str]:
    async with Chromium(executable, profile) as browser:
        page = await browser.new_page()
        await page.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=900,
                        deviceScaleFactor=1, mobile=False)  # fmt: skip
        await page.call("Page.navigate", url=url)
        await page.wait_for("document.body && Number(document.body.dataset.updates || 0) >= 1")
        assert await page.wait_for(_cell("exclamation", "[data-outcome=ok] .n")) == "8"
        assert await page.evaluate(_cell("failing", "[data-outcome=ok] .n")) == "3"
        assert await page.evaluate(_cell("failing", "[data-outcome=failed] .n")) == "1"
        assert await page.evaluate(_cell("failing", ".total")) == "4 total"
        assert await page.evaluate(_cell("exclamation", ".p50")) not in ("—", None)
        assert await page.evaluate(_cell("exclamation", ".p99")) not in ("—", None)
        failure = await page.evaluate(
            "Array.from(document.querySelectorAll('#failures tbody tr'))"
            ".map(row => row.innerText).join('\\n')"
        )
        assert "failing" in failure
        assert "FAILED_REQUEST" in failure
        assert "cannot handle 'bad'" in failure
        held = await page.evaluate(
            "(document.querySelector('#in-flight tr') && "
            "Array.from(document.querySelectorAll('#in-flight tbody tr'))"
            ".map(row => row.innerText).join('\\n'))"
        )
        assert "held" in held
        assert "queued" in held
        commits = await page.evaluate(_topology_cell(".commits"))
        assert int(commits) > 0
        replays = await page.evaluate(_topology_cell(".replays"))
        assert "processing" in replays or "commit" in replays
        assert await page.evaluate(_topology_cell(".run-state")) == "running"
        acked = await page.evaluate(_plain_cell("sentences", ".acked"))
        assert acked == str(len(SENTENCES))
        assert await page.evaluate(_plain_cell("split", ".emitted")) == str(6 * len(SENTENCES))
        assert (await page.evaluate(_plain_cell("sentences", ".complete-latency"))).endswith("s")
        assert await page.evaluate(_plain_cell("count", ".complete-latency")) == "—"
        txid, version, pins, undo_logs = await page.wait_for(_state_row())
        assert int(txid) > 0 and int(version) > 0
        assert int(pins) >= 0 and int(undo_logs) >= 0
        updates = int(await page.evaluate("document.body.dataset.updates"))
        await page.wait_for(f"Number(document.body.dataset.updates) >= {updates + 2}")
        await page.screenshot(shot, WIDTH)
        return page.errors


def test_the_dashboard_shows_the_calls_sent_with_no_console_errors(tmp_path: Path) -> None:
    executable = find_chromium()
    if executable is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    shot = tmp_path / "dashboard.png"
    dashboard = Dashboard(resolution=RESOLUTION, window=120.0)
    server = DRPCServer(**server_options(wait_for_unserved=True, dashboard=dashboard))
    server.register(exclamation())
    server.register(failing_topology())
    # a transactional run beside them, whose injected first-attempt failures replay
    log_dir, markers = tmp_path / "log", tmp_path / "markers"
    markers.mkdir()
    words = sum(append_words(log_dir, 300, seed=5).values())
    hosted = server.register_transactional(
        word_count(str(log_dir), str(markers), take=60),
        state_dir=str(tmp_path / "state"),
        max_spout_pending=2,
        idle_interval=0.5,
    )
    run = f"dashboard-{id(tmp_path)}"
    plain = plain_word_count(run, SENTENCES, WordCount(str(markers)))
    server.register_plain(plain, name=PLAIN)
    with ServerThread(server):
        _send_calls(server)
        wait_until(lambda: hosted.status()["tuples"] == words, 60)
        wait_until(lambda: len(set(events(run)["acked"])) == len(SENTENCES))
        held = _hold_one(server)
        url = f"http://{HOST}:{server.http_port}/"
        errors = asyncio.run(_look(executable, url, tmp_path / "chromium-profile", shot))
    held.join(10)
    assert errors == []
    assert shot.stat().st_size > 10_000
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "dashboard.png")
