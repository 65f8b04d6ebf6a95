"""Long polls (``?wait=``) through a real server: which turn they wait on, and what a poll
costs once its client has gone.

Races are repeated hundreds of times; every wait has an explicit signal (the
``lastword_result_polls_waiting`` gauge says when a poll is parked) and a bound.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import pytest
from lastword.client.core import AsyncLastwordClient, LastwordClient
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import threaded_server
from tests.polling import wait_until

TRIALS = 200
#: A failing poll waits this long on the wrong turn before it answers (only when the bug is back).
POLL_WAIT = 5


def waiters(api: httpx.Client) -> float:
    for family in text_string_to_metric_families(api.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "lastword_result_polls_waiting":
                return sample.value
    raise AssertionError("no lastword_result_polls_waiting gauge")


def until_waiters(api: httpx.Client, count: int, within: float = 30.0) -> None:
    wait_until(lambda: waiters(api) == count, lambda: f"{count} parked polls (found {waiters(api)})", within=within)


def _request(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize("endpoint", ["result", "tool-result"])
def test_poll_without_turn_answers_for_the_turn_current_when_it_arrived(make_settings: Any, endpoint: str) -> None:
    """A turn ends and the next starts at once (pipelined): the poll answers the ended turn, every time."""
    with threaded_server(make_settings()) as url, httpx.Client(base_url=url, timeout=30) as api:
        host, port = url.removeprefix("http://").split(":")
        run_id = api.post("/v1/runs", json={"mode": "continuable"}).json()["runId"]

        async def trials() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=30) as poller:
                for turn in range(1, TRIALS + 1):
                    started = time.monotonic()
                    poll = asyncio.create_task(poller.get(f"/v1/runs/{run_id}/{endpoint}", params={"wait": POLL_WAIT}))
                    await asyncio.to_thread(until_waiters, api, 1)
                    # The end and the next turn in one write: the new turn starts right after the end.
                    with socket.create_connection((host, int(port))) as sock:
                        sock.sendall(_request("POST", f"/v1/runs/{run_id}/end", b'{"stopReason":"completed"}')
                                     + _request("POST", f"/v1/runs/{run_id}/turns"))
                        received = b""
                        while received.count(b"HTTP/1.1 ") < 2 or not received.endswith(b"}"):
                            piece = await asyncio.to_thread(sock.recv, 65536)
                            assert piece, received
                            received += piece
                    answer = await poll
                    assert answer.status_code == 200, (answer.text, time.monotonic() - started)
                    body = answer.json()
                    if endpoint == "result":
                        assert (body["turn"], body["status"]) == (turn, "ended"), (turn, body)
                    else:
                        assert body["isError"] is False, (turn, body)

        asyncio.run(trials())


def test_client_wait_result_stays_on_the_turn_it_started_with(make_settings: Any) -> None:
    """wait_result without a turn keeps polling the turn current when it was called, even when
    that turn ends and the next starts between two of its polls."""
    with threaded_server(make_settings(max_wait_seconds=0.05)) as url, httpx.Client(base_url=url, timeout=30) as api:
        run_id = api.post("/v1/runs", json={"mode": "continuable"}).json()["runId"]

        class BetweenPolls(httpx.HTTPTransport):
            """After the first poll has answered: end turn 1 and start turn 2, before the next poll."""

            polls = 0

            def handle_request(self, request: httpx.Request) -> httpx.Response:
                response = super().handle_request(request)
                if request.url.path.endswith("/result"):
                    self.polls += 1
                    if self.polls == 1:
                        api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "max_tokens"}).raise_for_status()
                        api.post(f"/v1/runs/{run_id}/turns").raise_for_status()
                return response

        with LastwordClient(url, transport=BetweenPolls()) as client:
            result = client.wait_result(run_id, timeout=2)
        assert (result.turn, result.status, result.stopReason) == (1, "ended", "max_tokens")

        async def async_wait() -> Any:
            class AsyncBetweenPolls(httpx.AsyncHTTPTransport):
                polls = 0

                async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                    response = await super().handle_async_request(request)
                    if request.url.path.endswith("/result"):
                        self.polls += 1
                        if self.polls == 1:
                            await asyncio.to_thread(
                                lambda: api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "refusal"}).raise_for_status())
                            await asyncio.to_thread(lambda: api.post(f"/v1/runs/{run_id}/turns").raise_for_status())
                    return response

            async with AsyncLastwordClient(url, transport=AsyncBetweenPolls()) as client:
                return await client.wait_result(run_id, timeout=2)

        result = asyncio.run(async_wait())
        assert (result.turn, result.status, result.stopReason) == (2, "ended", "refusal")


def test_dropped_polls_are_released_at_once(make_settings: Any) -> None:
    """Hundreds of ?wait=300 polls whose clients disconnect stop waiting right away (the gauge drops to 0)."""
    with threaded_server(make_settings()) as url, httpx.Client(base_url=url, timeout=30) as api:
        host, port = url.removeprefix("http://").split(":")
        run_id = api.post("/v1/runs", json={}).json()["runId"]
        for _round in range(2):
            sockets = []
            for index in range(150):
                sock = socket.create_connection((host, int(port)))
                path = f"/v1/runs/{run_id}/{'result' if index % 2 else 'tool-result'}?wait=300"
                sock.sendall(_request("GET", path))
                sockets.append(sock)
            until_waiters(api, 150)
            for sock in sockets:
                sock.close()
            until_waiters(api, 0, within=20)  # far less than the 300 s they asked to wait
        # The run is untouched and a poll still answers.
        api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"}).raise_for_status()
        assert api.get(f"/v1/runs/{run_id}/result", params={"wait": 1}).json()["status"] == "ended"
