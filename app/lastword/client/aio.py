"""The asynchronous client, :class:`AsyncLastwordClient`: the same methods as the synchronous one, awaited.

It also takes async iterables where the synchronous client takes iterables (a CLI's lines, text
pieces, a provider's stream), streamed as they yield; a child's output is sent again for
``retry_seconds`` of failures in a row, as :mod:`lastword.client.sync` says.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from typing import Any, TypeVar

import httpx
from httpx_sse import aconnect_sse
from tenacity import AsyncRetrying

from lastword.client.answers import _Retryable, check
from lastword.client.bodies import (
    CliLines,
    ProviderBody,
    TextPieces,
    _acli_lines,
    _apieces,
    _async_of,
    _atext_body,
    _cli_line,
    _pieces,
    _sniff,
)
from lastword.client.calls import _Call, _wire
from lastword.client.errors import LastwordAPIError
from lastword.client.polls import _Join, _Wait
from lastword.client.pusher import LINGER, MAX_EVENTS, AsyncPusher
from lastword.client.replay import AsyncReplay
from lastword.client.stream_pusher import IDLE, ROLL_BYTES, ROLL_EVENTS, AsyncStreamPusher
from lastword.client.streams import StreamMessage, _open_stream_refused, _Stream
from lastword.client.transport import _Client
from lastword.schemas import (
    AppendResult,
    ChildrenJoin,
    DeliveryList,
    EventPage,
    ForkOf,
    Health,
    IngestResult,
    Run,
    RunList,
    Selection,
    SubagentResult,
    ToolResult,
    TranscriptPage,
    WebhookSpec,
)

__all__ = ["AsyncLastwordClient"]


T = TypeVar("T")


class AsyncLastwordClient(_Client[httpx.AsyncClient, httpx.AsyncBaseTransport]):
    """Asynchronous client with the same methods and options as :class:`LastwordClient`, awaited
    (``transport`` an ``httpx.AsyncBaseTransport``)."""

    def _open(self, base_url: str, timeout: float, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base_url, headers=self._core.headers, timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncLastwordClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        try:
            if not call.retriable:
                return call.answer(await self._http.request(call.method, call.path, **call.options()))
            async for attempt in AsyncRetrying(**self._core.retry_policy(call)):
                with attempt:
                    response = check(await self._http.request(call.method, call.path, **call.options()))
        except _Retryable as spent:  # the retries are spent: the last answer is the refusal
            response = spent.response
        except httpx.TransportError as error:
            raise self._unreachable(error) from error
        return call.answer(response)

    async def create_run(
        self, run_id: str | None = None, *, parent_run_id: str | None = None, agent: str | None = None,
        mode: str | None = None, metadata: Mapping[str, Any] | None = None, lease_seconds: float | None = None,
        fork_of: ForkOf | Mapping[str, Any] | None = None, selection: Selection | Mapping[str, Any] | None = None,
        webhook: WebhookSpec | Mapping[str, Any] | None = None,
    ) -> Run:
        """As :meth:`LastwordClient.create_run`."""
        return await self._send(self._core.create_run(run_id, {
            "parentRunId": parent_run_id, "agent": agent, "mode": mode, "metadata": metadata,
            "leaseSeconds": lease_seconds, "forkOf": _wire(fork_of), "selection": _wire(selection),
            "webhook": _wire(webhook)}))

    async def get_run(self, run_id: str) -> Run:
        """The run with its current turn and status."""
        return await self._send(self._core.get_run(run_id))

    async def list_runs(
        self, *, parent_run_id: str | None = None, status: str | None = None, agent: str | None = None,
        stop_reason: str | None = None, include_result: bool = False, limit: int | None = None,
        cursor: str | None = None,
    ) -> RunList:
        """As :meth:`LastwordClient.list_runs`."""
        filters = {"parentRunId": parent_run_id, "status": status, "agent": agent, "stopReason": stop_reason}
        return await self._send(self._core.list_runs(filters, include_result, limit, cursor))

    async def next_turn(self, run_id: str) -> Run:
        """As :meth:`LastwordClient.next_turn`."""
        return await self._send(self._core.next_turn(run_id))

    async def close_run(self, run_id: str) -> Run:
        """As :meth:`LastwordClient.close_run`."""
        return await self._send(self._core.close_run(run_id))

    async def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> EventPage:
        """As :meth:`LastwordClient.events`."""
        return await self._send(self._core.events(run_id, after, limit))

    async def messages(self, run_id: str, format: str, *, turn: int | None = None) -> TranscriptPage:
        """As :meth:`LastwordClient.messages`."""
        return await self._send(self._core.messages(run_id, format, turn))

    async def deliveries(self, run_id: str) -> DeliveryList:
        """As :meth:`LastwordClient.deliveries`."""
        return await self._send(self._core.deliveries(run_id))

    async def health(self) -> Health:
        """As :meth:`LastwordClient.health`."""
        return await self._send(self._core.probe("/healthz"))

    async def live(self) -> Health:
        """As :meth:`LastwordClient.live`."""
        return await self._send(self._core.probe("/livez"))

    async def ready(self) -> Health:
        """As :meth:`LastwordClient.ready`."""
        return await self._send(self._core.probe("/readyz"))

    async def metrics(self) -> str:
        """As :meth:`LastwordClient.metrics`."""
        return await self._send(self._core.metrics())

    async def push_events(self, run_id: str, events: Iterable[Mapping[str, Any]]) -> AppendResult:
        """Append session events (each gets an ``eventId`` unless it has one)."""
        return await self._send(self._core.push_events(run_id, events))

    async def push_text(self, run_id: str, text: str, *, event_id: str | None = None) -> AppendResult:
        """Append bare chunk text."""
        return await self._send(self._core.push_text(run_id, text, event_id))

    async def push_text_stream(self, run_id: str, pieces: TextPieces) -> AppendResult:
        """As :meth:`LastwordClient.push_text_stream`; an async iterable is streamed as it yields."""
        body = _atext_body(pieces) if isinstance(pieces, AsyncIterable) else _async_of(p.encode() for p in pieces)
        return await self._send(self._core.push_text_stream(run_id, body))

    def pusher(self, run_id: str, *, linger: float = LINGER, max_events: int = MAX_EVENTS) -> AsyncPusher:
        """A streaming producer for ``run_id``: ``push_text``/``push_events`` queue, a request goes
        after ``linger`` seconds (or at ``max_events``), ``flush()``/``close()`` wait until durable
        (:mod:`lastword.client.pusher`). Use it inside the event loop, as ``async with``."""

        async def send(events: list[dict[str, Any]]) -> AppendResult:
            return await self._send(self._core.push_events(run_id, events))

        return AsyncPusher(send, linger=linger, max_events=max_events)

    def stream_pusher(
        self, run_id: str, *, idle: float = IDLE, roll_events: int = ROLL_EVENTS, roll_bytes: int = ROLL_BYTES,
    ) -> AsyncStreamPusher:
        """A streaming producer for ``run_id`` over one long-lived NDJSON request: each pushed
        event is written at once; ``flush()``/``close()`` wait until durable
        (:mod:`lastword.client.stream_pusher`). Use it inside the event loop, as ``async with``."""

        async def send(body: AsyncIterator[bytes]) -> AppendResult:
            return await self._send(self._core.push_ndjson(run_id, body))

        return AsyncStreamPusher(send, idle=idle, roll_events=roll_events, roll_bytes=roll_bytes,
                                 retry_seconds=self._core.retry_seconds, backoff=self._core.backoff)

    async def push_provider_stream(
        self, run_id: str, format: str, body_or_iterable: ProviderBody, *, end: bool = False,
        idempotency_key: str | None = None, content_type: str | None = None,
    ) -> IngestResult:
        """Store a provider's own stream (SPEC §13); an async iterable is streamed as it yields."""
        body = body_or_iterable.encode() if isinstance(body_or_iterable, str) else body_or_iterable
        content: Any
        if isinstance(body, bytes):
            content, kind = body, _sniff(body)
        elif isinstance(body, AsyncIterable):
            content, kind = await _apieces(body)
        else:
            pieces, kind = _pieces(body)
            content = _async_of(pieces)
        return await self._send(self._core.push_provider_stream(run_id, format, content, content_type or kind, end,
                                                                idempotency_key))

    async def ingest_cli_stream(self, run_id: str, format: str, lines: CliLines, *,
                                tool_use_id: str | None = None) -> IngestResult:
        """As :meth:`LastwordClient.ingest_cli_stream`; an async iterable is streamed as it yields."""
        source = _acli_lines(lines) if isinstance(lines, AsyncIterable) else _async_of(map(_cli_line, lines))
        replay, window = AsyncReplay(source), self._core.retry_window()
        while True:
            started = time.monotonic()
            try:
                return await self._send(self._core.ingest_cli_stream(run_id, format, replay.body(), tool_use_id))
            except (LastwordAPIError, httpx.TransportError) as error:
                wait = window.failed(error, started)
                if wait is None:
                    raise
            await asyncio.sleep(wait)

    async def end(self, run_id: str, stop_reason: str, *, error: Any = None, cascade: bool = False) -> SubagentResult:
        """End the current turn; the same end again answers the same result."""
        return await self._send(self._core.end(run_id, stop_reason, error, cascade))

    async def result(self, run_id: str, *, turn: int | None = None, texts: bool = False) -> SubagentResult:
        """The turn's result as it stands now; ``texts``: with every text the assistant wrote in it."""
        return await self._send(self._core.result(run_id, turn, texts=texts))

    async def wait_result(self, run_id: str, *, timeout: float = 300.0, turn: int | None = None,
                    texts: bool = False) -> SubagentResult:
        """The turn's result once it has ended, or as it stands when ``timeout`` runs out
        (``texts``: with every text the assistant wrote in it).

        Without ``turn`` it is the turn current when this is called, however many polls it takes.
        """
        wait = _Wait(self._core, run_id, timeout, turn, texts)
        while True:
            result = await self._send(wait.next_call())
            if wait.finished(result):
                return result

    async def join(
        self, run_id: str, *, timeout: float = 300.0, any_child: bool = False, expect: int = 0
    ) -> ChildrenJoin:
        """As :meth:`LastwordClient.join`."""
        join = _Join(self._core, run_id, timeout, any_child, expect)
        while True:
            joined = await self._send(join.next_call())
            if join.finished(joined):
                return joined

    async def tool_result(self, run_id: str, *, wait: float = 0.0, turn: int | None = None) -> ToolResult | None:
        """The parent model's tool result; ``None`` while the turn still runs."""
        return await self._send(self._core.tool_result(run_id, turn, wait))

    async def stream(
        self, run_id: str, *, include_chunks: bool = False, after: int | None = None
    ) -> AsyncIterator[StreamMessage]:
        """The run's SSE messages; reconnects with ``Last-Event-ID`` after a dropped connection
        (a server draining for its restart ends streams so, and refuses new ones with 503 and
        ``Retry-After`` until it is gone: both mean "reconnect", not the run's end).

        Ends when the run's stream ends (after ``subagent/end`` of a oneshot run, or
        ``run/closed``); nothing is lost or repeated across reconnects.
        """
        stream = self._core.run_stream(run_id, include_chunks, after)
        stream.mode = (await self.get_run(run_id)).mode
        while True:
            try:
                async for message in self._follow(stream):
                    yield message
                if stream.finished_by_message or stream.over(await self.get_run(run_id)):
                    return
            except (httpx.TransportError, _Retryable) as error:
                await asyncio.sleep(self._reconnect_pause(stream, error))

    async def stream_all(
        self, *, parent_run_id: str | None = None, after: int | None = None
    ) -> AsyncIterator[StreamMessage]:
        """Every run's lifecycle events (the firehose), resuming after a dropped connection."""
        stream = self._core.firehose(parent_run_id, after)
        while True:
            try:
                async for message in self._follow(stream):
                    yield message
            except (httpx.TransportError, _Retryable) as error:
                await asyncio.sleep(self._reconnect_pause(stream, error))

    async def _follow(self, stream: _Stream) -> AsyncIterator[StreamMessage]:
        """One connection's messages, until the server closes it or a closing message arrives."""
        async with aconnect_sse(self._http, "GET", stream.path, **stream.connect_options()) as source:
            if source.response.is_error:
                await source.response.aread()
                _open_stream_refused(source.response)
            stream.resume.opened = True
            async for event in source.aiter_sse():
                message = stream.resume.take(event)
                if message is not None:
                    yield message
                    if stream.finished(message):
                        return
