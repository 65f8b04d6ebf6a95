"""``/ds/{path}`` in the OpenAPI document (SPEC §17): the Durable Streams operations, described.

The route (:mod:`lastword.http.ds`) takes every method on one path, which FastAPI cannot
describe per method, so it stays out of the generated schema and its operations are written
here, in the protocol's own terms: the headers it reads and answers, its statuses, an example
of each. :func:`lastword.http.api_docs.document` adds them to the document and completes them
like every other operation (security, problem documents). What the protocol means by each is
``PROTOCOL.md`` of ``durable-streams/durable-streams``; its conformance suite, not this
document's fuzzing, holds the server to it (``tests/test_durable_streams.py``).
"""

from __future__ import annotations

from typing import Any

_OFFSET = "0000000000000000_0000000000000003"
_NEXT = "0000000000000000_0000000000000005"
_MESSAGES: list[dict[str, Any]] = [{"type": "assistant/message",
                                    "message": {"content": [{"type": "text", "text": "Found three call sites."}]}},
                                   {"type": "turn/end", "stopReason": "completed"}]


def _header(description: str, example: str) -> dict[str, Any]:
    return {"description": description, "schema": {"type": "string"}, "example": example}


def _parameter(name: str, where: str, description: str, **schema: Any) -> dict[str, Any]:
    return {"name": name, "in": where, "required": where == "path", "description": description,
            "schema": {"type": "string", **schema}}


def _problem(description: str) -> dict[str, Any]:
    return {"description": description}  # made a problem document by api_docs


PATH = _parameter("path", "path", "The stream's name below /ds (slashes allowed). `runs/{runId}` is that run, "
                  "as a JSON stream of its events.")
NEXT_OFFSET = _header("The offset after the last entry answered (or stored): the next read starts there.", _NEXT)
CLOSED = _header("`true` once the stream is closed (a run: once it has ended).", "true")
PRODUCER = [
    _parameter("Producer-Id", "header", "An idempotent producer's id; with Producer-Epoch and Producer-Seq."),
    _parameter("Producer-Epoch", "header", "The producer's epoch: a restarted producer claims a higher one, and "
               "the old epoch's writes are refused 403 from then on.", pattern="^[0-9]+$"),
    _parameter("Producer-Seq", "header", "The producer's sequence number in its epoch, from 0: a repeat is "
               "answered 204 and stored once, a gap 409.", pattern="^[0-9]+$"),
]
CONFIGURATION = [
    _parameter("Content-Type", "header", "The stream's content type (`application/json`: JSON mode, each message "
               "an entry; a run is always JSON)."),
    _parameter("Stream-TTL", "header", "Seconds the stream lives after its last read or write (not for runs).",
               pattern="^[0-9]+$"),
    _parameter("Stream-Expires-At", "header", "When the stream expires, RFC 3339 (not for runs)."),
    _parameter("Stream-Closed", "header", "`true`: create it closed (not for runs, which close as they end)."),
    _parameter("Stream-Forked-From", "header", "Create the stream as a fork of this stream (its path)."),
    _parameter("Stream-Fork-Offset", "header", "The offset of the source the fork starts from (default: its tail)."),
]
_CONFLICT = ("The stream holds another content type or configuration, is closed (`Stream-Closed: true`; a run "
             "that has ended: `run_ended`), or a producer's seq leaves a gap (`Producer-Expected-Seq`).")
_STALE = "A producer's epoch older than the one already seen (`Producer-Epoch` names it); or the read token."
_GONE = "The stream was deleted and is still referenced by a fork."
_NOT_FOUND = "No stream (or run) at this path, or it has expired."
_MALFORMED = ("A header or offset this server does not take (an offset it never handed out, a producer's headers "
              "not all three, a TTL that is not a number), or a body that is not JSON in JSON mode.")
_TOO_LARGE = "The body is over the configured limit (LASTWORD_MAX_BODY_BYTES)."
_UNAVAILABLE = "The store cannot be reached, or the replica is draining (`Retry-After`)."
_INVALID_EVENT = "At a run: a message that is not a §4 event (`invalid_event`, naming its index); nothing stored."

_OPERATIONS: dict[str, Any] = {
    "get": {
        "tags": ["durable streams"],
        "summary": "Read a Durable Stream",
        "description": "Catch-up read from an offset, or live: `live=long-poll` waits for data (204 when none "
        "came), `live=sse` streams `data` and `control` events until the stream closes.",
        "operationId": "ds_read",
        "parameters": [
            _parameter("offset", "query", "Where to read from: `-1` the start, `now` the tail, or a "
                       "`Stream-Next-Offset` this server handed out."),
            _parameter("live", "query", "`long-poll` or `sse` (needs an offset).", enum=["long-poll", "sse"]),
            _parameter("cursor", "query", "The `Stream-Cursor` of the previous live answer."),
            _parameter("If-None-Match", "header", "An ETag of an earlier answer: 304 when it still holds."),
        ],
        "responses": {
            "200": {"description": "The entries after the offset (a JSON array in JSON mode, the bytes otherwise), "
                    "or with `live=sse` an event stream.",
                    "headers": {"Stream-Next-Offset": NEXT_OFFSET, "Stream-Closed": CLOSED,
                                "Stream-Up-To-Date": _header("`true` when the answer reaches the tail.", "true"),
                                "Stream-Cursor": _header("Send back as `cursor` on the next live read.", "5433"),
                                "ETag": _header("Names this answer, for If-None-Match.", '"a1:3:5"')},
                    "content": {
                        "application/json": {"schema": {"type": "array", "items": {}}, "example": _MESSAGES},
                        "text/event-stream": {"schema": {"type": "string"}, "example": (
                            'event: data\ndata:[{"type":"turn/end","stopReason":"completed"}]\n\n'
                            f'event: control\ndata:{{"streamNextOffset":"{_NEXT}","upToDate":true,'
                            '"streamClosed":true}\n\n')},
                    }},
            "204": {"description": "A long poll that timed out with no new data.",
                    "headers": {"Stream-Next-Offset": NEXT_OFFSET}},
            "304": {"description": "The If-None-Match ETag still holds."},
            "400": _problem(_MALFORMED), "404": _problem(_NOT_FOUND), "410": _problem(_GONE),
            "503": _problem(_UNAVAILABLE),
        },
    },
    "head": {
        "tags": ["durable streams"],
        "summary": "A Durable Stream's metadata",
        "description": "The stream's content type, tail offset, closure and expiry, without reading it.",
        "operationId": "ds_head",
        "responses": {
            "200": {"description": "The stream's metadata, as headers.",
                    "headers": {"Stream-Next-Offset": NEXT_OFFSET, "Stream-Closed": CLOSED}},
            "404": _problem(_NOT_FOUND), "410": _problem(_GONE), "503": _problem(_UNAVAILABLE),
        },
    },
    "put": {
        "tags": ["durable streams"],
        "summary": "Create a Durable Stream (or a run)",
        "description": "Create the stream, with optional initial content; the same configuration again is 200, "
        "another 409. At `runs/{runId}` with `application/json` it creates that run, its initial messages "
        "§4 events.",
        "operationId": "ds_create",
        "parameters": CONFIGURATION,
        "requestBody": {"required": False, "content": {
            "application/json": {"schema": {"type": "array", "items": {}}, "example": _MESSAGES[:1]},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}, "example": "initial bytes"},
        }},
        "responses": {
            "201": {"description": "Created.", "headers": {
                "Stream-Next-Offset": _header("The offset after the initial content.", _OFFSET),
                "Location": _header("The stream's URL.", "http://127.0.0.1:8000/ds/runs/child-1")}},
            "200": {"description": "The same stream was there already.",
                    "headers": {"Stream-Next-Offset": NEXT_OFFSET}},
            "400": _problem(_MALFORMED), "409": _problem(_CONFLICT), "413": _problem(_TOO_LARGE),
            "422": _problem(_INVALID_EVENT), "503": _problem(_UNAVAILABLE),
        },
    },
    "post": {
        "tags": ["durable streams"],
        "summary": "Append to a Durable Stream (or a run)",
        "description": "Append the body (JSON mode: each element of an array is one message), close the stream "
        "with `Stream-Closed: true`, or both. At `runs/{runId}` each message is a §4 event of that run, all or "
        "nothing.",
        "operationId": "ds_append",
        "parameters": [
            _parameter("Content-Type", "header", "The stream's own content type."),
            _parameter("Stream-Closed", "header", "`true`: close the stream after this append (not for runs)."),
            _parameter("Stream-Seq", "header", "A writer's sequence: must increase from one append to the next."),
            *PRODUCER,
        ],
        "requestBody": {"required": False, "content": {
            "application/json": {"schema": {"type": "array", "items": {}}, "example": _MESSAGES},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}, "example": "more bytes"},
        }},
        "responses": {
            "200": {"description": "Appended by an idempotent producer (its epoch and seq echoed).", "headers": {
                "Stream-Next-Offset": NEXT_OFFSET,
                "Producer-Epoch": _header("The producer's epoch.", "1"),
                "Producer-Seq": _header("The producer's seq just stored.", "0")}},
            "204": {"description": "Appended (or closed); for a producer, a repeat stored before.",
                    "headers": {"Stream-Next-Offset": NEXT_OFFSET, "Stream-Closed": CLOSED}},
            "400": _problem(_MALFORMED), "403": _problem(_STALE), "404": _problem(_NOT_FOUND),
            "409": _problem(_CONFLICT), "410": _problem(_GONE), "413": _problem(_TOO_LARGE),
            "422": _problem(_INVALID_EVENT), "503": _problem(_UNAVAILABLE),
        },
    },
    "delete": {
        "tags": ["durable streams"],
        "summary": "Delete a Durable Stream",
        "description": "Delete the stream (kept as gone while forks reference it). A run is not deleted here.",
        "operationId": "ds_delete",
        "responses": {
            "204": {"description": "Deleted.", "headers": {
                "X-Content-Type-Options": _header("On every answer here, as the protocol asks.", "nosniff")}},
            "404": _problem(_NOT_FOUND),
            "405": _problem("A run is deleted by retention, not here (`Allow: GET, HEAD, PUT, POST`)."),
            "410": _problem(_GONE), "503": _problem(_UNAVAILABLE),
        },
    },
}
PATHS: dict[str, Any] = {"/ds/{path}": {
    method: {**operation, "parameters": [PATH, *operation.get("parameters", [])]}
    for method, operation in _OPERATIONS.items()
}}
