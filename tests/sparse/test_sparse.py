"""streamparse projects on drpc: the project ``sparse quickstart wordcount`` generates (real
streamparse and pystorm from PyPI) runs with ``drpc-sparse run`` and through
``drpc.sparse`` on each executor; what does not map is refused, naming it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from drpc.errors import SparseProjectError
from drpc.sparse import SparseProject
from drpc.topologies import LocalCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

SPARSE = Path(sys.executable).parent / "sparse"

JAVA_TOPOLOGY = """
from streamparse import Grouping, JavaSpout, Topology

from bolts.wordcount import WordCountBolt


class Mixed(Topology):
    kafka = JavaSpout.spec(
        full_class_name="org.apache.storm.kafka.KafkaSpout", args_list=[], outputs=["word"]
    )
    count = WordCountBolt.spec(inputs={kafka: Grouping.fields("word")})
"""


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project ``sparse quickstart wordcount`` generates, as a streamparse user has it."""
    where = tmp_path_factory.mktemp("sparse")
    # as root, sparse refuses to start unless told Leiningen may run as root (it never does)
    env = {**os.environ, "LEIN_ROOT": "1"}
    made = subprocess.run(
        [str(SPARSE), "quickstart", "wordcount"], cwd=where, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    return where / "wordcount"


@pytest.fixture
def project(quickstart: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "wordcount"
    shutil.copytree(quickstart, copy)
    return copy


@pytest.mark.parametrize("in_process", [False, True], ids=["subprocess", "in-process"])
def test_the_quickstart_counts_its_words_on_each_executor(
    plain_executor: str, project: Path, in_process: bool
) -> None:
    sparse = SparseProject(project)
    assert sparse.names() == ["wordcount"]
    builder = sparse.builder("wordcount", in_process=in_process)
    with LocalCluster(plain_executor) as cluster:
        cluster.submit_topology("wordcount", None, builder)

        def counted() -> int:
            return cluster.get_topology_info("wordcount").components["count_bolt"].acked

        wait_until(lambda: counted() > 200, 120, what="words counted")
        cluster.deactivate("wordcount")  # the spout stops; what it emitted drains

        def drained() -> bool:
            figures = cluster.get_topology_info("wordcount").components
            return figures["word_spout"].emitted == figures["count_bolt"].acked

        wait_until(drained, 60, what="every emitted word counted")
        figures = cluster.get_topology_info("wordcount").components
    spout, bolt = figures["word_spout"], figures["count_bolt"]
    assert (spout.kind, spout.tasks, bolt.kind, bolt.tasks) == ("spout", 1, "bolt", 2)
    assert spout.emitted == bolt.acked == bolt.emitted > 200  # one [word, count] per word
    assert (spout.failed, bolt.failed) == (0, 0)


def test_drpc_sparse_run_runs_the_quickstart_from_its_directory(project: Path) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "drpc.sparse_cli", "run", "-n", "wordcount", "--seconds", "3",
         "--stats-every", "0.5", "--json"],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    info = json.loads(ran.stdout)
    assert info["name"] == "wordcount"
    stats = {component["component"]: component for component in info["components"]}
    assert stats["count_bolt"]["acked"] > 100
    assert stats["count_bolt"]["acked"] == stats["count_bolt"]["emitted"]  # drained


def test_what_does_not_map_is_refused_naming_it(project: Path, tmp_path: Path) -> None:
    with pytest.raises(SparseProjectError, match="is not a streamparse project"):
        SparseProject(tmp_path / "nothing")
    sparse = SparseProject(project)
    with pytest.raises(SparseProjectError, match=r"no topology 'typo' in .* \(wordcount\)"):
        sparse.topology("typo")
    (project / "topologies" / "mixed.py").write_text(JAVA_TOPOLOGY)
    with pytest.raises(SparseProjectError, match="component 'kafka' is a JavaSpoutSpec"):
        sparse.builder("mixed")
    (project / "topologies" / "empty.py").write_text("X = 1\n")
    with pytest.raises(SparseProjectError, match="defines 0 streamparse Topology classes"):
        sparse.topology("empty")


def test_a_drpc_sparse_mistake_is_one_line_and_exit_2(project: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "drpc.sparse_cli", "run", "-n", "typo"],
        cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.splitlines() if "Warning" not in line]
    assert lines[-1].startswith("drpc-sparse: error: no topology 'typo'")
    assert lines[-1].endswith("(see drpc-sparse --help)")
    listed = subprocess.run(
        [sys.executable, "-m", "drpc.sparse_cli", "list"],
        cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.stdout.split() == ["wordcount"]
