"""A big provider body does not hold the server's event loop (issue 22, item 9), measured in a real
``lastword serve``.

While a 16 MB provider body is read, translated, checked and stored, another connection asks
``GET /healthz`` back to back. A loop that parsed, translated or validated the whole body in one
call answers none of them until it is done. The figure is the longest stretch without an answer
between the moment the body was sent and its answer, as a share of that whole stretch, both
measured in the same run: a ratio, not a time limit (a loaded machine slows both alike).
(``bench/loop_stall.py`` reports the worst probe in milliseconds for ``/events`` batches.)
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.servers import ServerProcess
from tests.test_provider_memory import BODY_BYTES, Body, input_deltas_json, text_deltas_sse

pytestmark = pytest.mark.slow

#: The goal: no stretch without an answer longer than a quarter of the body's ingest. Parsing,
#: translating and checking a 16 MB JSON array in one call left it unanswered for 85 % of it;
#: sliced, the longest stretch is 1-7 % (a loaded machine's pauses, the store's own work).
MOST_SHARE = 0.25


class Prober:
    """``GET /healthz`` back to back on one connection, noting when each was answered, until stopped."""

    def __init__(self, url: str) -> None:
        self.answers: list[float] = []
        self.answering = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url,), daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self, url: str) -> None:
        with httpx.Client(base_url=url, timeout=300) as client:
            while not self._stop.is_set():
                client.get("/healthz").raise_for_status()
                self.answers.append(time.monotonic())
                self.answering.set()


def post_raw(port: int, path: str, body: bytes, media: str, sent: Callable[[], None]) -> bytes:
    """POST ``body`` over a socket; ``sent`` is called once the last byte is handed to the
    kernel. The whole response."""
    head = (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: {media}\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        sock.sendall(head + body)
        sent()
        pieces = []
        while piece := sock.recv(65536):
            pieces.append(piece)
    return b"".join(pieces)


def longest_share(database_url: str, tmp_path: Path, make_body: Callable[[str, int], Body], run_id: str) -> float:
    """One ingest of a 16 MB body into a fresh server, probed: the longest stretch without an
    answer to ``/healthz``, as a share of the ingest."""
    server = ServerProcess({"LASTWORD_DATABASE_URL": database_url, "LASTWORD_LOG_LEVEL": "warning"}, tmp_path)
    with contextlib.closing(server.start()), httpx.Client(base_url=server.url, timeout=300) as api:
        api.post("/v1/runs", json={"runId": run_id}).raise_for_status()
        content, media, format = make_body("msg_big", BODY_BYTES)
        with Prober(server.url) as prober:
            assert prober.answering.wait(60)  # the prober is answering before the body goes
            sent: list[float] = []
            response = post_raw(server.port, f"/v1/runs/{run_id}/ingest/{format}", content, media,
                                lambda: sent.append(time.monotonic()))
            answered = time.monotonic()
        assert response.startswith(b"HTTP/1.1 200"), response[:500]
        marks = [sent[0], *(at for at in prober.answers if sent[0] < at < answered), answered]
        longest = max(later - earlier for earlier, later in zip(marks, marks[1:]))
        share = longest / (answered - sent[0])
        print(f"{make_body.__name__}: {len(marks) - 2} probes answered during the ingest; the longest stretch "
              f"without one was {share:.1%} of it")
        return share


@pytest.mark.parametrize("make_body", [input_deltas_json, text_deltas_sse], ids=["json-array", "sse"])
def test_the_loop_answers_other_requests_while_a_big_provider_body_is_ingested(
    database_url: str, tmp_path: Path, make_body: Callable[[str, int], Body]
) -> None:
    """While a 16 MB provider body is ingested, ``/healthz`` is never left unanswered for more
    than a quarter of the ingest.

    Measured a second time, on a fresh server, only when the first is over: once in CI, with
    the other worker's tests beside it, one stretch came to 34 % where every run here gives
    1-6 % (loaded or not). A loop that takes the body in one call is over both times (85 %).
    """
    shares = [longest_share(database_url, tmp_path, make_body, "big")]
    if shares[0] > MOST_SHARE:
        shares.append(longest_share(database_url, tmp_path, make_body, "big-again"))
    assert min(shares) <= MOST_SHARE, f"the loop left /healthz unanswered for {min(shares):.0%} of the ingest"
