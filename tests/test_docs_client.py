"""The client examples of docs/CLIENT.md run as written, and print what their comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "CLIENT.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def example(number: int = 0) -> str:
    return str(BLOCK.findall(PAGE.read_text())[number])


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


def test_the_errors_example_prints_the_unreachable_line() -> None:
    """The errors example, against a port nothing listens on, prints the line its comment shows."""
    script = example(1)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False,
                          env=os.environ)
    assert done.returncode == 0, done.stderr
    comment = re.search(r"print\(error\)\s+# (.*)", script)
    assert comment is not None and done.stdout.strip() == comment[1], done.stdout
