"""``python -m bench.ab OLD NEW``: two commits' servers measured by the same scenarios, alternately.

Each commit is checked out into a temporary git worktree. The scenarios are always *this*
tree's (so both commits are measured by the same benchmark, even one that predates it); only
the server they start (and the ``lastword run`` child of scenario l) comes from the commit,
through ``LASTWORD_BENCH_TREE`` and ``LASTWORD_BENCH_PYTHON`` (:func:`bench.server.code_under_test`).

The interpreter for a commit: the one running this, when it has every dependency the commit's
``pyproject.toml`` declares (installed versions checked against the specifiers, extras
included); otherwise, or with ``--venv-per-commit``, a venv with the commit's dependencies,
cached under ``~/.cache/lastword-bench/venvs/`` keyed by the SHA-256 of that ``pyproject.toml``
(the commit's own package is then still imported from its worktree, first on ``PYTHONPATH``).

Rounds run OLD, NEW, OLD, NEW … (each a whole ``python -m bench --only …`` process, so neither
side inherits the other's warm state); each figure is reported as the median of its rounds per
side, NEW/OLD of those medians, and the range of the per-round NEW/OLD ratios (round i's NEW
over round i's OLD) as the spread.

``--fail-below RATIO`` makes it a guard (the CI smoke step in ``.ci/run``): exit 3 when a
``--gate`` figure of NEW fell below RATIO of OLD's, or was not reported by both sides.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.__main__ import DEFAULT_POSTGRES, SCENARIOS
from bench.server import PYTHON_VARIABLE, ROOT, TREE_VARIABLE

RESULTS = ROOT / "bench" / "results"
#: units where a smaller figure is the better one (for the "better" column)
LOWER_IS_BETTER = {"ns", "µs", "ms", "s", "B", "KB", "MB", "KiB", "MiB", "bytes", "KB/conn", "B/delta",
                   "statements", "commits", "instructions"}
#: What ``--fail-below`` checks unless told: lastword's own batched ingest on SQLite (scenario a).
GATE = ("a:sqlite_json", "a:sqlite_ndjson")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ab",
        description="Measure two commits' servers with this tree's scenarios, alternating OLD and NEW "
                    "in one sitting; prints each figure for both and NEW/OLD with its spread.",
        epilog="example: python -m bench.ab e632752 main --only a",
    )
    parser.add_argument("old", metavar="OLD", help="the commit measured first in each round (any git revision)")
    parser.add_argument("new", metavar="NEW", help="the commit compared with it")
    parser.add_argument("--only", default="a", help="comma-separated scenario letters (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="the scenarios' small sizes")
    parser.add_argument("--rounds", type=int, default=3, help="OLD, NEW pairs (default: %(default)s)")
    parser.add_argument(
        "--postgres", default=os.environ.get("LASTWORD_BENCH_POSTGRES_URL", DEFAULT_POSTGRES),
        help="as for python -m bench; 'none' leaves the PostgreSQL figures out (default: %(default)s)",
    )
    parser.add_argument("--venv-per-commit", action="store_true",
                        help="a venv of each commit's own dependencies even when this interpreter has them")
    parser.add_argument("--profile", action="store_true", help="py-spy on the servers (as python -m bench)")
    parser.add_argument(
        "--fail-below", type=float, metavar="RATIO",
        help="exit 3 when a --gate figure of NEW is worse than RATIO times OLD's (a time: OLD/NEW): "
             "the CI smoke guard, for a regression far beyond what noise moves one round",
    )
    parser.add_argument("--gate", default=",".join(GATE),
                        help="scenario:key figures --fail-below checks (default: %(default)s)")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="where ab.json (the summary) and each run's JSON go (default: bench/results)")
    return parser


class Refusal(Exception):
    """Arguments that cannot be run; the message says why (exit status 2)."""


def parse_only(text: str) -> list[str]:
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    if not chosen:
        raise Refusal("--only names no scenario")
    unknown = [letter for letter in chosen if letter not in SCENARIOS]
    if unknown:
        raise Refusal(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    return chosen


def resolve(revision: str) -> str:
    """The full hash of a revision of this repository."""
    answer = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
                            cwd=ROOT, capture_output=True, text=True)
    if answer.returncode != 0:
        raise Refusal(f"{revision!r} is not a commit of {ROOT}")
    return answer.stdout.strip()


@contextlib.contextmanager
def worktree(commit: str, parent: Path, name: str) -> Iterator[Path]:
    """A detached checkout of ``commit``, removed afterwards."""
    path = parent / name
    subprocess.run(["git", "worktree", "add", "--quiet", "--detach", str(path), commit], cwd=ROOT, check=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, capture_output=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)


# Run by the candidate interpreter: prints the requirements it does not satisfy, as JSON.
_MISSING = r'''
import json, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
missing, seen = [], set()
def check(text, extra=""):
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": extra}):
        return
    if (req.name, str(req.specifier), tuple(sorted(req.extras))) in seen:
        return
    seen.add((req.name, str(req.specifier), tuple(sorted(req.extras))))
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        missing.append(text)
        return
    if not req.specifier.contains(version, prereleases=True):
        missing.append(f"{text} (have {version})")
    for name in req.extras:
        for sub in metadata.requires(req.name) or []:
            check(sub, name)
for text in json.loads(sys.argv[1]):
    check(text)
print(json.dumps(missing))
'''


def dependencies(tree: Path) -> list[str]:
    import tomllib

    project = tomllib.loads((tree / "pyproject.toml").read_text())["project"]
    return list(project.get("dependencies", []))


def missing(python: str, requirements: list[str]) -> list[str]:
    answer = subprocess.run([python, "-c", _MISSING, json.dumps(requirements)], capture_output=True, text=True)
    if answer.returncode != 0:
        return [f"(could not check: {answer.stderr.strip()[-200:]})"]
    return list(json.loads(answer.stdout))


def cache_dir() -> Path:
    base = os.environ.get("LASTWORD_BENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lastword-bench")
    return Path(base)


def interpreter(tree: Path, *, own_venv: bool) -> tuple[str, str]:
    """The Python that runs this checkout's server, and a few words on why that one."""
    requirements = dependencies(tree)
    if not own_venv:
        lacking = missing(sys.executable, requirements)
        if not lacking:
            return sys.executable, "this interpreter (it has every dependency of the commit)"
    key = hashlib.sha256((tree / "pyproject.toml").read_bytes()).hexdigest()[:16]
    venv = cache_dir() / "venvs" / key
    python = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        shutil.rmtree(venv, ignore_errors=True)
        print(f"building {venv} (the dependencies of {tree.name}'s pyproject.toml)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *requirements], check=True)
        (venv / ".complete").write_text(key + "\n")
    return str(python), f"venv {venv}"


@dataclass
class Side:
    name: str  # "old" or "new"
    revision: str
    commit: str
    tree: Path = Path()
    python: str = ""
    why: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)  # each round's results JSON
    failures: list[str] = field(default_factory=list)


def run_once(side: Side, round_number: int, args: argparse.Namespace, only: list[str], out: Path) -> None:
    """One ``python -m bench`` of this tree against the side's server code; its JSON kept."""
    name = f"ab-{side.name}-{round_number}"
    command = [sys.executable, "-m", "bench", "--only", ",".join(only), "--no-chart", "--results", str(out),
               "--name", name, "--postgres", args.postgres]
    if args.quick:
        command.append("--quick")
    if args.profile:
        command.append("--profile")
    env = {**os.environ, TREE_VARIABLE: str(side.tree), PYTHON_VARIABLE: side.python}
    log = out / f"{name}.log"
    print(f"round {round_number + 1}: {side.name} {side.commit[:10]} …", end=" ", flush=True)
    with open(log, "wb") as sink:
        status = subprocess.run(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT).returncode
    path = out / f"{name}.json"
    body = json.loads(path.read_text()) if path.exists() else {"scenarios": {}, "skipped": {}}
    side.runs.append(body)
    skipped = body.get("skipped", {})
    if status != 0 or skipped:
        side.failures.append(f"round {round_number + 1}: exit {status}, skipped {skipped} (log {log})")
    print(f"{body.get('seconds', '?')} s" + (f", exit {status}" if status else ""), flush=True)


def figures(body: dict[str, Any]) -> dict[tuple[str, str], tuple[str, float, str]]:
    """(scenario, key) -> (label, value, unit) for every figure and ratio of one run."""
    found: dict[tuple[str, str], tuple[str, float, str]] = {}
    for letter, result in body.get("scenarios", {}).items():
        for kind in ("figures", "ratios"):
            for figure in result.get(kind, []):
                label = figure["label"] if kind == "figures" else "ratio: " + figure["label"]
                found[(letter, figure["key"])] = (label, float(figure["value"]), figure["unit"])
    return found


@dataclass
class Row:
    scenario: str
    key: str
    label: str
    unit: str
    by_round: dict[str, dict[int, float]] = field(default_factory=lambda: {"old": {}, "new": {}})

    @property
    def old(self) -> list[float]:
        return list(self.by_round["old"].values())

    @property
    def new(self) -> list[float]:
        return list(self.by_round["new"].values())

    @property
    def ratio(self) -> float:
        old = statistics.median(self.old)
        return statistics.median(self.new) / old if old else float("nan")

    @property
    def round_ratios(self) -> list[float]:
        """Round i's NEW over round i's OLD, for the rounds where both sides have the figure."""
        old, new = self.by_round["old"], self.by_round["new"]
        return [new[i] / old[i] for i in sorted(old.keys() & new.keys()) if old[i]]

    @property
    def better(self) -> str:
        if self.ratio != self.ratio or self.unit == "x" or abs(self.ratio - 1) < 0.005:
            return ""  # no figure, a ratio, or no change (a count that did not move)
        lower = self.unit in LOWER_IS_BETTER
        return "better" if (self.ratio < 1) == lower and self.ratio != 1 else "worse"


def compare(old: Side, new: Side) -> list[Row]:
    rows: dict[tuple[str, str], Row] = {}
    for side in (old, new):
        for round_number, body in enumerate(side.runs):
            for key, (label, value, unit) in figures(body).items():
                row = rows.setdefault(key, Row(key[0], key[1], label, unit))
                row.by_round[side.name][round_number] = value
    return [row for row in rows.values() if row.old and row.new]


def _number(value: float, unit: str) -> str:
    from bench.report import human

    return human(value, unit)


def render(rows: list[Row]) -> str:
    lines = [f"{'':2} {'figure':<64} {'OLD':>16} {'NEW':>16} {'NEW/OLD':>8}  per-round NEW/OLD"]
    for row in rows:
        spread = ", ".join(f"{r:.2f}" for r in row.round_ratios)
        label = row.label if len(row.label) <= 64 else row.label[:63] + "…"
        lines.append(f"{row.scenario:2} {label:<64} {_number(statistics.median(row.old), row.unit):>16} "
                     f"{_number(statistics.median(row.new), row.unit):>16} {row.ratio:>7.2f}x  "
                     f"{spread} {row.better}".rstrip())
    return "\n".join(lines)


def regressions(rows: list[Row], gate: set[str], floor: float) -> list[str]:
    """The gated figures where NEW kept less than ``floor`` of OLD (by the unit's better direction),
    and the gated figures not reported by both sides (a guard that measured nothing must not pass)."""
    found, seen = [], set()
    for row in rows:
        name = f"{row.scenario}:{row.key}"
        if name not in gate:
            continue
        seen.add(name)
        kept = 1 / row.ratio if row.unit in LOWER_IS_BETTER and row.ratio else row.ratio
        if not kept >= floor:  # a NaN fails too
            found.append(f"{row.scenario} {row.key}: NEW/OLD {row.ratio:.2f}x ({row.label})")
    found += [f"{name}: not reported by both sides" for name in sorted(gate - seen)]
    return found


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        only = parse_only(args.only)
        if args.rounds < 1:
            raise Refusal("--rounds must be at least 1")
        old = Side("old", args.old, resolve(args.old))
        new = Side("new", args.new, resolve(args.new))
    except Refusal as refusal:
        print(f"python -m bench.ab: {refusal}", file=sys.stderr)
        return 2
    args.results.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lastword-ab-") as scratch:
        with worktree(old.commit, Path(scratch), "old") as old.tree, \
                worktree(new.commit, Path(scratch), "new") as new.tree:
            for side in (old, new):
                side.python, side.why = interpreter(side.tree, own_venv=args.venv_per_commit)
                print(f"{side.name}: {side.revision} = {side.commit[:10]}, {side.why}")
            for round_number in range(args.rounds):
                # OLD first in odd rounds, NEW first in even ones: a machine whose load drifts
                # during the sitting favours neither side (a fixed order gave the side measured
                # second a tenth more, controls included, while a load faded).
                for side in (old, new) if round_number % 2 == 0 else (new, old):
                    run_once(side, round_number, args, only, args.results)
    load_after = os.getloadavg()
    rows = compare(old, new)
    print()
    print(render(rows))
    print(f"\nOLD {old.revision} ({old.commit[:10]}), NEW {new.revision} ({new.commit[:10]}); "
          f"{args.rounds} round(s), medians; load average {', '.join(f'{x:.2f}' for x in load_before)} at "
          f"the start, {', '.join(f'{x:.2f}' for x in load_after)} at the end")
    for side in (old, new):
        for failure in side.failures:
            print(f"{side.name}: {failure}")
    summary = {
        "command": "python -m bench.ab " + " ".join(argv if argv is not None else sys.argv[1:]),
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average": {"start": load_before, "end": load_after},
        "sides": {side.name: {"revision": side.revision, "commit": side.commit, "python": side.why,
                              "worktree": str(side.tree),
                              "failures": side.failures,
                              "series": [{letter: result.get("series", {}) for letter, result in
                                          body.get("scenarios", {}).items()} for body in side.runs]}
                  for side in (old, new)},
        "rows": [{"scenario": r.scenario, "key": r.key, "label": r.label, "unit": r.unit, "old": r.old,
                  "new": r.new, "ratio": r.ratio, "round_ratios": r.round_ratios} for r in rows],
    }
    path = args.results / "ab.json"
    path.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    print(f"wrote {path}")
    if old.failures or new.failures:
        return 1
    if args.fail_below is not None:
        gate = {name.strip() for name in args.gate.split(",") if name.strip()}
        fallen = regressions(rows, gate, args.fail_below)
        for line in fallen:
            print(f"regression: {line}, below the floor of {args.fail_below:g}x")
        if fallen:
            return 3
        print(f"no gated figure ({', '.join(sorted(gate))}) fell below {args.fail_below:g}x of OLD")
    return 0


if __name__ == "__main__":
    sys.exit(main())
