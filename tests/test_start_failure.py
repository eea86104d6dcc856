"""What a failed Spark start says: the master, the driver address the executors were given,
and the likely cause, for each way a start fails (drpc.runtime; the real thing runs in
tests/cluster/test_two_hosts.py)."""

from __future__ import annotations

import pytest

from drpc.runtime import _start_failure

MASTER = "spark://10.0.0.1:7077"


def test_a_loopback_driver_still_starting() -> None:
    message = _start_failure({"spark.master": MASTER, "spark.driver.host": "127.0.0.1"}, 5)
    assert message.startswith(f"no Spark executor registered within 5 s on master {MASTER}; ")
    assert "reach the driver at 127.0.0.1 (spark.driver.host; port not reported yet)" in message
    assert "Likely cause: 127.0.0.1 is a loopback address" in message


def test_a_master_that_gave_up() -> None:
    settings = {"spark.master": MASTER, "spark.driver.host": "10.0.0.2", "spark.driver.port": "4"}
    message = _start_failure(settings, 120, stopped=True, accepted=False)
    assert message.startswith(f"the Spark master {MASTER} gave up on the application")
    assert "reach the driver at 10.0.0.2:4 (spark.driver.host:spark.driver.port)" in message
    assert "is a master running, and reachable from this host" in message


def test_an_accepted_application_without_executors() -> None:
    settings = {"spark.master": MASTER, "spark.driver.host": "10.0.0.2", "spark.driver.port": "4"}
    message = _start_failure(settings, 120, accepted=True)
    assert "no Spark executor registered within 120 s" in message
    assert "cannot connect back to the driver" in message
    assert "no worker has the free cores and memory" in message


def test_an_unset_driver_host_on_yarn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    message = _start_failure({"spark.master": "yarn"}, 30)
    assert "reach the driver at an address Spark picked" in message
    assert "cannot connect back to the driver" in message  # no standalone verdict on yarn
