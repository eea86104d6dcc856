"""Spark settings: drpc's defaults per kind of master, the user's files and flags over them,
and the command-line flags every CLI shares (bad values: one line on stderr, exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest
from drpc.server.cli import main as server_main

from drpc.errors import SparkConfError
from drpc.runner.cli import main as runner_main
from drpc.sparkconf import (
    DEFAULT_START_TIMEOUT,
    add_spark_arguments,
    drpc_defaults,
    is_local_master,
    parse_setting,
    read_conf_file,
    resolve,
    spark_defaults_path,
    spark_options,
    user_defaults,
)
from drpc.transactional.cli import main as transactional_main

NETWORKING = ("spark.driver.host", "spark.driver.bindAddress", "spark.driver.port")


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[*]", True),
        ("local[2]", True),
        ("local-cluster[2,1,1024]", True),
        ("spark://10.1.2.3:7077", False),
        ("yarn", False),
        ("k8s://https://kubernetes.default.svc", False),
        ("localhost", False),
    ],
)
def test_only_local_masters_get_loopback_networking_and_no_ui(master: str, local: bool) -> None:
    assert is_local_master(master) is local
    defaults = drpc_defaults(master)
    if local:
        assert defaults["spark.driver.host"] == defaults["spark.driver.bindAddress"] == "127.0.0.1"
        assert defaults["spark.ui.enabled"] == "false"
    else:
        assert not set(NETWORKING) & set(defaults)  # Spark's own resolution applies
        assert defaults["spark.ui.enabled"] == "true"
    assert defaults["spark.scheduler.mode"] == "FAIR"
    assert defaults["spark.app.name"] == "drpc"
    # no barrier stage runs any more: its slot check settings would be noise
    assert not any(key.startswith("spark.scheduler.barrier.") for key in defaults)


def test_the_user_settings_beat_drpc_defaults_and_explicit_ones_beat_both() -> None:
    user = {"spark.scheduler.mode": "FIFO", "spark.executor.memory": "600m", "spark.master": "yarn"}
    explicit = {"spark.executor.memory": "700m", "spark.ui.enabled": False, "spark.cores.max": 4}
    settings = resolve(None, explicit, user)
    assert settings["spark.master"] == "yarn"  # no explicit master: the user's
    assert settings["spark.scheduler.mode"] == "FIFO"  # the user's file over drpc's FAIR
    assert settings["spark.executor.memory"] == "700m"  # explicit over the file
    assert settings["spark.ui.enabled"] == "false"  # explicit over drpc's cluster default
    assert settings["spark.cores.max"] == "4"
    assert "spark.driver.host" not in settings  # yarn: nothing pinned
    assert settings["spark.python.worker.reuse"] == "true"  # drpc's default where nobody spoke


def test_the_master_is_the_first_of_the_argument_the_explicit_conf_the_user_and_local() -> None:
    user = {"spark.master": "spark://user:7077"}
    explicit = {"spark.master": "spark://explicit:7077"}
    assert resolve("local[2]", explicit, user)["spark.master"] == "local[2]"
    assert resolve(None, explicit, user)["spark.master"] == "spark://explicit:7077"
    assert resolve(None, None, user)["spark.master"] == "spark://user:7077"
    local = resolve(None, None, {})
    assert local["spark.master"] == "local[*]"
    assert local["spark.driver.host"] == "127.0.0.1"


def test_a_user_setting_beats_even_drpc_loopback_defaults_on_a_local_master() -> None:
    settings = resolve("local[2]", None, {"spark.driver.host": "10.0.0.5"})
    assert settings["spark.driver.host"] == "10.0.0.5"


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"executor.memory": "1g"}, "'executor.memory' is not a Spark setting"),
        ({3: "x"}, "3 is not a Spark setting"),
    ],
)
def test_explicit_settings_must_be_spark_settings(conf: dict[object, str], message: str) -> None:
    with pytest.raises(SparkConfError, match=message):
        resolve(None, conf, {})  # type: ignore[arg-type]


def test_parse_setting() -> None:
    assert parse_setting("spark.executor.memory=2g") == ("spark.executor.memory", "2g")
    assert parse_setting("spark.executor.extraJavaOptions=-Da=b -Dc=d") == (
        "spark.executor.extraJavaOptions",
        "-Da=b -Dc=d",
    )
    with pytest.raises(SparkConfError, match=r"'spark\.ui\.port' is not of the form KEY=VALUE"):
        parse_setting("spark.ui.port")
    with pytest.raises(SparkConfError, match=r"'ui\.port' is not a Spark setting"):
        parse_setting("ui.port=4050")
    with pytest.raises(SparkConfError, match="is not of the form KEY=VALUE"):
        parse_setting("=4050")


def test_a_conf_file_in_spark_defaults_format(tmp_path: Path) -> None:
    path = tmp_path / "cluster.conf"
    path.write_text(
        "# comment\n"
        "! also a comment\n"
        "\n"
        "spark.master              spark://10.0.0.1:7077\n"
        "spark.executor.memory=2g\n"
        "spark.ui.port : 4050\n"
        "spark.executor.extraJavaOptions  -Dx=1 \\\n"
        "    -Dy=2\n"
        "  spark.archives env.tar.gz#environment  \n"
    )
    assert read_conf_file(path) == {
        "spark.master": "spark://10.0.0.1:7077",
        "spark.executor.memory": "2g",
        "spark.ui.port": "4050",
        "spark.executor.extraJavaOptions": "-Dx=1 -Dy=2",
        "spark.archives": "env.tar.gz#environment",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("spark.master h\nspark.ui.port\n", r"cluster.conf, line 2: 'spark.ui.port' has no"),
        ("\n\nexecutor.memory 2g\n", r"cluster.conf, line 3: 'executor.memory' is not a Spark"),
        ("spark.a 1 \\\n", r"cluster.conf, line 1: the file ends inside a line"),
    ],
)  # fmt: skip
def test_a_bad_conf_file_names_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cluster.conf"
    path.write_text(text)
    with pytest.raises(SparkConfError, match=message):
        read_conf_file(path)


def test_a_missing_conf_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(SparkConfError, match=r"cannot read Spark settings from .*nothing\.conf"):
        read_conf_file(tmp_path / "nothing.conf")


def test_spark_defaults_come_from_spark_conf_dir_else_spark_home(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.executor.cores 3\n")
    assert spark_defaults_path({"SPARK_CONF_DIR": str(tmp_path)}) == (
        tmp_path / "spark-defaults.conf"
    )
    assert user_defaults({"SPARK_CONF_DIR": str(tmp_path)}) == {}  # no file there: nothing
    assert user_defaults({"SPARK_HOME": str(tmp_path)}) == {"spark.executor.cores": "3"}
    assert user_defaults({"SPARK_CONF_DIR": str(tmp_path / "conf")}) == {
        "spark.executor.cores": "3"
    }


def _parse(*argv: str, executor: str = "spark") -> dict[str, object]:
    parser = argparse.ArgumentParser(prog="drpc-test")
    add_spark_arguments(parser)
    return spark_options(parser, parser.parse_args(argv), executor)


def test_the_flags_become_executor_keywords(tmp_path: Path) -> None:
    conf = tmp_path / "cluster.conf"
    conf.write_text("spark.executor.memory 1g\nspark.cores.max 8\n")
    options = _parse(
        "--master", "spark://10.0.0.1:7077", "--spark-conf-file", str(conf),
        "--spark-conf", "spark.executor.memory=2g", "--spark-conf", "spark.ui.port=4050",
        "--start-timeout", "30",
    )  # fmt: skip
    assert options == {
        "master": "spark://10.0.0.1:7077",
        "spark_conf": {
            "spark.executor.memory": "2g",  # --spark-conf over --spark-conf-file
            "spark.cores.max": "8",
            "spark.ui.port": "4050",
        },
        "start_timeout": 30.0,
    }
    assert _parse() == {"master": None, "spark_conf": {}, "start_timeout": DEFAULT_START_TIMEOUT}
    assert _parse(executor="local") == {}
    assert _parse("--master", "yarn", executor="spark-batch")["master"] == "yarn"


def test_the_ui_port_flag_is_spark_ui_port_over_spark_conf() -> None:
    options = _parse("--spark-conf", "spark.ui.port=4050", "--spark-ui-port", "4060")
    assert options["spark_conf"] == {"spark.ui.port": "4060"}


ONLY_SPARK = "applies to --executor spark and spark-batch only"


@pytest.mark.parametrize(
    ("argv", "executor", "message"),
    [
        (["--spark-conf", "spark.ui.port"], "spark", "'spark.ui.port' is not of the form KEY="),
        (["--spark-conf", "ui.port=1"], "spark", "'ui.port' is not a Spark setting"),
        (["--start-timeout", "0"], "spark", "must be positive, got '0'"),
        (["--spark-ui-port", "http"], "spark", "not a port number: 'http'"),
        (["--spark-ui-port", "4040"], "local", f"--spark-ui-port {ONLY_SPARK}"),
        (["--start-timeout", "soon"], "spark", "not a number of seconds: 'soon'"),
        (["--spark-conf-file", "/nonexistent/x.conf"], "spark", "--spark-conf-file: cannot read"),
        (["--spark-conf", "spark.a=1"], "local", f"--spark-conf {ONLY_SPARK}"),
        (["--master", "yarn"], "local", f"--master {ONLY_SPARK}"),
    ],
)  # fmt: skip
def test_bad_flags_exit_2_with_one_line(
    argv: list[str], executor: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _parse(*argv, executor=executor)
    assert exited.value.code == 2
    error = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(error) == 1 and message in error[0], error


@pytest.mark.parametrize(
    ("main", "argv"),
    [
        (server_main, ["--topology", "drpc.examples.exclamation:topology"]),
        (runner_main, ["--servers", "127.0.0.1:1", "--topology", "x:y"]),
        (transactional_main, ["run", "drpc.examples.transactional_words:topology",
                              "--state-dir", "s", "--executor", "spark"]),
    ],
    ids=["drpc-server", "drpc-runner", "drpc-transactional"],
)  # fmt: skip
def test_every_cli_takes_the_spark_flags(
    main: Callable[[list[str]], int], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--spark-conf", "spark.executor.memory"])
    assert exited.value.code == 2
    assert "'spark.executor.memory' is not of the form KEY=VALUE" in capsys.readouterr().err
