"""``python -m bench.ab``: its arguments, its dependency check, and that it measures two commits.

No figure is asserted (speed is bench's business, not the suite's); what is checked is that the
two sides really ran different code: the no-op scenario (z) records the SHA-256 of the served
``/openapi.json``, which differs between e632752 (before issue 23's package move) and HEAD.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import ab

OLD = "e632752"  # main three issues before issue 25; the commit the ingest regression is measured from


def test_scenario_letters_are_split_trimmed_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert ab.parse_only(" a, k ,") == ["a", "k"]
    assert ab.main(["HEAD", "HEAD", "--only", "a,zz"]) == 2
    assert "unknown scenario(s) zz" in capsys.readouterr().err
    assert ab.main(["HEAD", "HEAD", "--only", " , "]) == 2
    assert "names no scenario" in capsys.readouterr().err


def test_a_revision_that_is_no_commit_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert ab.main(["HEAD", "no-such-revision-anywhere", "--results", str(tmp_path)]) == 2
    assert "'no-such-revision-anywhere' is not a commit" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # refused before anything ran


def test_rounds_must_be_at_least_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert ab.main(["HEAD", "HEAD", "--rounds", "0"]) == 2
    assert "--rounds must be at least 1" in capsys.readouterr().err


def test_the_dependency_check_names_what_is_absent_or_too_old() -> None:
    import orjson  # noqa: F401  (installed: every lastword commit needs it)
    from importlib.metadata import version

    have = version("orjson")
    absent = "no-such-distribution-for-lastword>=1"
    assert ab.missing(sys.executable, ["orjson>=3", absent, "orjson>=9999"]) == [
        absent, f"orjson>=9999 (have {have})"]
    # an extra's own requirements count too: uvicorn[standard] brings uvloop
    assert ab.missing(sys.executable, ["uvicorn[standard]"]) == []


@pytest.mark.slow
def test_the_two_sides_run_their_own_commits_first_in_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = ab.main([OLD, "HEAD", "--only", "z", "--quick", "--rounds", "2", "--postgres", "none",
                      "--results", str(tmp_path)])
    assert status == 0
    runs = re.findall(r"^round (\d+): (old|new) ", capsys.readouterr().out, re.MULTILINE)
    assert runs == [("1", "old"), ("1", "new"), ("2", "new"), ("2", "old")]  # neither always first
    summary = json.loads((tmp_path / "ab.json").read_text())
    sides = summary["sides"]
    root = Path(ab.__file__).resolve().parent.parent

    def commit(revision: str) -> str:
        return subprocess.run(["git", "rev-parse", revision], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()

    assert sides["old"]["commit"] == commit(OLD)
    assert sides["new"]["commit"] == commit("HEAD")
    old_api = sides["old"]["series"][0]["z"]["openapi_sha256"]
    new_api = sides["new"]["series"][0]["z"]["openapi_sha256"]
    assert old_api != new_api
    (row,) = [row for row in summary["rows"] if row["key"] == "healthz"]
    assert len(row["old"]) == len(row["new"]) == 2
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=root, capture_output=True, text=True).stdout
    for side in sides.values():  # both checkouts removed (another bench.ab may have its own)
        assert side["worktree"] not in worktrees and not Path(side["worktree"]).exists()


def _row(key: str, unit: str, old: float, new: float) -> ab.Row:
    row = ab.Row("a", key, key, unit)
    row.by_round["old"][0], row.by_round["new"][0] = old, new
    return row


def test_the_smoke_guard_flags_only_a_gated_figure_that_fell_below_the_floor() -> None:
    rows = [
        _row("sqlite_json", "events/s", 60_000, 29_000),   # 0.48x: fallen below half
        _row("sqlite_ndjson", "events/s", 60_000, 31_000),  # 0.52x: within the floor
        _row("redis", "events/s", 60_000, 10_000),          # not gated
        _row("p99", "ms", 10.0, 21.0),                      # a time: 2.1x slower is 0.48x
    ]
    found = ab.regressions(rows, {"a:sqlite_json", "a:sqlite_ndjson", "a:p99"}, 0.5)
    assert [line.split(":")[0] for line in found] == ["a sqlite_json", "a p99"]
    assert ab.regressions(rows[1:2], {"a:sqlite_ndjson"}, 0.5) == []


def test_a_gated_figure_that_neither_side_reported_fails_the_guard() -> None:
    found = ab.regressions([_row("sqlite_json", "events/s", 1.0, 1.0)], {"a:sqlite_json", "a:gone"}, 0.5)
    assert found == ["a:gone: not reported by both sides"]


def test_a_cpu_time_in_microseconds_that_doubled_is_a_regression() -> None:
    """CPU per event is reported in µs: a smaller figure is the better one, as for ms."""
    rows = [_row("cpu_per_event", "µs", 15.0, 31.0), _row("rss", "MiB", 80.0, 170.0)]
    assert ab.regressions(rows, {"a:cpu_per_event", "a:rss"}, 0.5) == [
        "a cpu_per_event: NEW/OLD 2.07x (cpu_per_event)", "a rss: NEW/OLD 2.12x (rss)"]
    assert rows[0].better == "worse"
