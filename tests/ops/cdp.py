"""A headless Chromium driven over the DevTools protocol (CDP), for the dashboard's browser test.

Contract. ``find_chromium()`` is the path of Debian's ``chromium`` (or a
``chromium-browser``/``google-chrome`` on PATH), None if there is none.
``async with Chromium(path, profile_dir) as browser`` starts it headless on a
DevTools port it picks (read from ``DevToolsActivePort`` in the profile) and
kills its process group on exit; ``await browser.new_page()`` opens a tab and
returns a ``Page`` whose ``call(method, **params)`` sends one command and
returns its result. A page records every console error, uncaught exception
and browser log entry at level error (failed loads and CSP violations
included) in ``errors``. Only aiohttp (a runtime dependency) is used: no
driver download, no extra package.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import aiohttp

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
)


def find_chromium() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


class Chromium:
    def __init__(self, executable: str, profile_dir: Path, *, start_timeout: float = 30.0) -> None:
        self.executable = executable
        self.profile_dir = profile_dir
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Chromium:
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        log = (self.profile_dir / "chromium.log").open("wb")
        self.process = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self.profile_dir}", "about:blank"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: renderers and zygotes die with it
        )
        log.close()
        active = self.profile_dir / "DevToolsActivePort"
        deadline = asyncio.get_running_loop().time() + self.start_timeout
        while not (active.exists() and active.read_text().strip()):
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}: {self.log()}")
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"chromium did not open DevTools in time: {self.log()}")
            await asyncio.sleep(0.05)
        self.port = int(active.read_text().split()[0])
        self._session = aiohttp.ClientSession()
        return self

    def log(self) -> str:
        path = self.profile_dir / "chromium.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    async def new_page(self) -> Page:
        assert self._session is not None
        async with self._session.put(f"http://127.0.0.1:{self.port}/json/new?about:blank") as reply:
            target = await reply.json(content_type=None)
        socket = await self._session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        page = Page(socket)
        await page.start()
        return page

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        process = self.process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                await asyncio.to_thread(process.wait, 10)


class Page:
    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.errors: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._reader = asyncio.create_task(self._read())
        for domain in ("Page", "Runtime", "Log"):
            await self.call(f"{domain}.enable")

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        await self.socket.send_str(
            json.dumps({"id": message_id, "method": method, "params": params})
        )
        reply = await asyncio.wait_for(future, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        """Evaluate ``expression`` until it is truthy; returns its value."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{expression!r} still {value!r} after {timeout} s")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path, width: int) -> None:
        """A PNG of the whole page at ``width`` CSS pixels."""
        await self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=800,
            deviceScaleFactor=1,
            mobile=False,
        )
        height = await self.evaluate("document.documentElement.scrollHeight")
        await self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=int(height),
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))

    async def _read(self) -> None:
        async for message in self.socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            self.events.append(data)
            self._record_error(data.get("method", ""), data.get("params", {}))

    def _record_error(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(arg.get("value", arg.get("description", ""))) for arg in params["args"]]
            self.errors.append("console: " + " ".join(texts))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            description = details.get("exception", {}).get("description", details.get("text"))
            self.errors.append(f"exception: {description}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.errors.append(
                f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}"
            )
