"""drpc on a real two-host Spark cluster: a standalone master and two workers on one host, the
server on another (network namespaces joined by a veth pair, tests/cluster/harness.py), each
started with the commands docs/how-to/cluster.md documents.

In order, on one cluster:

1. a driver the executors cannot reach (``spark.driver.host=127.0.0.1``, the shape of
   issue 16) fails the start within ``--start-timeout``, exit 1, naming the master, the
   driver address and the cause;
2. ``spark-submit`` of a script whose bolt lives in ``__main__``: the server adopts the
   submitted master and settings, and the bolt runs on the executors;
3. ``drpc-server --master spark://... --executor spark`` (the resident executor, the
   default) with the code shipped as a packed environment (``spark.archives``) and a zip
   (``spark.submit.pyFiles``) from ``--spark-conf-file``, under a ``spark-defaults.conf``
   in ``SPARK_CONF_DIR`` (its app name applies, its executor memory, too large for the
   workers, loses to ``--spark-conf``): reach answers 16, 14 and 7 through the Python
   client, the resident tasks serve on the cluster host's address, the dashboard links the
   Spark UI, a transactional run commits exactly once, and a worker JVM SIGKILLed under
   load leaves only right answers or typed errors, then serving resumes on the one worker
   left. The transactional run's batches run on the resident tasks too, so they go on
   there; the killed worker is started again, as its supervisor would;
4. scale-out serving: a ``drpc-server`` on each host and a ``drpc-runner --executor
   spark`` driving two resident tasks on the cluster: the tasks fetch from both servers
   themselves (every fetching connection comes from the cluster host; the driver holds
   none) and answer each caller through its own server.

Nothing is written inside the installed pyspark, and everything is torn down afterwards.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drpc.compiled import engine_build
from tests.cluster.harness import (
    ROOT,
    Host,
    SparkCluster,
    TwoHosts,
    alive,
    children,
    cmdline,
    host_env,
    kill,
    package_listing,
    wait_for,
)
from tests.transactional.test_faults import committed, write_words

pytestmark = [pytest.mark.slow, pytest.mark.fault, pytest.mark.cluster, pytest.mark.spark]

BIN = Path(sys.executable).parent
EXECUTOR_MEMORY = "spark.executor.memory=512m"  # two of them fit the workers' 1g
WORDS = 8_000  # per half of the transactional input: two batches of 4 x 1000


@pytest.fixture(scope="module", autouse=True)
def package_before() -> list[str]:
    """The installed pyspark as it was before any Spark process of this module started."""
    return package_listing()


def _log(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _serving(server: subprocess.Popen[str], log: Path, timeout: float) -> str:
    """Wait until the server logs that it serves; returns its log so far."""
    wait_for(
        lambda: "DRPC server serving" in _log(log) or server.poll() is not None,
        timeout,
        "the server did not start serving",
        interval=0.2,
    )
    assert server.poll() is None, _log(log)[-4000:]
    return _log(log)


def _shipping(tmp_path: Path, shipped: dict[str, Path], more: str = "") -> Path:
    """A ``--spark-conf-file`` shipping the packed environment and the tests' code (and
    ``more`` settings) to the executors."""
    conf = tmp_path / "cluster.conf"
    conf.write_text(
        f"spark.archives        {shipped['environment']}#environment\n"
        "spark.pyspark.python  ./environment/bin/python\n"
        f"spark.submit.pyFiles  {shipped['code']}\n" + more
    )
    return conf


def _stop(server: subprocess.Popen[str], log: Path, driver: str | None = None) -> None:
    """SIGTERM the server (under spark-submit: its Python driver, the child whose command line
    has ``driver``) and check that it exits 0."""
    if server.poll() is None:
        targets = [pid for pid in children(server.pid) if driver and driver in cmdline(pid)]
        kill(targets[0] if targets else server.pid, signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
    assert server.returncode == 0, _log(log)[-4000:]


def _calls(hosts: TwoHosts, *args: str) -> subprocess.Popen[str]:
    return hosts.cluster.popen(
        [sys.executable, "-m", "tests.cluster.calls", *args, "--server", hosts.server.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.timeout(300)  # with the cluster's start
def test_a_driver_the_executors_cannot_reach_fails_the_start_loudly(
    two_hosts: TwoHosts, spark_cluster: SparkCluster
) -> None:
    refused = two_hosts.server.run(
        [BIN / "drpc-server", "--master", spark_cluster.master_url,
         "--spark-conf", "spark.driver.host=127.0.0.1", "--spark-conf", EXECUTOR_MEMORY,
         "--start-timeout", "3", "--topology", "drpc.examples.exclamation:topology",
         "--http-port", "-1"],
        timeout=240,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stderr[-4000:]
    [error] = [line for line in refused.stderr.splitlines() if "cannot serve" in line]
    assert f"on master {spark_cluster.master_url}" in error
    assert "no Spark executor registered within 3 s" in error
    assert "reach the driver at 127.0.0.1" in error
    assert "127.0.0.1 is a loopback address" in error
    assert "Traceback" not in refused.stderr  # never a hang either: run() has a timeout


@pytest.mark.timeout(300)
def test_spark_submit_adopts_the_submitted_master_and_runs_bolts_from_main(
    two_hosts: TwoHosts,
    spark_cluster: SparkCluster,
    shipped: dict[str, Path],
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    server = two_hosts.server.popen(
        [BIN / "spark-submit", "--master", spark_cluster.master_url, "--name", "shouting",
         "--archives", f"{shipped['environment']}#environment",
         "--conf", "spark.pyspark.python=./environment/bin/python",
         "--conf", f"spark.pyspark.driver.python={sys.executable}",
         "--conf", EXECUTOR_MEMORY, "--conf", "spark.ui.enabled=false",
         ROOT / "tests" / "cluster" / "serve.py",
         "--topology", "__main__:shout", "--http-port", "-1", "--log-level", "INFO"],
        log=log,
        env=host_env(PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    try:
        started = _serving(server, log, 240)
        shouted = two_hosts.cluster.run(
            [sys.executable, "-c",
             "from drpc.client import DRPCClient\n"
             f"with DRPCClient('{two_hosts.server.address}', 3772, timeout=120) as client:\n"
             "    print(client.execute('shout', 'on two hosts'))"],
            timeout=180,
        )  # fmt: skip
    finally:
        _stop(server, log, driver="serve.py")
    assert shouted.returncode == 0, shouted.stderr[-3000:]
    assert shouted.stdout.strip() == "ON TWO HOSTS!"
    [line] = [line for line in started.splitlines() if "started SparkSession" in line]
    assert f"'shouting' on {spark_cluster.master_url}" in line  # submitted name and master
    assert "Spark UI off" in line  # the submitted setting over drpc's cluster default
    assert "environment/lib/python" in line  # drpc came from the shipped environment


@pytest.mark.timeout(900)  # with the cluster's teardown
def test_serving_and_a_transactional_run_on_two_hosts_through_a_worker_kill(
    two_hosts: TwoHosts,
    spark_cluster: SparkCluster,
    shipped: dict[str, Path],
    package_before: list[str],
    tmp_path: Path,
) -> None:
    words, state, log = tmp_path / "words", tmp_path / "state", tmp_path / "server.log"
    expected = write_words(words, seed=11, count=WORDS)
    conf = _shipping(tmp_path, shipped)
    (tmp_path / "spark-conf").mkdir()
    (tmp_path / "spark-conf" / "spark-defaults.conf").write_text(
        "spark.app.name         two-hosts\n"  # over drpc's default name
        "spark.executor.memory  4g\n"  # more than a worker has: --spark-conf must win
    )
    server = two_hosts.server.popen(
        [BIN / "drpc-server", "--master", spark_cluster.master_url,
         "--spark-conf-file", conf, "--spark-conf", EXECUTOR_MEMORY,
         "--executor", "spark", "--topology", "drpc.examples.reach:topology",
         "--transactional", "tests.transactional.faults:topology", "--state-dir", state,
         "--max-spout-pending", "2", "--timeout", "240", "--log-level", "INFO"],
        log=log,
        env=host_env(
            PYTHONPATH=str(ROOT),
            SPARK_CONF_DIR=str(tmp_path / "spark-conf"),
            DRPC_TEST_LOG_DIR=str(words),
            DRPC_TEST_TAKE="1000",
        ),
    )  # fmt: skip
    try:
        started = _serving(server, log, 240)
        checked = _calls(two_hosts, "check")
        out, err = checked.communicate(timeout=240)
        assert checked.returncode == 0, err[-3000:]
        report = json.loads(out.splitlines()[-1])
        assert report["reach"] == {
            "foo.com/blog/1": "16",
            "engineering.twitter.com/blog/5": "14",
            "tech.backtype.com/blog/123": "7",
        }
        assert f"'two-hosts' on {spark_cluster.master_url}" in started  # spark-defaults.conf
        ui = re.search(r"Spark UI at (http://\S+?);", started)
        assert ui and ui.group(1) == f"http://{two_hosts.server.address}:4040"
        assert report["spark_ui"] == ui.group(1)  # the dashboard links what was logged
        assert "Spark" in report["ui_title"]  # and the UI answers there

        loading = _calls(two_hosts, "load", "--callers", "16", "--after", "3")
        assert loading.stdout is not None and loading.stdin is not None
        assert loading.stdout.readline().strip() == "loaded"
        wait_for(lambda: len(spark_cluster.executor_pids()) == 2, 30, "two executors")
        lost = spark_cluster.kill_worker(1)
        loading.stdin.write("killed\n")
        loading.stdin.flush()
        expected += write_words(words, seed=12, count=WORDS)  # processed only after the kill
        out, err = loading.communicate(timeout=600)
        assert loading.returncode == 0, err[-3000:]
        load = json.loads(out.splitlines()[-1])
        spark_cluster.start_worker(1)  # its supervisor's restart
        wait_for(lambda: committed(state, opaque=False) == expected, 300, "the run committing")
        time.sleep(1.0)  # it goes on polling the source: nothing more may be counted
    finally:
        _stop(server, log)
    served = _log(log)
    assert "serving DRPC function 'reach' on the resident Spark tasks" in started
    serving = [
        line
        for stderr in spark_cluster.workdir.glob("work-*/app-*/*/stderr")
        for line in stderr.read_text().splitlines()
        if "drpc.executors.resident.worker: resident task" in line and " serving on " in line
    ]
    serving_on = {line.rsplit(" ", 1)[1].rsplit(":", 1)[0] for line in serving}
    assert serving_on == {two_hosts.cluster.address}  # bound to their executors' address
    # The packed environment carries the engine this checkout runs, compiled or not.
    assert {line.split("(", 1)[1].split(")")[0] for line in serving} == {f"{engine_build()} engine"}
    assert lost and not any(alive(pid) for pid in lost)  # its executor went down with it
    assert "Lost executor" in served or "Executor lost" in served  # and Spark noticed
    assert load["across_kill"] > 0  # calls were in flight when the worker died
    assert load["wrong"] == []  # never a wrong answer
    assert set(load["outcomes"]) <= {"ok", "INTERNAL_ERROR", "FAILED_REQUEST"}, load["errors"]
    assert load["resumed"] == [True] * 20  # and serving resumed
    assert committed(state, opaque=False) == expected  # exactly once, across the kill
    assert package_listing() == package_before  # nothing written inside pyspark
    assert list(spark_cluster.workdir.glob("work-*/app-*")), "the work directories moved"


CALL_BOTH = """
import sys, time
from drpc.client import DRPCClient, DRPCExecutionException
from drpc.examples.reach import EXPECTED_REACH
for host in sys.argv[1:]:
    with DRPCClient(host, 3772, timeout=120) as client:
        deadline = time.monotonic() + 120
        while True:  # until the server has seen the tasks fetch reach
            try:
                client.execute("reach", "foo.com/blog/1")
                break
            except DRPCExecutionException as error:
                if "is not served" not in error.msg or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for url, want in EXPECTED_REACH.items():
            assert client.execute("reach", url) == str(want), (host, url)
print("answered")
"""
"""Run on the cluster host: reach through the server on each host given."""


def _peers(host: Host, port: int) -> set[str]:
    """The addresses of the connections established to ``port`` on ``host``."""
    listed = host.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"], timeout=30)
    assert listed.returncode == 0, listed.stderr
    return {line.split()[-1].rsplit(":", 1)[0] for line in listed.stdout.splitlines()}


@pytest.mark.timeout(300)
def test_the_resident_tasks_fetch_from_a_server_on_each_host_past_the_driver(
    two_hosts: TwoHosts, spark_cluster: SparkCluster, shipped: dict[str, Path], tmp_path: Path
) -> None:
    conf = _shipping(tmp_path, shipped, "spark.ui.enabled      false\n")
    hosts = (two_hosts.server, two_hosts.cluster)
    logs = [tmp_path / f"server-{index}.log" for index in range(2)]
    servers = [
        host.popen(
            [BIN / "drpc-server", "--host", host.address, "--executor", "local",
             "--http-port", "-1", "--runner-liveness", "2", "--log-level", "INFO"],
            log=log,
        )
        for host, log in zip(hosts, logs, strict=True)
    ]  # fmt: skip
    runner_log = tmp_path / "runner.log"
    runner = two_hosts.server.popen(
        [BIN / "drpc-runner", "--servers", ",".join(f"{host.address}:3773" for host in hosts),
         "--master", spark_cluster.master_url, "--spark-conf-file", conf,
         "--spark-conf", EXECUTOR_MEMORY, "--executor", "spark", "--slots", "2",
         "--topology", "drpc.examples.reach:topology", "--poll-interval", "0.02",
         "--log-level", "INFO"],
        log=runner_log,
        env=host_env(PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    try:
        for server, log in zip(servers, logs, strict=True):
            _serving(server, log, 60)
        wait_for(
            lambda: (
                "the resident Spark tasks fetch reach themselves" in _log(runner_log)
                or runner.poll() is not None
            ),
            240,
            "the runner did not start serving",
            interval=0.2,
        )
        assert runner.poll() is None, _log(runner_log)[-4000:]
        calling = two_hosts.cluster.run(
            [sys.executable, "-c", CALL_BOTH, *(host.address for host in hosts)],
            timeout=240,
            env=host_env(PYTHONPATH=str(ROOT)),
        )
        assert calling.returncode == 0, calling.stderr[-3000:] + _log(runner_log)[-3000:]
        assert calling.stdout.strip() == "answered"
        fetchers = [_peers(host, 3773) for host in hosts]
    finally:
        _stop(runner, runner_log)
        for server, log in zip(servers, logs, strict=True):
            _stop(server, log)
    # Both servers' fetching connections come from the cluster host, where the tasks run;
    # the driver, on the server host, fetches nothing.
    assert fetchers == [{two_hosts.cluster.address}] * 2
    fetched_from = {
        line.rsplit(" ", 1)[1]
        for stderr in spark_cluster.workdir.glob("work-*/app-*/*/stderr")
        for line in stderr.read_text().splitlines()
        if "drpc.runner: serving reach for " in line
    }
    assert fetched_from == {f"{host.address}:3773" for host in hosts}


ASK_COUNTS = """
import json, sys
from drpc.client import DRPCClient
with DRPCClient(sys.argv[1], 3772, timeout=120) as client:
    print(client.execute("count", " ".join(sys.argv[2:])))
"""
"""Run on the cluster host: the committed count of each word, through the server."""


@pytest.mark.timeout(600)
def test_partitioned_state_lives_on_the_worker_host_and_queries_read_it_there(
    two_hosts: TwoHosts, spark_cluster: SparkCluster, shipped: dict[str, Path], tmp_path: Path
) -> None:
    """Each host has a private disk over the same path: the state directory's global record
    is on the server host (the driver), the partitions on the cluster host (its resident
    tasks), and neither sees the other's files. Queries through the server read them right,
    and so do queries through a server on the cluster host (``--executor local``), which
    reads the partitions on its own disk (each at its latest: the global record is not
    there) and makes nothing where that record would be."""
    assert two_hosts.private is not None
    state, words, log = two_hosts.private / "state", tmp_path / "words", tmp_path / "server.log"
    expected = write_words(words, seed=17, count=WORDS)
    conf = _shipping(tmp_path, shipped, "spark.ui.enabled      false\n")
    server = two_hosts.server.popen(
        [BIN / "drpc-server", "--host", two_hosts.server.address, "--master",
         spark_cluster.master_url, "--spark-conf-file", conf, "--spark-conf", EXECUTOR_MEMORY,
         "--executor", "spark", "--slots", "2", "--topology", "tests.cluster.partitioned:query",
         "--transactional", "tests.cluster.partitioned:topology", "--state-dir", state,
         "--http-port", "-1", "--log-level", "INFO"],
        log=log,
        env=host_env(PYTHONPATH=str(ROOT), DRPC_TEST_LOG_DIR=str(words), DRPC_STATE_DIR=str(state)),
    )  # fmt: skip
    local_log = tmp_path / "local-server.log"
    local = two_hosts.cluster.popen(
        [BIN / "drpc-server", "--host", two_hosts.cluster.address, "--executor", "local",
         "--topology", "tests.cluster.partitioned:query", "--http-port", "-1"],
        log=local_log,
        env=host_env(PYTHONPATH=str(ROOT), DRPC_TEST_LOG_DIR=str(words), DRPC_STATE_DIR=str(state)),
    )  # fmt: skip
    asked = sorted(expected)[:40]
    try:
        _serving(server, log, 240)
        _serving(local, local_log, 60)

        def answered(through: str) -> dict[str, int]:
            calling = two_hosts.cluster.run(
                [sys.executable, "-c", ASK_COUNTS, through, *asked],
                timeout=120,
                env=host_env(PYTHONPATH=str(ROOT)),
            )
            assert calling.returncode == 0, calling.stderr[-3000:] + _log(log)[-3000:]
            return {word: count for word, count in json.loads(calling.stdout)}

        want = {word: expected[word] for word in asked}
        wait_for(lambda: answered(two_hosts.server.address) == want, 300, "counts")
        assert answered(two_hosts.cluster.address) == want
        on_server = two_hosts.server.run(
            [BIN / "drpc-transactional", "status", "--state-dir", state, "--json"], timeout=60
        )
        listed = {
            host.address: host.run(["find", two_hosts.private, "-name", "data.mdb"], timeout=30)
            for host in two_hosts.hosts
        }
    finally:
        _stop(local, local_log)
        _stop(server, log)
    assert on_server.returncode == 0, on_server.stderr
    report = json.loads(on_server.stdout)
    assert report["maps"] == {}  # the server host holds no map data: only the global record
    assert [(p["group"], p["index"]) for p in report["partitions"]] == [
        ("counts", 0),
        ("counts", 1),
    ]
    assert {p["host"] for p in report["partitions"]} == {two_hosts.cluster.address}
    assert {p["task"] for p in report["partitions"]} == {1, 2}  # one on each resident task
    assert not any("txid" in p for p in report["partitions"])  # none of them on this host
    server_files = sorted(listed[two_hosts.server.address].stdout.split())
    cluster_files = sorted(listed[two_hosts.cluster.address].stdout.split())
    assert server_files == [f"{state}/data.mdb"]
    assert cluster_files == [f"{state}/partitions/counts/p{index}/data.mdb" for index in (0, 1)]
    assert not any(two_hosts.private.iterdir())  # and this process sees neither disk
