"""Every error drpc raises, under one root class.

Contract:

- ``DRPCError`` is the root: ``except drpc.DRPCError`` catches anything drpc
  raises on purpose. Programming errors in user code (a bolt raising
  ``KeyError``) are wrapped into a request failure, never re-raised raw into
  the engine.
- ``DRPCExecutionException`` and ``AuthorizationException`` mirror Storm's
  Thrift exceptions field for field (``msg``, ``type``), so a failure looks the
  same whether it came over the wire or from an in-process runtime.
- ``Failure`` is the value form of a request or batch failure as it travels
  through the engine (collector -> acker -> spout -> request table); it turns
  into a ``DRPCExecutionException`` at the edge.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DRPCError(Exception):
    """Root of every exception drpc raises on purpose."""


class DRPCExceptionType(enum.IntEnum):
    """Storm's ``DRPCExceptionType`` enum; values are part of the wire format."""

    INTERNAL_ERROR = 0
    SERVER_SHUTDOWN = 1
    SERVER_TIMEOUT = 2
    FAILED_REQUEST = 3


class DRPCExecutionException(DRPCError):
    """A DRPC call did not produce a result.

    ``type`` tells why: FAILED_REQUEST (a step failed, or the function is not
    served), SERVER_TIMEOUT (the deadline passed), SERVER_SHUTDOWN, or
    INTERNAL_ERROR (the engine detected an inconsistency and refused to answer
    rather than answer wrongly).
    """

    def __init__(
        self, msg: str, type: DRPCExceptionType = DRPCExceptionType.FAILED_REQUEST
    ) -> None:
        super().__init__(msg)
        self.msg = msg
        self.type = DRPCExceptionType(type)

    def __repr__(self) -> str:
        return f"DRPCExecutionException({self.msg!r}, type={self.type.name})"

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.msg, self.type))


class ServerBusyError(DRPCExecutionException):
    """A call refused at once because a server limit is reached (queue depth, outstanding
    requests, functions tracked). On the wire it is FAILED_REQUEST with a message starting
    "server busy"; over HTTP it is 503 with ``Retry-After`` (``retry_after`` seconds, when
    known). Retrying later may succeed."""

    def __init__(
        self,
        msg: str,
        type: DRPCExceptionType = DRPCExceptionType.FAILED_REQUEST,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(msg, type)
        self.retry_after = retry_after


class NameTooLongError(DRPCExecutionException):
    """A function name or request id longer than the server's ``max_function_name`` UTF-8
    bytes, refused before it is looked up, logged or echoed. On the wire it is
    FAILED_REQUEST (execute), HTTP 400, or a ``TApplicationException`` on the invocations
    port, whose methods declare no exception for it."""


class AbandonedError(DRPCExecutionException):
    """The caller of a queued request went away (closed its connection) before a runtime
    fetched it: the server withdrew the request. Nobody receives it; observers count it as
    the outcome ``abandoned``."""


class ResidentTasksBrokenError(DRPCError):
    """A call on the resident Spark tasks (``drpc.executors.resident``) failed because their
    job broke, or was made while it restarts. A new job starts on its own: what was asked
    may be asked again once its tasks are back (``ResidentCluster.wait_ready``)."""


class AlreadyAliveError(DRPCError):
    """A plain topology of that name runs already (Storm's ``AlreadyAliveException``)."""


class NotAliveError(DRPCError):
    """No plain topology of that name runs (Storm's ``NotAliveException``)."""


class SparseProjectError(DRPCError, ValueError):
    """A streamparse project cannot run on drpc (``drpc.sparse``): a missing file or
    topology, or a part that does not map (a Java component, a custom grouping)."""


class AuthorizationException(DRPCError):
    """The caller's identity may not perform the operation."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.msg,))


class InvalidTopologyError(DRPCError, ValueError):
    """A topology cannot be built; ``component`` names the offending component."""

    def __init__(self, message: str, component: str | None = None) -> None:
        text = f"component {component!r}: {message}" if component else message
        super().__init__(text)
        self.component = component


class InvalidTupleError(DRPCError, ValueError):
    """An emit does not match its stream: wrong arity, unknown or misused stream."""


class UnserializableValueError(DRPCError, TypeError):
    """A value emitted by a bolt cannot be pickled, so it could not travel between tasks."""


class UnhashableGroupingValueError(DRPCError, TypeError):
    """A fields grouping met a value it cannot hash the same way in every process."""


class FailedException(DRPCError):
    """Raise from a bolt to fail the input tuple (and so its request or batch).

    Unlike other exceptions it is an expected outcome: drpc records the
    message as the failure reason without a traceback.
    """


class ReportedFailedException(FailedException):
    """A ``FailedException`` that is also logged as an error of the component."""


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a request, batch or tuple tree failed, as it travels through the engine."""

    type: DRPCExceptionType
    message: str
    component: str | None = None
    task: int | None = None
    tree_timeout: bool = False  # the tuple tree outlived topology.message.timeout.secs

    def to_exception(self) -> DRPCExecutionException:
        return DRPCExecutionException(self.message, self.type)

    @classmethod
    def timed_out(cls, detail: str = "") -> Failure:
        """The server's own request timer ran out (Storm's "Timed Out", SERVER_TIMEOUT)."""
        message = f"Timed Out: {detail}" if detail else "Timed Out"
        return cls(DRPCExceptionType.SERVER_TIMEOUT, message)

    @classmethod
    def tree_timed_out(
        cls,
        timeout: float,
        component: str | None = None,
        task: int | None = None,
        detail: str = "",
    ) -> Failure:
        """A tuple tree that did not complete within ``topology.message.timeout.secs``.

        Storm's DRPC spout fails such a request with FAILED_REQUEST (SERVER_TIMEOUT is
        the server's own timer); ``component`` names the step where it was stuck."""
        message = (
            f"Request failed: the tuple tree did not complete within {timeout:g} s "
            "(topology.message.timeout.secs)"
        )
        if component is not None:
            message += f"; stuck in step {component!r}"
            if task is not None:
                message += f" (task {task})"
        if detail:
            message += f": {detail}"
        return cls(DRPCExceptionType.FAILED_REQUEST, message, component, task, tree_timeout=True)

    @classmethod
    def from_exception(
        cls, error: BaseException, component: str | None, task: int | None, during: str
    ) -> Failure:
        """Describe an exception raised by user code in ``component`` while ``during``."""
        where = f"step {component!r}" if component else "a step"
        if task is not None:
            where += f" (task {task})"
        if isinstance(error, FailedException):
            detail = f"FailedException: {error}" if str(error) else "FailedException"
        else:
            detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        return cls(
            DRPCExceptionType.FAILED_REQUEST,
            f"Request failed: {where} raised {detail} in {during}",
            component,
            task,
        )


class StateError(DRPCError):
    """The LMDB state layer (``drpc.state``) could not do what was asked.

    The message names the state directory and what was wrong; an LMDB failure
    that is not one of the subclasses below arrives wrapped in this class.
    """


class StateFullError(StateError):
    """A write needs more room than the environment may grow to (``max_map_size``).

    The write was aborted (nothing of it is visible); the environment stays usable
    and a smaller next write can still succeed.
    """

    def __init__(self, path: str, map_size: int, max_map_size: int) -> None:
        super().__init__(
            f"state directory {path!r} is full: a write did not fit in {map_size} bytes "
            f"and max_map_size is {max_map_size} bytes; the write was aborted "
            "(raise max_map_size to allow larger state)"
        )
        self.path = path
        self.map_size = map_size
        self.max_map_size = max_map_size

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.map_size, self.max_map_size))


class StateForkError(StateError):
    """An LMDB environment was used in a process forked after it was opened.

    LMDB forbids using an environment across ``fork()``; open the state directory
    in a process that did not inherit an open environment for it.
    """


class StateInUseError(StateError):
    """Another writer holds the state directory: a live process commits to it, or this
    process already runs the same topology on it (``StateEnvironment.claim_writer``)."""

    def __init__(self, path: str, pid: int | None, holders: tuple[str, ...] = ()) -> None:
        who = f"process {pid}" if pid is not None else "another process"
        running = f" (running {', '.join(repr(h) for h in holders)})" if holders else ""
        super().__init__(
            f"state directory {path!r} is being written by {who}{running}; one process "
            "writes to a state directory at a time: stop that run first, or use another "
            "directory (reading it, e.g. drpc-transactional status, is fine meanwhile)"
        )
        self.path = path
        self.pid = pid
        self.holders = holders

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.pid, self.holders))


class StateClosedError(StateError):
    """A state environment was used after ``close()``."""


class StateOrderError(StateError):
    """Transaction ids arrived out of the order the state requires.

    Raised by strict rotating state (a txid without its predecessor, or with later
    txids already cached), by a commit record for a txid that is not the next one,
    and by a map update for a txid behind the txid already stored for that key.
    """


class VersionReclaimedError(StateError):
    """A read pinned to a committed version of a state directory came too late: the values
    it needed were reclaimed (its pin outlived ``version_retention``). The request fails;
    it never gets an answer mixing versions."""

    def __init__(self, path: str, version: int, oldest: int, latest: int) -> None:
        super().__init__(
            f"state directory {path!r}: version {version} was reclaimed; the oldest version "
            f"still readable is {oldest} and the latest is {latest} (a request reads its "
            "version for version_retention seconds after it entered)"
        )
        self.path = path
        self.version = version
        self.oldest = oldest
        self.latest = latest

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.version, self.oldest, self.latest))


class PartitionLostError(StateError):
    """A partition of a partitioned state is gone: no process holds its data any more (its
    worker or disk was lost), or what was found is behind the state's global commit record.
    The run stops and queries that need the partition fail with this error; no answer is
    made from the partitions left."""

    def __init__(self, group: str, partition: int, host: str | None, detail: str) -> None:
        where = f" (last on host {host})" if host else ""
        super().__init__(f"partition {partition} of state {group!r}{where} is lost: {detail}")
        self.group = group
        self.partition = partition
        self.host = host
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.group, self.partition, self.host, self.detail))


class CheckpointStoreError(StateError):
    """The checkpoint store (a run's ``checkpoint_dir``) could not be used: unreachable past
    its retry limit, refused the credentials, or the URI names no store drpc can reach.
    Nothing was recorded as committed that the store does not hold."""


class CheckpointCorruptError(CheckpointStoreError):
    """An object of the checkpoint store is not what drpc wrote there (a bad checksum, a
    truncated or foreign file), or a delta a restore needs is missing: the restore stops
    and names the object instead of rebuilding a partition from part of its history."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"checkpoint object {name!r}: {detail}")
        self.name = name
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.name, self.detail))


class PartitionKeyError(StateError, ValueError):
    """A committer task read or wrote a key that belongs to another partition of its state:
    its input is not grouped by the key it uses (group it with ``fields_grouping`` on the
    key's fields)."""


class StateFormatError(StateError):
    """A record of drpc's own in a state directory (a commit record, a spout's batch
    metadata) is in no format drpc reads, or was refused because reading it would have
    run code. The directory was written by something else, or tampered with."""


class StateKeyError(StateError, ValueError):
    """A key, txid or name cannot be stored: unsupported type, out of range or too long."""


class StateValueError(StateError, TypeError):
    """A state value cannot be pickled, so it could not be stored."""


class InvalidQueryError(DRPCError, ValueError):
    """A query of state was asked with an argument it cannot serve: a listing's page (its
    start, prefix or limit) malformed or over the limit. The message names the argument."""


class TransactionalError(DRPCError):
    """A transactional run cannot go on (e.g. one batch kept failing)."""


class SparkConfError(DRPCError, ValueError):
    """A Spark setting drpc was given is malformed (not KEY=VALUE, not a ``spark.`` key, an
    unreadable settings file); the message names the setting or the file and line."""


class SparkStartError(DRPCError):
    """The Spark session could not start serving: no executor registered in time, the
    master gave up, or the executors cannot run drpc's code. The message names the master,
    the driver address the executors were given and the likely cause."""


class MissingExtraError(DRPCError, ImportError):
    """An optional feature needs a package that is not installed; the message names the
    extra that installs it (``pip install 'drpc-spark[EXTRA]'``)."""


class BrokerError(DRPCError):
    """A log broker (Redis Streams, NATS JetStream) refused what a spout asked: bad
    credentials, a missing permission, an answer in no form the spout reads. The message
    names the broker as ``KIND at HOST:PORT``, never its credentials."""


class BrokerUnavailableError(BrokerError):
    """A broker could not be reached (refused, reset, timed out) for as long as the spout
    retries (``retry_for`` seconds, with backoff); meanwhile the run's status says
    ``waiting for KIND at HOST:PORT``."""


class RangeTrimmedError(BrokerError, FailedException):
    """A transactional spout cannot replay a batch: the broker no longer holds every entry
    of the range the batch was first emitted from (trimmed or deleted since). The batch
    fails (it would otherwise commit different tuples under the same txid); ``source``
    names the stream key or JetStream stream, ``first``/``last`` the range."""

    def __init__(self, source: str, first: str, last: str, detail: str) -> None:
        super().__init__(
            f"{source}: entries {first}..{last} can no longer be replayed ({detail}): they "
            "were trimmed or deleted since the batch was first emitted; a transactional "
            "spout emits exactly the same batch or none (an opaque spout goes on from what "
            "exists)"
        )
        self.source = source
        self.first = first
        self.last = last
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.source, self.first, self.last, self.detail))


class ShellProcessError(DRPCError):
    """A multilang subprocess (``drpc.multilang``: a ``ShellBolt`` or ``ShellSpout``) failed:
    the tuples it had in flight fail with this error and the subprocess is restarted. The
    message names the ``command``, what happened (``detail``), its ``exit_status`` (None
    while it ran; negative: killed by that signal) and the tail of its stderr."""

    def __init__(
        self,
        command: tuple[str, ...],
        detail: str,
        exit_status: int | None = None,
        stderr_tail: str = "",
    ) -> None:
        self.command = tuple(command)
        self.detail = detail
        self.exit_status = exit_status
        self.stderr_tail = stderr_tail
        super().__init__(
            f"multilang subprocess {' '.join(self.command)!r} {detail} "
            f"({describe_exit_status(exit_status)}); "
            f"stderr tail: {stderr_tail.strip()!r}"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.command, self.detail, self.exit_status, self.stderr_tail))


def describe_exit_status(status: int | None) -> str:
    """``exit status 3``, ``killed by signal 9`` or ``no exit status``."""
    if status is None:
        return "no exit status"
    if status >= 0:
        return f"exit status {status}"
    return f"killed by signal {-status}"


class ShellProcessExitedError(ShellProcessError):
    """The multilang subprocess exited (or closed its output) while it was serving."""


class ShellHeartbeatTimeoutError(ShellProcessError):
    """The multilang subprocess wrote nothing, not even the ``sync`` a heartbeat asks for,
    for longer than its heartbeat timeout: it was killed."""


class ShellProtocolError(ShellProcessError):
    """The multilang subprocess wrote something that is not the multilang protocol (not
    JSON, no ``command``, an ack of an unknown tuple id...): it was killed."""


class ShellHandshakeError(ShellProcessError):
    """The multilang subprocess did not answer the handshake with ``{"pid": N}`` (it
    exited, wrote something else, or stayed silent past its start timeout)."""


class ShellReportedError(DRPCError):
    """What a multilang subprocess reported with its ``error`` command (Storm's "Shell
    Process Exception"), handed to the collector's ``report_error``."""
