"""The README's client example ("From Python: the client library") runs as written, and prints
what its comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def example() -> str:
    section = README.read_text().split("## From Python: the client library", 1)[1].split("\n## ", 1)[0]
    return str(BLOCK.findall(section)[0])


def test_the_client_example_streams_the_run_to_its_end(base_url: str) -> None:
    """The example's stream, opened after the run ended, prints the run from its start and ends
    after subagent/end, as its comment says."""
    assert "# ends after subagent/end" in example()
    script = example().replace("http://127.0.0.1:8000", base_url)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False,
                          env=os.environ)
    assert done.returncode == 0, done.stderr
    events = [line.split(" ", 2)[1] for line in done.stdout.splitlines()]
    assert events[0] == "subagent/start", done.stdout
    assert "assistant/chunk" in events, done.stdout
    assert events[-1] == "subagent/end", done.stdout
