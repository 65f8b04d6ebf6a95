"""The synchronous client, :class:`LastwordClient`: every request sent with blocking I/O.

A child's output is the exception to counting tries: a CLI's lines (``ingest_cli_stream``) and
a stream pusher's deltas are sent again after a lost connection or a 502/503/504 for
``retry_seconds`` of failures in a row, the CLI's lines always whole from the first
(:mod:`lastword.client.replay`), so a rolling restart of the service never changes a child's answer.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import httpx
from httpx_sse import connect_sse
from tenacity import Retrying

from lastword.client.answers import _Retryable, check
from lastword.client.bodies import CliLines, ProviderBody, TextPieces, _cli_line, _pieces, _sniff
from lastword.client.calls import _Call, _wire
from lastword.client.errors import LastwordAPIError
from lastword.client.polls import _Join, _Wait
from lastword.client.pusher import LINGER, MAX_EVENTS, Pusher
from lastword.client.replay import Replay
from lastword.client.stream_pusher import IDLE, ROLL_BYTES, ROLL_EVENTS, StreamPusher
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

__all__ = ["LastwordClient"]


T = TypeVar("T")


class LastwordClient(_Client[httpx.Client, httpx.BaseTransport]):
    """Synchronous client. Use as a context manager, or call :meth:`close`. Options: see
    :class:`_Client` (``transport`` an ``httpx.BaseTransport``)."""

    def _open(self, base_url: str, timeout: float, transport: httpx.BaseTransport | None) -> httpx.Client:
        return httpx.Client(base_url=base_url, headers=self._core.headers, timeout=timeout, transport=transport)

    def __enter__(self) -> LastwordClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call[T]) -> T:
        try:
            if not call.retriable:
                return call.answer(self._http.request(call.method, call.path, **call.options()))
            for attempt in Retrying(**self._core.retry_policy(call)):
                with attempt:
                    response = check(self._http.request(call.method, call.path, **call.options()))
        except _Retryable as spent:  # the retries are spent: the last answer is the refusal
            response = spent.response
        except httpx.TransportError as error:
            raise self._unreachable(error) from error
        return call.answer(response)

    def create_run(
        self, run_id: str | None = None, *, parent_run_id: str | None = None, agent: str | None = None,
        mode: str | None = None, metadata: Mapping[str, Any] | None = None, lease_seconds: float | None = None,
        fork_of: ForkOf | Mapping[str, Any] | None = None, selection: Selection | Mapping[str, Any] | None = None,
        webhook: WebhookSpec | Mapping[str, Any] | None = None,
    ) -> Run:
        """Create a run (a ``runId`` is chosen here when none is given, so a retry is safe).

        ``fork_of`` continues another run's history up to a ``seq`` (SPEC §12); ``selection``
        opts into variations of the selection rule; ``webhook`` delivers each ``subagent/end``
        to a URL (§14). Each is its wire model or the same fields as a mapping.
        """
        return self._send(self._core.create_run(run_id, {
            "parentRunId": parent_run_id, "agent": agent, "mode": mode, "metadata": metadata,
            "leaseSeconds": lease_seconds, "forkOf": _wire(fork_of), "selection": _wire(selection),
            "webhook": _wire(webhook)}))

    def get_run(self, run_id: str) -> Run:
        """The run with its current turn and status."""
        return self._send(self._core.get_run(run_id))

    def list_runs(
        self, *, parent_run_id: str | None = None, status: str | None = None, agent: str | None = None,
        stop_reason: str | None = None, include_result: bool = False, limit: int | None = None,
        cursor: str | None = None,
    ) -> RunList:
        """One page of runs, newest first, filtered; pass ``nextCursor`` as ``cursor`` for the next
        page (None on the last). ``include_result`` adds each run's latest turn (no output)."""
        filters = {"parentRunId": parent_run_id, "status": status, "agent": agent, "stopReason": stop_reason}
        return self._send(self._core.list_runs(filters, include_result, limit, cursor))

    def next_turn(self, run_id: str) -> Run:
        """Start the next turn of an idle continuable run. Not idempotent, so it is sent again
        only after a failure that says it was not carried out."""
        return self._send(self._core.next_turn(run_id))

    def close_run(self, run_id: str) -> Run:
        """Close a continuable run (an open turn ends ``cancelled`` first); closing again answers the run."""
        return self._send(self._core.close_run(run_id))

    def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> EventPage:
        """One page of the run's stored events after ``seq`` ``after``; ``nextAfter`` continues."""
        return self._send(self._core.events(run_id, after, limit))

    def messages(self, run_id: str, format: str, *, turn: int | None = None) -> TranscriptPage:
        """The run's history as a provider-safe transcript (``anthropic`` or ``openai``; SPEC §12)
        up to ``turn`` (default: the latest), with what was left out or added."""
        return self._send(self._core.messages(run_id, format, turn))

    def deliveries(self, run_id: str) -> DeliveryList:
        """The run's webhook deliveries and their attempts, oldest first."""
        return self._send(self._core.deliveries(run_id))

    def health(self) -> Health:
        """``/healthz``: the process answers."""
        return self._send(self._core.probe("/healthz"))

    def live(self) -> Health:
        """``/livez``: the process is not stuck."""
        return self._send(self._core.probe("/livez"))

    def ready(self) -> Health:
        """``/readyz``: the replica can serve (a 503 that outlasts the retries raises)."""
        return self._send(self._core.probe("/readyz"))

    def metrics(self) -> str:
        """``/metrics``: the Prometheus text exposition."""
        return self._send(self._core.metrics())

    def push_events(self, run_id: str, events: Iterable[Mapping[str, Any]]) -> AppendResult:
        """Append session events (each gets an ``eventId`` unless it has one)."""
        return self._send(self._core.push_events(run_id, events))

    def push_text(self, run_id: str, text: str, *, event_id: str | None = None) -> AppendResult:
        """Append bare chunk text."""
        return self._send(self._core.push_text(run_id, text, event_id))

    def push_text_stream(self, run_id: str, pieces: TextPieces) -> AppendResult:
        """Append bare text as one ``text/plain`` request, each piece written the moment the
        iterable yields it (a piece may end mid-word; the service splits nothing). Streamed once,
        so not retried, and without ``eventId``s: prefer :meth:`push_text` or a pusher where a
        retry must be safe."""
        if isinstance(pieces, AsyncIterable):
            raise TypeError("an async iterable needs AsyncLastwordClient.push_text_stream")
        return self._send(self._core.push_text_stream(run_id, (piece.encode() for piece in pieces)))

    def pusher(self, run_id: str, *, linger: float = LINGER, max_events: int = MAX_EVENTS) -> Pusher:
        """A streaming producer for ``run_id``: ``push_text``/``push_events`` queue, a request goes
        after ``linger`` seconds (or at ``max_events``), ``flush()``/``close()`` wait until durable
        (:mod:`lastword.client.pusher`). Use it as ``with``."""

        def send(events: list[dict[str, Any]]) -> AppendResult:
            return self._send(self._core.push_events(run_id, events))

        return Pusher(send, linger=linger, max_events=max_events)

    def stream_pusher(
        self, run_id: str, *, idle: float = IDLE, roll_events: int = ROLL_EVENTS, roll_bytes: int = ROLL_BYTES,
    ) -> StreamPusher:
        """A streaming producer for ``run_id`` over one long-lived NDJSON request: each pushed
        event is written at once; ``flush()``/``close()`` wait until durable
        (:mod:`lastword.client.stream_pusher`). Use it as ``with``."""

        def send(body: Iterator[bytes]) -> AppendResult:
            return self._send(self._core.push_ndjson(run_id, body))

        return StreamPusher(send, idle=idle, roll_events=roll_events, roll_bytes=roll_bytes,
                            retry_seconds=self._core.retry_seconds, backoff=self._core.backoff)

    def push_provider_stream(
        self, run_id: str, format: str, body_or_iterable: ProviderBody, *, end: bool = False,
        idempotency_key: str | None = None, content_type: str | None = None,
    ) -> IngestResult:
        """Store a provider's own stream (``anthropic``, ``openai-responses``, ``acp``; SPEC §13).

        A whole body (bytes or str) is retried on failure; an iterable is streamed once.
        """
        body = body_or_iterable.encode() if isinstance(body_or_iterable, str) else body_or_iterable
        if isinstance(body, AsyncIterable):
            raise TypeError("an async iterable needs AsyncLastwordClient.push_provider_stream")
        if isinstance(body, bytes):
            content: Any = body
            kind = _sniff(body)
        else:
            content, kind = _pieces(body)
        return self._send(self._core.push_provider_stream(run_id, format, content, content_type or kind, end,
                                                          idempotency_key))

    def ingest_cli_stream(self, run_id: str, format: str, lines: CliLines, *,
                          tool_use_id: str | None = None) -> IngestResult:
        """Store an agent CLI's standard output (``claude-code``, ``codex``, ``opencode``; SPEC §16)
        as one NDJSON request; the service stores each line as it arrives. A Claude Code
        transcript (``claude-code-transcript``, SPEC §19) goes the same way; a subagent's names
        the call that ran it (``tool_use_id``).

        Each line is written the moment the iterable yields it, and kept: after a lost
        connection or a 502/503/504 (a replica restarting or draining) a new request sends every
        line so far again from the first, then the rest, for ``retry_seconds`` of failures in a
        row. The service derives eventIds from the CLI's ids, so nothing is stored twice.
        """
        if isinstance(lines, AsyncIterable):
            raise TypeError("an async iterable needs AsyncLastwordClient.ingest_cli_stream")
        replay, window = Replay(map(_cli_line, lines)), self._core.retry_window()
        while True:
            started = time.monotonic()
            try:
                return self._send(self._core.ingest_cli_stream(run_id, format, replay.body(), tool_use_id))
            except (LastwordAPIError, httpx.TransportError) as error:
                wait = window.failed(error, started)
                if wait is None:
                    raise
            time.sleep(wait)

    def end(self, run_id: str, stop_reason: str, *, error: Any = None, cascade: bool = False) -> SubagentResult:
        """End the current turn; the same end again answers the same result."""
        return self._send(self._core.end(run_id, stop_reason, error, cascade))

    def result(self, run_id: str, *, turn: int | None = None, texts: bool = False) -> SubagentResult:
        """The turn's result as it stands now; ``texts``: with every text the assistant wrote in it."""
        return self._send(self._core.result(run_id, turn, texts=texts))

    def wait_result(self, run_id: str, *, timeout: float = 300.0, turn: int | None = None,
                    texts: bool = False) -> SubagentResult:
        """The turn's result once it has ended, or as it stands when ``timeout`` runs out
        (``texts``: with every text the assistant wrote in it).

        Without ``turn`` it is the turn current when this is called, however many polls it takes.
        """
        wait = _Wait(self._core, run_id, timeout, turn, texts)
        while True:
            result = self._send(wait.next_call())
            if wait.finished(result):
                return result

    def join(self, run_id: str, *, timeout: float = 300.0, any_child: bool = False, expect: int = 0) -> ChildrenJoin:
        """Every child's current turn once all have ended (``any_child``: the first), or as they
        stand when ``timeout`` runs out; ``done`` says which. With ``expect``, not done before at
        least that many children exist (join before the children register); without it, a run
        with no children is done at once."""
        join = _Join(self._core, run_id, timeout, any_child, expect)
        while True:
            joined = self._send(join.next_call())
            if join.finished(joined):
                return joined

    def tool_result(self, run_id: str, *, wait: float = 0.0, turn: int | None = None) -> ToolResult | None:
        """The parent model's tool result; ``None`` while the turn still runs."""
        return self._send(self._core.tool_result(run_id, turn, wait))

    def stream(self, run_id: str, *, include_chunks: bool = False, after: int | None = None) -> Iterator[StreamMessage]:
        """The run's SSE messages; reconnects with ``Last-Event-ID`` after a dropped connection
        (a server draining for its restart ends streams so, and refuses new ones with 503 and
        ``Retry-After`` until it is gone: both mean "reconnect", not the run's end).

        Ends when the run's stream ends (after ``subagent/end`` of a oneshot run, or
        ``run/closed``); nothing is lost or repeated across reconnects.
        """
        stream = self._core.run_stream(run_id, include_chunks, after)
        stream.mode = self.get_run(run_id).mode
        while True:
            try:
                yield from self._follow(stream)
                if stream.finished_by_message or stream.over(self.get_run(run_id)):
                    return
            except (httpx.TransportError, _Retryable) as error:
                time.sleep(self._reconnect_pause(stream, error))

    def stream_all(self, *, parent_run_id: str | None = None, after: int | None = None) -> Iterator[StreamMessage]:
        """Every run's lifecycle events (the firehose), resuming after a dropped connection."""
        stream = self._core.firehose(parent_run_id, after)
        while True:
            try:
                yield from self._follow(stream)
            except (httpx.TransportError, _Retryable) as error:
                time.sleep(self._reconnect_pause(stream, error))

    def _follow(self, stream: _Stream) -> Iterator[StreamMessage]:
        """One connection's messages, until the server closes it or a closing message arrives."""
        with connect_sse(self._http, "GET", stream.path, **stream.connect_options()) as source:
            if source.response.is_error:
                source.response.read()
                _open_stream_refused(source.response)
            stream.resume.opened = True
            for event in source.iter_sse():
                message = stream.resume.take(event)
                if message is not None:
                    yield message
                    if stream.finished(message):
                        return
