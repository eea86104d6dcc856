/*
 * Distributed RPC wire definitions, field for field compatible with Apache
 * Storm's DistributedRPC and DistributedRPCInvocations services: the same
 * service and method names, argument and field ids, types and enum values, so
 * a client generated from Storm's IDL talks to drpc unchanged.
 *
 * Transport: framed; protocol: binary (strict write).
 * DistributedRPC listens on 3772, DistributedRPCInvocations on 3773.
 *
 * Regenerate the Python bindings with `make thrift` (into drpc/protocol/gen).
 */

namespace java org.apache.storm.generated
namespace py drpc.protocol.gen

enum DRPCExceptionType {
  INTERNAL_ERROR = 0,
  SERVER_SHUTDOWN = 1,
  SERVER_TIMEOUT = 2,
  FAILED_REQUEST = 3
}

exception DRPCExecutionException {
  1: required string msg;
  2: optional DRPCExceptionType type;
}

exception AuthorizationException {
  1: required string msg;
}

struct DRPCRequest {
  1: required string func_args;
  2: required string request_id;
}

service DistributedRPC {
  string execute(1: string functionName, 2: string funcArgs)
    throws (1: DRPCExecutionException e, 2: AuthorizationException aze);
}

service DistributedRPCInvocations {
  void result(1: string id, 2: string result)
    throws (1: AuthorizationException aze);
  DRPCRequest fetchRequest(1: string functionName)
    throws (1: AuthorizationException aze);
  void failRequest(1: string id)
    throws (1: AuthorizationException aze);
  void failRequestV2(1: string id, 2: DRPCExecutionException e)
    throws (1: AuthorizationException aze);
}
