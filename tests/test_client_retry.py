"""One backoff for the whole client: a retried request, a stream's reconnect and the stream
pusher's resend all pause by :func:`lastword.client.retry.pause` (no server needed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from lastword.client import retry
from lastword.client.core import LastwordClient, LastwordConnectionError
from lastword.client.replay import AsyncReplay, Replay
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
        with pytest.raises(LastwordConnectionError) as raised:
            client.next_turn("r1")
    assert isinstance(raised.value.__cause__, httpx.ReadError)
    assert sent == ["/v1/runs/r1/turns"]

    def refused_then_run(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        if len(sent) == 2:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(201, json={**RUN, "turn": 2})

    with LastwordClient("http://lastword.test", transport=httpx.MockTransport(refused_then_run)) as client:
        assert client.next_turn("r1").turn == 2
    assert len(sent) == 3


class Clock:
    """Seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


DROPPED = httpx.ConnectError("refused", request=httpx.Request("POST", "http://lastword.test/"))


def test_a_retry_window_pauses_growing_until_its_seconds_ran_out(pauses: list[int]) -> None:
    """Failures in a row pause by the helper, counted from 1, while they have lasted at most
    ``seconds``; a refusal not worth another try, or a spent window, gets no pause."""
    clock = Clock()
    window = retry.RetryWindow(10.0, 0.2, clock)
    assert window.failed(retry.LastwordAPIError(409, {"code": "run_ended"}), clock.now) is None
    assert window.failed(DROPPED, clock.now) == 0.0
    clock.now += 4.0
    assert window.failed(retry.LastwordAPIError(503, {"code": "draining"}), clock.now - 1.0) == 0.0
    clock.now += 6.0  # 10 s since the first failure: still inside
    assert window.failed(DROPPED, clock.now - 1.0) == 0.0
    clock.now += 0.5
    assert window.failed(DROPPED, clock.now - 0.5) is None
    assert pauses == [1, 2, 3]


def test_a_long_try_or_an_answer_opens_the_window_again(pauses: list[int]) -> None:
    """A try that lasted longer than the longest pause was connected: its failure starts a new
    window, counted from 1 again; so does an answered try."""
    clock = Clock()
    window = retry.RetryWindow(10.0, 0.2, clock)
    window.failed(DROPPED, clock.now)
    clock.now += 9.0
    window.failed(DROPPED, clock.now - retry.MAX_PAUSE)  # lasted exactly the longest pause
    clock.now += 60.0
    assert window.failed(DROPPED, clock.now - retry.MAX_PAUSE - 0.1) == 0.0  # lasted longer
    clock.now += 10.0
    assert window.failed(DROPPED, clock.now) == 0.0
    window.succeeded()
    clock.now += 60.0
    assert window.failed(DROPPED, clock.now) == 0.0
    assert pauses == [1, 2, 1, 2, 1]


def test_a_window_of_no_seconds_pauses_once_then_gives_up(pauses: list[int]) -> None:
    clock = Clock()
    window = retry.RetryWindow(0.0, 0.2, clock)
    assert window.failed(DROPPED, clock.now) == 0.0
    clock.now += 0.001
    assert window.failed(DROPPED, clock.now) is None


def test_the_pause_of_a_window_is_the_helpers_of_its_backoff() -> None:
    clock = Clock()
    window = retry.RetryWindow(100.0, 0.4, clock)
    first = window.failed(DROPPED, clock.now)
    assert first is not None and 0.2 <= first <= 0.4
    second = window.failed(DROPPED, clock.now)
    assert second is not None and 0.4 <= second <= 0.8


def test_a_replay_sends_every_line_taken_from_its_first_and_takes_each_once() -> None:
    taken: list[bytes] = []

    def source() -> Iterator[bytes]:
        for line in (b"a\n", b"b\n", b"c\n", b"d\n"):
            taken.append(line)
            yield line

    replay = Replay(source())
    first = replay.body()
    assert [next(first), next(first)] == [b"a\n", b"b\n"]  # the request fails here
    second = replay.body()
    assert next(second) == b"a\nb\n"
    assert list(second) == [b"c\n", b"d\n"]
    assert list(replay.body()) == [b"a\nb\nc\nd\n"]
    assert taken == [b"a\n", b"b\n", b"c\n", b"d\n"]


def test_an_async_replay_does_the_same() -> None:
    async def source() -> AsyncIterator[bytes]:
        for line in (b"a\n", b"b\n", b"c\n"):
            yield line

    async def main() -> None:
        replay = AsyncReplay(source())
        first = replay.body()
        assert await anext(first) == b"a\n"
        assert [piece async for piece in replay.body()] == [b"a\n", b"b\n", b"c\n"]
        assert [piece async for piece in replay.body()] == [b"a\nb\nc\n"]
        assert [piece async for piece in AsyncReplay(source()).body()] == [b"a\n", b"b\n", b"c\n"]

    asyncio.run(main())
