"""What the clients send and how they read replies: addresses, calls, outcomes. Sans-IO.

Contract:

- ``parse_address("host:port" | "host" | "[v6]:port", default_port)`` and
  ``parse_servers`` (comma-separated text or a sequence of strings or
  ``(host, port)`` pairs) return ``(host, port)`` pairs; bad input raises
  ``ValueError`` naming it;
- ``Call`` describes one Thrift method call; ``encode`` frames it with a
  sequence id; ``check_reply`` verifies a reply answers that call (name and
  sequence id) and returns its result struct;
- ``unwrap`` turns a result struct into the value it carries, or raises the
  declared exception converted to ``drpc.errors`` types;
- ``reply_length(header, max_frame_size, address)`` is the length a reply's
  frame header announces (``drpc.protocol.wire.frame_length``), except that a
  reply starting ``HTTP`` (the client was pointed at an HTTP port, whose
  answer would otherwise read as a frame of 1213486160 bytes) raises
  ``ProtocolError`` saying so and which port serves what.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drpc.protocol.gen import DistributedRPC, DistributedRPCInvocations, ttypes
from drpc.protocol.wire import (
    CALL,
    Message,
    ProtocolError,
    encode_message,
    frame_length,
    from_wire_authorization_error,
    from_wire_execution_error,
    read_reply,
)

Address = tuple[str, int]

HTTP_REPLY = b"HTTP"
"""The first bytes of any HTTP response ("HTTP/1.1 400 ...")."""


def parse_address(text: str, default_port: int) -> Address:
    text = text.strip()
    if not text:
        raise ValueError("empty server address")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"server address {text!r} has no host")
    if not port_text:
        return host, default_port
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"server address {text!r} has a port that is not a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"server address {text!r} has a port out of range")
    return host, port


def parse_servers(servers: str | Sequence[str | Address], default_port: int) -> list[Address]:
    items: Sequence[str | Address] = servers.split(",") if isinstance(servers, str) else servers
    parsed = [
        parse_address(item, default_port) if isinstance(item, str) else (item[0], int(item[1]))
        for item in items
    ]
    if not parsed:
        raise ValueError("no DRPC server given")
    return parsed


def format_address(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    args: Any
    result_type: type

    def encode(self, seqid: int) -> bytes:
        return encode_message(self.method, CALL, seqid, self.args)

    def check_reply(self, message: Message, seqid: int) -> Any:
        if message.name != self.method or message.seqid != seqid:
            raise ProtocolError(
                f"reply {message.name!r} #{message.seqid} does not answer {self.method!r} #{seqid}"
            )
        return read_reply(message, self.result_type)


def execute_call(function: str, args: str) -> Call:
    return Call(
        "execute",
        DistributedRPC.execute_args(functionName=function, funcArgs=args),
        DistributedRPC.execute_result,
    )


def fetch_request_call(function: str) -> Call:
    return Call(
        "fetchRequest",
        DistributedRPCInvocations.fetchRequest_args(functionName=function),
        DistributedRPCInvocations.fetchRequest_result,
    )


def result_call(request_id: str, result: str) -> Call:
    return Call(
        "result",
        DistributedRPCInvocations.result_args(id=request_id, result=result),
        DistributedRPCInvocations.result_result,
    )


def fail_request_call(request_id: str) -> Call:
    return Call(
        "failRequest",
        DistributedRPCInvocations.failRequest_args(id=request_id),
        DistributedRPCInvocations.failRequest_result,
    )


def fail_request_v2_call(request_id: str, error: ttypes.DRPCExecutionException) -> Call:
    return Call(
        "failRequestV2",
        DistributedRPCInvocations.failRequestV2_args(id=request_id, e=error),
        DistributedRPCInvocations.failRequestV2_result,
    )


def unwrap(result: Any, *, returns_value: bool) -> Any:
    """The value a result struct carries, or its declared exception raised."""
    error = getattr(result, "e", None)
    if error is not None:
        raise from_wire_execution_error(error)
    authorization = getattr(result, "aze", None)
    if authorization is not None:
        raise from_wire_authorization_error(authorization)
    if not returns_value:
        return None
    if result.success is None:
        raise ProtocolError("the reply carries neither a result nor an exception")
    return result.success


def reply_length(header: bytes, max_frame_size: int, address: Address) -> int:
    """The body length of a reply frame; ``ProtocolError`` if unacceptable or HTTP."""
    if header == HTTP_REPLY:
        raise ProtocolError(
            f"{format_address(address)} answered in HTTP: it is an HTTP port, not a Thrift "
            "one (a drpc server serves Thrift execute calls on 3772, invocations on 3773 and "
            "HTTP on 3774 by default; call an HTTP port with HTTPDRPCClient or "
            "drpc-client --http URL)"
        )
    return frame_length(header, max_frame_size)
