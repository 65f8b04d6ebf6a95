"""Native stream adapters end to end (SPEC §13): providers' own streams, built with their SDKs.

Each case posts a provider stream (made from the ``anthropic``, ``openai`` or
``agent-client-protocol`` SDK types, serialised as those SDKs serialise them) to a real server
while a real SSE client (httpx-sse) follows the run, and asserts what a parent sees: the
output, the stop reason, the usage, the tool result and the ``subagent/end`` event. The text a
stream assembles is checked against the SDK's own accumulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.api_helpers import shared_base_url  # noqa: F401  (the module's server fixture)
from tests.provider_streams import (
    BODIES,
    CONTENT_TYPES,
    OpenAIStream,
    a_text,
    a_thinking,
    a_tool,
    acp_message,
    acp_prompt_response,
    acp_text,
    acp_thought,
    acp_tool_call,
    acp_tool_call_done,
    anthropic_stream,
    anthropic_text,
    as_dict,
    openai_text,
)
from tests.sse import open_stream, payload

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Seen:
    answers: list[dict[str, Any]]
    result: dict[str, Any]
    tool_result: dict[str, Any]
    end: dict[str, Any] | None  # the subagent/end the SSE client received
    log: list[dict[str, Any]]


@dataclass
class Body:
    format: str
    events: list[Any]
    end: bool = True
    framing: str = "sse"
    headers: dict[str, str] | None = None


async def play(base_url: str, bodies: list[Body], *, then_end: str | None = None) -> Seen:
    """Post ``bodies`` to a new run followed by an SSE client; end it with ``then_end`` if asked."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        run_id = (await client.post("/v1/runs", json={"agent": "provider"})).json()["runId"]
        answers = []
        async with open_stream(client, f"/v1/runs/{run_id}/stream") as stream:
            for body in bodies:
                response = await client.post(
                    f"/v1/runs/{run_id}/ingest/{body.format}", params={"end": str(body.end).lower()},
                    content=BODIES[body.framing](body.events),
                    headers={"content-type": CONTENT_TYPES[body.framing], **(body.headers or {})},
                )
                assert response.status_code == 200, response.text
                answers.append(response.json())
            if then_end is not None:
                ended = await client.post(f"/v1/runs/{run_id}/end", json={"stopReason": then_end})
                assert ended.status_code == 200, ended.text
            received = await stream.until_closed()
        ends = [payload(event) for event in received if event.event == "subagent/end"]
        result = (await client.get(f"/v1/runs/{run_id}/result")).json()
        tool = (await client.get(f"/v1/runs/{run_id}/tool-result")).json()
        log = (await client.get(f"/v1/runs/{run_id}/events", params={"limit": 1000})).json()["events"]
        return Seen(answers, result, tool, ends[-1] if ends else None, [item["event"] for item in log])


def messages(seen: Seen) -> list[dict[str, Any]]:
    return [event["message"] for event in seen.log if event["type"] == "assistant/message"]


def agrees(seen: Seen, output: list[dict[str, Any]], stop_reason: str) -> None:
    """Result, subagent/end and tool result all tell the same output and stop reason."""
    assert seen.result["output"] == output
    assert seen.result["stopReason"] == stop_reason
    assert seen.end is not None
    assert seen.end["stopReason"] == stop_reason
    assert seen.end.get("lastAssistantMessage") == (output or None)
    assert seen.end["usage"] == seen.result["usage"]
    assert seen.tool_result["isError"] is (stop_reason != "completed")


# -- Anthropic ----------------------------------------------------------------------------------

@pytest.mark.parametrize("framing", ["sse", "ndjson", "json"])
async def test_anthropic_plain_text(shared_base_url: str, framing: str) -> None:  # noqa: F811
    """A plain text message gives its text as output, completed, with the stream's final usage."""
    stream = anthropic_stream("msg_plain", [a_text("The answer ", "is ", "42.")], input_tokens=12, output_tokens=7,
                              cache_read=3, cache_write=2)
    seen = await play(shared_base_url, [Body("anthropic", stream, framing=framing)])
    text = anthropic_text(stream)
    assert text == "The answer is 42."
    agrees(seen, [{"type": "text", "text": text}], "completed")
    assert seen.answers[0]["stopReason"] == "completed" and seen.answers[0]["providerStopReason"] == "end_turn"
    # Cumulative usage: message_delta's output count replaces message_start's 1, not added to it.
    assert seen.result["usage"] == {"inputTokens": 12, "outputTokens": 7, "cacheReadTokens": 3, "cacheWriteTokens": 2}
    assert seen.tool_result["content"] == [{"type": "text", "text": text}]
    chunks = [event["delta"]["text"] for event in seen.log if event["type"] == "assistant/chunk"]
    assert chunks == ["The answer ", "is ", "42."]
    for event in seen.log:
        if event["type"] in ("assistant/chunk", "assistant/message", "turn/end"):
            assert event["source"]["format"] == "anthropic"
    # Every raw event but ping is in exactly one stored event's source.
    sourced = [raw for event in seen.log if "source" in event for raw in event["source"]["events"]]
    raws = [as_dict(event) for event in stream if as_dict(event)["type"] != "ping"]
    assert sorted(map(str, sourced)) == sorted(map(str, raws))


async def test_anthropic_text_then_tool_call_leaves_the_turn_open(shared_base_url: str) -> None:  # noqa: F811
    """A message that stops for tool_use keeps the turn open; its text and parsed tool call are the output."""
    stream = anthropic_stream("msg_tool", [a_text("Let me look."), a_tool("toolu_1", "search", '{"query": ', '"parse_config"}')],
                              stop_reason="tool_use")
    seen = await play(shared_base_url, [Body("anthropic", stream)], then_end="cancelled")
    assert "stopReason" not in seen.answers[0] and seen.answers[0]["providerStopReason"] == "tool_use"
    output: list[dict[str, Any]] = [{"type": "text", "text": anthropic_text(stream)},
              {"type": "tool_call", "id": "toolu_1", "name": "search", "input": {"query": "parse_config"}}]
    # The turn stayed open until the parent ended it: the stop reason is the parent's.
    agrees(seen, output, "cancelled")
    assert messages(seen)[0]["stopReason"] == "tool_use"


async def test_anthropic_truncated_tool_call_at_max_tokens_keeps_the_earlier_text(shared_base_url: str) -> None:  # noqa: F811
    """The case of SPEC §1: a step that stops at max_tokens inside its tool call leaves a usage-only message, which hides nothing."""
    first = anthropic_stream("msg_step1", [a_text("Found three call sites; two pass a path."),
                                           a_tool("toolu_1", "read", '{"path": "a.py"}')],
                             stop_reason="tool_use", input_tokens=100, output_tokens=30)
    second = anthropic_stream("msg_step2", [a_tool("toolu_2", "read", '{"path": "b', '.py", "li')],
                              stop_reason="max_tokens", input_tokens=150, output_tokens=4096)
    seen = await play(shared_base_url, [Body("anthropic", first), Body("anthropic", second)])
    assert seen.answers[1]["stopReason"] == "max_tokens"
    logged = messages(seen)
    assert logged[1]["content"] == [] and logged[1]["usage"] == {"inputTokens": 150, "outputTokens": 4096}
    output: list[dict[str, Any]] = [{"type": "text", "text": "Found three call sites; two pass a path."},
              {"type": "tool_call", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}}]
    agrees(seen, output, "max_tokens")
    assert seen.result["usage"]["inputTokens"] == 250 and seen.result["usage"]["outputTokens"] == 4126
    text = seen.tool_result["content"][0]["text"]
    assert "max_tokens" in text.split("\n\n")[0] and text.endswith("Found three call sites; two pass a path.")


async def test_anthropic_thinking_keeps_its_signature(shared_base_url: str) -> None:  # noqa: F811
    """Thinking becomes a reasoning block with its signature, before the text."""
    stream = anthropic_stream("msg_think", [a_thinking("Consider ", "the callers.", signature="EqQBCgIYAhIM"),
                                            a_text("Two callers.")])
    seen = await play(shared_base_url, [Body("anthropic", stream)])
    output = [{"type": "reasoning", "text": "Consider the callers.", "signature": "EqQBCgIYAhIM"},
              {"type": "text", "text": anthropic_text(stream)}]
    agrees(seen, output, "completed")
    reasoning = [e["delta"]["text"] for e in seen.log if e["type"] == "assistant/chunk" and e["delta"]["type"] == "reasoning"]
    assert reasoning == ["Consider ", "the callers."]


async def test_anthropic_refusal_keeps_its_stop_details(shared_base_url: str) -> None:  # noqa: F811
    """A refusal ends the turn as refusal, and the message keeps the stop details."""
    details = {"type": "refusal", "category": "cyber", "explanation": "declined"}
    stream = anthropic_stream("msg_refuse", [a_text("I can't help with that.")], stop_reason="refusal",
                              stop_details=details)
    seen = await play(shared_base_url, [Body("anthropic", stream)])
    agrees(seen, [{"type": "text", "text": "I can't help with that."}], "refusal")
    assert messages(seen)[0]["stopDetails"] == details
    assert seen.tool_result["content"][0]["text"].split("\n\n")[0].count("refusal") >= 1


async def test_anthropic_error_event_ends_the_turn_with_error(shared_base_url: str) -> None:  # noqa: F811
    """An error event gives the message the error and ends the turn with error, keeping the text before it."""
    stream = anthropic_stream("msg_err", [a_text("Partial ", "answer")], error="Overloaded")
    seen = await play(shared_base_url, [Body("anthropic", stream)])
    assert anthropic_text(stream[:-1]) == "Partial answer"
    agrees(seen, [{"type": "text", "text": "Partial answer"}], "error")
    assert messages(seen)[0]["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert seen.result["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert "Overloaded" in seen.tool_result["content"][0]["text"]


async def test_anthropic_stream_cut_off_stores_what_arrived(shared_base_url: str) -> None:  # noqa: F811
    """A stream cut off mid-text stores its chunks and message and leaves the turn open."""
    whole = anthropic_stream("msg_cut", [a_text("Half ", "an ", "answer", " never finished")])
    stream = whole[:6]  # message_start, ping, block start, three deltas
    seen = await play(shared_base_url, [Body("anthropic", stream)], then_end="cancelled")
    assert seen.answers[0].keys() == {"accepted", "duplicates", "lastSeq"}
    assert anthropic_text(stream) == "Half an answer"
    agrees(seen, [{"type": "text", "text": "Half an answer"}], "cancelled")
    assert messages(seen)[0]["usage"] == {"inputTokens": 10, "outputTokens": 1}


# -- OpenAI Responses ---------------------------------------------------------------------------

@pytest.mark.parametrize("framing", ["sse", "ndjson", "json"])
async def test_openai_plain_text(shared_base_url: str, framing: str) -> None:  # noqa: F811
    """A completed response gives its text; input tokens are the uncached ones."""
    builder = OpenAIStream("resp_plain").created().message("Forty", "-two.")
    stream = builder.completed(builder.usage(100, 9, cached=60, cache_write=5))
    seen = await play(shared_base_url, [Body("openai-responses", stream, framing=framing)])
    agrees(seen, [{"type": "text", "text": openai_text(stream)}], "completed")
    assert seen.result["usage"] == {"inputTokens": 40, "outputTokens": 9, "cacheReadTokens": 60, "cacheWriteTokens": 5}


async def test_openai_function_call_leaves_the_turn_open(shared_base_url: str) -> None:  # noqa: F811
    """A completed response holding a function call is not terminal; the call's id is its call_id."""
    builder = OpenAIStream("resp_fc").created().message("Checking.").function_call("call_9", "lookup", '{"k":', ' 1}')
    stream = builder.completed(builder.usage(20, 5))
    seen = await play(shared_base_url, [Body("openai-responses", stream)], then_end="cancelled")
    assert "stopReason" not in seen.answers[0] and seen.answers[0]["providerStopReason"] == "function_call"
    agrees(seen, [{"type": "text", "text": "Checking."},
                  {"type": "tool_call", "id": "call_9", "name": "lookup", "input": {"k": 1}}], "cancelled")


async def test_openai_incomplete_at_max_output_tokens(shared_base_url: str) -> None:  # noqa: F811
    """response.incomplete (max_output_tokens) with an unfinished call: an empty usage-only message hides nothing."""
    first = OpenAIStream("resp_a").created().message("The config loader has two callers.").function_call("call_1", "read", '{"p": 1}')
    body1 = first.completed(first.usage(50, 10))
    second = OpenAIStream("resp_b").created().function_call("call_2", "read", '{"p": ', done=False)
    body2 = second.incomplete("max_output_tokens", second.usage(80, 4000))
    seen = await play(shared_base_url, [Body("openai-responses", body1), Body("openai-responses", body2)])
    assert seen.answers[1]["stopReason"] == "max_tokens" and seen.answers[1]["providerStopReason"] == "max_output_tokens"
    assert messages(seen)[1]["content"] == []
    agrees(seen, [{"type": "text", "text": openai_text(body1)},
                  {"type": "tool_call", "id": "call_1", "name": "read", "input": {"p": 1}}], "max_tokens")
    assert seen.result["usage"]["outputTokens"] == 4010


async def test_openai_reasoning_summary(shared_base_url: str) -> None:  # noqa: F811
    """A reasoning item becomes a reasoning block holding its summary, no signature."""
    builder = OpenAIStream("resp_rs").created().reasoning("Two ", "callers.").message("Done.")
    stream = builder.completed(builder.usage(10, 10))
    seen = await play(shared_base_url, [Body("openai-responses", stream)])
    agrees(seen, [{"type": "reasoning", "text": "Two callers."}, {"type": "text", "text": "Done."}], "completed")


async def test_openai_reasoning_without_summary_hides_nothing(shared_base_url: str) -> None:  # noqa: F811
    """A step cut at max_output_tokens after a summary-less reasoning item does not hide the previous answer."""
    first = OpenAIStream("resp_ans").created().message("The answer is in config.py.").function_call("call_1", "read", "{}")
    body1 = first.completed(first.usage(10, 10))
    second = OpenAIStream("resp_think").created().reasoning()
    body2 = second.incomplete("max_output_tokens", second.usage(20, 500))
    seen = await play(shared_base_url, [Body("openai-responses", body1), Body("openai-responses", body2)])
    assert messages(seen)[1]["content"] == []
    agrees(seen, [{"type": "text", "text": "The answer is in config.py."},
                  {"type": "tool_call", "id": "call_1", "name": "read", "input": {}}], "max_tokens")


async def test_openai_refusal_and_content_filter(shared_base_url: str) -> None:  # noqa: F811
    """A refusal part is kept as a refusal block; incomplete for content_filter is a refusal stop."""
    builder = OpenAIStream("resp_ref").created().message(refusal="I can't help with that.")
    stream = builder.incomplete("content_filter", builder.usage(10, 3))
    seen = await play(shared_base_url, [Body("openai-responses", stream)])
    agrees(seen, [{"type": "refusal", "text": "I can't help with that."}], "refusal")


@pytest.mark.parametrize("how", ["failed", "error"])
async def test_openai_failure_ends_with_error(shared_base_url: str, how: str) -> None:  # noqa: F811
    """response.failed and an error event end the turn with error and the message, keeping the earlier text."""
    builder = OpenAIStream(f"resp_{how}").created().message("Partial.")
    stream = builder.failed("server_error", "The model crashed") if how == "failed" else builder.error("The model crashed")
    seen = await play(shared_base_url, [Body("openai-responses", stream)])
    agrees(seen, [{"type": "text", "text": openai_text(stream)}], "error")
    assert seen.result["error"]["message"] == "The model crashed"
    assert "The model crashed" in seen.tool_result["content"][0]["text"]


async def test_openai_stream_cut_off(shared_base_url: str) -> None:  # noqa: F811
    """A response cut off mid-message keeps its chunk text (no item finished) and leaves the turn open."""
    builder = OpenAIStream("resp_cut").created().message("Half ", "done", done=False)
    seen = await play(shared_base_url, [Body("openai-responses", builder.events)], then_end="cancelled")
    assert "stopReason" not in seen.answers[0]
    assert messages(seen)[0]["content"] == []
    agrees(seen, [{"type": "text", "text": openai_text(builder.events)}], "cancelled")


# -- ACP ----------------------------------------------------------------------------------------

async def test_acp_chunks_then_cancelled(shared_base_url: str) -> None:  # noqa: F811
    """Message chunks then a cancelled prompt response: the turn ends cancelled with the chunk text and the usage."""
    stream = [acp_thought("Reading the file."), acp_message("The loader "), acp_tool_call("t1", "Read loader.py"),
              acp_tool_call_done("t1"), acp_message("has two callers."),
              acp_prompt_response(1, "cancelled", {"inputTokens": 30, "outputTokens": 8, "totalTokens": 38,
                                                   "cachedReadTokens": 4})]
    seen = await play(shared_base_url, [Body("acp", stream, end=False, framing="ndjson")])
    assert seen.answers[0]["stopReason"] == "cancelled"
    agrees(seen, [{"type": "text", "text": acp_text(stream)}], "cancelled")
    assert seen.result["usage"] == {"inputTokens": 30, "outputTokens": 8, "cacheReadTokens": 4, "cacheWriteTokens": 0}
    assert [e["type"] for e in seen.log].count("x-acp-tool-call") == 2


async def test_acp_thought_only(shared_base_url: str) -> None:  # noqa: F811
    """Thought chunks alone are no output: completed, the end event has no lastAssistantMessage."""
    stream = [acp_thought("Nothing to say."), acp_prompt_response(7, "end_turn")]
    seen = await play(shared_base_url, [Body("acp", stream, end=False)])
    agrees(seen, [], "completed")
    assert "lastAssistantMessage" not in (seen.end or {})
