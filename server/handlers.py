"""Thrift method handlers of Storm's two DRPC services, over a ``DRPCService``.

Contract (Storm's semantics, wire facts in DESIGN.md):

- ``DistributedRPC.execute(functionName, funcArgs)`` waits for the outcome and
  replies with the result, ``e`` (DRPCExecutionException) or ``aze``;
- ``DistributedRPCInvocations.fetchRequest(functionName)`` never blocks: the
  oldest queued request, or ``DRPCRequest(func_args="", request_id="")``;
- ``result``, ``failRequest`` ("Request failed", FAILED_REQUEST) and
  ``failRequestV2`` settle a request once; unknown ids are ignored;
- every call is authorized first; a refusal replies ``aze``;
- a function name or request id over ``limits.max_function_name`` bytes is
  refused before anything else: ``execute`` replies ``e`` (FAILED_REQUEST,
  ``NameTooLongError``); the invocations methods, which declare no exception
  for it, reply a ``TApplicationException`` (type UNKNOWN) naming the limit and
  keep the connection open;
- ``execute`` calls are held to the caller's quota: the user, or the
  connection's host when anonymous (``drpc.server.identity.caller_of``);
- a call missing a required argument is a ``ProtocolError``.

Storm's ``DRPCRequest`` carries no origin: a remote runner knows which server
it fetched a request from and routes the result back there itself.

A fetched request is bound to the connection that fetched it (its ``Peer``,
unique per connection); ``release_fetched`` is what the invocations listener
calls when a connection ends: the service fails what it still held
(``DRPCService.release``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drpc.server.identity import caller_of
from drpc.server.service import EXECUTE, FAIL_REQUEST, FETCH_REQUEST, RESULT, DRPCService
from drpc.server.thrift_listener import MethodHandler, Peer
from thrift.Thrift import TApplicationException

from drpc.errors import (
    AuthorizationException,
    DRPCExceptionType,
    DRPCExecutionException,
    NameTooLongError,
)
from drpc.protocol.gen import DistributedRPC, DistributedRPCInvocations, ttypes
from drpc.protocol.wire import (
    REPLY,
    Message,
    ProtocolError,
    encode_application_error,
    encode_message,
    from_wire_execution_error,
    read_struct,
    to_wire_authorization_error,
    to_wire_execution_error,
)

FAILED_MESSAGE = "Request failed"


def _require(message: Message, **arguments: Any) -> None:
    for name, value in arguments.items():
        if not isinstance(value, str):
            raise ProtocolError(f"{message.name!r} call without its {name!r} argument")


def _request_failed() -> DRPCExecutionException:
    return DRPCExecutionException(FAILED_MESSAGE, DRPCExceptionType.FAILED_REQUEST)


def _reply(message: Message, result: Any) -> bytes:
    return encode_message(message.name, REPLY, message.seqid, result)


def execute_methods(service: DRPCService) -> dict[str, MethodHandler]:
    async def execute(message: Message, peer: Peer) -> bytes:
        args = read_struct(message, DistributedRPC.execute_args)
        _require(message, functionName=args.functionName, funcArgs=args.funcArgs)
        reply = DistributedRPC.execute_result()
        try:
            service.authorize(peer.identity, EXECUTE, args.functionName)
            reply.success = await service.execute(
                args.functionName, args.funcArgs, caller=caller_of(peer.identity, peer.host)
            )
        except DRPCExecutionException as error:
            reply.e = to_wire_execution_error(error)
        except AuthorizationException as error:
            reply.aze = to_wire_authorization_error(error)
        return _reply(message, reply)

    return {"execute": execute}


def release_fetched(service: DRPCService) -> Callable[[Peer], None]:
    """What the invocations listener calls when a connection closes."""

    def closed(peer: Peer) -> None:
        service.release(peer, peer.address)

    return closed


def invocations_methods(service: DRPCService) -> dict[str, MethodHandler]:
    def refusing_long_names(handler: MethodHandler) -> MethodHandler:
        async def guarded(message: Message, peer: Peer) -> bytes:
            try:
                return await handler(message, peer)
            except NameTooLongError as error:
                service.refusals.refuse(
                    "refused %s from %s: %s", message.name, peer.address, error.msg
                )
                return encode_application_error(
                    message.name, message.seqid, TApplicationException.UNKNOWN, error.msg
                )

        return guarded

    def authorize_settling(peer: Peer, operation: str, request_id: str) -> None:
        service.check_name(request_id, "request id")
        function = service.function_of(request_id)
        if function is not None:  # unknown ids are ignored anyway
            service.authorize(peer.identity, operation, function)

    async def result(message: Message, peer: Peer) -> bytes:
        args = read_struct(message, DistributedRPCInvocations.result_args)
        _require(message, id=args.id, result=args.result)
        reply = DistributedRPCInvocations.result_result()
        try:
            authorize_settling(peer, RESULT, args.id)
            service.complete(args.id, args.result)
        except AuthorizationException as error:
            reply.aze = to_wire_authorization_error(error)
        return _reply(message, reply)

    async def fetch_request(message: Message, peer: Peer) -> bytes:
        args = read_struct(message, DistributedRPCInvocations.fetchRequest_args)
        _require(message, functionName=args.functionName)
        reply = DistributedRPCInvocations.fetchRequest_result()
        try:
            service.authorize(peer.identity, FETCH_REQUEST, args.functionName)
            request = service.fetch(args.functionName, peer.address, remote=True, fetcher=peer)
            if request is None:
                reply.success = ttypes.DRPCRequest(func_args="", request_id="")
            else:
                reply.success = ttypes.DRPCRequest(
                    func_args=request.args, request_id=request.return_info.request_id
                )
        except AuthorizationException as error:
            reply.aze = to_wire_authorization_error(error)
        return _reply(message, reply)

    def settle_failure(
        message: Message, peer: Peer, request_id: str, error: DRPCExecutionException, reply: Any
    ) -> bytes:
        try:
            authorize_settling(peer, FAIL_REQUEST, request_id)
            service.fail(request_id, error)
        except AuthorizationException as refusal:
            reply.aze = to_wire_authorization_error(refusal)
        return _reply(message, reply)

    async def fail_request(message: Message, peer: Peer) -> bytes:
        args = read_struct(message, DistributedRPCInvocations.failRequest_args)
        _require(message, id=args.id)
        reply = DistributedRPCInvocations.failRequest_result()
        return settle_failure(message, peer, args.id, _request_failed(), reply)

    async def fail_request_v2(message: Message, peer: Peer) -> bytes:
        args = read_struct(message, DistributedRPCInvocations.failRequestV2_args)
        _require(message, id=args.id)
        error = _request_failed() if args.e is None else from_wire_execution_error(args.e)
        reply = DistributedRPCInvocations.failRequestV2_result()
        return settle_failure(message, peer, args.id, error, reply)

    return {
        "result": refusing_long_names(result),
        "fetchRequest": refusing_long_names(fetch_request),
        "failRequest": refusing_long_names(fail_request),
        "failRequestV2": refusing_long_names(fail_request_v2),
    }
