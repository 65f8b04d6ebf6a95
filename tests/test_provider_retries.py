"""Provider bodies retried (SPEC §13): every event an adapter makes has an ``eventId``, so a
retried body is all duplicates, and one whose stream ended the turn answers duplicates, not 409.

The bodies here are the ones that had no id to derive from: only an ``error`` event, events
before ``message_start`` / ``response.created``, and ACP without an ``Idempotency-Key``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api_helpers import create, logged, shared_api, shared_base_url  # noqa: F401
from tests.provider_streams import OpenAIStream, a_text, acp_message, acp_prompt_response, anthropic_stream, as_dict, sse

OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _openai_out_of_order() -> list[dict[str, Any]]:
    """A text delta before ``response.created``, then the rest of a response whose message never finished."""
    builder = OpenAIStream("resp_ooo").created()
    builder.message("B", done=False)
    events = [as_dict(event) for event in builder.completed(builder.usage(3, 2))]
    early = {"type": "response.output_text.delta", "sequence_number": 99, "item_id": "msg_0", "output_index": 0,
             "content_index": 0, "delta": "A", "logprobs": []}
    return [early, *events]


BODIES: dict[str, tuple[str, list[Any]]] = {
    "anthropic error only": ("anthropic", [OVERLOADED]),
    "anthropic unknown event before message_start": (
        "anthropic", [{"type": "future_event", "n": 1}, *anthropic_stream("msg_unk", [a_text("A", "B")])]),
    "openai error only": ("openai-responses", [{"type": "error", "code": "server_error", "message": "boom",
                                                "param": None, "sequence_number": 0}]),
    "openai delta before response.created": ("openai-responses", _openai_out_of_order()),
    "acp without Idempotency-Key": ("acp", [acp_message("A"), acp_message("B"), acp_prompt_response(1, "end_turn")]),
}


def post(api: httpx.Client, run_id: str, format: str, body: bytes, end: bool) -> httpx.Response:
    return api.post(f"/v1/runs/{run_id}/ingest/{format}", params={"end": str(end).lower()}, content=body,
                    headers={"content-type": "text/event-stream"})


@pytest.mark.parametrize("end", [False, True], ids=["open", "end"])
@pytest.mark.parametrize("name", list(BODIES))
def test_a_retried_body_is_all_duplicates(shared_api: httpx.Client, name: str, end: bool) -> None:  # noqa: F811
    """Sent twice, a body stores once: the retry answers 200 with every event a duplicate, and
    the log, the output and the stop are as after the first attempt (with ?end=true too)."""
    format, events = BODIES[name]
    body = sse(events)
    run_id = create(shared_api)["runId"]
    first = post(shared_api, run_id, format, body, end)
    assert first.status_code == 200, first.text
    made = [item["event"] for item in logged(shared_api, run_id)]
    assert all("eventId" in event for event in made if not event["type"].startswith("subagent/")), made
    result = shared_api.get(f"/v1/runs/{run_id}/result").json()
    again = post(shared_api, run_id, format, body, end)
    assert again.status_code == 200, again.text
    assert again.json()["accepted"] == 0 and again.json()["duplicates"] == first.json()["accepted"]
    assert again.json()["lastSeq"] == first.json()["lastSeq"]
    assert [item["event"] for item in logged(shared_api, run_id)] == made
    assert shared_api.get(f"/v1/runs/{run_id}/result").json() == result


def test_the_out_of_order_openai_body_keeps_its_text_once(shared_api: httpx.Client) -> None:  # noqa: F811
    """The early delta and the late one make "AB", and a retry leaves it "AB" (it was "ABA")."""
    run_id = create(shared_api)["runId"]
    body = sse(BODIES["openai delta before response.created"][1])
    for _ in range(2):
        assert post(shared_api, run_id, "openai-responses", body, False).status_code == 200
    shared_api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"})
    assert shared_api.get(f"/v1/runs/{run_id}/result").json()["output"] == [{"type": "text", "text": "AB"}]


def test_the_same_error_body_in_a_later_turn_is_that_turn_s_own(shared_api: httpx.Client) -> None:  # noqa: F811
    """An id-less body's ids are scoped to the turn: the same overloaded error in turn 2 of a
    continuable run is stored and ends turn 2, rather than being taken for turn 1's retry."""
    run_id = create(shared_api, mode="continuable")["runId"]
    body = sse([OVERLOADED])
    assert post(shared_api, run_id, "anthropic", body, True).json()["stopReason"] == "error"
    assert shared_api.post(f"/v1/runs/{run_id}/turns").status_code == 201
    second = post(shared_api, run_id, "anthropic", body, True)
    assert second.status_code == 200 and second.json()["accepted"] == 2, second.text
    assert shared_api.get(f"/v1/runs/{run_id}/result", params={"turn": 2}).json()["stopReason"] == "error"


@pytest.mark.parametrize("text", ["héllo wörld", "😀 \u2028", "a" * 70_000 + "é"], ids=["latin", "emoji", "big"])
def test_a_retried_body_with_non_ascii_text_is_all_duplicates(shared_api: httpx.Client, text: str) -> None:  # noqa: F811
    """A message whose text is not all ASCII, sent again, is a duplicate, not 409: its stored
    source is found where it begins by characters, not by bytes."""
    body = sse(anthropic_stream("msg_non_ascii", [a_text(text[:5], text[5:])]))
    run_id = create(shared_api)["runId"]
    first = post(shared_api, run_id, "anthropic", body, False)
    assert first.status_code == 200, first.text
    again = post(shared_api, run_id, "anthropic", body, False)
    assert again.status_code == 200, again.text
    assert again.json()["accepted"] == 0 and again.json()["duplicates"] == first.json()["accepted"]
