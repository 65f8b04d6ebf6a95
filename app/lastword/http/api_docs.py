"""The OpenAPI document as documentation: what FastAPI generates, completed for a reader.

FastAPI derives paths, parameters and schemas from the routes and models (whose docstrings
describe every schema and field). This module adds what the routes do not say, once for all of
them, so a new endpoint gets it without repeating it:

* the two ways to present a token (``Authorization: Bearer`` and ``?access_token=`` for
  reads), so ``/docs`` has an Authorize button, and on every guarded operation its 401 (and
  403 where the read token is refused);
* every error as ``application/problem+json`` holding a :class:`~lastword.schemas.Problem`
  (FastAPI's own 422 shape never reaches a client: the service answers problems), with what
  the status means here; the 503 every store-backed operation can answer;
* a description for every parameter the route left without one (the same name means the same
  thing on every path);
* an example request and answer for every operation.

A test walks the generated document and fails when any of this is missing.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from lastword.errors import PROBLEM_JSON
from lastword.http import ds_docs
from lastword.http.access import kind_of
from lastword.rules.tool_result import tool_result

PROBLEM_SCHEMA = {"$ref": "#/components/schemas/Problem"}

SECURITY_SCHEMES: dict[str, Any] = {
    "bearerToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "LASTWORD_INGEST_TOKEN for ingest (every POST under /v1); either token for reads. "
        "Only needed when the service is configured with tokens.",
    },
    "accessTokenQuery": {
        "type": "apiKey",
        "in": "query",
        "name": "access_token",
        "description": "The read token in the URL, for browsers' EventSource (reads only; it ends up in "
        "proxy logs and browser history, so prefer the header).",
    },
}
INGEST_SECURITY: list[dict[str, list[str]]] = [{"bearerToken": []}]
READ_SECURITY: list[dict[str, list[str]]] = [{"bearerToken": []}, {"accessTokenQuery": []}]

#: What each error status means on this service (docs/ERRORS.md lists every code).
STATUSES: dict[int, str] = {
    400: "Malformed input: a body that is not JSON or not UTF-8, a cursor or resume id this service never gave "
    "out (`malformed_json`, `too_deeply_nested`, `invalid_cursor`, `invalid_last_event_id`).",
    401: "Tokens are configured and the request has none, or one that is not valid (`missing_token`, "
    "`invalid_token`).",
    403: "The read token on an ingest endpoint, or a token in the query string where it is not taken "
    "(`wrong_token_kind`).",
    404: "No run with this id, or no such turn (`run_not_found`, `turn_not_found`).",
    409: "The request conflicts with the run's state: events for a turn that has ended (`run_ended`, with its "
    "`stopReason`), another stop reason after the end (`turn_already_ended`), a `runId` created with another "
    "body (`run_exists`), an `eventId` repeated with other content (`event_id_conflict`), turns of a oneshot "
    "run (`not_continuable`). Nothing is changed.",
    410: "The run was deleted by retention (`run_deleted`).",
    413: "The body, one event or the batch is over the configured limit (`payload_too_large`, `event_too_large`, "
    "`batch_too_large`; the problem names the `limit` and the event's `index`).",
    415: "A content type this endpoint does not take (`unsupported_media_type`).",
    422: "The input breaks the schema: the problem names the event's `index` and the `field` "
    "(`invalid_event`, `validation_error`, `empty_batch`, `unstorable_value`). Nothing is stored.",
    503: "The store cannot be reached (`store_unavailable`): nothing was stored; retry with the same eventIds. "
    "Or the replica is draining (`draining`, with `Retry-After`): a new stream or long poll is refused; retry.",
}

#: Descriptions of parameters by name, for routes that give none.
PARAMETERS: dict[str, str] = {
    "runId": "The run's id (given at creation, or made by the service).",
    "parentRunId": "Only runs whose parentRunId is this.",
    "status": "Only runs in this status.",
    "agent": "Only runs of this agent.",
    "limit": "Most items on one page (lowered to LASTWORD_MAX_PAGE_SIZE).",
    "cursor": "The nextCursor of the previous page; absent or empty for the first page.",
    "after": "Only events after this seq (0: from the start).",
    "Last-Event-ID": "Resume after this message id (an EventSource sends it when it reconnects); wins over "
    "?after=.",
}

_RUN = {
    "runId": "01JD8X3KQ2M7V4T9B6N0C5R1ZP", "parentRunId": "parent-1", "agent": "researcher", "mode": "oneshot",
    "metadata": {"task": "find call sites"}, "leaseSeconds": 600.0, "status": "running", "turn": 1, "lastSeq": 1,
    "leaseExpiresAt": "2026-11-30T14:10:00.000Z", "createdAt": "2026-11-30T14:00:00.000Z",
    "updatedAt": "2026-11-30T14:00:00.000Z",
}
_USAGE = {"inputTokens": 2600, "outputTokens": 4181, "cacheReadTokens": 0, "cacheWriteTokens": 0}
_PARTIAL = "Found three call sites of parse_config; two pass a path, one passes a dict."
_OUTPUT: list[dict[str, Any]] = [{"type": "text", "text": _PARTIAL}]
_RESULT = {
    "runId": _RUN["runId"], "turn": 1, "status": "ended", "stopReason": "max_tokens", "isError": True,
    "output": _OUTPUT, "usage": _USAGE,
    "startedAt": "2026-11-30T14:00:00.000Z", "endedAt": "2026-11-30T14:03:12.000Z",
}
_CHUNK = {"type": "assistant/chunk", "eventId": "c-17", "delta": {"type": "text", "text": "Found three call sites"}}
_MESSAGE = {
    "type": "assistant/message", "eventId": "m-2",
    "message": {"id": "msg_2", "content": [], "usage": {"inputTokens": 1400, "outputTokens": 4096},
                "stopReason": "max_tokens"},
}
_APPENDED = {"accepted": 2, "duplicates": 0, "lastSeq": 9}
#: A short Anthropic Messages stream (SPEC §13), as the provider sends it.
_ANTHROPIC: list[dict[str, Any]] = [
    {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                                          "content": [], "usage": {"input_tokens": 1200, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Found three call sites"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 4096}},
    {"type": "message_stop"},
]
_SNAPSHOT = (
    f'id: 9\nevent: run/snapshot\ndata: {{"run": {{"runId": "{_RUN["runId"]}", "status": "running", "turn": 1}}, '
    '"result": {"status": "running", "output": []}}\n\n'
    'id: 10\nevent: assistant/chunk\ndata: {"type": "assistant/chunk", "delta": {"type": "text", "text": "Found"}}\n\n'
)
_FIREHOSE = (
    f'id: 41\nevent: subagent/start\ndata: {{"type": "subagent/start", "runId": "{_RUN["runId"]}", "turn": 1, '
    '"startedAt": "2026-11-30T14:00:00.000Z"}\n\n'
)

#: (method, path) -> {"request": {media type: example}, "response": (status, media type, example)}.
EXAMPLES: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/v1/runs"): {
        "request": {"application/json": {"agent": "researcher", "parentRunId": "parent-1",
                                         "metadata": {"task": "find call sites"}}},
        "response": ("201", "application/json", _RUN),
    },
    ("get", "/v1/runs"): {
        "response": ("200", "application/json", {"runs": [_RUN], "nextCursor": "MTI"}),
    },
    ("get", "/v1/runs/{runId}"): {"response": ("200", "application/json", _RUN)},
    ("post", "/v1/runs/{runId}/events"): {
        "request": {
            "application/json": [_CHUNK, _MESSAGE],
            "application/x-ndjson": "".join(json.dumps(event) + "\n" for event in (_CHUNK, _MESSAGE)),
        },
        "response": ("200", "application/json", _APPENDED),
    },
    ("post", "/v1/runs/{runId}/chunks"): {
        "request": {"text/plain": "Found three call sites", "application/json": {"text": "Found three", "eventId": "t-1"}},
        "response": ("200", "application/json", {"accepted": 1, "duplicates": 0, "lastSeq": 4}),
    },
    ("post", "/v1/runs/{runId}/end"): {
        "request": {"application/json": {"stopReason": "max_output_tokens"}},
        "response": ("200", "application/json", _RESULT),
    },
    ("post", "/v1/runs/{runId}/turns"): {
        "response": ("201", "application/json", {**_RUN, "mode": "continuable", "turn": 2, "lastSeq": 14}),
    },
    ("post", "/v1/runs/{runId}/close"): {
        "response": ("200", "application/json", {**_RUN, "mode": "continuable", "status": "ended",
                                                 "leaseExpiresAt": None, "lastSeq": 15}),
    },
    ("post", "/v1/runs/{runId}/ingest/{format}"): {
        "request": {
            "text/event-stream": "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in _ANTHROPIC),
            "application/json": _ANTHROPIC,
            "application/x-ndjson": "".join(json.dumps(e) + "\n" for e in _ANTHROPIC),
        },
        "response": ("200", "application/json", {"accepted": 3, "duplicates": 0, "lastSeq": 5,
                                                 "stopReason": "max_tokens", "providerStopReason": "max_tokens"}),
    },
    ("get", "/v1/runs/{runId}/result"): {"response": ("200", "application/json", _RESULT)},
    ("get", "/v1/runs/{runId}/tool-result"): {
        "response": ("200", "application/json", tool_result("max_tokens", _OUTPUT, None)),
    },
    ("get", "/v1/runs/{runId}/events"): {
        "response": ("200", "application/json", {"events": [
            {"seq": 1, "turn": 1, "receivedAt": "2026-11-30T14:00:00.000Z",
             "event": {"type": "subagent/start", "runId": _RUN["runId"], "turn": 1,
                       "startedAt": "2026-11-30T14:00:00.000Z"}},
            {"seq": 2, "turn": 1, "receivedAt": "2026-11-30T14:00:01.000Z", "event": _CHUNK},
        ], "nextAfter": 2}),
    },
    ("get", "/v1/runs/{runId}/messages"): {"response": ("200", "application/json", {
        "format": "openai",
        "messages": [
            {"role": "assistant", "content": "Found three call sites of parse_config.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read_file", "arguments": '{"path":"app/config.py"}'}}]},
            {"role": "tool", "tool_call_id": "call_1",
             "content": "The tool call was interrupted before it returned a result."},
        ],
        "omitted": [{"runId": _RUN["runId"], "seq": 11, "reason": "empty"}],
        "inserted": [{"index": 1, "reason": "interrupted_tool_call", "toolCallId": "call_1"}],
    })},
    ("get", "/v1/runs/{runId}/stream"): {"response": ("200", "text/event-stream", _SNAPSHOT)},
    ("get", "/v1/stream"): {"response": ("200", "text/event-stream", _FIREHOSE)},
    ("get", "/v1/runs/{runId}/deliveries"): {"response": ("200", "application/json", {"deliveries": [{
        "webhookId": f"msg_{_RUN['runId']}_1", "turn": 1, "state": "pending",
        "attempts": [{"at": "2026-11-30T14:00:03.120Z", "statusCode": 503, "response": "busy", "durationMs": 41.7}],
        "lastStatus": 503, "nextAttemptAt": "2026-11-30T14:00:04.300Z",
    }]})},
    ("get", "/v1/runs/{runId}/children"): {"response": ("200", "application/json", {
        "runId": "parent-1", "done": True, "children": [_RESULT],
    })},
    ("get", "/healthz"): {"response": ("200", "application/json", {"status": "ok"})},
    ("get", "/livez"): {"response": ("200", "application/json", {"status": "ok"})},
    ("get", "/readyz"): {"response": ("200", "application/json", {"status": "ready"})},
    ("get", "/metrics"): {"response": ("200", "text/plain", (
        '# TYPE lastword_events_ingested_total counter\nlastword_events_ingested_total{type="assistant/chunk"} 17.0\n'
    ))},
}

_INGEST_EVENT = (
    "One ingested event (SPEC §4), told apart by its `type`: assistant/chunk, assistant/message, tool/result, "
    "user/message, step/start, step/finish, turn/end, or any type starting with `x-`."
)


def _problem_response(status: int, description: str | None) -> dict[str, Any]:
    generic = description in (None, "", "A problem document.", "Validation Error")
    return {
        "description": STATUSES.get(status, "A problem document.") if generic else description,
        "content": {PROBLEM_JSON: {"schema": PROBLEM_SCHEMA}},
    }


def _complete_operation(method: str, path: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    kind = kind_of(method.upper(), path)
    if kind is None:
        operation["security"] = []  # open: a probe needs no secret
    else:
        operation["security"] = INGEST_SECURITY if kind == "ingest" else READ_SECURITY
        responses.setdefault("401", {})
        if kind == "ingest":
            responses.setdefault("403", {})
    if path.startswith("/v1/"):
        responses.setdefault("503", {})
    for status, response in list(responses.items()):
        if int(status) >= 400:
            responses[status] = _problem_response(int(status), response.get("description"))
    for parameter in operation.get("parameters", []):
        if not parameter.get("description"):
            parameter["description"] = PARAMETERS.get(parameter["name"], "")
    example = EXAMPLES.get((method, path), {})
    for media, value in example.get("request", {}).items():
        operation["requestBody"]["content"][media]["example"] = value
    if "response" in example:
        status, media, value = example["response"]
        responses[status].setdefault("content", {}).setdefault(media, {})["example"] = value


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (FastAPI's generated document) completed as described above, in place."""
    components = schema.setdefault("components", {})
    components["securitySchemes"] = SECURITY_SCHEMES
    schemas = components.setdefault("schemas", {})
    # Never sent: every invalid request is answered with a Problem.
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    if "IngestEvent" in schemas:
        schemas["IngestEvent"].setdefault("description", _INGEST_EVENT)
    schema.setdefault("paths", {}).update(copy.deepcopy(ds_docs.PATHS))  # the route is not in the schema
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            _complete_operation(method, path, operation)
    return schema
