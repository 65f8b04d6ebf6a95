"""The core: the service as a whole, with no face. ``open_core(settings)`` opens it.

The store, the fan-out, the run and stream services, the webhook sender and the turn spans are
built here, each handed what it needs in its constructor, and closed in the reverse order. A face
(the HTTP app, an MCP or gRPC server, a worker process, a test, a benchmark) opens a core and
calls its services; nothing here imports a web framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lastword.ds_service import StreamService
from lastword.fanout.hub import Hub
from lastword.metrics import Metrics
from lastword.registry import open_fanout, open_store
from lastword.rules.records import StoredEvent, TurnRecord
from lastword.service import RunService
from lastword.settings import Settings
from lastword.store.base import Store
from lastword.telemetry import open_turn_spans, run_or_none
from lastword.webhooks.rules import allowed_host_patterns
from lastword.webhooks.sender import WebhookSender


@dataclass(frozen=True)
class Core:
    settings: Settings
    #: Seconds since the epoch: what leases, timestamps and retention are reckoned by.
    clock: Callable[[], float]
    metrics: Metrics
    #: Runs and their turns (SPEC §4–§16).
    runs: RunService
    #: The Durable Streams (SPEC §17).
    streams: StreamService
    #: Webhook deliveries (SPEC §14); the drain stops it leasing more.
    sender: WebhookSender

    def drain(self) -> None:
        """Shutting down: streams and long polls answer now, no new webhook attempt starts."""
        self.runs.drain()
        self.sender.drain()


@contextlib.asynccontextmanager
async def open_core(
    settings: Settings,
    *,
    clock: Callable[[], float] = time.time,
    metrics: Metrics | None = None,
    store_options: Mapping[str, Any] | None = None,
    background: bool = True,
) -> AsyncIterator[Core]:
    """The core for ``settings``, started: it hears other replicas' commits, has ended the turns
    whose lease ran out while it was down, and (``background``) sweeps leases, applies retention
    and delivers webhooks until the block is left.

    ``store_options`` go to the constructor of the store ``settings.database_url`` names (a
    test's hold on the SQLite writer). Raises :class:`lastword.errors.Unavailable` when the
    store cannot be opened.
    """
    metrics = metrics or Metrics()
    hub = Hub(settings.subscriber_buffer)
    store = open_store(settings, hub, **(store_options or {}))
    await store.open()
    # What is opened is closed in reverse order, at the end and equally when a later step of the
    # start fails (a failed sweep must not leak the sender's client).
    async with contextlib.AsyncExitStack() as opened:
        opened.push_async_callback(store.close)
        streams = StreamService(store, clock=clock, max_json_messages=settings.ds_max_json_messages)
        fanout = open_fanout(settings, store, hub, streams)
        sender = WebhookSender(store, metrics, backoff_seconds=settings.webhook_backoff_seconds,
                               max_attempts=settings.webhook_max_attempts,
                               timeout_seconds=settings.webhook_timeout_seconds,
                               allow_private=settings.webhook_allow_private, clock=clock)
        opened.push_async_callback(sender.close)
        observers: list[Callable[[StoredEvent], None]] = [sender.ended]
        spans = open_turn_spans(lambda run_id: run_or_none(store.get_run, run_id),
                                lambda run_id, turn: _turn_record(store, run_id, turn),
                                conventions=settings.otel_genai_conventions)
        if spans is not None:
            observers.append(spans.ended)
            opened.push_async_callback(spans.close)
        runs = RunService(store, fanout, streams, metrics, page_size=settings.max_page_size,
                          webhook_hosts=allowed_host_patterns(settings.webhook_allowed_hosts),
                          webhook_allow_private=settings.webhook_allow_private, clock=clock,
                          end_observers=observers)
        opened.push_async_callback(runs.close)  # closes the fan-out
        # The start's sweep may end turns: the observers above hear those ends too.
        await runs.start()
        if background:
            sender.start()
            opened.push_async_callback(_stop, _background_jobs(runs, settings))
        yield Core(settings=settings, clock=clock, metrics=metrics, runs=runs, streams=streams, sender=sender)


async def _turn_record(store: Store, run_id: str, turn: int) -> TurnRecord:
    return (await store.turn_result(run_id, turn))[1]


def _background_jobs(runs: RunService, settings: Settings) -> list[asyncio.Task[None]]:
    # Named, so logs, debuggers and tests can tell the background jobs apart.
    jobs = [asyncio.create_task(
        runs.every(settings.sweep_interval_seconds, runs.sweep_once, "lease sweep"), name="lease sweep")]
    if settings.retention_hours > 0:
        hours = settings.retention_hours
        jobs.append(asyncio.create_task(runs.every(
            settings.retention_interval_seconds, lambda: runs.delete_expired_runs(hours), "retention"),
            name="retention"))
    return jobs


async def _stop(jobs: list[asyncio.Task[None]]) -> None:
    """Cancel the background jobs and wait for them to finish."""
    for job in jobs:
        job.cancel()
    for job in jobs:
        with contextlib.suppress(asyncio.CancelledError):
            await job
