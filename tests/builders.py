"""Builders every test uses: content blocks, ingested events, usage, and creating a run over HTTP.

One definition of each, so a change to the event shapes (SPEC §3–§4) is made once. The event
builders return plain dicts, exactly what a producer would send as JSON.
"""

from __future__ import annotations

from typing import Any

import httpx

Block = dict[str, Any]
Event = dict[str, Any]

# -- blocks (SPEC §3) ----------------------------------------------------------------------------


def text(value: str, **extra: Any) -> Block:
    return {"type": "text", "text": value, **extra}


def reasoning(value: str = "thinking", **extra: Any) -> Block:
    return {"type": "reasoning", "text": value, **extra}


def tool_call(call_id: str = "call_1", name: str = "search", **extra: Any) -> Block:
    return {"type": "tool_call", "id": call_id, "name": name, "input": {"q": "x"}, **extra}


def tool_result_block(call_id: str = "call_1", content: Any = "found it") -> Block:
    return {"type": "tool_result", "toolCallId": call_id, "content": content, "isError": False}


def usage(inp: int, out: int, **extra: int) -> dict[str, int]:
    """``{inputTokens, outputTokens}`` plus any of the optional cache fields."""
    return {"inputTokens": inp, "outputTokens": out, **extra}


# -- events (SPEC §4) ----------------------------------------------------------------------------


def _with_id(event: Event, event_id: str | None) -> Event:
    if event_id is not None:
        event["eventId"] = event_id
    return event


def chunk(value: str, event_id: str | None = None) -> Event:
    """An ``assistant/chunk`` text delta."""
    return _with_id({"type": "assistant/chunk", "delta": {"type": "text", "text": value}}, event_id)


def message(*blocks: Block | str, usage: dict[str, int] | None = None, event_id: str | None = None,
            **extra: Any) -> Event:
    """An ``assistant/message``; plain strings become text blocks, ``extra`` goes into the message."""
    content = [text(block) if isinstance(block, str) else block for block in blocks]
    body: dict[str, Any] = {"content": content, **extra}
    if usage is not None:
        body["usage"] = usage
    return _with_id({"type": "assistant/message", "message": body}, event_id)


def turn_end(stop_reason: str = "completed", usage: dict[str, int] | None = None,
             event_id: str | None = None, **extra: Any) -> Event:
    """A ``turn/end`` event."""
    event: Event = {"type": "turn/end", "stopReason": stop_reason, **extra}
    if usage is not None:
        event["usage"] = usage
    return _with_id(event, event_id)


# -- runs over HTTP (SPEC §7) --------------------------------------------------------------------


def new_run(api: httpx.Client, **body: Any) -> dict[str, Any]:
    """Create a run (201) and return it as the service answered."""
    response = api.post("/v1/runs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def create_run(api: httpx.Client, **body: Any) -> str:
    """Create a run (201) and return its ``runId``."""
    return str(new_run(api, **body)["runId"])


async def create_run_async(client: httpx.AsyncClient, **body: Any) -> str:
    """Create a run (201) through an async client and return its ``runId``."""
    response = await client.post("/v1/runs", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["runId"])
