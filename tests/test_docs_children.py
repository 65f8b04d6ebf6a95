"""The Claude Agent SDK example of docs/CHILDREN.md runs as written: only its options (the one
line a reader writes for their own) and the service's address are pointed at a scripted model and
a test server. It is top-level ``await`` code, as in ``python -m asyncio``."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from tests.cli_children import fake_models  # noqa: E402
from tests.sdk_children import claude_options  # noqa: E402

PAGE = Path(__file__).resolve().parent.parent / "docs" / "CHILDREN.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)

pytestmark = [
    pytest.mark.slow,
    # The SDK leaves a memory stream unclosed after its error result (as alone; see
    # tests/test_integration_claude_agent_sdk.py).
    pytest.mark.filterwarnings("ignore:Exception ignored in. <function MemoryObjectReceiveStream.__del__"
                               ":pytest.PytestUnraisableExceptionWarning"),
]


def test_the_claude_agent_sdk_example_runs_as_written_and_keeps_the_partial_answer(
    base_url: str, tmp_path: Path,
) -> None:
    """Every name it uses is defined or imported by the example itself; on a max-tokens stop it
    catches the SDK's ResultError and its ``result`` is the partial answer, stopReason max_tokens."""
    script = str(BLOCK.findall(PAGE.read_text())[0])
    script = re.sub(r"^options = .*$", "options = _test_options", script, flags=re.M)
    script = script.replace("http://127.0.0.1:8000", base_url)
    code = compile(script, str(PAGE), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    with fake_models.start("max_tokens_partial", "anthropic") as model:
        namespace: dict[str, Any] = {"_test_options": claude_options(model.url, tmp_path)}
        pending = eval(code, namespace)  # noqa: S307 -- the page's own example
        if pending is not None:
            asyncio.run(pending)
    result = namespace["result"]
    assert result.stopReason == "max_tokens", result
    assert [block["text"] for block in result.output if block["type"] == "text"] != [], result
