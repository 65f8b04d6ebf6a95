"""``push_provider_stream`` of the client library (sync and async), against a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from lastword.client.core import AsyncLastwordClient, LastwordAPIError, LastwordClient

from tests.api_helpers import shared_base_url  # noqa: F401  (the module's server fixture)
from tests.provider_streams import (
    OpenAIStream,
    a_text,
    acp_message,
    acp_prompt_response,
    anthropic_stream,
    json_array,
    sse,
)


def test_sync_whole_sse_body_and_its_retry(shared_base_url: str) -> None:  # noqa: F811
    """A whole SSE body is stored and ends the turn; sending it again counts duplicates."""
    body = sse(anthropic_stream("msg_c1", [a_text("Hello ", "there")]))
    with LastwordClient(shared_base_url) as client:
        run = client.create_run()
        first = client.push_provider_stream(run.runId, "anthropic", body, end=True)
        assert (first.accepted, first.duplicates, first.stopReason) == (4, 0, "completed")
        again = client.push_provider_stream(run.runId, "anthropic", body, end=True)
        assert (again.accepted, again.duplicates) == (0, 4)
        assert client.result(run.runId).output == [{"type": "text", "text": "Hello there"}]


def test_sync_iterable_of_sdk_events_is_sent_as_ndjson(shared_base_url: str) -> None:  # noqa: F811
    """An iterable of SDK event models is streamed as NDJSON, each serialised as its SDK does."""
    builder = OpenAIStream("resp_c2").created().message("From ", "models")
    stream = builder.completed(builder.usage(5, 2))
    with LastwordClient(shared_base_url) as client:
        run = client.create_run()
        answer = client.push_provider_stream(run.runId, "openai-responses", iter(stream), end=True)
        assert answer.stopReason == "completed"
        assert client.result(run.runId).output == [{"type": "text", "text": "From models"}]


def test_sync_json_array_and_problem(shared_base_url: str) -> None:  # noqa: F811
    """A JSON array body is recognised; a body that is not the format raises the problem with its index."""
    with LastwordClient(shared_base_url) as client:
        run = client.create_run()
        answer = client.push_provider_stream(run.runId, "anthropic", json_array(anthropic_stream("msg_c3", [a_text("x")])))
        assert answer.stopReason == "completed" and answer.accepted == 2
        with pytest.raises(LastwordAPIError) as raised:
            client.push_provider_stream(run.runId, "anthropic", b'[{"type": "message_stop"}]')
        assert raised.value.status == 422 and raised.value.problem["index"] == 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_async_iterable_of_raw_pieces_and_acp_retry(shared_base_url: str, anyio_backend: str) -> None:  # noqa: F811
    """An async iterable of raw SSE pieces is streamed; an ACP body with a key retries as duplicates."""
    body = sse(anthropic_stream("msg_c4", [a_text("Streamed ", "in ", "pieces")]))

    async def pieces() -> AsyncIterator[bytes]:
        for at in range(0, len(body), 7):
            yield body[at:at + 7]

    async with AsyncLastwordClient(shared_base_url) as client:
        run = await client.create_run()
        answer = await client.push_provider_stream(run.runId, "anthropic", pieces(), end=True)
        assert answer.stopReason == "completed"
        assert (await client.result(run.runId)).output == [{"type": "text", "text": "Streamed in pieces"}]

        acp_run = await client.create_run()
        acp_body = sse([acp_message("hi"), acp_prompt_response(1, "end_turn")])
        first = await client.push_provider_stream(acp_run.runId, "acp", acp_body, idempotency_key="turn-1")
        again = await client.push_provider_stream(acp_run.runId, "acp", acp_body, idempotency_key="turn-1")
        assert (first.accepted, again.accepted, again.duplicates) == (2, 0, 2)
