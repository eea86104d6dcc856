"""Every resource limit of the DRPC server, with its safe default, in one place.

Contract. ``Limits`` is a frozen dataclass: each field is a limit, its
default the value a server runs with unless told otherwise, and its
``help`` metadata the text of its ``drpc-server`` flag (``--max-queue-depth``
for ``max_queue_depth``…). ``Limits(...)`` refuses a non-positive value with
``ValueError`` naming the field. ``add_limit_arguments`` adds one flag per
field to a parser; ``limits_from_args`` builds ``Limits`` from the parsed
flags. What each limit stops, and what happens at it, is in each help text
and in THREAT_MODEL.md.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import Any

from drpc.protocol.wire import MAX_FRAME_SIZE

CALL_COST = 4096
"""Bytes a started Thrift call holds beyond its frame (its task, coroutine, decoded message,
request and waiter: about 3.5 KB of small objects, measured with tracemalloc), counted
against ``max_pending_bytes``: without it a connection of tiny frames could hold thousands
of started calls."""
PARKED_COST = 64
"""Bytes a parked Thrift frame holds beyond its own (its bytes object and queue slot)."""


def _limit(default: Any, help: str, kind: type | None = None) -> Any:
    """A limit field; ``kind`` is its type when its default is None (derived elsewhere)."""
    return field(default=default, metadata={"help": help, "kind": kind or type(default)})


@dataclass(frozen=True, slots=True)
class Limits:
    max_frame_size: int = _limit(
        MAX_FRAME_SIZE,
        "largest Thrift frame in bytes; a frame is one whole message (framed transport), so "
        "this also bounds a message; a bigger or negative length closes the connection "
        "before its body is read",
    )
    max_string_length: int = _limit(
        MAX_FRAME_SIZE, "largest string inside a Thrift message, in bytes"
    )
    max_container_length: int = _limit(
        1024, "most elements a Thrift list, set or map may announce (DRPC sends none)"
    )
    max_nesting_depth: int = _limit(
        64, "deepest nesting of structs and containers in a Thrift message"
    )
    max_body_size: int = _limit(
        MAX_FRAME_SIZE, "largest HTTP request body in bytes; a bigger one is answered 413"
    )
    max_header_size: int = _limit(
        8190,
        "longest HTTP request line, header name and header value in bytes; longer ones are "
        "answered 400",
    )
    max_queue_depth: int = _limit(
        4096,
        "most requests of one function waiting to be fetched; past it calls are refused at "
        "once (Thrift: FAILED_REQUEST 'server busy', HTTP: 503 with Retry-After)",
    )
    max_outstanding: int = _limit(
        16384, "most requests the server holds in total (queued or running); refused the same way"
    )
    max_functions: int = _limit(
        1024,
        "most distinct function names tracked (queues and runner fetches); calls that would "
        "track one more are refused the same way",
    )
    read_timeout: float = _limit(
        10.0,
        "seconds a started Thrift frame or HTTP request (headers and body) has to arrive "
        "whole; a slower one closes its connection",
    )
    max_result_size: int = _limit(
        1_000_000,
        "largest result in UTF-8 bytes; a bigger one fails its request with FAILED_REQUEST "
        "(keep it below max_frame_size so the reply fits the client's frame limit)",
    )
    max_calls_per_connection: int = _limit(
        128,
        "most calls of one Thrift connection running at once; calls read past them wait "
        "(parked as their frames, within max_pending_bytes) and start in order as running "
        "ones finish",
    )
    retry_after: int = _limit(1, "seconds a refused HTTP caller is told to wait (Retry-After)")
    max_function_name: int = _limit(
        256,
        "longest function name (execute, fetchRequest, HTTP) and request id (result, "
        "failRequest) in UTF-8 bytes; a longer one is refused at once, before any lookup "
        "(execute: FAILED_REQUEST, HTTP: 400, invocations: TApplicationException)",
    )
    max_listed_functions: int = _limit(
        32,
        "most served function names a 'not served' error, /health or the dashboard lists; "
        "the others are counted, not named",
    )
    max_label_length: int = _limit(
        128,
        "longest metric label value in characters; a longer name is cut and tagged with a "
        "digest of the whole, so two long names stay apart",
    )
    max_outstanding_per_caller: int = _limit(
        2048,
        "most requests one caller holds (queued or running): the user, or the client address "
        "when anonymous; past it its calls are refused like max_outstanding",
    )
    max_connections_per_address: int | None = _limit(
        None,
        "most open connections from one client address per Thrift port, below "
        "--max-connections (default: half of it, at most 256); past it the address's "
        "oldest idle connection is closed to make room, or, with none idle, the new one",
        kind=int,
    )
    idle_timeout: float = _limit(
        120.0,
        "seconds a Thrift connection with no call in flight may wait for its next frame; "
        "then it is closed (clients reconnect); an invocations connection holding requests "
        "it fetched and has not answered is not idle",
    )
    max_pending_bytes: int = _limit(
        MAX_FRAME_SIZE,
        "most bytes one Thrift connection may make the server hold: its calls read and not "
        f"answered yet (a running call counts its frame plus {CALL_COST} B, what it holds; "
        f"a parked one its frame plus {PARKED_COST} B) plus its replies not sent yet; past "
        "it the server reads no more calls from it (and, past it in unsent replies alone, "
        "holds further replies) until it drains",
    )
    write_timeout: float = _limit(
        30.0,
        "seconds a connection has to take its waiting replies (Thrift: once its unsent "
        "replies pass max_pending_bytes; HTTP: any unsent bytes); a slower one is closed and "
        "its calls withdrawn",
    )
    refusal_logs_per_second: int = _limit(
        10,
        "most WARNING lines a second about refused client input (closed connections, "
        "malformed HTTP requests); past it they are counted and one line says how many",
    )

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None and item.default is None:
                continue  # derived from another setting (its help says how)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"limit {item.name} must be a positive number, got {value!r}")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("limits")
    for item in fields(Limits):
        kind = item.metadata["kind"]
        group.add_argument(
            _flag(item.name),
            type=kind,
            default=item.default,
            metavar="SECONDS" if kind is float else "N",
            help=item.metadata["help"] + ("" if item.default is None else " (default %(default)s)"),
        )


def limits_from_args(args: argparse.Namespace) -> Limits:
    return Limits(**{item.name: getattr(args, item.name) for item in fields(Limits)})
