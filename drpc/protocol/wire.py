"""The DRPC Thrift wire format, sans-IO: framing, messages, and exception conversion.

Contract:

- A frame is a 4-byte big-endian signed length, then that many bytes
  (Thrift's framed transport). ``frame_length`` refuses a negative length or
  one over ``max_frame_size`` with ``ProtocolError`` before any body is read.
- Messages use the binary protocol with strict writes and lenient reads, as
  Storm's server does; ``encode_message`` returns a whole frame, and
  ``decode_message``/``read_struct`` turn any malformed byte into
  ``ProtocolError`` (never another exception type), so a network edge has one
  thing to catch. ``decode_message(payload, limits)`` first checks the whole
  message against ``WireLimits`` (string and container lengths, nesting;
  ``drpc.protocol.scan``), so nothing decodes a hostile length.
- ``to_wire_*``/``from_wire_*`` convert between ``drpc.errors`` exceptions and
  the generated Thrift structs, so a failure looks the same on both sides.

The server, the clients and the remote runner all go through this module.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, TypeVar

from thrift.protocol.TBinaryProtocol import TBinaryProtocolAccelerated
from thrift.protocol.TProtocol import TProtocolBase
from thrift.Thrift import TApplicationException, TMessageType
from thrift.transport.TTransport import TMemoryBuffer

from drpc.errors import (
    AuthorizationException,
    DRPCError,
    DRPCExceptionType,
    DRPCExecutionException,
)
from drpc.protocol.gen import ttypes
from drpc.protocol.scan import WireLimits, check_message

MAX_FRAME_SIZE = 1024 * 1024
"""Default largest frame body accepted, in bytes (Storm's ``drpc.max_buffer_size``)."""

FRAME_HEADER_SIZE = 4
_FRAME_HEADER = struct.Struct(">i")

CALL = TMessageType.CALL
REPLY = TMessageType.REPLY
EXCEPTION = TMessageType.EXCEPTION
ONEWAY = TMessageType.ONEWAY

StructT = TypeVar("StructT")


class ProtocolError(DRPCError):
    """Bytes on a DRPC connection that are not a well-formed Thrift message.

    Raised by the codec for malformed input, and by clients when the server
    answers with a Thrift ``TApplicationException`` (``application_error_type``
    then holds its type, e.g. ``TApplicationException.UNKNOWN_METHOD``).
    """

    def __init__(self, message: str, application_error_type: int | None = None) -> None:
        super().__init__(message)
        self.application_error_type = application_error_type


@dataclass(frozen=True, slots=True)
class Message:
    """A decoded message header; ``protocol`` is positioned at the message body."""

    name: str
    type: int
    seqid: int
    protocol: TProtocolBase
    size: int = 0
    """Bytes of the framed payload it was decoded from."""


def _protocol(buffer: TMemoryBuffer) -> TProtocolBase:
    return TBinaryProtocolAccelerated(buffer, strictRead=False, strictWrite=True)


def frame_length(header: bytes, max_frame_size: int = MAX_FRAME_SIZE) -> int:
    """The body length a frame header announces; ``ProtocolError`` if unacceptable."""
    if len(header) != FRAME_HEADER_SIZE:
        raise ProtocolError(f"truncated frame header ({len(header)} of 4 bytes)")
    (length,) = _FRAME_HEADER.unpack(header)
    if length < 0:
        raise ProtocolError(f"negative frame length {length}")
    if length > max_frame_size:
        raise ProtocolError(f"frame of {length} bytes exceeds the limit of {max_frame_size}")
    return length


def frame(payload: bytes) -> bytes:
    return _FRAME_HEADER.pack(len(payload)) + payload


def encode_message(name: str, message_type: int, seqid: int, body: Any) -> bytes:
    """One framed message: header, then ``body`` (a generated struct or TApplicationException)."""
    buffer = TMemoryBuffer()
    protocol = _protocol(buffer)
    protocol.writeMessageBegin(name, message_type, seqid)
    body.write(protocol)
    protocol.writeMessageEnd()
    return frame(buffer.getvalue())


def encode_application_error(name: str, seqid: int, error_type: int, message: str) -> bytes:
    return encode_message(name, EXCEPTION, seqid, TApplicationException(error_type, message))


def check_call(payload: bytes, limits: WireLimits) -> tuple[str, int]:
    """The method name and message type of ``payload``, a message within ``limits``;
    ``ProtocolError`` as ``decode_message`` raises it otherwise. Cheaper than decoding:
    nothing is built for the body (decode it when the call starts)."""
    name, message_type = check_message(payload, limits, _malformed)
    try:
        return name.decode("utf-8"), message_type
    except UnicodeDecodeError as error:
        raise ProtocolError(f"malformed message header: {_describe(error)}") from error


def decode_message(payload: bytes, limits: WireLimits | None = None) -> Message:
    if limits is not None:
        check_message(payload, limits, _malformed)
    protocol = _protocol(TMemoryBuffer(payload))
    try:
        name, message_type, seqid = protocol.readMessageBegin()
    except Exception as error:
        raise ProtocolError(f"malformed message header: {_describe(error)}") from error
    if not isinstance(name, str):
        raise ProtocolError("malformed message header: method name is not a string")
    return Message(name, message_type, seqid, protocol, len(payload))


def _malformed(reason: str) -> ProtocolError:
    return ProtocolError(f"malformed message: {reason}")


def read_struct(message: Message, struct_type: type[StructT]) -> StructT:
    """Read a message body into a fresh ``struct_type``; ``ProtocolError`` if malformed."""
    value = struct_type()
    try:
        value.read(message.protocol)  # type: ignore[attr-defined]
        message.protocol.readMessageEnd()
    except Exception as error:
        raise ProtocolError(
            f"malformed {message.name!r} message body: {_describe(error)}"
        ) from error
    return value


def read_reply(message: Message, result_type: type[StructT]) -> StructT:
    """The result struct of a reply, or ``ProtocolError`` for a TApplicationException."""
    if message.type == EXCEPTION:
        error = read_struct(message, TApplicationException)
        raise ProtocolError(
            f"server refused {message.name!r}: {error.message or 'no message'}", error.type
        )
    if message.type != REPLY:
        raise ProtocolError(
            f"expected a reply to {message.name!r}, got message type {message.type}"
        )
    return read_struct(message, result_type)


def _describe(error: BaseException) -> str:
    text = str(error) or getattr(error, "message", "") or ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# -- exceptions ---------------------------------------------------------------------------


def to_wire_execution_error(error: DRPCExecutionException) -> ttypes.DRPCExecutionException:
    return ttypes.DRPCExecutionException(msg=error.msg, type=int(error.type))


def from_wire_execution_error(
    error: ttypes.DRPCExecutionException,
    missing_type: DRPCExceptionType = DRPCExceptionType.FAILED_REQUEST,
) -> DRPCExecutionException:
    """Convert a received exception; a missing type becomes ``missing_type``, an unknown one
    INTERNAL_ERROR (the message is kept either way)."""
    if error.type is None:
        kind = missing_type
    else:
        try:
            kind = DRPCExceptionType(error.type)
        except ValueError:
            kind = DRPCExceptionType.INTERNAL_ERROR
    return DRPCExecutionException(error.msg or "", kind)


def to_wire_authorization_error(error: AuthorizationException) -> ttypes.AuthorizationException:
    return ttypes.AuthorizationException(msg=error.msg)


def from_wire_authorization_error(error: ttypes.AuthorizationException) -> AuthorizationException:
    return AuthorizationException(error.msg or "")
