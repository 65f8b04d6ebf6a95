"""docs/WALKTHROUGH.md's "Replaying a child" blocks run as written, and answer what the README shows."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "docs" / "WALKTHROUGH.md"
SH = re.compile(r"```sh\n(.*?)```", re.DOTALL)
JSON = re.compile(r"```json\n(.*?)```", re.DOTALL)

pytestmark = pytest.mark.slow


def section() -> str:
    return README.read_text().split("## Replaying a child: the transcript and forks", 1)[1].split("\n## ", 1)[0]


def last_json(output: str) -> dict[str, Any]:
    """The last JSON document of what a block printed (curl prints answers back to back)."""
    decoder, found, at = json.JSONDecoder(), None, 0
    while (at := output.find("{", at)) != -1:
        found, at = decoder.raw_decode(output, at)
    assert isinstance(found, dict), output
    return found


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("jq") is None, reason="the blocks use curl and jq")
def test_the_transcript_and_fork_blocks_answer_what_the_readme_shows(base_url: str) -> None:
    """Each block (it plays the demo itself), run twice in a row, ends with the answer shown under it
    (the run ids aside, which differ per run)."""
    blocks = SH.findall(section())
    shown = [json.loads(text) for text in JSON.findall(section())]
    assert len(blocks) == len(shown) == 3
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LASTWORD_URL": base_url}
    script = "set -euo pipefail\n" + "\necho '<<<>>>'\n".join(blocks + blocks)
    done = subprocess.run(["bash", "-c", script.replace("localhost:8000", base_url.removeprefix("http://"))],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    outputs = done.stdout.split("<<<>>>\n")
    for output, expected in zip(outputs, shown + shown, strict=True):
        answer = last_json(output)
        for entry in answer["omitted"] + expected["omitted"]:
            entry.pop("runId", None)  # the shown documents are compared twice
        assert answer == expected
