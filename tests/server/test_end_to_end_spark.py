"""The server hosting topologies on Spark, called over real sockets by every kind of client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest
from drpc.client import AsyncDRPCClient
from drpc.server import DRPCServer, ServerThread

from drpc.examples.reach import EXPECTED_REACH, build_reach
from drpc.protocol.gen import DistributedRPC
from tests.server.helpers import (
    HOST,
    exclamation,
    failing_topology,
    generated_client,
    server_options,
)

pytestmark = pytest.mark.usefixtures("spark_session")


@pytest.fixture(scope="module")
def spark_server(spark_session: object) -> Iterator[DRPCServer]:
    server = DRPCServer(**server_options(executor="spark"))
    assert server.register(build_reach()).name == "spark"
    server.register(exclamation())
    server.register(failing_topology())
    with ServerThread(server) as running:
        yield running


def test_a_compiler_generated_client_gets_the_reach_from_spark(spark_server: DRPCServer) -> None:
    with generated_client(DistributedRPC, spark_server.port) as client:
        assert client.execute("reach", "foo.com/blog/1") == "16"


async def test_http_get_and_post_and_a_failure_as_json(spark_server: DRPCServer) -> None:
    base = f"http://{HOST}:{spark_server.http_port}/drpc"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/reach/foo.com%2Fblog%2F1") as response:
            assert (response.status, await response.text()) == (200, "16")
        async with session.post(f"{base}/reach", data=b"foo.com/blog/1") as response:
            assert (response.status, await response.text()) == (200, "16")
        async with session.get(f"{base}/failing/bad") as response:
            assert response.status == 400
            body = await response.json()
            assert body["error"] == "FAILED_REQUEST"
            assert "ValueError: cannot handle 'bad'" in body["errorMessage"]


async def test_2000_concurrent_calls_on_spark_all_answer_correctly(
    spark_server: DRPCServer,
) -> None:
    urls = list(EXPECTED_REACH)
    async with AsyncDRPCClient(HOST, spark_server.port) as client:
        answers = await asyncio.gather(
            *(
                client.execute("reach", urls[i % len(urls)])
                if i % 2
                else client.execute("exclamation", str(i))
                for i in range(2000)
            )
        )
    expected = [EXPECTED_REACH[urls[i % len(urls)]] if i % 2 else f"{i}!" for i in range(2000)]
    assert answers == expected
    assert spark_server.service.outstanding() == 0
