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

    with StreamPusher(send, idle=0.05, attempts=3, backoff=0.01) as pusher:
        pusher.push_text("hello")
        pusher.flush()
    assert b"hello" in sent[-1]
    assert pauses == [1]
