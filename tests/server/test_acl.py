"""Storm's DRPC ACL matrix over real connections: Thrift with TLS client certificates,
HTTP with bearer tokens; and the ACL file itself (format, strictness, reload, logging)."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from drpc.client import (
    AuthorizationException,
    DRPCClient,
    DRPCExecutionException,
    DRPCInvocationsClient,
    HTTPDRPCClient,
    TLSSettings,
)
from drpc.server import DRPCServer, ServerThread
from drpc.server.acl import ACL, ACLAuthorizer
from drpc.server.files import ConfigFileError
from drpc.server.identity import TokenTable

from drpc.protocol.tls import server_context
from tests.server.certs import PKI
from tests.server.helpers import HOST, server_options, wait_until

LISTED = "listed"  # has an ACL entry
UNLISTED = "unlisted"  # has none
ROLES = {"client": "alice", "invocation": "runner", "other": "mallory"}
TOKENS = {user: f"{user}-token-0123456789abcdef" for user in ROLES.values()}
ACL_DATA = {
    "drpc.authorizer.acl": {LISTED: {"client.users": ["alice"], "invocation.user": "runner"}}
}


def storm_allows(role: str, operation: str, listed: bool, strict: bool) -> bool:
    """Storm's DRPCSimpleACLAuthorizer, as its documentation states it."""
    if not listed:
        return not strict
    if operation == "execute":
        return role == "client"
    return role == "invocation"


def refusal(operation: str, user: str) -> str:
    return f"DRPC request '{operation}' for '{user}' user is not authorized"


@dataclass
class Secured:
    thread: ServerThread
    server: DRPCServer
    pki: PKI

    def tls(self, user: str) -> TLSSettings:
        cert, key = self.pki.clients[user]
        return TLSSettings(ca=self.pki.ca, cert=cert, key=key)

    def answer_next(self, function: str, result: str) -> None:
        """Act as the function's in-process runtime: answer its oldest queued request."""
        wait_until(lambda: self.server.service.queue_depth(function) > 0)
        request = self.server.service.fetch(function, "test", remote=False)
        assert request is not None
        self.server.service.complete(request.return_info.request_id, result)

    def queue(self, function: str, args: str) -> tuple[Future[str], str]:
        """Queue a request from inside the server; returns its outcome and its id."""
        before = self.server.service.queue_depth(function)
        outcome = self.thread.run(self.server.service.execute(function, args))
        wait_until(lambda: self.server.service.queue_depth(function) == before + 1)
        request = self.server.service.fetch(function, "test", remote=False)
        assert request is not None
        return outcome, request.return_info.request_id


@pytest.fixture(params=[False, True], ids=["non-strict", "strict"])
def secured(request: pytest.FixtureRequest, pki: PKI, tmp_path: Path) -> Iterator[Secured]:
    acl = tmp_path / "acl.yaml"
    acl.write_text(json.dumps(ACL_DATA))  # JSON is YAML too
    server = DRPCServer(
        **server_options(wait_for_unserved=True),
        authorizer=ACLAuthorizer(acl, strict=request.param),
        tokens=TokenTable(TOKENS),
        ssl_context=server_context(pki.server_cert, pki.server_key, pki.ca),
    )
    thread = ServerThread(server)
    thread.start()
    try:
        yield Secured(thread, server, pki)
    finally:
        thread.stop()


CASES = list(itertools.product(ROLES, [LISTED, UNLISTED]))


@pytest.mark.parametrize(("role", "function"), CASES)
def test_the_matrix_over_thrift_with_client_certificates(
    secured: Secured, role: str, function: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="drpc.audit")
    strict = secured.server.service._authorizer.acl.strict  # type: ignore[union-attr]
    user = ROLES[role]
    listed = function == LISTED
    port = secured.server.port
    # execute
    with (
        ThreadPoolExecutor(1) as pool,
        DRPCClient(HOST, port, timeout=20, tls=secured.tls(user)) as client,
    ):
        call = pool.submit(client.execute, function, "x")
        if storm_allows(role, "execute", listed, strict):
            secured.answer_next(function, "x!")
            assert call.result(20) == "x!"
        else:
            with pytest.raises(AuthorizationException) as denied:
                call.result(20)
            assert denied.value.msg == refusal("execute", user)
    # fetchRequest and result, on a queued request of the function
    outcome, request_id = secured.queue(function, "y")
    with DRPCInvocationsClient(
        HOST, secured.server.invocations_port, timeout=20, tls=secured.tls(user)
    ) as invocations:
        for operation in ("fetchRequest", "result"):
            allowed = storm_allows(role, operation, listed, strict)
            try:
                if operation == "fetchRequest":
                    assert invocations.fetch_request(function) is None  # queue drained above
                else:
                    invocations.result(request_id, "y!")
                    assert outcome.result(10) == "y!"
            except AuthorizationException as denied:
                assert not allowed, f"{user} was refused {operation} on {function}"
                assert denied.msg == refusal(operation, user)
            else:
                assert allowed, f"{user} was allowed {operation} on {function}"
    if not outcome.done():
        secured.server.service.complete(request_id, "cleanup")
    records = [r for r in caplog.records if r.name == "drpc.audit"]
    verdicts = [r.getMessage() for r in records]
    assert len(verdicts) == 3, verdicts  # every decision logged, once
    assert all(f"for user {user!r}" in verdict for verdict in verdicts)
    # Allowed operations are routine (a runner polls several times a second): DEBUG.
    # Refusals stay visible: WARNING.
    level = {"allowed": logging.DEBUG, "denied": logging.WARNING}
    assert [r.levelno for r in records] == [level[v.split()[0]] for v in verdicts]


async def _http_execute(
    secured: Secured, function: str, user: str, *, token: str | None
) -> tuple[int, str]:
    """GET /drpc/<function>/x over TLS presenting ``user``'s certificate (and ``token``);
    an allowed call is answered "x!" by the in-process stand-in runtime."""
    url = f"https://{HOST}:{secured.server.http_port}/drpc/{function}/x"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = secured.tls(user).client_context()
    async with aiohttp.ClientSession() as session:

        async def call() -> tuple[int, str]:
            async with session.get(url, headers=headers, ssl=context) as response:
                return response.status, await response.text()

        pending = asyncio.ensure_future(call())
        while not pending.done() and secured.server.service.queue_depth(function) == 0:
            await asyncio.sleep(0.01)
        if not pending.done():
            await asyncio.to_thread(secured.answer_next, function, "x!")
        return await pending


@pytest.mark.parametrize(("role", "function"), CASES)
async def test_the_matrix_over_http_with_bearer_tokens(
    secured: Secured, role: str, function: str
) -> None:
    strict = secured.server.service._authorizer.acl.strict  # type: ignore[union-attr]
    user = ROLES[role]
    # The token names the user; the certificate (bob's, in no ACL entry) only opens TLS.
    status, text = await _http_execute(secured, function, "bob", token=TOKENS[user])
    if storm_allows(role, "execute", function == LISTED, strict):
        assert (status, text) == (200, "x!")
    else:
        assert status == 401
        assert json.loads(text) == {
            "error": "AuthorizationException",
            "errorMessage": refusal("execute", user),
        }


@pytest.mark.parametrize("role", list(ROLES))
async def test_over_http_without_a_token_the_certificate_names_the_user(
    secured: Secured, role: str
) -> None:
    user = ROLES[role]
    status, text = await _http_execute(secured, LISTED, user, token=None)
    if role == "client":
        assert (status, text) == (200, "x!")
    else:
        assert (status, json.loads(text)["errorMessage"]) == (401, refusal("execute", user))


async def test_a_bad_or_malformed_token_is_refused_not_downgraded(secured: Secured) -> None:
    # Non-strict or strict, UNLISTED would be open to anonymous in non-strict mode:
    # a wrong token must still be refused.
    for token in ("not-a-known-token-0123456789", ""):
        url = f"https://{HOST}:{secured.server.http_port}/drpc/{UNLISTED}/x"
        header = f"Bearer {token}" if token else "Basic YWxpY2U6cHc="
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                url,
                headers={"Authorization": header},
                ssl=secured.tls("alice").client_context(),
            ) as response,
        ):
            assert response.status == 401
            assert (await response.json())["error"] == "AuthorizationException"
    assert secured.server.service.outstanding() == 0


def test_failrequest_and_v2_are_the_invocation_users(secured: Secured) -> None:
    outcome, request_id = secured.queue(LISTED, "z")
    with (
        DRPCInvocationsClient(
            HOST, secured.server.invocations_port, timeout=20, tls=secured.tls("alice")
        ) as client_user,
        pytest.raises(AuthorizationException, match=refusal("failRequest", "alice")),
    ):
        client_user.fail_request(request_id)
    with DRPCInvocationsClient(
        HOST, secured.server.invocations_port, timeout=20, tls=secured.tls("runner")
    ) as runner:
        runner.fail_request(request_id)
    with pytest.raises(Exception, match="Request failed"):
        outcome.result(10)


def test_no_identity_is_the_anonymous_user(tmp_path: Path) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(
        json.dumps({"drpc.authorizer.acl": {"open": {"client.users": ["anonymous"]}, "shut": {}}})
    )
    server = DRPCServer(**server_options(wait_for_unserved=True), authorizer=ACLAuthorizer(acl))
    with ServerThread(server) as running, DRPCClient(HOST, running.port, timeout=10) as client:
        with pytest.raises(AuthorizationException) as denied:
            client.execute("shut", "x")
        assert denied.value.msg == refusal("execute", "anonymous")
        with (
            HTTPDRPCClient(f"http://{HOST}:{running.http_port}", timeout=10) as http,
            pytest.raises(AuthorizationException, match=refusal("execute", "anonymous")),
        ):
            http.execute("shut", "x")
        with pytest.raises(AuthorizationException, match=refusal("fetchRequest", "anonymous")):
            DRPCInvocationsClient(HOST, running.invocations_port, timeout=10).fetch_request("open")


def test_storm_rules_on_edge_cases() -> None:
    acl = ACL.from_mapping(
        {
            "drpc.authorizer.acl": {"half": {"client.users": "alice"}},
            "drpc.authorizer.acl.strict": False,
        }
    )
    assert acl.permits("alice", "execute", "half")  # a single name for client.users
    assert not acl.permits("alice", "fetchRequest", "half")  # no invocation.user: nobody
    assert not acl.permits("alice", "execute", "")  # an empty function name, even open
    assert not acl.permits("alice", "rebalance", "free")  # unknown operations
    assert not acl.permits("alice", "killTopology", "free")  # no nimbus.admins: nobody
    assert acl.permits("anyone", "result", "free")  # not strict: unlisted is open


def test_nimbus_admins_alone_may_kill_activate_and_deactivate() -> None:
    acl = ACL.from_mapping(
        {
            "drpc.authorizer.acl": {"words": {"client.users": ["alice"]}},
            "drpc.authorizer.acl.strict": False,
            "nimbus.admins": "ops",  # a single name, as for client.users
        }
    )
    for operation in ("killTopology", "activate", "deactivate"):
        assert acl.permits("ops", operation, "words")
        assert not acl.permits("alice", operation, "words")  # a client of a same-named function
        assert not acl.permits("anonymous", operation, "words")  # not strict: still nobody
        assert not acl.permits("ops", operation, "")
    assert not acl.permits("ops", "execute", "words")  # an admin is not a client
    strict = ACLAuthorizer(acl, strict=True).acl
    assert strict.strict and strict.permits("ops", "killTopology", "words")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[1, 2]", "must hold a mapping"),
        ("drpc.authorizer.acl: {f: {client.users: [alice], invocation.users: x}}", "unknown key"),
        ("drpc.authorizer.acl: {f: {invocation.user: [a, b]}}", "must be one user"),
        ("drpc.authorizer.acl.strict: maybe", "true or false"),
        ("acl: {}", "unknown key"),
        ("drpc.authorizer.acl: {f: [alice]}", "must be a mapping"),
        ("{unclosed", "is not valid"),
        ("drpc.authorizer.acl: {}\nnimbus.admins: [ops, 7]", "'nimbus.admins' must list user"),
        ("drpc.authorizer.acl: {}\nnimbus.admins: {ops: yes}", "'nimbus.admins' must list user"),
    ],
)
def test_a_bad_acl_file_is_refused_naming_the_problem(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "acl.yaml"
    path.write_text(content)
    with pytest.raises(ConfigFileError, match=problem) as error:
        ACLAuthorizer(path)
    assert "acl.yaml" in str(error.value)


def test_the_acl_file_is_reloaded_when_it_changes_and_a_broken_one_is_not_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "acl.yaml"
    path.write_text("drpc.authorizer.acl: {f: {client.users: [alice]}}\n")
    authorizer = ACLAuthorizer(path, reload_interval=0.0)
    authorizer("alice", "execute", "f")
    with pytest.raises(AuthorizationException):
        authorizer("bob", "execute", "f")
    path.write_text("drpc.authorizer.acl: {f: {client.users: [bob]}}\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    authorizer("bob", "execute", "f")
    with pytest.raises(AuthorizationException):
        authorizer("alice", "execute", "f")
    path.write_text("{broken")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    caplog.set_level(logging.ERROR, logger="drpc.audit")
    authorizer("bob", "execute", "f")  # the previous ACL stays in force
    assert any("kept the previous ACL" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("users", "problem"),
    [
        ({"alice": "short"}, "at least 16"),
        ({"alice": "same-token-0123456789", "bob": ["same-token-0123456789"]}, "share a token"),
        ({"alice": 12345678901234567890}, "must map a user to token"),
    ],
)
def test_a_bad_tokens_table_is_refused(users: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigFileError, match=problem):
        TokenTable(users)  # type: ignore[arg-type]


def test_tokens_file_maps_users_to_one_or_several_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(
        "alice: alice-token-0123456789\nrunner: [r1-token-0123456789, r2-token-0123456789]\n"
    )
    table = TokenTable.from_file(path)
    assert table.user_of("alice-token-0123456789") == "alice"
    assert table.user_of("r2-token-0123456789") == "runner"
    assert table.user_of("alice-token-012345678") is None


@pytest.mark.parametrize(
    ("key", "read_as"),
    [("on", "True (bool)"), ("yes", "True (bool)"), ("null", "None (NoneType)"),
     ("007", "7 (int)"), ("12:30", "750 (int)")],
)  # fmt: skip
def test_a_function_name_yaml_reads_as_another_type_is_refused_naming_it(
    tmp_path: Path, key: str, read_as: str
) -> None:
    path = tmp_path / "acl.yaml"
    path.write_text(f"drpc.authorizer.acl:\n  {key}: {{client.users: [alice]}}\n")
    with pytest.raises(ConfigFileError, match="quote them") as refused:
        ACLAuthorizer(path)
    assert f"function names must be strings, but YAML read {read_as}" in str(refused.value)
    path.write_text(f"drpc.authorizer.acl:\n  '{key}': {{client.users: [alice]}}\n")
    authorizer = ACLAuthorizer(path, strict=False)  # quoted: the function has its entry
    authorizer("alice", "execute", key)
    with pytest.raises(AuthorizationException):
        authorizer("bob", "execute", key)


def test_a_reload_that_reads_an_empty_or_cut_file_keeps_the_previous_acl(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "acl.yaml"
    path.write_text("drpc.authorizer.acl: {f: {client.users: [alice]}}\n")
    authorizer = ACLAuthorizer(path, reload_interval=0.0)
    caplog.set_level(logging.ERROR, logger="drpc.audit")
    for content in ("", "drpc.authorizer.acl.strict: false\n", "drpc.authorizer.acl: {on: {}}\n"):
        path.write_text(content)  # a writer caught half way; a key YAML read as True
        authorizer("alice", "execute", "f")
        with pytest.raises(AuthorizationException):
            authorizer("bob", "execute", "f")  # f is not open: the previous ACL holds
    kept = [r.getMessage() for r in caplog.records if "kept the previous ACL" in r.getMessage()]
    assert len(kept) == 3 and "no 'drpc.authorizer.acl' key" in kept[0]
    path.write_text("drpc.authorizer.acl: {f: {client.users: [bob]}}\n")
    authorizer("bob", "execute", "f")  # a whole file is taken again
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigFileError, match=r"no 'drpc\.authorizer\.acl' key"):
        ACLAuthorizer(empty)  # at start too: an empty ACL file is a mistake, not an open door


async def test_a_bearer_token_that_is_not_utf8_is_refused_audited_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tokens = TokenTable({"alice": TOKENS["alice"]})
    server = DRPCServer(**server_options(), tokens=tokens)
    caplog.set_level(logging.WARNING, logger="drpc.audit")
    with ServerThread(server) as running:
        for token in (b"\xff\xfe" + b"x" * 20, TOKENS["alice"].encode() + b"\xe9"):
            reader, writer = await asyncio.open_connection(HOST, running.http_port)
            writer.write(
                b"GET /drpc/f/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Authorization: Bearer " + token + b"\r\n\r\n"
            )
            answer = await reader.read()
            writer.close()
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 401"), answer[:200]
            assert json.loads(body) == {
                "error": "AuthorizationException",
                "errorMessage": "the bearer token is not UTF-8",
            }
        outcomes = running.dashboard.status()["functions"]
        with (
            HTTPDRPCClient(f"http://{HOST}:{running.http_port}", token=TOKENS["alice"]) as ok,
            pytest.raises(DRPCExecutionException, match="is not served"),
        ):
            ok.execute("f", "x")  # a good token is still taken
    denied = [r.getMessage() for r in caplog.records if r.getMessage().startswith("denied")]
    assert denied == ["denied execute of 'f' from 127.0.0.1: the bearer token is not UTF-8"] * 2
    assert [(f["name"], f["totals"]) for f in outcomes] == [("__other__", {"unauthorized": 2})]
