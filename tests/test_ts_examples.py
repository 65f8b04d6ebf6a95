"""The TypeScript parents of docs/examples, run with node against the scripted model servers (SPEC §19).

Each example drives a real child through its SDK (``@anthropic-ai/claude-agent-sdk``, which
runs the Claude Code it bundles; ``@openai/codex-sdk``, which runs the codex binary), pointed at
a fake model server of tests/cli_children on loopback, and streams the child's turn into a real
lastword server through one fetch request. In every case lastword keeps the child's last word as
SPEC §5/§16 say, whatever the SDK itself answers or throws, and the turn is ended: a completion,
a max-tokens partial, an API error mid-run (both SDKs throw) and a cancellation (AbortController).

They need ``npm ci`` in docs/examples (``.ci/run`` does it); without it they skip and say so,
and ``LASTWORD_REQUIRE_TS_EXAMPLES=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api_helpers import serving
from tests.cli_children import fake_models
from tests.cli_children.fake_models import text, tool
from tests.cli_children.record import _base_env, _setup_claude, _setup_codex
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
DRIVER = Path(__file__).resolve().parent / "ts_examples" / "drive.mjs"
PACKAGES = {"claude": "@anthropic-ai/claude-agent-sdk", "codex": "@openai/codex-sdk"}
SCRIPTS = {"claude": "claude-agent-sdk.mjs", "codex": "codex-sdk.mjs"}
FLAVOURS = {"claude": "anthropic", "codex": "openai-responses"}
TIMEOUT = 120

pytestmark = pytest.mark.slow


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    absent = [name for name in PACKAGES.values() if not (EXAMPLES / "node_modules" / name / "package.json").exists()]
    return f"{', '.join(absent)} not installed: `npm ci` in docs/examples" if absent else None


@pytest.fixture(scope="module")
def lastword_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require(_missing(), "LASTWORD_REQUIRE_TS_EXAMPLES")
    with serving("sqlite", tmp_path_factory) as url:
        yield url


def _node(sdk: str, argv: list[str], scenario: Any, lastword_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run node with ``argv`` as a parent whose ``sdk`` child talks to a fake model playing ``scenario``."""
    work = tmp_path / "work"
    work.mkdir()
    env = _base_env(tmp_path)
    with fake_models.start(scenario, FLAVOURS[sdk]) as model:
        if sdk == "claude":
            _setup_claude("claude-code", model.url, tmp_path, work, env)
            env["ANTHROPIC_MODEL"] = "claude-sonnet-4-5"  # the model the fixtures were recorded with
        else:
            _setup_codex(model.url, tmp_path, work, env)
        env["LASTWORD_URL"] = lastword_url
        return subprocess.run(["node", *argv], cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=TIMEOUT, start_new_session=True)


def _drive(sdk: str, scenario: Any, run_id: str, lastword_url: str, tmp_path: Path, at_tool: str = "") -> dict[str, Any]:
    """One child turn through the example's ``child()``: what the SDK gave, and lastword's result.
    ``at_tool``: ``abort-at-tool`` or ``break-at-tool``, what the parent does once a tool call started."""
    argv = [str(DRIVER), sdk, run_id, "Say hello.", *([at_tool] if at_tool else [])]
    done = _node(sdk, argv, scenario, lastword_url, tmp_path)
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def _texts(result: dict[str, Any]) -> list[str]:
    return [block["text"] for block in result["output"] if block["type"] == "text"]


ANSWER = "Hello from the fake model. The answer is 42."
PARTIAL = "This answer is cut off at the token ceil"
BEFORE_OUTAGE = "Running a command before the outage."
# A tool call that runs until the parent aborts (Claude Code refuses a bare `sleep`).
SLOW_TOOL = {"main": [tool("shell", text_before="Running a long command.", command="timeout 60 tail -f /dev/null"),
                      text("The command finished.")]}


@pytest.mark.parametrize("sdk", ["claude", "codex"])
def test_a_completion_is_the_childs_answer(sdk: str, lastword_url: str, tmp_path: Path) -> None:
    seen = _drive(sdk, "completion", f"ts-{sdk}-completion", lastword_url, tmp_path)
    assert (seen["threw"], seen["sdkAnswer"]) == (None, ANSWER)
    result = seen["lastword"]
    assert (result["status"], result["stopReason"], _texts(result)) == ("ended", "completed", [ANSWER])
    assert result["usage"]["inputTokens"] > 0


def test_claude_max_tokens_keeps_the_partial_text_while_the_sdk_throws(lastword_url: str, tmp_path: Path) -> None:
    seen = _drive("claude", "max_tokens_partial", "ts-claude-ceiling", lastword_url, tmp_path)
    assert "returned an error result" in seen["threw"]
    assert seen["sdkAnswer"].startswith("API Error: Claude's response exceeded the 32000 output token maximum")
    result = seen["lastword"]
    assert (result["stopReason"], _texts(result)) == ("max_tokens", [PARTIAL])


def test_codex_max_tokens_keeps_the_partial_text_while_the_sdk_throws(lastword_url: str, tmp_path: Path) -> None:
    seen = _drive("codex", "max_tokens_partial", "ts-codex-ceiling", lastword_url, tmp_path)
    assert seen["threw"].startswith("Error: Codex Exec exited with code 1")
    assert seen["turnFailed"] == "Incomplete response returned, reason: max_output_tokens"
    result = seen["lastword"]
    assert (result["stopReason"], _texts(result)) == ("max_tokens", [PARTIAL])


@pytest.mark.parametrize(("sdk", "threw", "error"), [
    ("claude", "returned an error result: API Error: 500", "API Error: 500"),
    ("codex", "Codex Exec exited with code 1", "experiencing high demand"),
])
def test_an_api_error_mid_run_ends_the_turn_with_the_text_before_it(sdk: str, threw: str, error: str,
                                                                   lastword_url: str, tmp_path: Path) -> None:
    seen = _drive(sdk, "http_500_mid_run", f"ts-{sdk}-outage", lastword_url, tmp_path)
    assert threw in seen["threw"]
    result = seen["lastword"]
    assert (result["stopReason"], _texts(result)) == ("error", [BEFORE_OUTAGE])
    assert [block["type"] for block in result["output"]] == ["text", "tool_call"]
    assert error in result["error"]["message"]


@pytest.mark.parametrize("sdk", ["claude", "codex"])
def test_an_aborted_child_ends_the_turn_cancelled_with_its_text(sdk: str, lastword_url: str, tmp_path: Path) -> None:
    seen = _drive(sdk, SLOW_TOOL, f"ts-{sdk}-aborted", lastword_url, tmp_path, at_tool="abort-at-tool")
    assert seen["aborted"] and seen["threw"] is not None
    result = seen["lastword"]
    assert (result["status"], result["stopReason"]) == ("ended", "cancelled")
    assert _texts(result) == ["Running a long command."]
    assert [block["type"] for block in result["output"]] == ["text", "tool_call"]


@pytest.mark.parametrize("sdk", ["claude", "codex"])
def test_leaving_the_loop_early_ends_the_turn_cancelled(sdk: str, lastword_url: str, tmp_path: Path) -> None:
    seen = _drive(sdk, SLOW_TOOL, f"ts-{sdk}-left", lastword_url, tmp_path, at_tool="break-at-tool")
    assert seen["left"] and (seen["threw"], seen["aborted"]) == (None, False)
    result = seen["lastword"]
    assert (result["status"], result["stopReason"]) == ("ended", "cancelled")
    assert _texts(result) == ["Running a long command."]


@pytest.mark.parametrize("sdk", ["claude", "codex"])
def test_the_example_runs_as_its_readme_says(sdk: str, lastword_url: str, tmp_path: Path) -> None:
    """``node <example> RUN_ID PROMPT``: the SDK's throw on stderr, lastword's result on stdout."""
    done = _node(sdk, [str(EXAMPLES / SCRIPTS[sdk]), f"ts-{sdk}-main", "Say hello."], "max_tokens_partial",
                 lastword_url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "the SDK threw: " in done.stderr
    result = json.loads(done.stdout)
    assert (result["stopReason"], _texts(result)) == ("max_tokens", [PARTIAL])


def test_the_examples_pin_exact_versions() -> None:
    package = json.loads((EXAMPLES / "package.json").read_text())
    lock = json.loads((EXAMPLES / "package-lock.json").read_text())
    for name, version in package["dependencies"].items():
        assert version[0].isdigit(), f"{name} is not pinned: {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
