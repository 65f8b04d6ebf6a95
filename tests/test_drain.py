"""The drain on SIGTERM (SPEC §18), through real ``lastword serve`` processes on each backend.

Order comes from explicit signals, never from sleeps: ``/metrics`` says when a long poll is
parked, a request body the test holds back keeps a write in flight (and so the drain open),
and the server's request log says when a client was refused by the draining replica.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from lastword.client.core import LastwordClient, StreamMessage

from tests.receiver import Answer, Received, Receiver
from tests.servers import ServerProcess
from tests.sse import ids, open_stream, payload, strictly_increasing
from tests.polling import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DRAIN_SECONDS = 10.0


def serve(database_url: str, **env: str) -> ServerProcess:
    return ServerProcess({"LASTWORD_DATABASE_URL": database_url, "LASTWORD_KEEPALIVE_SECONDS": "1",
                          "LASTWORD_LEASE_SECONDS": "0", "LASTWORD_LOG_LEVEL": "info",
                          "LASTWORD_DRAIN_SECONDS": str(DRAIN_SECONDS), **env}, ROOT)


def gauge(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def answers(url: str, path: str, status: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(url + path, timeout=2).status_code == status
        except httpx.TransportError:
            return False
    return check


def logged(server: ServerProcess, text: str) -> Callable[[], bool]:
    return lambda: text in server.log_path.read_text()


def terminate(server: ServerProcess) -> float:
    """Send SIGTERM; the monotonic time it was sent."""
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    return time.monotonic()


def exit_status(server: ServerProcess, timeout: float = DRAIN_SECONDS + 10) -> int:
    assert server.process is not None
    status = server.process.wait(timeout=timeout)
    server.kill()  # closes its log
    return status


def x_line(n: int) -> bytes:
    return orjson.dumps({"type": "x-line", "eventId": f"held-{n}", "n": n})


class HeldIngest:
    """An ingest whose body stops after ``first`` until :meth:`finish` sends ``rest``: a write in
    flight. By default an NDJSON body of ``count`` lines, held after the first half of them."""

    def __init__(self, url: str, run_id: str, count: int = 0, *, first: bytes | None = None,
                 rest: bytes = b"", content_type: str = "application/x-ndjson") -> None:
        if first is None:
            lines = [x_line(n) + b"\n" for n in range(count)]
            first, rest = b"".join(lines[:count // 2]), b"".join(lines[count // 2:])
        self.parts = (first, rest)
        self.content_type = content_type
        self.first_half_sent, self._release = threading.Event(), threading.Event()
        self.answer: httpx.Response | None = None
        self.error: httpx.TransportError | None = None
        self._thread = threading.Thread(target=self._post, args=(url, run_id), daemon=True)
        self._thread.start()

    def _body(self) -> Iterator[bytes]:
        yield self.parts[0]
        self.first_half_sent.set()
        self._release.wait(30)
        yield self.parts[1]

    def _post(self, url: str, run_id: str) -> None:
        try:
            self.answer = httpx.post(f"{url}/v1/runs/{run_id}/events", content=self._body(),
                                     headers={"content-type": self.content_type}, timeout=30)
        except httpx.TransportError as error:
            self.error = error

    def finish_quietly(self) -> None:
        """Let the body end, for a server that is gone: the post fails, and that is expected."""
        self._release.set()
        self._thread.join(30)

    def finish(self) -> httpx.Response:
        self._release.set()
        self._thread.join(30)
        assert self.answer is not None, self.error
        return self.answer


def create_run(url: str, **body: Any) -> str:
    response = httpx.post(url + "/v1/runs", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["runId"])


def last_seq(url: str, run_id: str) -> int:
    return int(httpx.get(f"{url}/v1/runs/{run_id}").json()["lastSeq"])


def assert_draining(response: httpx.Response) -> None:
    assert response.status_code == 503, (response.request.url, response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "draining"
    assert response.headers["retry-after"] == "1"


def test_draining_keeps_the_listener_open_and_refuses_only_new_waits(database_url: str) -> None:
    """After SIGTERM, while a write is in flight: /readyz 503 draining, /livez 200, new streams
    and long polls 503 with Retry-After, plain reads and writes still served (each answer closing
    its connection); the held write commits whole, then the process exits 0 within the drain."""
    server = serve(database_url).start()
    try:
        run = create_run(server.url, runId="drain-open")
        held = HeldIngest(server.url, run, 6)
        assert held.first_half_sent.wait(10)
        wait_until(lambda: last_seq(server.url, run) >= 4, "the first half of the held write is stored")
        signalled = terminate(server)
        wait_until(answers(server.url, "/readyz", 503), "/readyz turns 503 while the listener stays open")
        ready = httpx.get(server.url + "/readyz")
        assert_draining(ready)
        assert ready.headers["connection"] == "close"
        assert httpx.get(server.url + "/livez").json() == {"status": "ok"}
        for path in (f"/v1/runs/{run}/stream", "/v1/stream", f"/v1/runs/{run}/result?wait=5",
                     f"/v1/runs/{run}/tool-result?wait=5", f"/v1/runs/{run}/children?wait=5"):
            assert_draining(httpx.get(server.url + path))
        assert httpx.get(f"{server.url}/v1/runs/{run}/result").json()["status"] == "running"
        late = httpx.post(f"{server.url}/v1/runs/{run}/events", json=[{"type": "x-line", "eventId": "late", "n": 6}])
        assert late.status_code == 200 and late.json()["accepted"] == 1
        answer = held.finish()
        assert answer.status_code == 200 and answer.json()["accepted"] == 6
        assert exit_status(server) == 0
        assert time.monotonic() - signalled < DRAIN_SECONDS
    finally:
        server.kill()

    restarted = serve(database_url).start()
    try:
        events = httpx.get(f"{restarted.url}/v1/runs/{run}/events").json()["events"]
        assert sorted(e["event"]["n"] for e in events if e["event"]["type"] == "x-line") == list(range(7))
    finally:
        restarted.stop()


def test_a_parked_long_poll_answers_at_once_and_the_process_exits(database_url: str) -> None:
    """A ?wait=60 poll parked on a running turn answers with the running result as soon as
    SIGTERM comes, and the process then exits 0 well within the drain."""
    server = serve(database_url).start()
    try:
        run = create_run(server.url)
        polled: list[tuple[httpx.Response, float]] = []
        poll = threading.Thread(target=lambda: polled.append((
            httpx.get(f"{server.url}/v1/runs/{run}/result", params={"wait": 60}, timeout=70), time.monotonic())))
        poll.start()
        wait_until(lambda: gauge(server.url, "lastword_result_polls_waiting") >= 1, "the poll is parked")
        signalled = terminate(server)
        poll.join(DRAIN_SECONDS)
        assert polled, "the parked poll did not answer within the drain"
        response, answered = polled[0]
        assert response.status_code == 200 and response.json()["status"] == "running"
        assert answered - signalled < 5
        assert exit_status(server) == 0
        assert time.monotonic() - signalled < DRAIN_SECONDS
    finally:
        server.kill()


def test_an_open_stream_resumes_on_a_second_server_without_loss_or_repeat(database_url: str, backend: str) -> None:
    """A stream open on a replica that drains ends with server/reconnect naming its last id;
    resumed with that id on a second server (PostgreSQL: another replica, running meanwhile;
    SQLite: the restart on the same file) it gives every later event once, in order."""
    first = serve(database_url).start()
    second = serve(database_url) if backend == "postgres" else None
    if second is not None:
        second.start()
    try:
        run = create_run(first.url, runId="drain-resume")

        def post(url: str, n: int) -> None:
            body = {"type": "assistant/chunk", "eventId": f"c{n}", "delta": {"type": "text", "text": f"c{n} "}}
            assert httpx.post(f"{url}/v1/runs/{run}/events", json=body).status_code == 200

        async def before_drain() -> tuple[list[Any], list[Any]]:
            async with httpx.AsyncClient(base_url=first.url, timeout=20) as client:
                async with open_stream(client, f"/v1/runs/{run}/stream?include=chunks") as stream:
                    seen = [await stream.next()]  # the snapshot
                    for n in range(5):
                        await asyncio.to_thread(post, first.url, n)
                        seen.append(await stream.next())
                    terminate(first)
                    return seen, await stream.until_closed()

        seen, rest = asyncio.run(before_drain())
        assert [event.event for event in rest] == ["server/reconnect"]
        assert payload(rest[0]) == {"reason": "shutdown", "lastEventId": int(seen[-1].id)}
        if second is None:
            assert exit_status(first) == 0
            second = serve(database_url).start()
        for n in range(5, 10):
            post(second.url, n)
        assert httpx.post(f"{second.url}/v1/runs/{run}/end", json={"stopReason": "completed"}).status_code == 200

        async def after_drain() -> list[Any]:
            async with httpx.AsyncClient(base_url=second.url, timeout=20) as client:
                async with open_stream(client, f"/v1/runs/{run}/stream?include=chunks",
                                       last_event_id=str(payload(rest[0])["lastEventId"])) as stream:
                    return await stream.until_closed()

        resumed = await_list(after_drain())
        events = seen[1:] + resumed
        chunks = [payload(e)["delta"]["text"] for e in events if e.event == "assistant/chunk"]
        assert chunks == [f"c{n} " for n in range(10)]
        assert events[-1].event == "subagent/end"
        assert strictly_increasing(ids(seen + resumed))
        if backend == "postgres":
            assert exit_status(first) == 0
    finally:
        first.kill()
        if second is not None:
            second.stop()


def await_list(coroutine: Any) -> list[Any]:
    result: list[Any] = asyncio.run(coroutine)
    return result


def test_the_client_stream_follows_a_drain_and_the_restart(database_url: str) -> None:
    """LastwordClient.stream takes the drain's end of stream and the draining replica's 503 as
    "reconnect": across SIGTERM and a restart it gives every chunk once, then the end."""
    server = serve(database_url).start()
    try:
        run = create_run(server.url)
        got: list[StreamMessage] = []
        failed: list[BaseException] = []
        first_chunk = threading.Event()

        def follow() -> None:
            try:
                with LastwordClient(server.url, retries=2, backoff=0.05, reconnects=200) as client:
                    for message in client.stream(run, include_chunks=True):
                        got.append(message)
                        if message.event == "assistant/chunk":
                            first_chunk.set()
            except BaseException as error:  # reported by the test below
                failed.append(error)

        def chunk(n: int) -> None:
            body = {"type": "assistant/chunk", "eventId": f"c{n}", "delta": {"type": "text", "text": f"c{n}"}}
            assert httpx.post(f"{server.url}/v1/runs/{run}/events", json=body).status_code == 200

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        wait_until(lambda: gauge(server.url, "lastword_sse_subscribers") >= 1, "the client's stream is open")
        chunk(0)
        assert first_chunk.wait(10)
        held = HeldIngest(server.url, run, 2)  # keeps the drain open until the client met it
        assert held.first_half_sent.wait(10)
        terminate(server)
        wait_until(logged(server, f"GET /v1/runs/{run}/stream 503"), "the client was refused by the draining replica")
        assert held.finish().status_code == 200
        assert exit_status(server) == 0
        server.start()
        chunk(1)
        assert httpx.post(f"{server.url}/v1/runs/{run}/end", json={"stopReason": "completed"}).status_code == 200
        follower.join(20)
        assert not failed, failed
        assert not follower.is_alive()
        assert [m.data["delta"]["text"] for m in got if m.event == "assistant/chunk"] == ["c0", "c1"]
        assert got[-1].event == "subagent/end"
        assert strictly_increasing([m.id for m in got]), [(m.id, m.event) for m in got]
    finally:
        server.kill()


def test_lastword_tail_follows_a_drain_and_the_restart(database_url: str) -> None:
    """``lastword tail RUN`` prints the whole output once across a drain and a restart, and
    exits 0 at the run's end (the drain's 503 is not the run's end)."""
    server = serve(database_url).start()
    tail: subprocess.Popen[bytes] | None = None
    try:
        run = create_run(server.url)
        tail = subprocess.Popen([sys.executable, "-m", "lastword.cli", "tail", run, "--url", server.url],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy(), cwd=ROOT)
        wait_until(lambda: gauge(server.url, "lastword_sse_subscribers") >= 1, "tail's stream is open")
        post = f"{server.url}/v1/runs/{run}/events"
        delta = {"type": "text", "text": "before "}
        assert httpx.post(post, json={"type": "assistant/chunk", "eventId": "a", "delta": delta}).status_code == 200
        held = HeldIngest(server.url, run, 2)
        assert held.first_half_sent.wait(10)
        terminate(server)
        wait_until(logged(server, f"GET /v1/runs/{run}/stream 503"), "tail was refused by the draining replica")
        assert held.finish().status_code == 200
        assert exit_status(server) == 0
        server.start()
        delta = {"type": "text", "text": "after"}
        assert httpx.post(post, json={"type": "assistant/chunk", "eventId": "b", "delta": delta}).status_code == 200
        assert httpx.post(f"{server.url}/v1/runs/{run}/end", json={"stopReason": "completed"}).status_code == 200
        out, err = tail.communicate(timeout=30)
        assert tail.returncode == 0, err.decode()
        assert out.decode().count("before after") == 1, out.decode()
        assert out.decode().rstrip().endswith("end turn 1: completed")
    finally:
        if tail is not None and tail.poll() is None:
            tail.kill()
            tail.wait()
        server.kill()


def test_a_second_sigterm_exits_at_once_keeping_what_was_committed(database_url: str) -> None:
    """SIGTERM during a drain held open by a write in flight, then SIGTERM again: the process
    exits at once (not at the drain's deadline), and what was committed before is kept."""
    server = serve(database_url).start()
    try:
        run = create_run(server.url, runId="twice")
        held = HeldIngest(server.url, run, 6)
        assert held.first_half_sent.wait(10)
        wait_until(lambda: last_seq(server.url, run) >= 4, "the first half of the held write is stored")
        terminate(server)
        wait_until(answers(server.url, "/readyz", 503), "the drain began")
        second = terminate(server)
        assert server.process is not None
        server.process.wait(timeout=DRAIN_SECONDS)
        assert time.monotonic() - second < 3
        server.kill()
        held.finish_quietly()
    finally:
        server.kill()

    restarted = serve(database_url).start()
    try:
        events = httpx.get(f"{restarted.url}/v1/runs/{run}/events").json()["events"]
        assert [e["event"]["n"] for e in events if e["event"]["type"] == "x-line"] == [0, 1, 2]
    finally:
        restarted.stop()


def webhook_serve(database_url: str, **env: str) -> ServerProcess:
    """A server whose webhook attempts may take 30 s, so a lease (attempt time-out + 5 s) would
    hold a delivery for 35 s: a retry sooner than that means the lease was released."""
    return serve(database_url, LASTWORD_WEBHOOK_TIMEOUT_SECONDS="30", LASTWORD_WEBHOOK_ALLOW_PRIVATE="true",
                 LASTWORD_WEBHOOK_BACKOFF_SECONDS="0.05", **env)


def deliveries(url: str, run_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = httpx.get(f"{url}/v1/runs/{run_id}/deliveries").json()["deliveries"]
    return found


def end_with_webhook(url: str, run_id: str, receiver: Receiver) -> None:
    assert httpx.post(url + "/v1/runs", json={"runId": run_id, "webhook": {"url": receiver.url}}).status_code == 201
    assert httpx.post(f"{url}/v1/runs/{run_id}/end", json={"stopReason": "end_turn"}).status_code == 200


def test_a_webhook_attempt_in_flight_at_sigterm_finishes_within_the_drain(database_url: str) -> None:
    """A delivery whose receiver is still answering when SIGTERM comes: the drain waits for it
    (the process outlives the signal until the receiver answers), records it delivered, and
    exits 0; after the restart it is delivered, once, by that one attempt."""
    let_go = threading.Event()
    receiver = Receiver(lambda _: Answer(200, hold=let_go))
    server = webhook_serve(database_url).start()
    try:
        end_with_webhook(server.url, "hooked", receiver)
        arrived = receiver.arrivals.get(timeout=10)
        signalled = terminate(server)
        wait_until(answers(server.url, "/readyz", 503), "the drain began")
        assert server.process is not None and server.process.poll() is None  # held open by the attempt
        let_go.set()
        assert exit_status(server) == 0
        assert time.monotonic() - signalled < DRAIN_SECONDS
        server.start()
        (delivery,) = deliveries(server.url, "hooked")
        assert delivery["state"] == "delivered" and len(delivery["attempts"]) == 1, delivery
        assert receiver.ids() == [arrived.webhook_id]
    finally:
        let_go.set()
        server.kill()
        receiver.close()


def test_a_webhook_attempt_cut_by_the_drain_deadline_is_attempted_again_at_once(
        database_url: str, backend: str) -> None:
    """A receiver that does not answer within the drain: at the deadline the attempt is cut and
    its lease released, so the delivery is attempted again (PostgreSQL: by a second replica,
    running meanwhile; SQLite: by the restart on the same file) within moments, not after its
    35 s lease; that attempt delivers it."""
    never = threading.Event()
    first_seen = threading.Event()

    def answer(request: Received) -> Answer:
        if not first_seen.is_set():
            first_seen.set()
            return Answer(200, hold=never)  # answers only when the test ends
        return Answer(200)

    receiver = Receiver(answer)
    drain = 2.0
    first = webhook_serve(database_url, LASTWORD_DRAIN_SECONDS=str(drain)).start()
    second: ServerProcess | None = None
    try:
        end_with_webhook(first.url, "cut", receiver)
        held = receiver.arrivals.get(timeout=10)
        leased = time.monotonic()  # the lease began before this: it ends by leased + 35 s
        if backend == "postgres":  # started after the first leased it: it cannot have taken it
            second = webhook_serve(database_url).start()
        signalled = terminate(first)
        assert exit_status(first, timeout=drain + 10) == 0
        assert time.monotonic() - signalled < drain + 5
        if second is None:
            second = webhook_serve(database_url).start()
        again = receiver.arrivals.get(timeout=30)
        assert again.webhook_id == held.webhook_id
        # Before the lease could have run out: the drain released it. (Not a tighter bound: the
        # second server's start alone took 5-7 s on a loaded machine.)
        assert time.monotonic() - leased < 35 - 2
        wait_until(lambda: deliveries(second.url, "cut")[0]["state"] == "delivered", "delivered by the second")
        (delivery,) = deliveries(second.url, "cut")
        assert len(delivery["attempts"]) == 1, delivery  # the cut attempt was released, not recorded
        assert "released 1 webhook deliveries" in first.log_path.read_text()
    finally:
        never.set()
        first.kill()
        if second is not None:
            second.stop()
        receiver.close()


def x_lines_logged(url: str, run_id: str) -> list[int]:
    events = httpx.get(f"{url}/v1/runs/{run_id}/events").json()["events"]
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs  # no gap: nothing half-written
    return [e["event"]["n"] for e in events if e["event"]["type"] == "x-line"]


def test_an_ndjson_body_cut_by_the_drain_deadline_keeps_its_whole_lines_only(database_url: str) -> None:
    """SIGTERM while an NDJSON body is held mid-line, and the body never resumes: at the drain's
    deadline the request is cut (answered 503), the process exits 0, and the log holds exactly the lines that
    were whole before (a group is committed whole; the half line is no event). The producer's
    retry of the whole body, with its eventIds, then stores each line once."""
    drain = 2.0
    lines = [x_line(n) + b"\n" for n in range(6)]
    cut = len(lines[3]) // 2
    first, rest = b"".join(lines[:3]) + lines[3][:cut], lines[3][cut:] + b"".join(lines[4:])
    server = serve(database_url, LASTWORD_DRAIN_SECONDS=str(drain)).start()
    try:
        run = create_run(server.url, runId="cut-ndjson")
        held = HeldIngest(server.url, run, first=first, rest=rest)
        assert held.first_half_sent.wait(10)
        wait_until(lambda: last_seq(server.url, run) >= 4, "the three whole lines are stored")
        signalled = terminate(server)
        assert exit_status(server, timeout=drain + 10) == 0
        # Held open by the body, then cut a little before the deadline: answered, not cancelled.
        assert drain - 1.0 < time.monotonic() - signalled < drain + 5
        assert "timeout graceful shutdown exceeded" not in server.log_path.read_text()
        held.finish_quietly()
        # (The 503 is answered while the client still sends; it may read it or a lost connection.)
        assert held.answer is None or held.answer.status_code == 503, held.answer.text
        server.start()
        assert x_lines_logged(server.url, run) == [0, 1, 2]
        retried = httpx.post(f"{server.url}/v1/runs/{run}/events", content=first + rest,
                             headers={"content-type": "application/x-ndjson"})
        assert retried.status_code == 200 and retried.json()["accepted"] == 3 and retried.json()["duplicates"] == 3
        assert x_lines_logged(server.url, run) == list(range(6))
    finally:
        server.kill()


def test_a_json_batch_cut_by_the_drain_deadline_is_refused_whole(database_url: str) -> None:
    """SIGTERM while a JSON array (a batch: all or nothing) is held half-sent, and the body never
    resumes: at the drain's deadline the request is cut (503) and nothing of it is stored; the retry
    stores it whole. (A batch that completes within the drain commits whole: see
    test_draining_keeps_the_listener_open_and_refuses_only_new_waits.)"""
    drain = 2.0
    events = [x_line(n) for n in range(6)]
    first, rest = b"[" + b",".join(events[:3]) + b",", b",".join(events[3:]) + b"]"
    server = serve(database_url, LASTWORD_DRAIN_SECONDS=str(drain)).start()
    try:
        run = create_run(server.url, runId="cut-json")
        before = last_seq(server.url, run)
        held = HeldIngest(server.url, run, first=first, rest=rest, content_type="application/json")
        assert held.first_half_sent.wait(10)
        signalled = terminate(server)
        wait_until(answers(server.url, "/readyz", 503), "the drain began")
        assert exit_status(server, timeout=drain + 10) == 0
        # Held open by the body, then cut a little before the deadline: answered, not cancelled.
        assert drain - 1.0 < time.monotonic() - signalled < drain + 5
        assert "timeout graceful shutdown exceeded" not in server.log_path.read_text()
        held.finish_quietly()
        # (The 503 is answered while the client still sends; it may read it or a lost connection.)
        assert held.answer is None or held.answer.status_code == 503, held.answer.text
        server.start()
        assert last_seq(server.url, run) == before
        assert x_lines_logged(server.url, run) == []
        retried = httpx.post(f"{server.url}/v1/runs/{run}/events", content=first + rest,
                             headers={"content-type": "application/json"})
        assert retried.status_code == 200 and retried.json()["accepted"] == 6, retried.text
        assert x_lines_logged(server.url, run) == list(range(6))
    finally:
        server.kill()


def _codex(line: dict[str, Any]) -> bytes:
    return orjson.dumps(line) + b"\n"


#: Per endpoint: its path under the run, its content type, the body's first part (whole lines and
#: then half a line, or text), and how many events the whole part stores.
CUT_BODIES = {
    "cli": ("ingest/codex", "application/x-ndjson",
            _codex({"type": "thread.started", "thread_id": "t1"}) + _codex({"type": "turn.started"})
            + _codex({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "zero"}})
            + _codex({"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": "one"}})
            + _codex({"type": "item.completed", "item": {"id": "item_2", "type": "agent_message",
                                                         "text": "two"}})[:30]),
    "events": ("events", "application/x-ndjson", b"".join(x_line(n) + b"\n" for n in range(3)) + x_line(3)[:10]),
    "chunks": ("chunks", "text/plain", "partial text".encode()),
}


def _cut_body_answer(url: str, path: str, content_type: str, first: bytes) -> tuple[Any, dict[str, Any]]:
    """Send ``first`` as the start of a chunked body that never ends; once the server answers,
    its status line, headers and problem (h11 lets a client read an answer given early)."""
    import h11  # httpx's own HTTP/1.1 parser

    host, port = url.removeprefix("http://").split(":")
    connection = h11.Connection(h11.CLIENT)
    sock = socket.create_connection((host, int(port)))
    try:
        sock.sendall(connection.send(h11.Request(method="POST", target=path, headers=[
            ("Host", host), ("Content-Type", content_type), ("Transfer-Encoding", "chunked")])))
        sock.sendall(connection.send(h11.Data(data=first)))
        sock.settimeout(30)
        response, body = None, b""
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(sock.recv(65536))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return response, orjson.loads(body)
    finally:
        sock.close()


@pytest.mark.parametrize("endpoint", sorted(CUT_BODIES))
def test_a_streamed_body_at_the_drain_deadline_is_answered_503_with_what_it_stored(
        database_url: str, endpoint: str) -> None:
    """SIGTERM while a streamed body (a CLI's output, NDJSON events, text chunks) is still
    arriving and never ends: at the drain's deadline its whole lines are committed and it is
    answered 503 draining with Retry-After and the run's lastSeq, never cancelled (500); the
    process exits 0 and a restart finds everything the answer counted."""
    drain = 2.0
    suffix, content_type, first = CUT_BODIES[endpoint]
    server = serve(database_url, LASTWORD_DRAIN_SECONDS=str(drain)).start()
    try:
        run = create_run(server.url, runId=f"cut-{endpoint}")
        before = last_seq(server.url, run)
        answered: list[tuple[Any, dict[str, Any]]] = []
        sender = threading.Thread(target=lambda: answered.append(
            _cut_body_answer(server.url, f"/v1/runs/{run}/{suffix}", content_type, first)), daemon=True)
        sender.start()
        wait_until(lambda: last_seq(server.url, run) > before, "the body's first part is stored")
        stored = last_seq(server.url, run)
        terminate(server)
        sender.join(drain + 10)
        [(response, problem)] = answered
        assert response.status_code == 503, problem
        assert (problem["code"], problem["lastSeq"]) == ("draining", stored)
        assert dict(response.headers)[b"retry-after"] == b"1"
        assert exit_status(server, timeout=drain + 10) == 0
        assert "timeout graceful shutdown exceeded" not in server.log_path.read_text()
        server.start()
        assert last_seq(server.url, run) == stored
    finally:
        server.kill()
