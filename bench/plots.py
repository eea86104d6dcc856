"""The performance page's plots, drawn from the benchmarks' JSON reports.

Contract: ``python bench/plots.py [--results DIR] [--out DIR]`` reads the reports in
``--results`` (default ``bench/results``) and draws, with matplotlib's Agg backend (no
display needed), into ``--out`` (default ``docs/images``):

- ``latency_cdf.png`` from ``spark_serving.json``'s sequential calls: the latency CDF
  of each executor (local, resident ``spark``, ``spark-batch``) and of the one-task
  Spark job, the floor of any design that launches a job per call (each summary's
  ``quantiles_ms``);
- ``throughput_callers.png`` from ``spark_serving.json``: requests per second against
  the number of callers on each executor, from its callers sweep (``--callers-sweep``)
  when it ran one, else from the sequential calls (one caller) and the closed loop;
- ``trident_vs_streaming.png`` from ``trident.json``: tuples per second of Trident on
  each executor against competent Structured Streaming and the plain-Python limit;
- ``soak.png`` from ``version_soak.json``: the state file, the pages in use and both
  processes' RSS, and the undo logs kept, over the run.

Each plot's caption names the run (date, cpus, Python, Spark, master, engine, from the
report's ``environment``); the captions, with each plot's file and source, go to
``plots.json`` beside the images, which the performance page quotes. A report that is
missing skips its plot (and keeps that plot's previous entry in ``plots.json``); a
report without what a plot needs (an old one) fails naming the benchmark to re-run.
The drawing functions take the parsed report and the output path, so a test can feed
them small synthetic reports.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
IMAGES = HERE.parent / "docs" / "images"
CAPTIONS = "plots.json"
SERVING = "bench/spark_serving.py"

EXECUTORS = {  # report key -> legend label
    "local": "local (in-process)",
    "resident": "spark (resident tasks)",
    "spark_batch": "spark-batch (a job per batch)",
}
FLOOR = ("one_task_job", "one-task Spark job (the floor of a job per call)")


class ReportError(ValueError):
    """A report lacks what a plot needs."""


def describe_run(environment: dict[str, Any]) -> str:
    """The run in one line: date, machine and versions, as far as the report has them."""
    parts = []
    if "date" in environment:
        parts.append(f"Run of {environment['date']}")
    if "cpus" in environment:
        parts.append(f"{environment['cpus']} CPUs")
    if "python" in environment:
        parts.append(f"Python {environment['python']}")
    if "spark" in environment:
        master = f" ({environment['master']})" if "master" in environment else ""
        parts.append(f"Spark {environment['spark']}{master}")
    if "lmdb" in environment:
        parts.append(f"LMDB {environment['lmdb']}")
    if "engine" in environment:
        parts.append(f"{environment['engine']} engine")
    return ", ".join(parts) if parts else "Run not described by its report"


def _need(report: dict[str, Any], *keys: str, bench: str) -> Any:
    value: Any = report
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            path = ".".join(keys)
            raise ReportError(f"the report has no {path}: re-run {bench}")
        value = value[key]
    return value


def _save(figure: Figure, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    # No software version nor date in the file: the same report draws the same bytes.
    figure.savefig(out, dpi=110, metadata={"Software": None})
    plt.close(figure)


def _legend_below(axes: Any) -> None:
    """The legend under the plot, where it hides no curve."""
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)


def plot_latency_cdf(serving: dict[str, Any], out: Path) -> str:
    """Latency CDF of sequential reach calls per executor and of the one-task job."""
    sequential = _need(serving, "sequential", bench=SERVING)
    figure, axes = plt.subplots(figsize=(7.5, 5), layout="constrained")
    for key, label in [*EXECUTORS.items(), FLOOR]:
        quantiles = _need(sequential, key, "quantiles_ms", bench=SERVING)
        levels = [float(q) for q, _ in quantiles]
        millis = [float(ms) for _, ms in quantiles]
        style = "--" if key == FLOOR[0] else "-"
        axes.plot(millis, levels, style, label=label, drawstyle="steps-post")
    axes.set_xscale("log")
    axes.set_xlabel("latency of one reach call, ms (log scale)")
    axes.set_ylabel("calls answered within, %")
    axes.set_ylim(0, 100)
    axes.grid(True, which="both", alpha=0.3)
    _legend_below(axes)
    axes.set_title("Sequential calls, one caller")
    _save(figure, out)
    return (
        "Latency CDF of sequential reach calls (one caller) on each executor, against a "
        f"one-task Spark job. {describe_run(serving.get('environment', {}))}."
    )


def _throughput_series(serving: dict[str, Any]) -> tuple[dict[str, list[tuple[int, float]]], str]:
    """Per executor, (callers, requests per second) points, and where they come from."""
    sweep = serving.get("callers_sweep")
    if sweep:
        counts = [int(n) for n in sweep["callers"]]
        series = {
            key: [
                (n, float(run["throughput_rps"])) for n, run in zip(counts, sweep[key], strict=True)
            ]
            for key in EXECUTORS
        }
        return series, f"closed loops of {sweep['seconds_each']:g} s at each number of callers"
    sequential = _need(serving, "sequential", bench=SERVING)
    loop = _need(serving, "throughput", bench=SERVING)
    series = {
        key: [
            (1, 1000.0 / float(_need(sequential, key, "mean_ms", bench=SERVING))),
            (int(loop["callers"]), float(_need(loop, key, "throughput_rps", bench=SERVING))),
        ]
        for key in EXECUTORS
    }
    return series, (
        f"one caller: sequential calls; {loop['callers']} callers: a closed loop of "
        f"{loop['seconds_each']:g} s (bench/spark_serving.py --callers-sweep draws more points)"
    )


def plot_throughput_callers(serving: dict[str, Any], out: Path) -> str:
    """Requests per second against the number of concurrent callers, per executor."""
    series, source = _throughput_series(serving)
    figure, axes = plt.subplots(figsize=(7.5, 5), layout="constrained")
    for key, points in series.items():
        callers = [n for n, _ in points]
        rates = [rate for _, rate in points]
        axes.plot(callers, rates, "o-", label=EXECUTORS[key])
    axes.set_xscale("log", base=2)
    axes.set_xticks(sorted({n for points in series.values() for n, _ in points}))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_yscale("log")
    axes.set_xlabel("concurrent callers (log scale)")
    axes.set_ylabel("reach calls answered per second (log scale)")
    axes.grid(True, which="both", alpha=0.3)
    _legend_below(axes)
    axes.set_title("Throughput against callers")
    _save(figure, out)
    return (
        f"Reach calls per second against concurrent callers ({source}). "
        f"{describe_run(serving.get('environment', {}))}."
    )


TRIDENT_BARS = (
    ("trident_spark", "Trident,\nspark (resident)"),
    ("trident_spark_batch", "Trident,\nspark-batch"),
    ("trident_local", "Trident,\nlocal"),
    ("structured_streaming", "Structured\nStreaming"),
    ("plain_python", "plain Python\n(the limit)"),
)


def plot_trident_vs_streaming(trident: dict[str, Any], out: Path) -> str:
    """Word-count throughput: Trident per executor, Structured Streaming, plain Python."""
    labels, rates = [], []
    for key, label in TRIDENT_BARS:
        rates.append(float(_need(trident, key, "tuples_per_s", bench="bench/trident.py")))
        labels.append(label)
    figure, axes = plt.subplots(figsize=(7.5, 4.5))
    colours = ["C0", "C0", "C0", "C1", "C2"]
    bars = axes.bar(labels, [rate / 1000 for rate in rates], color=colours)
    axes.bar_label(bars, labels=[f"{rate / 1000:,.0f}k" for rate in rates], padding=2)
    axes.set_ylabel("words counted per second, thousands")
    axes.grid(True, axis="y", alpha=0.3)
    words = trident.get("words")
    batch = trident.get("batch")
    title = "Exactly-once word count"
    if words and batch:
        title += f": {words:,} words, batches of {batch:,}"
    axes.set_title(title)
    _save(figure, out)
    return (
        "Word count into exactly-once state: Trident on each executor against Structured "
        "Streaming and plain Python (no state, no exactly-once: the limit). "
        f"{describe_run(trident.get('environment', {}))}."
    )


def plot_soak(soak: dict[str, Any], out: Path) -> str:
    """The version soak's samples over time: sizes and RSS, and undo logs kept."""
    samples = _need(soak, "samples", bench="bench/version_soak.py")
    if not samples:
        raise ReportError("the version soak report has no samples: re-run bench/version_soak.py")
    minutes = [float(s["seconds"]) / 60 for s in samples]
    figure, (sizes, logs) = plt.subplots(
        2, 1, figsize=(7.5, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for key, label, style in (
        ("file_mib", "LMDB file", "s-"),
        ("pages_used_mib", "pages in use", "o--"),
        ("writer_rss_mib", "writer RSS", "o-"),
        ("query_rss_mib", "querying process RSS", "o-"),
    ):
        sizes.plot(minutes, [float(s[key]) for s in samples], style, label=label)
    sizes.set_xlim(left=0)
    sizes.set_ylabel("MiB")
    sizes.set_ylim(bottom=0)
    sizes.grid(True, alpha=0.3)
    sizes.legend(loc="center right")
    commits = int(samples[-1]["commits"])
    answers = int(samples[-1].get("answers", 0))
    mixed = int(samples[-1].get("mixed", 0))
    sizes.set_title(f"{commits:,} commits under {answers:,} pinned reads ({mixed} mixed)")
    logs.step(minutes, [int(s["undo_logs"]) for s in samples], where="post")
    logs.set_ylabel("undo logs")
    logs.set_ylim(bottom=0)
    logs.yaxis.set_major_locator(MaxNLocator(integer=True))
    logs.set_xlabel("minutes into the run")
    logs.grid(True, alpha=0.3)
    _save(figure, out)
    return (
        f"Version soak: {commits:,} commits while a DRPC query reads without pause; "
        "the state file, the pages in use and both processes' memory over the run. "
        f"{describe_run(soak.get('environment', {}))}."
    )


PLOTS: dict[str, tuple[str, Callable[[dict[str, Any], Path], str]]] = {
    "latency_cdf.png": ("spark_serving.json", plot_latency_cdf),
    "throughput_callers.png": ("spark_serving.json", plot_throughput_callers),
    "trident_vs_streaming.png": ("trident.json", plot_trident_vs_streaming),
    "soak.png": ("version_soak.json", plot_soak),
}
"""Each image and the report (in the results directory) and function that draw it."""


def draw_all(results: Path, out: Path) -> dict[str, Any]:
    """Draw every plot whose report exists; write and return the captions (plots.json)."""
    captions_path = out / CAPTIONS
    captions: dict[str, Any] = (
        json.loads(captions_path.read_text()) if captions_path.exists() else {}
    )
    for image, (source, draw) in PLOTS.items():
        report_path = results / source
        if not report_path.exists():
            print(f"{image}: skipped, no {report_path}", file=sys.stderr)
            continue
        report = json.loads(report_path.read_text())
        caption = draw(report, out / image)
        captions[image] = {
            "caption": caption,
            "source": f"bench/results/{source}",
            "environment": report.get("environment", {}),
        }
        print(f"{image}: {caption}")
    out.mkdir(parents=True, exist_ok=True)
    captions_path.write_text(json.dumps(captions, indent=2, sort_keys=True) + "\n")
    return captions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the reports' directory")
    parser.add_argument("--out", type=Path, default=IMAGES, help="where the images go")
    args = parser.parse_args(argv)
    try:
        draw_all(args.results, args.out)
    except ReportError as error:
        print(f"bench/plots.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
