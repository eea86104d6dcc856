"""The HTTP front end (real aiohttp server, real aiohttp client): Storm's REST mapping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from drpc.client import DRPCInvocationsClient
from drpc.server import DRPCServer, ServerThread

from drpc.errors import AuthorizationException, DRPCExceptionType, DRPCExecutionException
from drpc.examples.reach import build_reach
from tests.server.helpers import HOST, exclamation, failing_topology, server_options

LIMIT = 4096


def _base(server: DRPCServer) -> str:
    return f"http://{HOST}:{server.http_port}"


@pytest.fixture
async def http() -> AsyncIterator[tuple[DRPCServer, str]]:
    server = DRPCServer(**server_options(max_frame_size=LIMIT))
    server.register(build_reach())
    server.register(exclamation())
    server.register(failing_topology())
    with ServerThread(server):
        yield server, _base(server)


async def _get(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.content_type, await response.text()


async def _post(url: str, body: bytes) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.post(url, data=body) as response:
        return response.status, await response.text()


async def _error(url: str, method: str = "GET", body: bytes = b"") -> tuple[int, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=body) as response,
    ):
        assert response.content_type == "application/json"
        return response.status, await response.json()


async def test_get_with_encoded_and_plain_slashes(http: tuple[DRPCServer, str]) -> None:
    _, base = http
    assert await _get(f"{base}/drpc/reach/foo.com%2Fblog%2F1") == (200, "text/plain", "16")
    assert await _get(f"{base}/drpc/reach/foo.com/blog/1") == (200, "text/plain", "16")
    assert await _get(f"{base}/drpc/exclamation/a%20b") == (200, "text/plain", "a b!")


async def test_get_without_args_passes_the_empty_string(http: tuple[DRPCServer, str]) -> None:
    _, base = http
    assert await _get(f"{base}/drpc/exclamation") == (200, "text/plain", "!")


async def test_post_body_is_the_args(http: tuple[DRPCServer, str]) -> None:
    _, base = http
    assert await _post(f"{base}/drpc/reach", b"foo.com/blog/1") == (200, "16")
    assert await _post(f"{base}/drpc/exclamation", "h\u00e9".encode()) == (200, "h\u00e9!")


async def test_a_failing_request_is_400_with_the_json_body(http: tuple[DRPCServer, str]) -> None:
    _, base = http
    status, body = await _error(f"{base}/drpc/failing/bad")
    assert status == 400
    assert body["error"] == "FAILED_REQUEST"
    assert "ValueError: cannot handle 'bad'" in body["errorMessage"]
    assert set(body) == {"error", "errorMessage"}
    status, body = await _error(f"{base}/drpc/failing", "POST", b"bad")
    assert (status, body["error"]) == (400, "FAILED_REQUEST")


async def test_an_unserved_function_is_400(http: tuple[DRPCServer, str]) -> None:
    _, base = http
    status, body = await _error(f"{base}/drpc/nope/x")
    assert (status, body["error"]) == (400, "FAILED_REQUEST")
    assert "exclamation, failing, reach" in body["errorMessage"]


async def test_post_bodies_up_to_the_limit(http: tuple[DRPCServer, str]) -> None:
    _, base = http
    status, text = await _post(f"{base}/drpc/exclamation", b"x" * LIMIT)
    assert (status, len(text)) == (200, LIMIT + 1)
    status, _ = await _post(f"{base}/drpc/exclamation", b"x" * (LIMIT + 1))
    assert status == 413


async def test_a_body_that_is_not_utf8_is_400(http: tuple[DRPCServer, str]) -> None:
    _, base = http
    status, body = await _error(f"{base}/drpc/exclamation", "POST", b"\xff\xfe")
    assert (status, body["error"]) == (400, "FAILED_REQUEST")


async def test_health(http: tuple[DRPCServer, str]) -> None:
    _, base = http
    async with aiohttp.ClientSession() as session, session.get(f"{base}/health") as response:
        assert response.status == 200
        assert await response.json() == {
            "status": "ok",
            "functions": ["exclamation", "failing", "reach"],
            "functions_total": 3,
            "outstanding": 0,
        }


async def test_timeout_is_504() -> None:
    server = DRPCServer(**server_options(timeout=0.3, wait_for_unserved=True))
    with ServerThread(server):
        base = _base(server)
        started = time.monotonic()
        assert await _error(f"{base}/drpc/slow/x") == (
            504,
            {"error": "SERVER_TIMEOUT", "errorMessage": "Timed Out"},
        )
        assert time.monotonic() - started >= 0.3


async def test_shutdown_is_503_and_health_says_so() -> None:
    server = DRPCServer(**server_options(wait_for_unserved=True))
    with ServerThread(server):
        base = _base(server)
        pending = asyncio.ensure_future(_error(f"{base}/drpc/held/x"))
        while server.service.outstanding() == 0:
            await asyncio.sleep(0.01)
        server.service.shutdown()
        assert await pending == (
            503,
            {"error": "SERVER_SHUTDOWN", "errorMessage": "Server Shutting Down"},
        )
        async with aiohttp.ClientSession() as session, session.get(f"{base}/health") as response:
            assert response.status == 503


async def test_other_failure_types_are_500() -> None:
    server = DRPCServer(**server_options())
    with ServerThread(server):
        base = _base(server)
        invocations = DRPCInvocationsClient(HOST, server.invocations_port)
        await asyncio.to_thread(invocations.fetch_request, "f")
        pending = asyncio.ensure_future(_error(f"{base}/drpc/f/x"))

        def fail_it() -> None:
            request = None
            while request is None:
                request = invocations.fetch_request("f")
            invocations.fail_request_v2(
                request.return_info.request_id,
                DRPCExecutionException("lost a tuple", DRPCExceptionType.INTERNAL_ERROR),
            )

        await asyncio.to_thread(fail_it)
        invocations.close()
        assert await pending == (500, {"error": "INTERNAL_ERROR", "errorMessage": "lost a tuple"})


def _deny(function: str) -> Callable[[str | None, str, str], None]:
    def authorizer(identity: str | None, operation: str, name: str) -> None:
        if name == function:
            raise AuthorizationException(f"{identity} may not {operation} {name}")

    return authorizer


async def test_a_refused_identity_is_401() -> None:
    server = DRPCServer(**server_options(authorizer=_deny("exclamation")))
    server.register(exclamation())
    with ServerThread(server):
        base = _base(server)
        assert await _error(f"{base}/drpc/exclamation/x") == (
            401,
            {"error": "AuthorizationException", "errorMessage": "None may not execute exclamation"},
        )
