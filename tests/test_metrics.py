"""Prometheus metrics over HTTP: what an operator graphs."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.clock import ManualClock
from tests.servers import threaded_server
from tests.sse import open_stream
from tests.polling import wait_until


def samples(api: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = api.get("/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_what_happened(make_settings: Any) -> None:
    """Events by type, ingest latency, runs by status, turns by stop reason, expired leases, subscribers."""
    clock = ManualClock()
    with threaded_server(make_settings(sweep_interval_seconds=0.01), clock) as url, httpx.Client(base_url=url) as api:
        ended = api.post("/v1/runs", json={}).json()["runId"]
        api.post(f"/v1/runs/{ended}/events", json=[
            {"type": "assistant/chunk", "delta": {"type": "text", "text": "a"}},
            {"type": "assistant/chunk", "delta": {"type": "text", "text": "b"}},
            {"type": "assistant/message", "message": {"content": []}},
        ]).raise_for_status()
        api.post(f"/v1/runs/{ended}/end", json={"stopReason": "length"}).raise_for_status()
        api.post("/v1/runs", json={"leaseSeconds": 30})
        api.post("/v1/runs", json={"mode": "continuable"})
        running = api.post("/v1/runs", json={"leaseSeconds": 0}).json()["runId"]
        clock.advance(31)
        clock.wait_for_reads(2, by="lease sweep")  # a whole lease sweep ran at the new time (see test_api_runs.Leases)

        async def with_subscriber() -> dict[Any, float]:
            async with httpx.AsyncClient(base_url=url) as client, open_stream(client, f"/v1/runs/{running}/stream"):
                return await asyncio.to_thread(samples, api)

        during = asyncio.run(with_subscriber())
        # The server hears the client leave a moment after the client closed: wait for it.
        def gone() -> dict[Any, float] | None:
            found = samples(api)
            return found if found[("lastword_sse_subscribers", ())] == 0 else None

        after = wait_until(gone, "the subscriber gauge is back to 0")

    assert after[("lastword_events_ingested_total", (("type", "assistant/chunk"),))] == 2
    assert after[("lastword_events_ingested_total", (("type", "assistant/message"),))] == 1
    assert after[("lastword_ingest_batch_seconds_count", ())] == 1
    assert after[("lastword_turns_ended_total", (("stop_reason", "max_tokens"),))] == 1
    assert after[("lastword_turns_ended_total", (("stop_reason", "timeout"),))] == 1
    assert after[("lastword_leases_expired_total", ())] == 1
    assert after[("lastword_runs", (("status", "ended"),))] == 2
    assert after[("lastword_runs", (("status", "running"),))] == 2
    assert during[("lastword_sse_subscribers", ())] == 1
    assert after[("lastword_sse_subscribers", ())] == 0


def test_result_waiters_gauge_counts_requests_parked_on_wait(api: httpx.Client) -> None:
    """lastword_result_waiters is 1 while a ?wait= request waits for a turn to end, and 0 after."""
    run_id = api.post("/v1/runs", json={}).json()["runId"]
    assert samples(api)[("lastword_result_waiters", ())] == 0
    answered: list[httpx.Response] = []
    waiter = threading.Thread(target=lambda: answered.append(
        api.get(f"/v1/runs/{run_id}/result", params={"wait": 30}, timeout=60)))
    waiter.start()
    try:
        deadline = threading.Event()
        for _ in range(1000):  # bounded: up to 10 s for the request to arrive
            if samples(api)[("lastword_result_waiters", ())] == 1:
                break
            deadline.wait(0.01)
        assert samples(api)[("lastword_result_waiters", ())] == 1
        assert not answered
    finally:
        api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"}).raise_for_status()
        waiter.join(timeout=30)
    assert answered[0].json()["stopReason"] == "completed"
    assert samples(api)[("lastword_result_waiters", ())] == 0


def test_readyz_checks_the_store(api: httpx.Client) -> None:
    """/readyz answers ready when the store answers."""
    assert api.get("/readyz").json() == {"status": "ready"}


def test_duplicates_are_not_counted_as_ingested(api: httpx.Client) -> None:
    """A retried batch counts its repeats in lastword_events_duplicate, not in events_ingested."""
    run = api.post("/v1/runs", json={}).json()["runId"]
    chunk = {"type": "assistant/chunk", "eventId": "c1", "delta": {"type": "text", "text": "a"}}
    message = {"type": "assistant/message", "eventId": "m1", "message": {"content": []}}
    before = samples(api)
    api.post(f"/v1/runs/{run}/events", json=[chunk]).raise_for_status()
    # Half a retry: the chunk again (a duplicate) and a new message.
    answer = api.post(f"/v1/runs/{run}/events", json=[chunk, message]).json()
    assert (answer["accepted"], answer["duplicates"]) == (1, 1)
    api.post(f"/v1/runs/{run}/events", json=[chunk, message]).raise_for_status()  # a whole retry
    after = samples(api)

    def grew(name: str, *labels: tuple[str, str]) -> float:
        key = (name, tuple(labels))
        return after.get(key, 0) - before.get(key, 0)

    assert grew("lastword_events_ingested_total", ("type", "assistant/chunk")) == 1
    assert grew("lastword_events_ingested_total", ("type", "assistant/message")) == 1
    assert grew("lastword_events_duplicate_total") == 3


def test_the_outbox_age_is_reckoned_by_the_service_clock(make_settings: Any) -> None:
    """The oldest pending delivery's age is counted on the clock the service runs by (the one
    leases use), not the wall clock: a delivery pending since the clock read 1,000,000 is 120 s
    old once that clock has moved on 120 s."""
    clock = ManualClock(start=1_000_000.0)
    settings = make_settings(webhook_allow_private=True, webhook_backoff_seconds=3600, webhook_max_attempts=1000)
    with threaded_server(settings, clock) as url, httpx.Client(base_url=url) as api:
        # Nothing listens on the discard port: the delivery stays pending, retried after an hour.
        run_id = api.post("/v1/runs", json={"webhook": {"url": "http://127.0.0.1:9/hook"}}).json()["runId"]
        api.post(f"/v1/runs/{run_id}/end", json={"stopReason": "end_turn"}).raise_for_status()
        clock.advance(120)
        found = samples(api)
    assert found[("lastword_webhook_outbox_pending", ())] == 1
    assert found[("lastword_webhook_outbox_oldest_seconds", ())] == 120
