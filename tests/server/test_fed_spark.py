"""A function embedded in the server on ``executor="spark"`` serves on the tasks path: the
driver feeds the resident tasks the request table's requests over the resident link
(``drpc.executors.resident.feeding``), so the server's ACL and TLS guard the callers'
ports and nothing stands between the tasks and the table."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from drpc.client import AuthorizationException, DRPCClient, TLSSettings
from drpc.server import DRPCServer, ServerThread
from drpc.server.acl import ACLAuthorizer

from drpc.examples.reach import EXPECTED_REACH, build_reach
from drpc.protocol.tls import server_context
from tests.server.certs import PKI
from tests.server.helpers import HOST, server_options

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_session"), pytest.mark.timeout(180)]


def test_an_embedded_function_behind_an_acl_and_tls_is_fed_to_the_resident_tasks(
    pki: PKI, tmp_path: Path
) -> None:
    acl = tmp_path / "acl.yaml"
    acl.write_text(
        json.dumps(
            {"drpc.authorizer.acl": {"reach": {"client.users": ["alice"], "invocation.user": "x"}}}
        )
    )
    server = DRPCServer(
        **server_options(executor="spark", http_port=None),
        authorizer=ACLAuthorizer(acl, strict=True),
        ssl_context=server_context(pki.server_cert, pki.server_key, pki.ca),
    )
    runtime = server.register(build_reach())
    assert runtime.feed is not None and runtime.fetching is None
    assert runtime.engine is None  # the driver runs no part of the topology
    feeder = runtime.deployment.feeder

    def tls(user: str) -> TLSSettings:
        cert, key = pki.clients[user]
        return TLSSettings(ca=pki.ca, cert=cert, key=key)

    urls = sorted(EXPECTED_REACH)

    def calls(offset: int) -> list[tuple[str, str]]:
        with DRPCClient(HOST, server.port, timeout=60, tls=tls("alice")) as client:
            return [
                (url, client.execute("reach", url))
                for url in (urls[(offset + n) % len(urls)] for n in range(10))
            ]

    with ServerThread(server):
        with ThreadPoolExecutor(8) as pool:
            answers = [answer for batch in pool.map(calls, range(8)) for answer in batch]
        assert len(answers) == 80
        assert all(result == str(EXPECTED_REACH[url]) for url, result in answers)
        with (
            DRPCClient(HOST, server.port, timeout=20, tls=tls("mallory")) as client,
            pytest.raises(AuthorizationException),
        ):
            client.execute("reach", urls[0])
        assert feeder.in_flight == 0 and server.service.outstanding() == 0
