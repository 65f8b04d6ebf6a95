"""Scripted fake children: drive a running lastword through the client exactly as a child runtime would.

No model and no key: each scenario is a fixed script of session events and chunk text that
reproduces one of the cases lastword exists for (SPEC §1). A refusal raises the client's
:class:`~lastword.client.core.LastwordAPIError`, as in every other command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx

from lastword.cli.demo_provider import acp_cancelled, anthropic_max_tokens, openai_incomplete
from lastword.client.core import LastwordAPIError, LastwordClient

Script = Callable[[LastwordClient, str], None]
#: A demo says soon that the service is not there (as the other commands do).
RETRIES = 2


def _events(client: LastwordClient, run_id: str, *events: dict[str, Any]) -> None:
    client.push_events(run_id, events)


def _text(text: str) -> dict[str, Any]:
    return {"type": "assistant/chunk", "delta": {"type": "text", "text": text}}


def max_tokens_partial(client: LastwordClient, run_id: str) -> None:
    """Streams a partial answer and a tool call, then a tool-only step ends at max-tokens.

    The truncated tool call is dropped, so the loop logs an assistant message with empty
    content that records usage only: the case naive readers get wrong.
    """
    partial = "Found three call sites of parse_config; two pass a path, one passes a dict."
    _events(client, run_id, {"type": "step/start"})
    for piece in ("Found three call sites of parse_config; ", "two pass a path, ", "one passes a dict."):
        _events(client, run_id, _text(piece))
    _events(
        client, run_id,
        {"type": "assistant/message", "message": {
            "id": "msg_1",
            "content": [
                {"type": "text", "text": partial},
                {"type": "tool_call", "id": "call_1", "name": "read_file", "input": {"path": "app/config.py"}},
            ],
            "usage": {"inputTokens": 1200, "outputTokens": 85},
            "stopReason": "tool_use",
        }},
        {"type": "tool/result", "toolCallId": "call_1", "content": "def parse_config(source): ..."},
        {"type": "step/finish"},
        {"type": "step/start"},
        {"type": "assistant/chunk", "delta": {"type": "tool_call", "id": "call_2", "name": "edit_file"}},
        {"type": "assistant/message", "message": {
            "id": "msg_2", "content": [], "usage": {"inputTokens": 1400, "outputTokens": 4096},
            "stopReason": "max_tokens",
        }},
        {"type": "step/finish"},
    )
    client.end(run_id, "max_output_tokens")


def cancelled_streaming(client: LastwordClient, run_id: str) -> None:
    """Only bare chunk text, streamed as text/plain, then the parent cancels the child."""

    def pieces() -> Iterator[str]:
        yield "Draft summary: the migration touches "
        yield "4 tables and needs a backfill for "
        yield "users.email"

    client.push_text_stream(run_id, pieces())
    client.end(run_id, "cancelled")


def reasoning_only(client: LastwordClient, run_id: str) -> None:
    """A step whose only substantive block is reasoning, after some streamed text."""
    _events(
        client, run_id,
        _text("Let me think about this."),
        {"type": "assistant/message", "message": {
            "content": [{"type": "reasoning", "text": "The user wants the shortest path.", "signature": "sig-1"}],
            "usage": {"inputTokens": 300, "outputTokens": 40},
        }},
        {"type": "turn/end", "stopReason": "end_turn"},
    )


def completed(client: LastwordClient, run_id: str) -> None:
    """An ordinary child: streams its answer, logs the message, ends with end_turn."""
    answer = "The build fails because the lockfile pins an old resolver."
    _events(
        client, run_id,
        _text("The build fails because "), _text("the lockfile pins an old resolver."),
        {"type": "assistant/message", "message": {
            "content": [{"type": "text", "text": answer}], "usage": {"inputTokens": 900, "outputTokens": 25},
        }},
        {"type": "turn/end", "stopReason": "end_turn"},
    )


SCENARIOS: dict[str, Script] = {
    "max-tokens-partial": max_tokens_partial,
    "cancelled-streaming": cancelled_streaming,
    "reasoning-only": reasoning_only,
    "completed": completed,
    # Raw provider streams through the native adapters (SPEC §13).
    "anthropic-max-tokens": anthropic_max_tokens,
    "openai-incomplete": openai_incomplete,
    "acp-cancelled": acp_cancelled,
}


def run_scenario(
    name: str,
    url: str,
    *,
    run_id: str | None = None,
    token: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> str:
    """Play the scenario into a new run, or into ``run_id``, and return the run id.

    A ``run_id`` that does not exist yet is created; one that exists is played into as it is,
    so a watcher can create the run and subscribe to its stream before the scenario starts
    (a stream of a run that does not exist yet is a 404). ``token`` is a bearer token (the ingest
    token), for a service that asks for one.
    """
    with LastwordClient(url, token=token, timeout=30, retries=RETRIES, transport=transport) as client:
        if run_id is not None and _exists(client, run_id):
            SCENARIOS[name](client, run_id)
            return run_id
        created = client.create_run(run_id, agent=f"demo:{name}").runId
        SCENARIOS[name](client, created)
        return created


def _exists(client: LastwordClient, run_id: str) -> bool:
    try:
        client.get_run(run_id)
    except LastwordAPIError as error:
        if error.status == 404:
            return False
        raise
    return True
