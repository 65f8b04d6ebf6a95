"""What a scenario hands back, and the table, JSON and chart made of it."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Figure:
    key: str  # stable name in latest.json, e.g. "sqlite_json"
    label: str  # what the table says
    value: float
    unit: str
    note: str = ""


@dataclass
class Target:
    label: str  # e.g. "p99 at 100 subscribers <= 10 ms"
    value: float
    goal: float
    unit: str
    higher_is_better: bool

    @property
    def met(self) -> bool:
        return self.value >= self.goal if self.higher_is_better else self.value <= self.goal


@dataclass
class Result:
    scenario: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    ratios: list[Figure] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)  # what the chart draws
    seconds: float = 0.0

    def add(self, key: str, label: str, value: float, unit: str, note: str = "") -> Figure:
        figure = Figure(key, label, value, unit, note)
        self.figures.append(figure)
        return figure

    def ratio(self, key: str, label: str, value: float, note: str = "") -> Figure:
        figure = Figure(key, label, value, "x", note)
        self.ratios.append(figure)
        return figure

    def target(self, label: str, value: float, goal: float, unit: str, *, higher_is_better: bool) -> None:
        self.targets.append(Target(label, value, goal, unit, higher_is_better))

    def note(self, text: str) -> None:
        print(f"  note: {text}")
        self.notes.append(text)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["targets"] = [{**asdict(t), "met": t.met} for t in self.targets]
        return body


def human(value: float, unit: str) -> str:
    if value != value:  # NaN
        return "n/a"
    if unit == "x":
        return f"{value:.2f}x"
    if abs(value) >= 100_000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".rstrip()


def table(results: list[Result]) -> str:
    rows: list[tuple[str, str, str, str]] = []
    for result in results:
        rows.append((result.scenario, result.title, "", ""))
        for figure in result.figures:
            rows.append(("", "  " + figure.label, human(figure.value, figure.unit), figure.note))
        for figure in result.ratios:
            rows.append(("", "  ratio: " + figure.label, human(figure.value, figure.unit), figure.note))
        for target in result.targets:
            mark = "met" if target.met else "MISSED"
            rows.append(("", f"  target: {target.label}", human(target.value, target.unit), mark))
        for note in result.notes:
            rows.append(("", "  note: " + note, "", ""))
    widths = [max(len(row[i]) for row in rows) if rows else 0 for i in range(3)]
    widths[1] = min(widths[1], 72)
    lines = []
    for row in rows:
        label = row[1] if len(row[1]) <= widths[1] else row[1][: widths[1] - 1] + "…"
        lines.append(f"{row[0]:<{widths[0]}}  {label:<{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}".rstrip())
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        sqlite_version = __import__("sqlite3").sqlite_version
    except ImportError:  # pragma: no cover
        sqlite_version = "?"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent.parent,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(memory / 2**30, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "sqlite": sqlite_version,
        "commit": commit,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def write_json(path: Path, header: dict[str, Any], results: list[Result]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {**header, "scenarios": {result.scenario: result.to_json() for result in results}}
    path.write_text(json.dumps(body, indent=2, default=float) + "\n")
