"""One multilang subprocess and its pipes: the IO under a ShellBolt or ShellSpout.

Contract. ``ShellProcess(command, cwd=..., env=..., on_output=..., on_closed=...,
on_stderr=..., stderr_tail_bytes=...)``; ``start()`` runs ``command`` in a session of its
own (so ``kill`` reaches the children it started too) with three pipes and one thread
each:

- the reader hands each chunk of stdout to ``on_output(data)`` as it arrives and calls
  ``on_closed()`` once stdout ends;
- ``write(data)`` keeps the order of the writes and never blocks (a subprocess that
  stops reading must not stall the task that executes tuples): a write that comes
  ``QUIET`` seconds or more after the one before, with nothing queued, goes out from the
  calling thread at once (a lone tuple does not wait for a thread to wake); the rest of
  it, and writes closer together, queue for the writer thread, which writes what queued
  in one go; a write to a subprocess that closed its stdin is dropped (its end is seen
  by the reader or the heartbeat);
- the stderr reader keeps the last ``stderr_tail_bytes`` bytes (``stderr_tail()``) and
  hands every line to ``on_stderr(line)``.

``output_ended`` is set once stdout ended. ``kill(grace)`` waits up to ``grace``
seconds for the subprocess to exit by itself, then kills its session, and returns its
exit status (negative: the signal that ended it) once its stderr is read to the end (or
after a second). ``stop(grace)`` closes its stdin first, for a subprocess that exits
when its input ends. The callbacks run on the threads; ``start`` raises ``OSError``
when the command cannot be run.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Final

DEFAULT_STDERR_TAIL_BYTES: Final = 4096
"""How much of a subprocess's stderr its errors quote (the last bytes)."""
QUIET: Final = 0.0003
"""A write that comes this long (seconds) after the one before goes out from the calling
thread at once; writes closer together queue for the writer thread, which writes them
in one go."""
_READ_SIZE: Final = 65536
_STDERR_WAIT: Final = 1.0


class Tail:
    """The last ``limit`` bytes of what was added."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"stderr_tail_bytes must not be negative, got {limit}")
        self.limit = limit
        self._data = bytearray()
        self._lock = threading.Lock()

    def add(self, data: bytes) -> None:
        with self._lock:
            self._data += data
            if len(self._data) > self.limit:
                del self._data[: len(self._data) - self.limit]

    def text(self) -> str:
        with self._lock:
            return self._data.decode(errors="replace")


class ShellProcess:
    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        on_output: Callable[[bytes], None],
        on_closed: Callable[[], None],
        on_stderr: Callable[[str], None],
        stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES,
    ) -> None:
        self.command = tuple(command)
        self.cwd = cwd
        self.env = None if env is None else {**os.environ, **env}
        self._on_output = on_output
        self._on_closed = on_closed
        self._on_stderr = on_stderr
        self._tail = Tail(stderr_tail_bytes)
        self._writes: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._write_lock = threading.Lock()
        self._backlog = False  # the writer thread has bytes to write: later ones queue
        self._last_write = -math.inf
        self._stdin_fd = -1
        self._popen: subprocess.Popen[bytes] | None = None
        self._stderr_thread: threading.Thread | None = None
        self.output_ended = False

    @property
    def pid(self) -> int | None:
        return None if self._popen is None else self._popen.pid

    def start(self) -> None:
        popen = self._popen = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.cwd,
            env=self.env,
            bufsize=0,
            start_new_session=True,
        )
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        self._stdin_fd = popen.stdin.fileno()
        os.set_blocking(self._stdin_fd, False)
        name = f"multilang-{popen.pid}"
        threading.Thread(
            target=self._read, args=(popen.stdout,), name=f"{name}-out", daemon=True
        ).start()
        threading.Thread(
            target=self._write, args=(popen.stdin,), name=f"{name}-in", daemon=True
        ).start()
        self._stderr_thread = threading.Thread(
            target=self._read_stderr, args=(popen.stderr,), name=f"{name}-err", daemon=True
        )
        self._stderr_thread.start()

    def write(self, data: bytes) -> None:
        now = time.monotonic()
        with self._write_lock:
            quiet = now - self._last_write >= QUIET
            self._last_write = now
            if quiet and not self._backlog:
                try:
                    written = os.write(self._stdin_fd, data)
                except BlockingIOError:
                    written = 0
                except OSError:
                    return  # closed, or the subprocess is gone: the reader sees the end
                if written == len(data):
                    return
                data = data[written:]
            self._backlog = True
            self._writes.put(data)

    def stderr_tail(self) -> str:
        return self._tail.text()

    def kill(self, grace: float = 0.0) -> int | None:
        popen = self._popen
        if popen is None:
            return None
        try:
            popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                popen.kill()
            popen.wait()
        self._writes.put(None)
        if self._stderr_thread is not None:
            self._stderr_thread.join(_STDERR_WAIT)
        return popen.returncode

    def stop(self, grace: float) -> int | None:
        self._writes.put(None)
        return self.kill(grace)

    # -- threads ------------------------------------------------------------------------

    def _read(self, stdout: IO[bytes]) -> None:
        fd = stdout.fileno()
        try:
            while True:
                try:
                    data = os.read(fd, _READ_SIZE)
                except OSError:
                    data = b""
                if not data:
                    break
                self._on_output(data)
        finally:
            self.output_ended = True
            self._on_closed()
            with contextlib.suppress(OSError):
                stdout.close()

    def _write(self, stdin: IO[bytes]) -> None:
        fd = stdin.fileno()
        writes = self._writes
        writable = select.poll()  # not select(): a Spark worker's fds may pass FD_SETSIZE
        writable.register(fd, select.POLLOUT)
        try:
            while True:
                first = writes.get()
                if first is None:
                    return
                chunks = [first]
                done = False
                while True:
                    try:
                        more = writes.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        done = True
                        break
                    chunks.append(more)
                view = memoryview(b"".join(chunks))
                while view:
                    try:
                        view = view[os.write(fd, view) :]
                    except BlockingIOError:  # the pipe is full: wait until it takes more
                        writable.poll()
                with self._write_lock:
                    if writes.empty():
                        self._backlog = False
                if done:
                    return
        except OSError:
            return  # the subprocess closed its stdin or is gone: the reader sees the end
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    def _read_stderr(self, stderr: IO[bytes]) -> None:
        try:
            for line in stderr:
                self._tail.add(line)
                self._on_stderr(line.decode(errors="replace").rstrip("\n"))
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                stderr.close()
