"""Structured logs: the formatters, the context, and ``drpc-server --log-format json`` for real."""

from __future__ import annotations

import io
import json
import logging
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drpc import (
    BaseBasicBolt,
    BasicOutputCollector,
    Fields,
    LinearDRPCTopologyBuilder,
    OutputFieldsDeclarer,
    Tuple,
)
from drpc.logs import ContextFilter, JSONFormatter, TextFormatter, log_context, request_extra
from drpc.observe import Observer
from drpc.testing import LocalDRPC
from tests import ahead
from tests.server.helpers import EPHEMERAL_PORTS, http_get
from tests.topologies.bolts import SleepThenEcho

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def sleepy() -> LinearDRPCTopologyBuilder:
    """Function "sleepy": sleeps the argument's seconds (for timeouts in a server process)."""
    builder = LinearDRPCTopologyBuilder("sleepy")
    builder.add_bolt(SleepThenEcho(), 1)
    return builder


class LoggingBolt(BaseBasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        logging.getLogger("tests.bolt").info("working on %s", tuple[1])
        collector.emit([tuple[0], tuple[1] + "!"])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "result"))


def logged() -> LinearDRPCTopologyBuilder:
    """Function "logged": appends "!" and logs a line per tuple from inside the step."""
    builder = LinearDRPCTopologyBuilder("logged")
    builder.add_bolt(LoggingBolt(), 2)
    return builder


def test_a_bolts_own_log_lines_carry_the_request_on_the_local_executor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    builder = logged()
    caplog.handler.addFilter(ContextFilter())
    with (
        caplog.at_level(logging.INFO, logger="tests.bolt"),
        LocalDRPC(timeout=30.0, observer=Observer()) as drpc,
    ):
        drpc.register(builder)
        assert [drpc.execute("logged", word) for word in ("a", "b")] == ["a!", "b!"]
    lines = {r.getMessage(): r for r in caplog.records if r.name == "tests.bolt"}
    assert set(lines) == {"working on a", "working on b"}
    ids = {getattr(r, "request_id", None) for r in lines.values()}
    assert ids == {"1", "2"}
    assert {getattr(r, "function", None) for r in lines.values()} == {"logged"}


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    logger = logging.getLogger("drpc.test")
    return logger.makeRecord(
        "drpc.test", logging.WARNING, __file__, 1, message, args, None, extra=extra
    )


def test_json_lines_carry_extra_fields_and_serialize_exceptions() -> None:
    formatter = JSONFormatter()
    line = formatter.format(record("request %s failed", "12", **request_extra("12", "reach")))
    entry = json.loads(line)
    assert entry["message"] == "request 12 failed"
    assert entry["level"] == "WARNING" and entry["logger"] == "drpc.test"
    assert (entry["request_id"], entry["function"]) == ("12", "reach")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        failed = logging.getLogger("drpc.test").makeRecord(
            "drpc.test", logging.ERROR, __file__, 1, "it broke", (), sys.exc_info()
        )
    broken = formatter.format(failed)
    assert "\n" not in broken
    exception = json.loads(broken)["exception"]
    assert exception["type"] == "ValueError" and exception["message"] == "boom\nsecond line"
    assert (
        "Traceback" in exception["traceback"] and 'raise ValueError("boom' in exception["traceback"]
    )
    odd = json.loads(formatter.format(record("x", ids={1, 2}, path=Path("/x"))))
    assert odd["ids"] == repr({1, 2}) and odd["path"] == repr(Path("/x"))


def test_the_context_tags_records_and_extra_wins() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("drpc.test.context")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with log_context(request_id="5", function="reach"):
            logger.warning("inside")
            logger.warning("explicit", extra={"request_id": "6"})
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    inside, explicit, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (inside["request_id"], inside["function"]) == ("5", "reach")
    assert (explicit["request_id"], explicit["function"]) == ("6", "reach")
    assert "request_id" not in outside


def test_text_lines_stay_readable_with_the_fields_at_the_end() -> None:
    line = TextFormatter().format(record("request %s timed out", "3", **request_extra("3", "f")))
    assert re.fullmatch(
        r"\S+ \S+ WARNING drpc\.test: request 3 timed out \[request_id=3 function=f\]", line
    )
    assert TextFormatter().format(record("plain")).endswith("drpc.test: plain")


def test_text_lines_escape_control_characters_so_input_cannot_forge_a_line() -> None:
    forged = "x\n2099-01-01 00:00:00,000 INFO drpc: forged\r\x1b[2K\u2028\x85\t"
    escaped = r"x\n2099-01-01 00:00:00,000 INFO drpc: forged\r\x1b[2K\u2028\x85\t"
    line = TextFormatter().format(record("failed: %s", forged, function=forged))
    assert line.endswith(f"failed: {escaped} [function={escaped}]")
    assert line.splitlines() == [line]  # one line, whatever the input held
    try:
        raise ValueError("boom\n2099-01-01 00:00:00,000 INFO drpc: forged too")
    except ValueError:
        broken = logging.LogRecord(
            "drpc.test", logging.ERROR, "", 1, "it broke", (), sys.exc_info()
        )
    head, *rest = TextFormatter().format(broken).splitlines()
    assert head.endswith("ERROR drpc.test: it broke")
    assert rest[0] == "  Traceback (most recent call last):"
    assert rest[-1] == "  2099-01-01 00:00:00,000 INFO drpc: forged too"
    assert all(line.startswith("  ") for line in rest)  # a record starts at column one only


def test_configure_logging_in_a_fresh_process() -> None:
    script = (
        "import logging; from drpc.logs import configure_logging\n"
        "configure_logging('INFO', 'json')\n"
        "configure_logging('DEBUG', 'json')\n"  # replaces its own handler: no doubled lines
        "logging.getLogger('a').debug('one', extra={'txid': 4})\n"
        "import warnings; warnings.warn('careful')\n"
        "import os, subprocess, sys\n"
        "os.write(2, b'raw bytes on fd 2\\n')\n"
        "child = 'import sys; print(\"from a child\", file=sys.stderr)'\n"
        "subprocess.run([sys.executable, '-c', child])\n"
        "print('last words', file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert (lines[0]["logger"], lines[0]["message"]) == ("a", "one")
    assert lines[0]["txid"] == 4 and lines[0]["level"] == "DEBUG"
    assert lines[1]["logger"] == "py.warnings" and "careful" in lines[1]["message"]
    # whatever else reaches file descriptor 2, a child's output included, is wrapped
    assert [(e["logger"], e["level"], e["message"]) for e in lines[2:]] == [
        ("stderr", "WARNING", "raw bytes on fd 2"),
        ("stderr", "WARNING", "from a child"),
        ("stderr", "WARNING", "last words"),
    ]


LISTENING = re.compile(
    r"execute \(Thrift\) on [\d.]+:(?P<port>\d+), invocations \(Thrift\) on [\d.]+:\d+; "
    r"HTTP on http://[\d.]+:(?P<http>\d+)/drpc/"
)


def _server_argv(executor: str) -> list[str]:
    spark = ["--master", "local[1]"] if executor == "spark" else []
    return [
        sys.executable,
        "-m",
        "drpc.server",
        "--log-format",
        "json",
        "--topology",
        "drpc.examples.reach:topology",
        "--topology",
        "tests.server.helpers:failing_topology",
        "--topology",
        "tests.test_logs:sleepy",
        "--topology",
        "tests.test_logs:logged",
        "--executor",
        executor,
        *spark,
        "--timeout",
        str(_timeout(executor)),
        *EPHEMERAL_PORTS,
    ]


def _timeout(executor: str) -> int:
    return 3 if executor == "spark" else 1  # resident tasks on a loaded machine: slack


SPARK_SERVER = ahead.register(
    "json-logging-spark-server",
    lambda workdir: ahead.Command(_server_argv("spark")),
    timeout=180,
)
"""The Spark case's server and its JVM, started early in the session: it starts beside
the other tests, and the case runs last (tests/ahead.py)."""


def _listening(server: ahead.Running) -> re.Match[str]:
    """Waits for the server's line saying where it listens (every line before it is JSON)."""
    while True:
        for line in server.stderr.read_text().splitlines(keepends=True):
            if line.endswith("\n") and (listening := LISTENING.search(json.loads(line)["message"])):
                return listening
        if server.process.poll() is not None:
            pytest.fail("the server exited without listening:\n" + server.stderr.read_text())
        time.sleep(0.05)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "executor", ["local", pytest.param("spark", marks=pytest.mark.ahead(SPARK_SERVER.name))]
)
def test_the_server_logs_one_json_object_per_line_with_request_ids(
    executor: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    timeout = _timeout(executor)
    server = (
        SPARK_SERVER.running(tmp_path_factory)
        if executor == "spark"
        else ahead.spawn("server", ahead.Command(_server_argv("local")), tmp_path)
    )
    try:
        listening = _listening(server)
        http = int(listening["http"])
        assert http_get(http, "/drpc/reach/foo.com%2Fblog%2F1") == (200, b"16")
        status, body = http_get(http, "/drpc/failing/bad?trace=1")
        assert status == 400
        failed_id = json.loads(body)["request_id"]
        status, body = http_get(http, "/drpc/logged/hey?trace=1")
        assert status == 200 and json.loads(body)["result"] == "hey!"
        logged_id = json.loads(body)["request_id"]
        status, body = http_get(http, f"/drpc/sleepy/{timeout + 2}")
        assert status == 504
    finally:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(60)
    lines = server.stderr.read_text().splitlines(keepends=True)
    assert server.process.returncode == 0, "".join(lines)
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    for entry in entries:
        assert {"time", "level", "logger", "message"} <= set(entry), entry
    messages = [entry["message"] for entry in entries]
    assert any(m.startswith("DRPC server serving") for m in messages)
    assert "DRPC server stopped" in messages
    [failure] = [e for e in entries if e.get("request_id") == failed_id]
    assert failure["function"] == "failing" and failure["level"] == "INFO"
    assert "FAILED_REQUEST" in failure["message"] and "cannot handle 'bad'" in failure["message"]
    if executor == "spark":  # the JVM's own start-up lines arrive wrapped
        assert any(e["logger"] == "stderr" for e in entries)
    # The step's own line, written on Spark by a Python worker and forwarded through the
    # JVM's stderr, is one JSON object of its logger, with the request's fields.
    [step] = [e for e in entries if e["message"] == "working on hey"]
    assert step["logger"] == "tests.bolt" and step["level"] == "INFO"
    assert (step["request_id"], step["function"]) == (logged_id, "logged")
    [timeout] = [e for e in entries if "timed out" in e["message"]]
    assert timeout["function"] == "sleepy" and timeout["request_id"].isdigit()
    assert timeout["request_id"] != failed_id


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "drpc.server"],
        ["-m", "drpc.runner"],
        ["-m", "drpc.client"],
        ["-m", "drpc.transactional.cli", "run"],
    ],
    ids=["drpc-server", "drpc.runner", "drpc-client", "drpc-transactional run"],
)
def test_every_command_line_offers_the_log_format(command: list[str]) -> None:
    shown = subprocess.run(
        [sys.executable, *command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "--log-format" in shown.stdout and "{text,json}" in shown.stdout
    assert "--log-level" in shown.stdout
