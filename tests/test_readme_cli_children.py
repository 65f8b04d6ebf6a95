"""The README's "Put lastword between your orchestrator and its children" runs as written, twice.

Both blocks run with the real, pinned Claude Code (tests/cli_children) on the PATH as
``claude``, against the scripted model's max-tokens scenario: the CLI's own answer is an API
error sentence; the blocks must give the child's partial reply and the ``max_tokens`` stop.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.cli_children import fake_models
from tests.cli_children.record import BIN, _base_env, _setup_claude

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)
PARTIAL = "This answer is cut off at the token ceil"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (BIN / "claude").exists(), reason=f"Claude Code not installed ({BIN})"),
              pytest.mark.skipif(shutil.which("curl") is None, reason="the section uses curl")]


def blocks() -> list[str]:
    section = README.read_text().split("## Put lastword between your orchestrator and its children", 1)[1]
    return BLOCK.findall(section.split("\n## ", 1)[0])


def claude_env(model_url: str, tmp: Path) -> dict[str, str]:
    """The CLI's environment as the recorder sets it (offline, pointed at the fake), with
    ``claude`` and ``lastword`` on the PATH."""
    env = _base_env(tmp)
    _setup_claude("claude-code", model_url, tmp, tmp, env)
    env["PATH"] = os.pathsep.join([str(BIN), str(Path(sys.executable).parent), env["PATH"]])
    return {key: str(value) for key, value in env.items()}


def test_the_section_has_the_pipe_and_the_run_form() -> None:
    found = blocks()
    assert len(found) == 2
    assert "| curl" in found[0] and "/ingest/claude-code" in found[0]
    assert found[1].startswith("lastword run ")


def test_the_pipe_form_keeps_the_partial_reply(base_url: str) -> None:
    model = fake_models.start("max_tokens_partial", "anthropic")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            script = "set -eu\n" + blocks()[0].replace("localhost:8000", base_url.removeprefix("http://"))
            runs = [subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp,
                                   env=claude_env(model.url, Path(tmp)), timeout=180, check=False) for _ in (1, 2)]
    finally:
        model.close()
    for done in runs:  # run twice in a row: the block makes its own run id each time
        assert done.returncode == 0, done.stderr[-2000:]
        # one answer a line (the block ends each curl with echo): the last is the result
        answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        assert len(answers) == 3, done.stdout
        result = answers[-1]
        assert result["stopReason"] == "max_tokens", result
        assert result["output"] == [{"type": "text", "text": PARTIAL}]


def test_the_run_form_prints_the_partial_reply_and_exits_3(base_url: str) -> None:
    model = fake_models.start("max_tokens_partial", "anthropic")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            script = blocks()[1].replace("http://127.0.0.1:8000", base_url)
            runs = [subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp,
                                   env=claude_env(model.url, Path(tmp)), timeout=180, check=False) for _ in (1, 2)]
    finally:
        model.close()
    for done in runs:  # run twice in a row
        assert done.returncode == 3, (done.stdout[-1000:], done.stderr[-2000:])
        assert done.stdout.strip() == PARTIAL


def test_without_a_key_both_forms_end_error_as_the_readme_says(base_url: str) -> None:
    """A newcomer with no model key and no ``claude`` login runs the section as written: the README
    says what they get (the error type it names, no answer, ``lastword run`` exiting 1), and it is so."""
    section = README.read_text().split("## Put lastword between your orchestrator and its children", 1)[1]
    named = re.search(r"Without a model key.*?`error\.type` `(\w+)`", section, re.S)
    assert named is not None, "the README says what a reader without a key gets"
    assert "exits 1" in section[named.start():named.start() + 600]
    with tempfile.TemporaryDirectory() as tmp:
        env = claude_env("http://127.0.0.1:9", Path(tmp))
        del env["ANTHROPIC_API_KEY"], env["ANTHROPIC_BASE_URL"]  # nothing to log in with
        pipe = blocks()[0].replace("localhost:8000", base_url.removeprefix("http://"))
        piped = subprocess.run(["bash", "-c", "set -eu\n" + pipe], capture_output=True, text=True, cwd=tmp, env=env,
                               timeout=180, check=False)
        ran = subprocess.run(["bash", "-c", blocks()[1].replace("http://127.0.0.1:8000", base_url)],
                             capture_output=True, text=True, cwd=tmp, env=env, timeout=180, check=False)
    assert piped.returncode == 0, piped.stderr[-2000:]
    result = json.loads(piped.stdout.splitlines()[-1])
    assert (result["stopReason"], result["error"]["type"], result["output"]) == ("error", named[1], []), result
    assert ran.returncode == 1, (ran.stdout[-1000:], ran.stderr[-2000:])
    assert ran.stdout.strip() == "" and "ended error" in ran.stderr, ran.stderr[-2000:]
