"""A real S3-compatible server for tests: moto's server mode on a free loopback port.

``S3Server(directory)`` starts ``python -m moto.server`` on 127.0.0.1; ``stop()`` kills it
and ``start()`` starts it again on the same port (moto keeps its objects in memory, so a
restarted server is empty: ``create_bucket`` again). ``settings(prefix, **more)`` are the
``CheckpointSettings`` of ``s3://<bucket>/<prefix>`` on it, with its endpoint, region and
credentials. ``Outage(server)`` is a TCP gate in front of it on a port of its own: ``cut()``
drops every connection and refuses new ones (the network to the store is down, its data
kept), ``mend()`` lets them through again. Fixture (a plugin of ``tests/conftest.py``):
``s3_server``, one server for the session with ``BUCKET`` made; a test that needs it skips,
saying why, when moto is not installed (``make install`` installs it with the test extras).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drpc.state.checkpoint_store import CheckpointSettings
from tests.brokers import START_TIMEOUT, _listening, free_port
from tests.tcp_gate import TcpGate
from tests.waiting import settle_garbage

BUCKET = "drpc-checkpoints"
REGION = "us-east-1"
ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key-never-logged"


class S3Server:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "moto.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while not _listening(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)
        self.process = None

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def create_bucket(self, name: str = BUCKET) -> None:
        self.client().create_bucket(Bucket=name)

    def settings(self, prefix: str, **more: Any) -> CheckpointSettings:
        return CheckpointSettings(
            f"s3://{BUCKET}/{prefix}",
            endpoint_url=self.endpoint,
            region=REGION,
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            **more,
        )

    def conf(self) -> dict[str, Any]:
        """The run conf that reaches this server (``drpc.checkpoint.s3.*``)."""
        return {
            "drpc.checkpoint.s3.endpoint": self.endpoint,
            "drpc.checkpoint.s3.region": REGION,
            "drpc.checkpoint.s3.access.key": ACCESS_KEY,
            "drpc.checkpoint.s3.secret.key": SECRET_KEY,
        }


class Outage(TcpGate):
    """A TCP gate before ``server`` (see the module doc and ``tests.tcp_gate``)."""

    def __init__(self, server: S3Server) -> None:
        self.server = server
        super().__init__(server.port)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def s3_settled() -> Iterator[None]:
    """After the test, let go of what its s3fs clients held: s3fs closes a dropped client's
    session on fsspec's IO thread, which frees a cycle of some 30 000 botocore objects
    there, later. Collected here, that garbage does not land in another test's count."""
    yield
    settle_garbage()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    pytest.importorskip("moto.server", reason="moto[server] is not installed (make install)")
    pytest.importorskip("s3fs", reason="s3fs is not installed (make install)")
    server = S3Server(tmp_path_factory.mktemp("s3"))
    server.start()
    server.create_bucket()
    yield server
    server.stop()
