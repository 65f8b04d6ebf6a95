"""Every shell block of the README runs as written, twice in a row, against a real server.

The README's blocks are self-contained (each makes its own ids, none uses another's variable),
so a reader can paste any of them, in any order, as often as they like. Two blocks are not run
here: the one that starts the service (this test starts it) and the test command (.ci/run runs
it). The blocks that run ``claude`` run with the real Claude Code in
tests/test_readme_cli_children.py, twice as well.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("curl") is None, reason="the blocks use curl")]


def blocks() -> list[str]:
    return [str(block) for block in BLOCK.findall(README.read_text())]


def run_here(block: str) -> bool:
    """Whether this test runs ``block``: not the service's start, the test command or a CLI's."""
    return not ("lastword serve" in block or "pytest" in block or re.search(r"(^|-- )claude ", block, re.M))


def test_the_readme_is_short_and_its_blocks_are_accounted_for() -> None:
    """At most ~250 lines; every block is run by this test or by the CLI children's."""
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "SPEC §" not in text
    assert [block for block in blocks() if not run_here(block)] == [
        block for block in blocks() if "lastword serve" in block or "pytest" in block or "claude " in block]
    assert any(run_here(block) for block in blocks())


@pytest.mark.parametrize("number", [n for n, block in enumerate(blocks()) if run_here(block)])
def test_each_block_runs_twice_in_a_row(base_url: str, number: int) -> None:
    """The block, run twice against one server as written (only the address changed): both runs
    succeed, nothing is refused, and each curl answer stands on a line of its own."""
    script = "set -euo pipefail\n" + blocks()[number].replace("localhost:8000", base_url.removeprefix("http://"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LASTWORD_URL": base_url}
    for attempt in (1, 2):
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        assert done.returncode == 0, f"run {attempt}: {done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, done.stderr
        for line in done.stdout.splitlines():
            if line.startswith("{") and line.endswith("}"):  # a curl answer: one JSON document a line, never two run together
                answer = json.loads(line)
                assert not (isinstance(answer.get("status"), int) and answer["status"] >= 400), (attempt, line)


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    """Moving text between the README and docs/ left no link pointing at nothing."""
    root = README.parent
    broken = []
    for page in [README, *sorted((root / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#", 1)[0]
            if path and not target.startswith(("http:", "https:", "mailto:")) and not (page.parent / path).exists():
                broken.append(f"{page.name}: {target}")
    assert broken == []
