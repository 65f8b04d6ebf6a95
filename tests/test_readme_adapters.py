"""docs/WALKTHROUGH.md's curl examples for the providers' own streams run as written, twice in a row."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.api_helpers import shared_base_url  # noqa: F401  (the module's server fixture)

README = Path(__file__).resolve().parent.parent / "docs" / "WALKTHROUGH.md"
BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)


def examples() -> str:
    """The section's shell block, without the line that pipes a real provider call."""
    section = README.read_text().split("## Providers' own streams", 1)[1].split("\n## ", 1)[0]
    [block] = BLOCK.findall(section)
    lines = block.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("your-anthropic-call"))
    return "\n".join(lines[:start] + lines[start + 2:])  # the pipe and its continuation line


@pytest.mark.skipif(shutil.which("curl") is None, reason="the examples use curl")
def test_each_format_example_gives_its_result(shared_base_url: str) -> None:  # noqa: F811
    """The Anthropic SSE, OpenAI NDJSON and ACP JSON examples each store their stream and end the turn."""
    script = examples().replace("localhost:8000", shared_base_url.removeprefix("http://"))
    for _ in (1, 2):  # run twice in a row: the block makes its own run ids
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert not re.findall(r'"status":\s*4\d\d', done.stdout), done.stdout
        answers = [json.loads(line) for line in done.stdout.splitlines()]  # one answer a line
        results = dict(zip(("a1", "o1", "c1"), answers[-3:], strict=True))
        assert [results[r]["stopReason"] for r in ("a1", "o1", "c1")] == ["completed", "completed", "cancelled"]
        assert results["a1"]["output"] == results["o1"]["output"] == [{"type": "text", "text": "Hello"}]
        assert results["c1"]["output"] == [{"type": "text", "text": "Half an answer"}]
        assert results["o1"]["usage"]["inputTokens"] == 15  # 20 input tokens, 5 of them cached
