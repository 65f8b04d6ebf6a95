"""The PNG chart of a bench run: one panel per scenario, targets drawn as dashed lines.

``python -m bench.chart bench/results/latest.json`` redraws a chart from a results file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import json  # noqa: E402
import sys  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import FuncFormatter  # noqa: E402

from bench.report import Result, Target  # noqa: E402

THOUSANDS = FuncFormatter(lambda value, _: f"{value / 1000:,.0f}k" if abs(value) >= 10_000 else f"{value:,.0f}")

TARGET = {"color": "tab:red", "linestyle": "--", "linewidth": 1}


def _bars(ax: Any, labels: list[str], values: list[float], unit: str, title: str) -> None:
    positions = range(len(labels))
    ax.barh(list(positions), values, color="tab:blue")
    ax.set_yticks(list(positions), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(unit, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="x", labelsize=7)
    ax.xaxis.set_major_formatter(THOUSANDS)
    for position, value in zip(positions, values):
        ax.text(value, position, f" {value:,.0f}" if value >= 10 else f" {value:.2f}", va="center", fontsize=6)


def _panel_a(ax: Any, result: Result) -> None:
    rates = result.series.get("rates", {})
    labels = [label.replace("lastword, ", "") for label in rates]
    _bars(ax, labels, list(rates.values()), "events/s", "a. batched ingest (1,000 events/request)")
    ax.axvline(100_000, **TARGET)


def _panel_b(ax: Any, result: Result) -> None:
    rates = result.series.get("rates", {})
    names = {"sqlite": "SQLite", "sqlite_full": "SQLite full", "postgres": "PostgreSQL"}
    labels, values = [], []
    for key, value in rates.items():
        backend, _, kind = key.rpartition("_")
        labels.append(f"{names.get(backend, backend)}: {'1 event' if kind == 'event' else 'no-op'}")
        values.append(value)
    _bars(ax, labels, values, "requests/s", "b. one event per request vs GET /healthz")


def _panel_c(ax: Any, result: Result) -> None:
    speeds = result.series.get("speeds", {})
    _bars(ax, list(speeds), list(speeds.values()), "MiB/s", "c. /chunks, streamed text/plain")


def _panel_d(ax: Any, result: Result) -> None:
    latency = result.series.get("latency", {})
    counts = sorted(int(n) for n in latency)
    for name, marker in (("p50", "o"), ("p99", "s")):
        ax.plot(counts, [latency[n][name] if n in latency else latency[str(n)][name] for n in counts],
                marker=marker, label=name)
    ax.axhline(10, **TARGET)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("subscribers", fontsize=8)
    ax.set_ylabel("ms", fontsize=8)
    ax.set_title("d. POST /end to subagent/end on SSE", fontsize=9)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)


def _panel_e(ax: Any, result: Result) -> None:
    series = result.series.get("per_connection_kib", {})
    labels = [f"{int(n):,} streams" for n in series]
    _bars(ax, labels, list(series.values()), "KiB per idle connection", "e. memory per idle SSE connection")
    ax.axvline(50_000 / 1024, **TARGET)


def _panel_f(ax: Any, result: Result) -> None:
    fold = result.series.get("fold", {})
    sizes = fold.get("sizes", [])
    if not sizes:
        return
    values = fold["fold_ns_per_delta"]
    ax.plot(sizes, [v / values[0] for v in values], marker="o", label="TurnFold: ns/delta / ns/delta at smallest")
    ax.plot(sizes, fold["ingest_vs_fresh"], marker="s", label="ingest: batch cost / small run's, same seconds")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_ylim(0, max(2.0, ax.get_ylim()[1]))
    ax.set_xlabel("text deltas in the turn", fontsize=8)
    ax.set_ylabel("relative cost per delta", fontsize=8)
    ax.set_title("f. fold scaling (flat = linear)", fontsize=9)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)


def _panel_g(ax: Any, result: Result) -> None:
    series = result.series.get("restart", {})
    labels = list(series)
    positions = range(len(labels))
    ax.barh([p - 0.2 for p in positions], [series[k]["ready"] for k in labels], height=0.4, label="to /readyz")
    ax.barh([p + 0.2 for p in positions], [series[k]["results"] for k in labels], height=0.4,
            label="to every result read")
    ax.set_yticks(list(positions), labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(5.0, **TARGET)
    ax.set_xlabel("seconds from process start", fontsize=8)
    ax.set_title("g. restart", fontsize=9)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)


PANELS = {"a": _panel_a, "b": _panel_b, "c": _panel_c, "d": _panel_d, "e": _panel_e, "f": _panel_f, "g": _panel_g}


def _panel_targets(ax: Any, results: list[Result], header: dict[str, Any]) -> None:
    ax.axis("off")
    lines = ["targets (dashed red lines):"]
    for result in results:
        for target in result.targets:
            value = f"{target.value:,.3g}" if target.value < 1000 else f"{target.value:,.0f}"
            label = target.label if len(target.label) <= 48 else target.label[:47] + "…"
            lines.append(f"{result.scenario}. {'met   ' if target.met else 'MISSED'} {label}: {value} {target.unit}")
    machine = header.get("machine", {})
    lines += ["", f"{machine.get('nproc')} x {machine.get('cpu')}, {machine.get('memory_gib')} GiB,",
              f"Python {machine.get('python')}, SQLite {machine.get('sqlite')}", header.get("started", "")]
    ax.text(0, 1, "\n".join(lines), va="top", fontsize=6.5, family="monospace", wrap=True)


def draw(results: list[Result], path: Path, header: dict[str, Any]) -> Path:
    figure, axes = plt.subplots(2, 4, figsize=(20, 9))
    flat = list(axes.flat)
    by_letter = {result.scenario: result for result in results}
    for ax, (letter, panel) in zip(flat, PANELS.items()):
        if letter in by_letter:
            panel(ax, by_letter[letter])
        else:
            ax.axis("off")
            ax.set_title(f"{letter}. not run", fontsize=9)
    _panel_targets(flat[-1], results, header)
    figure.suptitle("lastword benchmarks (" + ("quick" if header.get("quick") else "full") + " run)", fontsize=11)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def redraw(results_file: Path) -> Path:
    """Draw the chart of a results file again (after a change to this module)."""
    body = json.loads(results_file.read_text())
    results = []
    for letter, scenario in body["scenarios"].items():
        result = Result(letter, scenario["title"], series=scenario["series"])
        result.targets = [Target(t["label"], t["value"], t["goal"], t["unit"], t["higher_is_better"])
                          for t in scenario["targets"]]
        results.append(result)
    return draw(results, results_file.with_suffix(".png"), body)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["bench/results/latest.json"]:
        print(f"wrote {redraw(Path(name))}")
