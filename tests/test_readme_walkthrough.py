"""The README's walkthrough ("The whole loop, by hand") runs as written, and runs twice."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)

pytestmark = pytest.mark.slow


def walkthrough() -> str:
    section = README.read_text().split("## The whole loop, by hand", 1)[1].split("\n## ", 1)[0]
    return "\n".join(BLOCK.findall(section))


def test_the_walkthrough_uses_one_way_of_calling_the_command() -> None:
    """The walkthrough calls the command as `lastword`, never by a path."""
    script = walkthrough()
    assert re.search(r"^(\w+=\$\()?lastword ", script, re.MULTILINE)
    assert ".venv/bin/lastword" not in README.read_text()
    assert "python -m lastword.cli" not in README.read_text()


@pytest.mark.skipif(shutil.which("curl") is None, reason="the walkthrough uses curl")
def test_the_walkthrough_runs_twice_in_a_row(base_url: str) -> None:
    """Every block of the walkthrough, run against a server and then run again on the same
    database, succeeds both times and no request of it is refused."""
    # The streams that follow forever (the firehose) are cut after a few seconds; a request
    # the service refuses shows in the output as a problem document.
    prelude = (
        "set -euo pipefail\n"
        'curl() { command curl --max-time 3 "$@" || [ $? -eq 28 ]; }\n'
    )
    script = prelude + walkthrough().replace("localhost:8000", base_url.removeprefix("http://"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LASTWORD_URL": base_url}
    for attempt in (1, 2):
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        assert done.returncode == 0, f"run {attempt}: {done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, f"run {attempt}: {done.stderr[-2000:]}"
        refusals = re.findall(r'"status":\s*4\d\d[^}]*', done.stdout)
        assert not refusals, f"run {attempt}: refused: {refusals}"
        assert '"stopReason":"max_tokens"' in done.stdout.replace(" ", "")
        assert "event: subagent/start" in done.stdout  # the firehose from ?after=0
