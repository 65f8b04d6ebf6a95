"""lastword.integrations.claude_agent_sdk: a parent driving children with the Claude Agent SDK (SPEC §19).

Each case runs the SDK's bundled Claude Code against a scripted model server, through the
integration into a real lastword server, and checks three things: lastword's output and stop
reason are the ones SPEC §5/§16 give; the caller got what the SDK alone gives (the same messages,
the same exception); and the SDK's own final answer, which the table in the module's cases
records, is where it differs from lastword's.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

claude_agent_sdk = pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import AssistantMessage, ResultError, ResultMessage, ToolUseBlock  # noqa: E402

from lastword.client.core import AsyncLastwordClient  # noqa: E402
from lastword.integrations import claude_agent_sdk as lw_claude  # noqa: E402
from tests.cli_children import fake_models  # noqa: E402
from tests.cli_children.fake_models import text, tool  # noqa: E402
from tests.sdk_children import claude_options, summary  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    # The SDK itself leaves a memory stream unclosed when its caller stops iterating early or is
    # cancelled (the SDK alone does the same: seen with claude-agent-sdk 0.2.189); the collector
    # may find it during any later test of the module.
    pytest.mark.filterwarnings("ignore:Exception ignored in. <function MemoryObjectReceiveStream.__del__"
                               ":pytest.PytestUnraisableExceptionWarning"),
]


async def _plain(scenario: Any, home: Path, **fields: Any) -> tuple[list[Any], BaseException | None]:
    """The SDK alone on ``scenario``: what its caller gets."""
    got: list[Any] = []
    with fake_models.start(scenario, "anthropic") as model:
        try:
            async for message in claude_agent_sdk.query(prompt="go", options=claude_options(model.url, home, **fields)):
                got.append(message)
        except Exception as error:
            return got, error
    return got, None


async def _through_lastword(base_url: str, scenario: Any, home: Path, run_id: str,
                            **create: Any) -> tuple[list[Any], BaseException | None]:
    got: list[Any] = []
    with fake_models.start(scenario, "anthropic") as model:
        async with AsyncLastwordClient(base_url) as lw:
            try:
                async for message in lw_claude.query(prompt="go", options=claude_options(model.url, home),
                                                     lastword=lw, run_id=run_id, **create):
                    got.append(message)
            except Exception as error:
                return got, error
    return got, None


def _result(base_url: str, run_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{base_url}/v1/runs/{run_id}/result", timeout=30)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _texts(output: list[dict[str, Any]]) -> list[str]:
    return [block["text"] for block in output if block.get("type") == "text"]


def _same_for_the_caller(base_url: str, scenario: Any, tmp_path: Path, run_id: str,
                         **create: Any) -> tuple[list[Any], BaseException | None]:
    """Run ``scenario`` alone and through lastword; the caller's messages and exception must match."""
    alone, alone_error = asyncio.run(_plain(scenario, tmp_path / "alone"))
    got, error = asyncio.run(_through_lastword(base_url, scenario, tmp_path / "wrapped", run_id, **create))
    assert _seen(got) == _seen(alone)
    assert type(error) is type(alone_error)
    if alone_error is not None:
        assert isinstance(error, type(alone_error))
        assert getattr(error, "subtype", None) == getattr(alone_error, "subtype", None)
        assert str(error).split(":")[0] == str(alone_error).split(":")[0]
    return got, error


def _seen(messages: list[Any]) -> list[str]:
    """The caller's messages as it reads them; the fake model's port (in error texts) left out."""
    return [re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", repr(summary(message))) for message in messages]


def _sdk_answer(messages: list[Any]) -> str | None:
    results = [message for message in messages if isinstance(message, ResultMessage)]
    return results[-1].result if results else None


def test_a_completion_is_its_text_and_completed(base_url: str, tmp_path: Path) -> None:
    got, error = _same_for_the_caller(base_url, "completion", tmp_path, "sdk-completion")
    assert error is None
    result = _result(base_url, "sdk-completion")
    assert (result["status"], result["stopReason"]) == ("ended", "completed")
    assert _texts(result["output"]) == ["Hello from the fake model. The answer is 42."]
    assert _sdk_answer(got) == "Hello from the fake model. The answer is 42."
    assert result["usage"]["inputTokens"] > 0


def test_a_max_tokens_stop_keeps_the_partial_answer_while_the_sdk_raises(base_url: str, tmp_path: Path) -> None:
    got, error = _same_for_the_caller(base_url, "max_tokens_partial", tmp_path, "sdk-ceiling")
    assert isinstance(error, ResultError)  # the SDK raises on the error result, and so does the drop-in
    assert "exceeded the 32000 output token maximum" in (_sdk_answer(got) or "")
    result = _result(base_url, "sdk-ceiling")
    assert result["stopReason"] == "max_tokens"
    assert _texts(result["output"]) == ["This answer is cut off at the token ceil"]


def test_an_api_error_mid_run_keeps_the_text_before_it(base_url: str, tmp_path: Path) -> None:
    got, error = _same_for_the_caller(base_url, "http_500_mid_run", tmp_path, "sdk-outage")
    assert isinstance(error, ResultError)
    assert (_sdk_answer(got) or "").startswith("API Error: 500")
    result = _result(base_url, "sdk-outage")
    assert result["stopReason"] == "error"
    assert _texts(result["output"]) == ["Running a command before the outage."]
    assert "API Error: 500" in result["error"]["message"]


def test_a_reply_split_by_the_ceiling_is_joined_as_the_cli_printed_it(base_url: str, tmp_path: Path) -> None:
    """The CLI's nudges between the parts are recognised although the SDK drops ``isSynthetic``."""
    got, error = _same_for_the_caller(base_url, "continued_after_ceiling", tmp_path, "sdk-joined",
                                      selection={"joinContinuations": True})
    assert error is None
    assert _sdk_answer(got) == " and part three, which completes the answer."
    result = _result(base_url, "sdk-joined")
    assert result["stopReason"] == "completed"
    assert "".join(_texts(result["output"])) == (
        "Part one of a long answer, cut part two, cut again and part three, which completes the answer.")


def test_a_subagent_is_a_child_run_of_the_parent(base_url: str, tmp_path: Path) -> None:
    got, error = _same_for_the_caller(base_url, "subagent_foreground", tmp_path, "sdk-parent")
    assert error is None
    calls = [block for message in got if isinstance(message, AssistantMessage) for block in message.content
             if isinstance(block, ToolUseBlock) and block.name in ("Agent", "Task")]
    assert len(calls) == 1
    parent = _result(base_url, "sdk-parent")
    assert parent["stopReason"] == "completed"
    assert _texts(parent["output"]) == ["The subagent replied: hello from the subagent."]
    child_id = f"sdk-parent.{calls[0].id}"
    child = httpx.get(f"{base_url}/v1/runs/{child_id}", timeout=30).json()
    assert child["parentRunId"] == "sdk-parent"
    child_result = _result(base_url, child_id)
    assert child_result["stopReason"] == "completed"
    assert "Hello from the subagent." in "".join(_texts(child_result["output"]))


SLOW_TOOL = {"main": [tool("shell", text_before="Running a long command.", command="sleep 60"),
                      text("The command finished.")]}


def test_a_cancelled_query_ends_the_turn_cancelled_with_its_text(base_url: str, tmp_path: Path) -> None:
    seen: list[Any] = []

    async def parent() -> None:
        with fake_models.start(SLOW_TOOL, "anthropic") as model:
            async with AsyncLastwordClient(base_url) as lw:
                async def child() -> None:
                    async for message in lw_claude.query(prompt="go", options=claude_options(model.url, tmp_path),
                                                         lastword=lw, run_id="sdk-cancelled"):
                        seen.append(message)
                        if isinstance(message, AssistantMessage) and any(
                                isinstance(block, ToolUseBlock) for block in message.content):
                            started.set()

                started = asyncio.Event()
                task = asyncio.create_task(child())
                await asyncio.wait_for(started.wait(), 60)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

    asyncio.run(parent())
    result = _result(base_url, "sdk-cancelled")
    assert result["stopReason"] == "cancelled"
    assert _texts(result["output"]) == ["Running a long command."]
    assert [block["type"] for block in result["output"]] == ["text", "tool_call"]
    assert not any(isinstance(message, ResultMessage) for message in seen)


def test_leaving_the_iteration_early_ends_the_turn_cancelled(base_url: str, tmp_path: Path) -> None:
    async def parent() -> None:
        with fake_models.start(SLOW_TOOL, "anthropic") as model:
            async with AsyncLastwordClient(base_url) as lw:
                messages = lw_claude.query(prompt="go", options=claude_options(model.url, tmp_path), lastword=lw,
                                           run_id="sdk-left")
                async for message in messages:
                    if isinstance(message, AssistantMessage) and any(
                            isinstance(block, ToolUseBlock) for block in message.content):
                        break
                await messages.aclose()

    asyncio.run(parent())
    result = _result(base_url, "sdk-left")
    assert result["stopReason"] == "cancelled"
    assert _texts(result["output"]) == ["Running a long command."]


TWO_TURNS = {"main": [text("First answer."), text("Second answer.")]}


def test_the_client_streams_each_query_as_a_turn_of_one_run(base_url: str, tmp_path: Path) -> None:
    answers: list[str | None] = []

    async def parent() -> None:
        with fake_models.start(TWO_TURNS, "anthropic") as model:
            async with AsyncLastwordClient(base_url) as lw:
                async with lw_claude.ClaudeSDKClient(claude_options(model.url, tmp_path), lastword=lw,
                                                     run_id="sdk-client") as client:
                    for prompt in ("one", "two"):
                        await client.query(prompt)
                        async for message in client.receive_response():
                            if isinstance(message, ResultMessage):
                                answers.append(message.result)

    asyncio.run(parent())
    assert answers == ["First answer.", "Second answer."]
    first = httpx.get(f"{base_url}/v1/runs/sdk-client/result", params={"turn": 1}, timeout=30).json()
    second = httpx.get(f"{base_url}/v1/runs/sdk-client/result", params={"turn": 2}, timeout=30).json()
    assert (first["stopReason"], _texts(first["output"])) == ("completed", ["First answer."])
    assert (second["stopReason"], _texts(second["output"])) == ("completed", ["Second answer."])


def test_an_interrupted_client_turn_ends_cancelled(base_url: str, tmp_path: Path) -> None:
    async def parent() -> None:
        with fake_models.start(SLOW_TOOL, "anthropic") as model:
            async with AsyncLastwordClient(base_url) as lw:
                async with lw_claude.ClaudeSDKClient(claude_options(model.url, tmp_path), lastword=lw,
                                                     run_id="sdk-interrupted") as client:
                    await client.query("go")
                    async for message in client.receive_messages():
                        if isinstance(message, AssistantMessage) and any(
                                isinstance(block, ToolUseBlock) for block in message.content):
                            await client.interrupt()
                            break

    asyncio.run(parent())
    result = _result(base_url, "sdk-interrupted")
    assert result["stopReason"] == "cancelled"
    assert _texts(result["output"]) == ["Running a long command."]

