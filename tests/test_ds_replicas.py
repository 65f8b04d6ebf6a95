"""Durable Streams across replicas (SPEC §17): a live reader on replica B hears an append made
on replica A of the same PostgreSQL database, through the commit notices the runs use.

Replica B's reader is an SSE read: its first control event says it has read the stream up to
date, and from then on it waits. The keep-alive and the read's own length are set far beyond
the test's bound on waiting, so nothing but a wake-up from A's commit can bring the append to
B before the bound: the read would otherwise sit until its keep-alive re-read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.builders import message
from tests.servers import threaded_app_server, threaded_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: Seconds the test waits for one SSE event before it fails (a bound, not a measure of speed).
HEARD_WITHIN = 20.0


@pytest.fixture
def backend() -> str:
    """Replicas need a shared database: PostgreSQL only."""
    return "postgres"


@pytest.fixture
def replicas(make_settings: Any) -> Iterator[tuple[str, str]]:
    # Far beyond HEARD_WITHIN: an idle SSE read re-reads the log only at a keep-alive.
    settings = make_settings(keepalive_seconds=300.0, ds_sse_seconds=600.0)
    with threaded_server(settings) as a, threaded_server(settings) as b:
        yield a, b


def sse_events(response: httpx.Response) -> Iterator[tuple[str, Any]]:
    """``(event, data)`` of each SSE event as it arrives (JSON data parsed)."""
    name, data = "", []
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line[len("event:"):].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:"):])
        elif not line and name:
            yield name, json.loads("\n".join(data))
            name, data = "", []


def heard_on_b(b: str, path: str, offset: str, append_on_a: Any) -> list[Any]:
    """Open an SSE read of ``path`` on B at ``offset``; once it is up to date, append on A; the
    messages of B's next data event."""
    timeout = httpx.Timeout(30.0, read=HEARD_WITHIN)
    with httpx.Client(timeout=timeout) as http, \
            http.stream("GET", f"{b}{path}", params={"offset": offset, "live": "sse"}) as response:
        assert response.status_code == 200
        events = sse_events(response)
        name, control = next(events)
        assert name == "control" and control["upToDate"] is True
        append_on_a()
        name, data = next(events)
        assert name == "data"
        return list(data)


def test_an_append_on_replica_a_wakes_a_live_stream_reader_on_replica_b(replicas: tuple[str, str]) -> None:
    a, b = replicas
    created = httpx.put(f"{a}/ds/shared/one", headers={"Content-Type": "application/json"})
    assert created.status_code == 201, created.text

    def append() -> None:
        assert httpx.post(f"{a}/ds/shared/one", json={"n": 1}).status_code == 204

    assert heard_on_b(b, "/ds/shared/one", created.headers["Stream-Next-Offset"], append) == [{"n": 1}]


def test_an_event_on_replica_a_wakes_a_live_run_reader_on_replica_b(replicas: tuple[str, str]) -> None:
    a, b = replicas
    created = httpx.put(f"{a}/ds/runs/shared-run", headers={"Content-Type": "application/json"})
    assert created.status_code == 201, created.text

    def append() -> None:
        answer = httpx.post(f"{a}/v1/runs/shared-run/events", json=message("from a"))
        assert answer.status_code == 200, answer.text

    heard = heard_on_b(b, "/ds/runs/shared-run", created.headers["Stream-Next-Offset"], append)
    assert [event["message"]["content"] for event in heard] == [[{"type": "text", "text": "from a"}]]


def test_a_stream_whose_path_does_not_fit_in_a_notice_still_wakes_readers_on_replica_b(
        replicas: tuple[str, str]) -> None:
    """PostgreSQL refuses a notice of 8000 bytes or more: such a stream's writes still commit,
    and its readers on other replicas are still woken (every parked reader reads again)."""
    a, b = replicas
    path = "/ds/shared/" + "p" * 9000
    created = httpx.put(f"{a}{path}", headers={"Content-Type": "application/json"})
    assert created.status_code == 201, created.text

    def append() -> None:
        answer = httpx.post(f"{a}{path}", json={"n": 2})
        assert answer.status_code == 204, answer.text

    assert heard_on_b(b, path, created.headers["Stream-Next-Offset"], append) == [{"n": 2}]


def test_readers_parked_on_replica_b_are_woken_when_its_notices_are_lost(make_settings: Any) -> None:
    """Notices B did not keep (its backlog overflowed; a dropped connection does the same) wake
    every reader parked on B to read the log again: an SSE read of a stream and one of a run,
    each parked (B counts it) before A's write, hear it though no notice of it reached them."""
    settings = make_settings(keepalive_seconds=300.0, ds_sse_seconds=600.0)
    with threaded_server(settings) as a, threaded_app_server(settings) as (b, app):
        streams = app.state.core.streams
        # B keeps no backlog of notices: every notice overflows it and is dropped, unread.
        app.state.core.runs._fanout.listener.max_pending = 0
        created = httpx.put(f"{a}/ds/shared/lost", headers={"Content-Type": "application/json"})
        assert created.status_code == 201, created.text
        run = httpx.put(f"{a}/ds/runs/lost-run", headers={"Content-Type": "application/json"})
        assert run.status_code == 201, run.text

        def parked_then(write: Any) -> Any:
            def append() -> None:
                deadline = time.monotonic() + HEARD_WITHIN
                while streams.waiting != 1:  # B's reader is registered to be woken: only then write
                    assert time.monotonic() < deadline, "the reader on B never parked"
                    threading.Event().wait(0.01)
                write()
            return append

        def to_stream() -> None:
            assert httpx.post(f"{a}/ds/shared/lost", json={"n": 3}).status_code == 204

        def to_run() -> None:
            answer = httpx.post(f"{a}/v1/runs/lost-run/events", json=message("unheard"))
            assert answer.status_code == 200, answer.text

        heard = heard_on_b(b, "/ds/shared/lost", created.headers["Stream-Next-Offset"], parked_then(to_stream))
        assert heard == [{"n": 3}]
        heard = heard_on_b(b, "/ds/runs/lost-run", run.headers["Stream-Next-Offset"], parked_then(to_run))
        assert [event["message"]["content"] for event in heard] == [[{"type": "text", "text": "unheard"}]]
