"""bench/plots.py draws the performance page's plots from the benchmarks' reports: here
from small synthetic reports in a temporary directory (no benchmark runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.loading import load_script

PNG = b"\x89PNG\r\n\x1a\n"


plots = load_script("drpc_bench_plots", "bench/plots.py")

SPARK = {"cpus": 2, "python": "3.11.7", "spark": "4.1.0", "master": "local[*]", "date": "D"}


def _summary(p50: float) -> dict[str, Any]:
    levels = [*range(1, 100), 99.9]
    return {
        "n": 100,
        "p50_ms": p50,
        "p99_ms": 3 * p50,
        "mean_ms": 1.2 * p50,
        "quantiles_ms": [[q, p50 * (0.5 + q / 50)] for q in levels],
    }


def _serving(sweep: bool) -> dict[str, Any]:
    executors = {"local": 0.2, "resident": 1.0, "spark_batch": 40.0}
    report: dict[str, Any] = {
        "environment": {**SPARK, "engine": "compiled"},
        "sequential": {name: _summary(p50) for name, p50 in executors.items()}
        | {"one_task_job": _summary(20.0)},
        "throughput": {"callers": 64, "seconds_each": 10.0}
        | {name: {"throughput_rps": 64_000 / p50} for name, p50 in executors.items()},
    }
    if sweep:
        report["callers_sweep"] = {
            "callers": [1, 4, 16],
            "seconds_each": 3.0,
        } | {
            name: [{"throughput_rps": n * 1000 / p50} for n in (1, 4, 16)]
            for name, p50 in executors.items()
        }
    return report


TRIDENT = {
    "environment": SPARK,
    "words": 1000,
    "batch": 100,
    **{
        key: {"tuples_per_s": rate}
        for key, rate in (
            ("trident_spark", 7e5),
            ("trident_spark_batch", 5e5),
            ("trident_local", 4e4),
            ("structured_streaming", 2.5e5),
            ("plain_python", 7.7e5),
        )
    },
}

SOAK = {
    "environment": {"cpus": 2, "python": "3.11.7", "lmdb": "0.9.31", "date": "D"},
    "commits": 300,
    "samples": [
        {
            "commits": 100 * n,
            "seconds": 60.0 * n,
            "file_mib": 1.0,
            "pages_used_mib": 1.0,
            "undo_logs": n,
            "writer_rss_mib": 30.0,
            "answers": 10 * n,
            "mixed": 0,
            "query_rss_mib": 40.0,
        }
        for n in (1, 2, 3)
    ],
}


@pytest.mark.parametrize("sweep", [True, False])
def test_every_plot_is_drawn_with_its_caption(tmp_path: Path, sweep: bool) -> None:
    results, images = tmp_path / "results", tmp_path / "images"
    results.mkdir()
    for name, report in (
        ("spark_serving.json", _serving(sweep)),
        ("trident.json", TRIDENT),
        ("version_soak.json", SOAK),
    ):
        (results / name).write_text(json.dumps(report))
    assert plots.main(["--results", str(results), "--out", str(images)]) == 0
    captions = json.loads((images / "plots.json").read_text())
    assert sorted(captions) == sorted(plots.PLOTS)
    for image, entry in captions.items():
        assert (images / image).read_bytes().startswith(PNG)
        assert "2 CPUs, Python 3.11.7" in entry["caption"]
        assert entry["source"].startswith("bench/results/")
    assert "Spark 4.1.0 (local[*])" in captions["latency_cdf.png"]["caption"]
    assert "LMDB 0.9.31" in captions["soak.png"]["caption"]
    throughput = captions["throughput_callers.png"]["caption"]
    assert ("at each number of callers" in throughput) == sweep


def test_a_missing_report_skips_its_plot_and_keeps_the_others(tmp_path: Path) -> None:
    results, images = tmp_path / "results", tmp_path / "images"
    results.mkdir()
    (results / "trident.json").write_text(json.dumps(TRIDENT))
    images.mkdir()
    (images / "plots.json").write_text(json.dumps({"soak.png": {"caption": "earlier"}}))
    assert plots.main(["--results", str(results), "--out", str(images)]) == 0
    captions = json.loads((images / "plots.json").read_text())
    assert sorted(captions) == ["soak.png", "trident_vs_streaming.png"]
    assert captions["soak.png"] == {"caption": "earlier"}
    assert not (images / "latency_cdf.png").exists()


def test_an_old_report_names_the_benchmark_to_run_again(tmp_path: Path) -> None:
    old = _serving(sweep=False)
    del old["sequential"]["resident"]["quantiles_ms"]
    with pytest.raises(plots.ReportError, match=r"bench/spark_serving\.py"):
        plots.plot_latency_cdf(old, tmp_path / "latency_cdf.png")
