"""Mutation testing of lastword's rule modules with mutmut, over the fast unit tests.

Usage (from the repository root, with the test extras installed)::

    .venv/bin/python scripts/mutation.py                      # the default modules
    .venv/bin/python scripts/mutation.py fold tool_result     # only these
    .venv/bin/python scripts/mutation.py fold transcript --tests tests/test_transcript.py

A module is named as under ``app/lastword/`` (``rules/fold``, ``store/base``; a bare ``fold`` is
found in its subpackage) or by its path. It
prints, per module, how many mutants the tests killed and the score, then the diff of every
mutant that survived; mutants listed as equivalent in ``docs/MUTATION.md`` are left out of the
score and of the survivors (they cannot be killed: the mutated code behaves the same).

Why a scratch copy: mutmut (3.x) imports the mutated code from ``mutants/``, ``mutants/src``
or ``mutants/source`` and names mutants after the module path with a leading ``src.``
stripped. Our source root is ``app/`` (the package is ``app/lastword``), so the script lays
out ``build/mutation/src/lastword`` and ``build/mutation/tests`` and runs mutmut there; the
repository itself is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "app" / "lastword"
WORK = ROOT / "build" / "mutation"
EQUIVALENTS = ROOT / "docs" / "MUTATION.md"

DEFAULT_MODULES = ["rules/fold", "rules/tool_result", "rules/stop_reasons", "rules/events", "rules/transcript",
                   "rules/exact_ints", "rules/ds", "rules/ids", "rules/lifecycle"]
#: The fast unit tests of the rule modules: pure, no server, no database.
DEFAULT_TESTS = [
    "tests/test_fold.py",
    "tests/test_fold_join.py",
    "tests/test_texts.py",
    "tests/test_transcript.py",
    "tests/test_tool_result.py",
    "tests/test_stop_reasons.py",
    "tests/test_event_validation.py",
    "tests/test_exact_ints.py",
    "tests/test_rules_ds.py",
    "tests/test_ds_json_split.py",
    "tests/test_ids.py",
    "tests/test_lifecycle.py",
]

# mutmut's exit codes of a mutant's test run (mutmut/stats.py).
KILLED = {1, 3, 37}
TIMEOUT = {36, 24, -24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


def module_path(name: str) -> Path:
    """``fold`` → ``fold.py`` inside the package; a path is taken as it is."""
    candidate = Path(name)
    if candidate.suffix == ".py":
        return candidate.resolve().relative_to(PACKAGE)
    path = Path(name.replace(".", "/") + ".py")
    if not (PACKAGE / path).is_file():
        # A bare name (``fold``) is found in whichever subpackage holds it, when only one does.
        found = [match.relative_to(PACKAGE) for match in PACKAGE.rglob(path.name)]
        if len(found) == 1:
            return found[0]
    return path


def equivalent_mutants() -> set[str]:
    """Mutant names listed in docs/MUTATION.md (a backticked ``lastword.…__mutmut_N``)."""
    if not EQUIVALENTS.exists():
        return set()
    return set(re.findall(r"`(lastword\.[\w.ǁ]+__mutmut_\d+)`", EQUIVALENTS.read_text()))


def lay_out(modules: list[Path], tests: list[str]) -> None:
    """A scratch tree mutmut can run in: src/lastword, tests/, pyproject.toml with its config."""
    if WORK.exists():
        shutil.rmtree(WORK)
    (WORK / "src").mkdir(parents=True)
    shutil.copytree(PACKAGE, WORK / "src" / "lastword", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", WORK / "tests", ignore=shutil.ignore_patterns("__pycache__", ".hypothesis", "node_modules"))
    only = ", ".join(json.dumps(f"src/lastword/{path.as_posix()}") for path in modules)
    selection = ", ".join(json.dumps(test) for test in tests)
    pyproject = (ROOT / "pyproject.toml").read_text()
    pyproject += (
        "\n[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = [{only}]\n"
        f"pytest_add_cli_args_test_selection = [{selection}]\n"
        # The property tests stay deterministic, so a mutant is judged the same on every run.
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "--hypothesis-seed=0"]\n'
    )
    (WORK / "pyproject.toml").write_text(pyproject)


def results(modules: list[Path]) -> dict[str, dict[str, int]]:
    """Exit code of every mutant, by mutant name, read from mutmut's .meta files."""
    found: dict[str, dict[str, int]] = {}
    for path in modules:
        meta = WORK / "mutants" / "src" / "lastword" / (path.as_posix() + ".meta")
        found[path.as_posix()] = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", default=DEFAULT_MODULES, help="modules under app/lastword")
    parser.add_argument("--tests", nargs="+", default=[],
                        help="further test files to run against mutants (the fast unit tests always run)")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once")
    parser.add_argument("--json", type=Path, help="also write the per-module figures here")
    args = parser.parse_args()

    modules = [module_path(name) for name in args.modules]
    for path in modules:
        if not (PACKAGE / path).is_file():
            parser.error(f"no module app/lastword/{path}")
    # Every mutant runs the transcript's property test again: fewer examples keep the run short
    # (the suite itself runs 400).
    os.environ.setdefault("LASTWORD_TRANSCRIPT_EXAMPLES", "40")
    lay_out(modules, DEFAULT_TESTS + [test for test in args.tests if test not in DEFAULT_TESTS])
    run = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children)], cwd=WORK)
    if run.returncode != 0:
        print(f"mutmut run exited {run.returncode}", file=sys.stderr)
        return run.returncode

    equivalent = equivalent_mutants()
    figures: dict[str, dict[str, float]] = {}
    survivors: list[str] = []
    #: Listed as equivalent yet killed: the listing names another mutant now (mutmut numbers a
    #: function's mutants in order, so an edit above one renumbers it) and hides a survivor.
    stale: list[str] = []
    print(f"\n{'module':<20} {'mutants':>8} {'killed':>7} {'equiv.':>7} {'survived':>9} {'other':>6} {'score':>7}")
    for module, codes in results(modules).items():
        counts: Counter[str] = Counter()
        for name, code in codes.items():
            if name in equivalent and (code in KILLED or code in TIMEOUT):
                counts["killed"] += 1
                stale.append(name)
            elif name in equivalent:
                counts["equivalent"] += 1
            elif code in KILLED or code in TIMEOUT:
                counts["killed"] += 1
            elif code in SURVIVED or code in NO_TESTS:
                counts["survived"] += 1
                survivors.append(name)
            else:
                counts["other"] += 1
                survivors.append(name)
        judged = len(codes) - counts["equivalent"]
        score = 100.0 * counts["killed"] / judged if judged else 100.0
        figures[module] = {"mutants": len(codes), **counts, "score": round(score, 1)}
        print(
            f"{module:<20} {len(codes):>8} {counts['killed']:>7} {counts['equivalent']:>7} "
            f"{counts['survived']:>9} {counts['other']:>6} {score:>6.1f}%"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    for name in sorted(survivors):
        shown = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=WORK,
                               capture_output=True, text=True)
        print(f"\n--- survived: {name}\n{shown.stdout.strip()}")
    for name in sorted(stale):
        print(f"\n--- listed as equivalent in docs/MUTATION.md but killed (name it anew): {name}")
    return 1 if survivors or stale else 0


if __name__ == "__main__":
    sys.exit(main())
