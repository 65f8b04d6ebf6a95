"""One backoff for the whole client: a retried request, a stream's reconnect and the stream
pusher's resend all pause by :func:`lastword.client.retry.pause` (no server needed)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from lastword.client import retry
from lastword.client.core import LastwordClient
from lastword.client.stream_pusher import StreamPusher

RUN = {"runId": "r1", "mode": "oneshot", "metadata": {}, "leaseSeconds": 600.0, "status": "running", "turn": 1,
       "lastSeq": 1, "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z"}


def test_the_pause_doubles_from_the_backoff_up_to_its_cap() -> None:
    """Failure n waits between half and all of backoff * 2**(n-1), never more than MAX_PAUSE."""
    for failures in range(1, 12):
        full = min(retry.MAX_PAUSE, 0.2 * 2 ** (failures - 1))
        for _ in range(20):
            assert full / 2 <= retry.pause(0.2, failures) <= full


def test_what_is_retried() -> None:
    """A lost connection and a 429/502/503/504 are retried; any other refusal is not."""
    request = httpx.Request("GET", "http://127.0.0.1/")
    assert retry.is_retried(httpx.ConnectError("refused", request=request))
    assert retry.is_retried(retry.LastwordAPIError(503, {"code": "draining"}))
    assert not retry.is_retried(retry.LastwordAPIError(409, {"code": "run_ended"}))
    assert not retry.is_retried(ValueError("no"))


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every call of the one backoff helper, by failure count (each pause made 0 s long)."""
    seen: list[int] = []

    def recorded(backoff: float, failures: int) -> float:
        seen.append(failures)
        return 0.0

    monkeypatch.setattr(retry, "pause", recorded)
    return seen


def _once_then(status: int, answer: httpx.Response) -> httpx.MockTransport:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(status, json={"code": "draining"}) if len(calls) == 1 else answer

    return httpx.MockTransport(handle)


def test_a_retried_request_pauses_by_the_helper(pauses: list[int]) -> None:
    with LastwordClient("http://lastword.test", transport=_once_then(503, httpx.Response(200, json=RUN))) as client:
        assert client.get_run("r1").runId == "r1"
    assert pauses == [1]


def test_a_stream_reconnect_pauses_by_the_helper(pauses: list[int]) -> None:
    body = b'id: 7\nevent: subagent/start\ndata: {"runId": "r1"}\n\n'
    answer = httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    with LastwordClient("http://lastword.test", transport=_once_then(503, answer)) as client:
        message = next(iter(client.stream_all()))
    assert (message.id, message.event) == (7, "subagent/start")
    assert pauses == [1]


def test_the_stream_pusher_pauses_by_the_helper(pauses: list[int]) -> None:
    sent: list[bytes] = []

    def send(body: Iterator[bytes]) -> None:
        pieces = b"".join(body)
        if not sent:
            sent.append(b"")
            raise httpx.ConnectError("dropped", request=httpx.Request("POST", "http://lastword.test/"))
        sent.append(pieces)

    with StreamPusher(send, idle=0.05, backoff=0.01) as pusher:
        pusher.push_text("hello")
        pusher.flush()
    assert b"hello" in sent[-1]
    assert pauses == [1]


def test_a_refusal_that_outlasts_the_retries_is_a_lastword_api_error(pauses: list[int]) -> None:
    """A 503 answered to every try raises the client's one error, with the service's problem."""
    always = httpx.MockTransport(lambda request: httpx.Response(503, json={"code": "draining", "detail": "bye"}))
    with LastwordClient("http://lastword.test", retries=2, transport=always) as client:
        with pytest.raises(retry.LastwordAPIError) as refused:
            client.get_run("r1")
    assert (refused.value.status, refused.value.code) == (503, "draining")
    assert pauses[:2] == [1, 2]  # (tenacity also works out the pause it does not take after the last)


def test_next_turn_is_sent_again_only_when_it_surely_was_not_carried_out(pauses: list[int]) -> None:
    """Starting a turn is not idempotent: a lost answer is raised, not retried into a 409; a
    connection never made is retried."""
    sent: list[str] = []

    def lost(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        raise httpx.ReadError("answer lost", request=request)

    with LastwordClient("http://lastword.test", transport=httpx.MockTransport(lost)) as client:
        with pytest.raises(httpx.ReadError):
            client.next_turn("r1")
    assert sent == ["/v1/runs/r1/turns"]

    def refused_then_run(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        if len(sent) == 2:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(201, json={**RUN, "turn": 2})

    with LastwordClient("http://lastword.test", transport=httpx.MockTransport(refused_then_run)) as client:
        assert client.next_turn("r1").turn == 2
    assert len(sent) == 3
