"""Demo children that speak a provider's own stream (SPEC §13): raw bodies, as a producer forwards them.

Each scenario posts the wire events of a real provider stream (written out here, no SDK needed)
to ``POST /v1/runs/{runId}/ingest/{format}`` and lets the adapter do the translating.
"""

from __future__ import annotations

import json
from typing import Any

from lastword.client.core import LastwordClient

PARTIAL = "Found three call sites of parse_config; two pass a path, one passes a dict."


def _sse(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def _ingest(client: LastwordClient, run_id: str, format: str, body: bytes, content_type: str, *, end: bool,
            key: str | None = None) -> None:
    client.push_provider_stream(run_id, format, body, end=end, idempotency_key=key, content_type=content_type)


def _anthropic_message(message_id: str, input_tokens: int) -> dict[str, Any]:
    return {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": "claude-demo", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}


def anthropic_max_tokens(client: LastwordClient, run_id: str) -> None:
    """Two Messages streams: text and a tool call, then a step cut at max_tokens inside its tool input."""
    text_pieces = ["Found three call sites of parse_config; ", "two pass a path, ", "one passes a dict."]
    first = [_anthropic_message("msg_demo_1", 1200), {"type": "ping"},
             {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
             *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}} for t in text_pieces),
             {"type": "content_block_stop", "index": 0},
             {"type": "content_block_start", "index": 1,
              "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}},
             {"type": "content_block_delta", "index": 1,
              "delta": {"type": "input_json_delta", "partial_json": '{"path": "app/config.py"}'}},
             {"type": "content_block_stop", "index": 1},
             {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
              "usage": {"output_tokens": 85}},
             {"type": "message_stop"}]
    _ingest(client, run_id, "anthropic", _sse(first), "text/event-stream", end=True)
    second = [_anthropic_message("msg_demo_2", 1400),
              {"type": "content_block_start", "index": 0,
               "content_block": {"type": "tool_use", "id": "toolu_2", "name": "edit_file", "input": {}}},
              {"type": "content_block_delta", "index": 0,
               "delta": {"type": "input_json_delta", "partial_json": '{"path": "app/config.py", "new_text": "def parse'}},
              {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
               "usage": {"output_tokens": 4096}},
              {"type": "message_stop"}]
    _ingest(client, run_id, "anthropic", _sse(second), "text/event-stream", end=True)


def _response(response_id: str, status: str, output: list[Any], **extra: Any) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "created_at": 0, "model": "gpt-demo", "status": status,
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], **extra}


def openai_incomplete(client: LastwordClient, run_id: str) -> None:
    """Two Responses streams: an answer and a function call, then one incomplete at max_output_tokens."""
    message = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": PARTIAL, "annotations": []}]}
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "read_file",
            "arguments": '{"path": "app/config.py"}', "status": "completed"}
    usage = {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 200}, "output_tokens": 85,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1285}
    first: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": _response("resp_demo_1", "in_progress", [])},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
         "item": {**message, "status": "in_progress", "content": []}},
        *({"type": "response.output_text.delta", "sequence_number": 2 + n, "item_id": "msg_1", "output_index": 0,
           "content_index": 0, "delta": piece, "logprobs": []}
          for n, piece in enumerate(("Found three call sites of parse_config; ", "two pass a path, ", "one passes a dict."))),
        {"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": message},
        {"type": "response.output_item.done", "sequence_number": 6, "output_index": 1, "item": call},
        {"type": "response.completed", "sequence_number": 7,
         "response": _response("resp_demo_1", "completed", [message, call], usage=usage)},
    ]
    _ingest(client, run_id, "openai-responses", _sse(first), "text/event-stream", end=True)
    cut_usage = {**usage, "input_tokens": 1400, "output_tokens": 4096, "total_tokens": 5496}
    second = [
        {"type": "response.created", "sequence_number": 0, "response": _response("resp_demo_2", "in_progress", [])},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
         "item": {"id": "fc_2", "type": "function_call", "call_id": "call_2", "name": "edit_file", "arguments": "",
                  "status": "in_progress"}},
        {"type": "response.function_call_arguments.delta", "sequence_number": 2, "item_id": "fc_2",
         "output_index": 0, "delta": '{"path": "app/config.py", "new_text": "def parse'},
        {"type": "response.incomplete", "sequence_number": 3,
         "response": _response("resp_demo_2", "incomplete", [], usage=cut_usage,
                               incomplete_details={"reason": "max_output_tokens"})},
    ]
    _ingest(client, run_id, "openai-responses", _sse(second), "text/event-stream", end=True)


def acp_cancelled(client: LastwordClient, run_id: str) -> None:
    """An ACP prompt turn: a thought, message chunks and a tool call, then the client cancels it."""
    def update(session_update: str, **fields: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "method": "session/update",
                "params": {"sessionId": "sess_demo", "update": {"sessionUpdate": session_update, **fields}}}

    messages = [
        update("agent_thought_chunk", content={"type": "text", "text": "I should look at the callers first."}),
        update("agent_message_chunk", content={"type": "text", "text": "Draft summary: the migration touches "}),
        update("tool_call", toolCallId="call_1", title="Read schema.sql", kind="read", status="pending"),
        update("tool_call_update", toolCallId="call_1", status="completed"),
        update("agent_message_chunk", content={"type": "text", "text": "4 tables and needs a backfill for users.email"}),
        {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "cancelled"}},
    ]
    body = b"".join(json.dumps(message).encode() + b"\n" for message in messages)
    _ingest(client, run_id, "acp", body, "application/x-ndjson", end=False, key=f"demo-{run_id}")
