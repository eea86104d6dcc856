"""Lines about refused client input: one WARNING each, at most ``per_second`` a second,
the rest counted; aiohttp's client errors become such lines, its other records do not."""

from __future__ import annotations

import logging

import pytest
from drpc.server import DRPCServer, ServerThread
from drpc.server.limits import Limits
from drpc.server.refusals import HTTPServerLog, RefusalLog

from tests.server.helpers import closed_by_server, raw_connection, server_options


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_at_the_rate_every_line_is_logged_past_it_they_are_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    refusals = RefusalLog(3, clock=clock)
    caplog.set_level(logging.WARNING, logger="drpc.server.refusals")
    assert [refusals.refuse("refused %d", i) for i in range(3)] == [True] * 3  # at the rate
    assert [refusals.refuse("refused %d", i) for i in range(3, 8)] == [False] * 5  # past it
    clock.now += 1 / 3  # a third of a second refills one line
    assert refusals.refuse("refused %d", 8)
    assert not refusals.refuse("refused %d", 9)
    assert (refusals.logged, refusals.left_out) == (4, 6)
    assert [r.getMessage() for r in caplog.records] == [
        "refused 0",
        "refused 1",
        "refused 2",
        "left out 5 refusal line(s) (more than 3 a second)",
        "refused 8",
    ]
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in caplog.records)
    with pytest.raises(ValueError, match="per_second"):
        RefusalLog(0)


def test_aiohttp_client_errors_become_refusals_and_its_other_records_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusals = RefusalLog(100)
    log = HTTPServerLog(refusals)
    caplog.set_level(logging.DEBUG, logger="aiohttp.server")
    try:
        raise RuntimeError("a server bug")
    except RuntimeError as error:
        log.exception("Unhandled exception", exc_info=error)
    log.debug("Ignored premature client disconnection")
    records = [
        (r.name, r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records
    ]
    assert records == [
        ("aiohttp.server", "ERROR", "Unhandled exception", True),
        ("aiohttp.server", "DEBUG", "Ignored premature client disconnection", False),
    ]
    assert refusals.logged == 0


def test_a_flood_of_malformed_http_requests_logs_at_most_the_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = DRPCServer(**server_options(), limits=Limits(refusal_logs_per_second=5))
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    caplog.set_level(logging.WARNING, logger="drpc.server.refusals")
    with ServerThread(server) as running:
        for _ in range(30):
            with raw_connection(running.http_port) as connection:
                connection.sendall(b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n")
                assert closed_by_server(connection)[:12] in (b"HTTP/1.0 400", b"HTTP/1.1 400")
        refusals = running.refusals
        assert refusals.logged + refusals.left_out == 30
        assert 5 <= refusals.logged < 30
    lines = [r for r in caplog.records if "refused a request" in r.getMessage()]
    assert len(lines) == refusals.logged
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in lines)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
