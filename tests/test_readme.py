"""The README and every page of docs/ as a new user meets them, so that they stay true.

The pages are README.md and docs/**/*.md. Fenced blocks are found at any indentation
(inside admonitions and content tabs too) and with or without attributes
(```python title="x.py"); a block is named by its file and the line of its first line of
code, e.g. ``docs/tutorials/drpc.md:line-12``, and only ``python``, ``sh`` and ``yaml``
blocks run (text, mermaid and the other languages of ``NOT_RUN`` are shown, not run).

- Every Python block runs as written and prints what its ``# ...`` comments
  say. Blocks that call a server get one on 127.0.0.1 and have its ports put
  in for the shown ones (3772, 3773, 3774) and its address for ``drpc.example``;
  blocks on Spark share the suite's session (its master put in for
  ``local[*]``). A new block fails here until ``PYTHON_BLOCKS`` (one table for
  every page) says how to run it.
- Every command of a ``sh`` block is written in a form that runs from a fresh
  clone (``make``, ``curl``, or a program of ``.venv/bin``: the virtual
  environment is not on ``PATH``), and the transcripts' ``drpc-client`` and
  ``curl`` calls print what the page shows.
- Every ``yaml`` block is YAML, and the ACL example is a valid ACL.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from drpc.client import DRPCClient
from drpc.server import DRPCServer, ServerThread
from drpc.server.acl import ACL
from drpc.server.identity import TokenTable

from drpc.examples.exclamation import build_exclamation
from drpc.examples.reach import build_reach
from drpc.protocol.tls import server_context
from tests.conftest import SPARK_TEST_MASTER
from tests.server.certs import make_pki
from tests.server.helpers import HOST, free_port, running_server, server_options, wait_until

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
VENV_BIN = f"{Path(sys.executable).parent}/"
TOKEN = "alice-token-0123456789"

RUN = {"python", "sh", "yaml"}
NOT_RUN = {"", "text", "mermaid", "json", "toml", "ini", "java", "clojure", "properties", "diff"}
"""Fence languages shown but not run; any other (``bash``, ``py``, ``console``) is refused
below, so that no block a reader copies escapes the test by its spelling."""


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository, e.g. "docs/tutorials/drpc.md"
    language: str
    line: int  # of the block's first line of code, 1-based
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def id(self) -> str:
        return f"{self.page}:line-{self.line}"


FENCE = re.compile(
    r"(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<language>[\w+-]*)(?P<rest>.*)"
)


def page_blocks(page: Path) -> list[Block]:
    """Every fenced block of a page, dedented by its fence's indentation."""
    found: list[Block] = []
    name = page.relative_to(ROOT).as_posix()
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.fullmatch(lines[index])
        index += 1
        if opening is None:
            continue
        indent, fence = opening["indent"], opening["fence"]
        start = index
        while index < len(lines) and lines[index].strip() != fence:
            index += 1
        assert index < len(lines), f"{name}:{start}: a fence that never closes"
        code = [line.removeprefix(indent) for line in lines[start:index]]
        found.append(Block(name, opening["language"], start + 1, "\n".join(code) + "\n"))
        index += 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in page_blocks(page)]


def blocks(language: str) -> list[Block]:
    return [block for block in ALL_BLOCKS if block.language == language]


def test_every_block_is_in_a_language_that_runs_or_is_only_shown() -> None:
    unknown = [f"{b.where} ```{b.language}" for b in ALL_BLOCKS if b.language not in RUN | NOT_RUN]
    assert not unknown, f"write python, sh or yaml (run), or one of {sorted(NOT_RUN)}: {unknown}"


@dataclass(frozen=True)
class Run:
    """How a Python block runs: ``needs`` a setup of ``SETUPS``; ``prints`` its output lines
    (a line ending in "..." matches output starting with the rest)."""

    needs: str
    prints: list[str] = field(default_factory=list)


PYTHON_BLOCKS: dict[str, Run] = {
    'LinearDRPCTopologyBuilder("exclamation")': Run("nothing", ["hello!"]),
    'LocalDRPC(executor="spark"': Run("spark", ["16", "16"]),
    'TransactionalTopologyBuilder("global-count"': Run("spark", ["[9, 16, 19]"]),
    'topology.new_drpc_stream("words")': Run("nothing", ["[3, 2, 0]", "[[6]]", "[[0]]"]),
    "build_vocabulary_counts(10**6)": Run("nothing", ["True"]),
    ".parallelism_hint(4)                       # four partitions": Run(
        "nothing", ["104 3", '[["cat", 2]]']
    ),
    'DRPCClient("localhost", 3772)': Run(
        "a reach server",
        ["16", "FAILED_REQUEST function 'no-such-function' is not served: ..."],
    ),
    "asyncio.run(serve())": Run("its own process"),
    "TLSSettings(": Run("a TLS reach server", ["16", "16"]),
    # The spark-submit script: run here it only defines its topology (not __main__);
    # tests/cluster/serve.py is it under spark-submit on the two-host cluster.
    "class Shout(BaseBasicBolt)": Run("nothing"),
    # docs/tutorials/drpc.md
    'LinearDRPCTopologyBuilder("upper")': Run("nothing", ["HELLO!!!", "DRPC!!!"]),
    "class PartialUniquer(BaseBatchBolt):": Run(
        "nothing",
        ["foo.com/blog/1 16", "tech.backtype.com/blog/123 7", "notaurl.com 0"],
    ),
    'LinearDRPCTopologyBuilder("inverse")': Run("nothing", ["0.25", "FAILED_REQUEST"]),
    'CoordinatedDRPCTopologyBuilder("consonants")': Run("nothing", ["7", "0"]),
    'AsyncDRPCClient("localhost", 3772, timeout=30)': Run("a reach server", ["['16', '14', '7']"]),
    'HTTPDRPCClient("http://localhost:3774")': Run("a reach server", ["7"]),
    # docs/tutorials/trident.md
    'new_drpc_stream("count-words")': Run("nothing", ["[4, 0]", "[[7]]"]),
    'new_drpc_stream("letters")': Run("nothing", ["[[14]]"]),
    "class Longest(CombinerAggregator)": Run("nothing", ['[["jumped"]]']),
    'new_drpc_stream("stats")': Run("nothing", ["[[3, 12]]", "[[0, 0]]", '[["jumped", 6]]']),
    'LMDBMapState.opaque("totals")': Run("nothing", ["[[7]]", "[[null]]"]),
    'new_drpc_stream("customer")': Run("nothing", ['[["alice", 15, 2], ["bob", 2, 1]]', "[]"]),
    "class CountPerWord(Aggregator)": Run(
        "nothing",
        [
            "the cow",
            "the cow jumped over",
            "jumped over the moon",
            "the moon and the",
            "and the dish ran",
            "[[3]]",
            "[[null]]",
        ],
    ),
    'new_drpc_stream("list-stock")': Run(
        "nothing", ['[[[["apple", 2], ["fig", 1]], "fig"]]', '[[[["plum", 1]], null]]']
    ),
    # docs/how-to/plain-topologies.md
    'cluster.submit_topology("word-count"': Run("nothing", ["2 12"]),
    # docs/how-to/writing-a-spout.md: sketches whose classes are defined, never run
    "class MySpout(BasePartitionedTransactionalSpout)": Run("nothing"),
    "class KafkaMeta:": Run("nothing"),
}
"""A distinctive piece of each Python block of README.md and docs/**/*.md (one table for
all pages: a marker names one block wherever it is), and how the block runs."""


def _run_of(block: Block) -> Run:
    matching = [run for marker, run in PYTHON_BLOCKS.items() if marker in block.text]
    assert len(matching) == 1, (
        f"{block.where}: a Python block PYTHON_BLOCKS does not describe "
        f"(or describes twice); add its marker and what it prints:\n{block.text}"
    )
    return matching[0]


def _substituted(text: str, replacements: dict[str, str]) -> str:
    """``text`` with every ``replacements`` key put in for, in one pass: a port put in for
    3772 may itself hold 3773, which one replacement after another would replace again."""
    for old in replacements:
        assert old in text, f"the block no longer shows {old!r}"
    if not replacements:
        return text
    pattern = "|".join(map(re.escape, sorted(replacements, key=len, reverse=True)))
    return re.sub(pattern, lambda found: replacements[found[0]], text)


def test_a_port_put_in_is_not_replaced_again() -> None:
    shown = "ports 3772, 3773 and 3774"
    assert _substituted(shown, {"3772": "43773", "3773": "3774", "3774": "1"}) == (
        "ports 43773, 3774 and 1"
    )


def _exec(block: Block, replacements: dict[str, str]) -> list[str]:
    """Run the block in this process (so Spark blocks share the session); its output lines."""
    # dont_inherit: a block runs as the file a reader saves it to, without this module's
    # `from __future__ import annotations` (under which @dataclass looks up the block's module)
    code = compile(_substituted(block.text, replacements), block.where, "exec", dont_inherit=True)
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(code, {"__name__": "readme_block"})
    return output.getvalue().splitlines()


def _ports(server: DRPCServer) -> dict[str, str]:
    return {"3772": str(server.port), "3774": str(server.http_port)}


def _nothing(block: Block, request: pytest.FixtureRequest) -> list[str]:
    return _exec(block, {})


def _spark(block: Block, request: pytest.FixtureRequest) -> list[str]:
    request.getfixturevalue("spark_session")
    shown = 'master="local[*]"'
    return _exec(block, {shown: f'master="{SPARK_TEST_MASTER}"'} if shown in block.text else {})


def _reach_server(block: Block, request: pytest.FixtureRequest) -> list[str]:
    with running_server(build_reach()) as server:
        return _exec(block, {k: v for k, v in _ports(server).items() if k in block.text})


def _tls_reach_server(block: Block, request: pytest.FixtureRequest) -> list[str]:
    here = Path.cwd()
    (here / "pki").mkdir()
    pki = make_pki(here / "pki", ["alice"])
    shutil.copy(pki.ca, here / "ca.pem")
    shutil.copy(pki.clients["alice"][0], here / "alice.pem")
    shutil.copy(pki.clients["alice"][1], here / "alice.key")
    request.getfixturevalue("monkeypatch").setenv("DRPC_TOKEN", TOKEN)
    server = DRPCServer(
        **server_options(),
        ssl_context=server_context(pki.server_cert, pki.server_key, pki.ca),
        tokens=TokenTable({"alice": TOKEN}),
    )
    server.register(build_reach())
    with ServerThread(server) as running:
        return _exec(block, {**_ports(running), "drpc.example": "localhost"})


def _its_own_process(block: Block, request: pytest.FixtureRequest) -> list[str]:
    """A block that serves until Ctrl-C: run it, call it, press Ctrl-C, see it exit 0."""
    port = free_port()
    ports = {"3772": str(port), "3773": str(free_port()), "3774": str(free_port())}
    Path("example.py").write_text(_substituted(block.text, ports))
    process = subprocess.Popen(
        [sys.executable, "example.py"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_until(lambda: _accepts(port) or process.poll() is not None, 60)
        if process.poll() is not None:
            output, _ = process.communicate()
            pytest.fail(f"{block.where} exited before serving:\n{output}")
        with DRPCClient(HOST, port, timeout=30) as client:
            assert client.execute("reach", "foo.com/blog/1") == "16"
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    return []


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
        return True
    return False


SETUPS: dict[str, Callable[[Block, pytest.FixtureRequest], list[str]]] = {
    "nothing": _nothing,
    "spark": _spark,
    "a reach server": _reach_server,
    "a TLS reach server": _tls_reach_server,
    "its own process": _its_own_process,
}

PYTHON = blocks("python")


def _marks_of(block: Block) -> list[pytest.MarkDecorator]:
    """``spark`` for a block that runs on the Spark session (see tests/spark_marker.py)."""
    runs = [run for marker, run in PYTHON_BLOCKS.items() if marker in block.text]
    return [pytest.mark.spark] if any(run.needs == "spark" for run in runs) else []


@pytest.mark.parametrize(
    "block",
    [pytest.param(block, id=block.id, marks=_marks_of(block)) for block in PYTHON],
)
def test_every_python_block_runs_as_written(
    block: Block, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run_of(block)
    for expected in run.prints:  # the page says what the block prints
        assert f"# {expected}" in block.text, f"{block.where} no longer shows {expected!r}"
    monkeypatch.chdir(tmp_path)
    printed = SETUPS[run.needs](block, request)
    assert len(printed) == len(run.prints), printed
    for line, expected in zip(printed, run.prints, strict=True):
        if expected.endswith("..."):
            assert line.startswith(expected.removesuffix("...")), line
        else:
            assert line == expected


def test_every_python_block_is_run() -> None:
    described = {marker for block in PYTHON for marker in PYTHON_BLOCKS if marker in block.text}
    lost = set(PYTHON_BLOCKS) - described
    assert not lost, f"PYTHON_BLOCKS names blocks no page shows any more: {sorted(lost)}"
    assert len(PYTHON) >= len(PYTHON_BLOCKS)


# -- commands ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str  # continuation lines joined, without the "$ " prompt
    output: list[str]  # the lines a transcript shows under it

    @property
    def id(self) -> str:
        return f"{self.page}:line-{self.line}"


def page_commands() -> list[Command]:
    commands: list[Command] = []
    for block in blocks("sh"):
        transcript = block.text.startswith("$ ")
        pending, first = "", 0
        for offset, raw in enumerate(block.text.splitlines()):
            if transcript and not raw.startswith("$ ") and not pending:
                commands[-1].output.append(raw)
                continue
            text = raw.removeprefix("$ ") if not pending else raw
            if not pending and (not text.strip() or text.lstrip().startswith("#")):
                continue
            if not pending:
                first = block.line + offset
            pending += text.rstrip("\\").rstrip() + " " if text.endswith("\\") else text
            if not text.endswith("\\"):
                commands.append(Command(block.page, first, " ".join(pending.split()), []))
                pending = ""
    return commands


COMMANDS = page_commands()
PROGRAMS_ON_PATH = {"make", "curl"}


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_every_command_runs_from_a_fresh_clone(command: Command) -> None:
    words = shlex.split(command.text.split("#")[0].replace("...", "x"))
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VARIABLE=value before a command
        words.pop(0)
    program = words[0]
    assert program in PROGRAMS_ON_PATH or program.startswith(".venv/bin/"), (
        f"{command.page}:{command.line}: {program!r} is not on a fresh clone's PATH; "
        f"write .venv/bin/{program}"
    )
    if program.startswith(".venv/bin/"):
        assert (Path(VENV_BIN) / program.removeprefix(".venv/bin/")).exists(), program


TRANSCRIPTS = [
    c
    for c in COMMANDS
    if c.output
    and re.match(
        r"(\.venv/bin/drpc-client --servers|curl (-X POST .*)?localhost:3774/drpc/)", c.text
    )
]


@pytest.fixture(scope="module")
def examples_server() -> Iterator[DRPCServer]:
    with running_server(build_reach(), build_exclamation()) as server:
        yield server


@pytest.mark.parametrize("command", TRANSCRIPTS, ids=[c.id for c in TRANSCRIPTS])
def test_the_transcripts_print_what_they_show(
    command: Command, examples_server: DRPCServer
) -> None:
    text = command.text
    for shown, port in _ports(examples_server).items():
        text = text.replace(f"localhost:{shown}", f"{HOST}:{port}")
    words = shlex.split(text.replace(".venv/bin/", VENV_BIN, 1))
    ran = subprocess.run(
        words, capture_output=True, text=True, timeout=60, env={**os.environ, "NO_PROXY": "*"}
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == command.output, f"{command.page}:{command.line}"


def test_the_transcripts_that_run_are_the_ones_meant() -> None:
    in_readme = [c.text.split()[0:2] for c in TRANSCRIPTS if c.page == "README.md"]
    assert len(in_readme) == 4, in_readme  # drpc-client, curl GET, curl POST, curl exclamation


@pytest.mark.parametrize("block", blocks("yaml"), ids=[b.id for b in blocks("yaml")])
def test_every_yaml_block_is_yaml(block: Block) -> None:
    assert isinstance(yaml.safe_load(block.text), dict | list), block.where


def test_the_acl_example_is_a_valid_acl() -> None:
    [block] = [b for b in blocks("yaml") if "drpc.authorizer.acl:" in b.text]
    acl = ACL.from_mapping(yaml.safe_load(block.text))
    assert acl.entries["reach"].client_users == {"alice", "bob"}
    assert acl.entries["reach"].invocation_user == "runner"
    assert acl.strict is False
    assert acl.admins == {"ops"}
