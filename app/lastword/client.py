"""Clients for parent agents and child runtimes: :class:`LastwordClient` and :class:`AsyncLastwordClient`.

Both share one core (:class:`_Core`) that builds requests, decodes answers, decides what to
retry and keeps streams resumable; the two classes only do the I/O. The transport is
injectable (``transport=``), as in httpx.

Retries are safe because nothing is ever sent twice under a new identity: events get an
``eventId`` before the first attempt (a retried batch is counted as duplicates, not stored
twice), runs get a ``runId`` before the first attempt (a retried create answers 200 with the
same run), and ending a turn is idempotent on the server.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import orjson
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse
from pydantic import BaseModel
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from lastword.ids import new_run_id
from lastword.schemas import AppendResult, IngestResult, Run, SubagentResult, ToolResult

__all__ = [
    "AsyncLastwordClient",
    "LastwordAPIError",
    "LastwordClient",
    "StreamMessage",
]

M = TypeVar("M", bound=BaseModel)

RETRIED_STATUSES = frozenset({429, 502, 503, 504})
#: Streams wait for their next message as long as it takes (keep-alives arrive meanwhile).
STREAM_TIMEOUT = httpx.Timeout(30.0, read=None)
CLOSING_EVENTS = frozenset({"run/closed"})


class LastwordAPIError(Exception):
    """The service answered with a problem document (or another non-2xx answer)."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        self.status = status
        self.problem = dict(problem)
        self.code = str(problem.get("code", "http_error"))
        super().__init__(f"{status} {self.code}: {problem.get('detail', '')}")


class _Retryable(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"{response.status_code} from {response.request.url}")
        self.response = response


@dataclass(frozen=True, slots=True)
class StreamMessage:
    """One SSE message: ``id`` resumes the stream, ``event`` is its type, ``data`` its body."""

    id: int
    event: str
    data: dict[str, Any]


#: What ``push_provider_stream`` takes: a whole body (bytes or str, sent as is and retried on
#: failure), or an iterable of provider events (dicts or SDK models, sent as NDJSON) or of raw
#: body pieces (bytes, e.g. a provider response's ``iter_bytes()``), streamed and not retried.
ProviderBody = bytes | str | Iterable[Any]
AsyncProviderBody = bytes | str | Iterable[Any] | AsyncIterable[Any]


def _event_json(event: Any) -> bytes:
    """One provider event as NDJSON: a dict, or an SDK model serialised as its SDK does."""
    if hasattr(event, "to_dict"):  # the anthropic and openai SDKs' models
        event = event.to_dict()
    elif isinstance(event, BaseModel):  # e.g. agent-client-protocol's schema models
        event = event.model_dump(mode="json", by_alias=True, exclude_none=True)
    return orjson.dumps(event) + b"\n"


def _sniff(body: bytes) -> str:
    """The content type of a whole body: a JSON array, NDJSON, or (otherwise) SSE."""
    head = body.lstrip()[:1]
    return {b"[": "application/json", b"{": "application/x-ndjson"}.get(head, "text/event-stream")


class _Core:
    def __init__(self, token: str | None, retries: int, backoff: float) -> None:
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.retries = retries
        self.backoff = backoff

    def retry_policy(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.retries + 1),
            "wait": wait_random_exponential(multiplier=self.backoff, max=5.0),
            "retry": retry_if_exception(lambda e: isinstance(e, (httpx.TransportError, _Retryable))),
            "reraise": True,
        }

    @staticmethod
    def with_event_ids(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Copies of the events, each with an ``eventId`` (kept when it has one)."""
        return [
            dict(event) if event.get("eventId") else {**event, "eventId": uuid.uuid4().hex}
            for event in events
        ]

    def provider_request(
        self, run_id: str, format: str, end: bool, idempotency_key: str | None, content_type: str | None
    ) -> tuple[str, dict[str, Any], dict[str, str]]:
        """The path, query and headers of an ingest of a provider stream.

        An ACP stream has no ids of its own, so it gets an ``Idempotency-Key`` before the first
        attempt, as events get ``eventId``s: a retried body is then counted as duplicates.
        """
        headers = {} if content_type is None else {"content-type": content_type}
        if idempotency_key is None and format == "acp":
            idempotency_key = uuid.uuid4().hex
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return f"/v1/runs/{run_id}/ingest/{format}", {"end": "true" if end else "false"}, headers

    @staticmethod
    def create_body(run_id: str | None, fields: Mapping[str, Any]) -> dict[str, Any]:
        body = {key: value for key, value in fields.items() if value is not None}
        body["runId"] = run_id or new_run_id()
        return body

    @staticmethod
    def check(response: httpx.Response) -> httpx.Response:
        if response.status_code in RETRIED_STATUSES:
            raise _Retryable(response)
        return response

    @staticmethod
    def decode(response: httpx.Response, model: type[M]) -> M:
        if response.is_error:
            try:
                problem = response.json()
            except ValueError:
                problem = {"detail": response.text}
            raise LastwordAPIError(response.status_code, problem)
        return model.model_validate(response.json())

    @staticmethod
    def stream_params(include_chunks: bool) -> dict[str, str]:
        return {"include": "chunks"} if include_chunks else {}

    @staticmethod
    def message(event: ServerSentEvent) -> StreamMessage | None:
        if not event.id:
            return None
        return StreamMessage(int(event.id), event.event, orjson.loads(event.data) if event.data else {})

    @staticmethod
    def finished(message: StreamMessage, oneshot: bool) -> bool:
        return message.event in CLOSING_EVENTS or (oneshot and message.event == "subagent/end")


class _Resume:
    """Where a stream stands, so that a reconnect continues right after the last message."""

    def __init__(self, after: int | None, retries: int, backoff: float) -> None:
        self.last = after
        self._failures = 0
        self._retries = retries
        self._backoff = backoff

    def headers(self) -> dict[str, str]:
        return {"Last-Event-ID": str(self.last)} if self.last is not None else {}

    def take(self, event: ServerSentEvent) -> StreamMessage | None:
        """The message an SSE event carries; None for one without an id (``server/reconnect``)."""
        message = _Core.message(event)
        if message is not None:
            self._failures = 0
            self.last = message.id
        return message

    def failed(self, error: Exception) -> float:
        """The pause before reconnecting after ``error``; re-raises it once retries are spent."""
        self._failures += 1
        if self._failures > self._retries:
            raise error
        return min(5.0, self._backoff * 2.0**self._failures)


def _raise_for_stream(response: httpx.Response) -> None:
    if response.is_error:
        response.read()
        _Core.decode(response, Run)


class LastwordClient:
    """Synchronous client. Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        retries: int = 5,
        backoff: float = 0.2,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._core = _Core(token, retries, backoff)
        self._http = httpx.Client(base_url=base_url, headers=self._core.headers, timeout=timeout, transport=transport)

    def __enter__(self) -> LastwordClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for attempt in Retrying(**self._core.retry_policy()):
            with attempt:
                return self._core.check(self._http.request(method, path, **kwargs))
        raise AssertionError("unreachable")  # pragma: no cover

    def create_run(
        self, run_id: str | None = None, *, parent_run_id: str | None = None, agent: str | None = None,
        mode: str | None = None, metadata: Mapping[str, Any] | None = None, lease_seconds: float | None = None,
    ) -> Run:
        body = self._core.create_body(run_id, {"parentRunId": parent_run_id, "agent": agent, "mode": mode,
                                                "metadata": metadata, "leaseSeconds": lease_seconds})
        return self._core.decode(self._request("POST", "/v1/runs", json=body), Run)

    def get_run(self, run_id: str) -> Run:
        return self._core.decode(self._request("GET", f"/v1/runs/{run_id}"), Run)

    def push_events(self, run_id: str, events: Iterable[Mapping[str, Any]]) -> AppendResult:
        batch = self._core.with_event_ids(events)
        return self._core.decode(self._request("POST", f"/v1/runs/{run_id}/events", json=batch), AppendResult)

    def push_text(self, run_id: str, text: str, *, event_id: str | None = None) -> AppendResult:
        body = {"text": text, "eventId": event_id or uuid.uuid4().hex}
        return self._core.decode(self._request("POST", f"/v1/runs/{run_id}/chunks", json=body), AppendResult)

    def push_provider_stream(
        self, run_id: str, format: str, body_or_iterable: ProviderBody, *, end: bool = False,
        idempotency_key: str | None = None, content_type: str | None = None,
    ) -> IngestResult:
        """Store a provider's own stream (``anthropic``, ``openai-responses``, ``acp``; SPEC §13).

        A whole body (bytes or str) is retried on failure; an iterable is streamed once.
        """
        body = body_or_iterable.encode() if isinstance(body_or_iterable, str) else body_or_iterable
        if isinstance(body, bytes):
            path, params, headers = self._core.provider_request(
                run_id, format, end, idempotency_key, content_type or _sniff(body))
            return self._core.decode(self._request("POST", path, params=params, content=body, headers=headers),
                                     IngestResult)
        pieces, kind = _pieces(body)
        path, params, headers = self._core.provider_request(run_id, format, end, idempotency_key, content_type or kind)
        response = self._http.post(path, params=params, content=pieces, headers=headers)
        return self._core.decode(response, IngestResult)

    def end(self, run_id: str, stop_reason: str, *, error: Any = None, cascade: bool = False) -> SubagentResult:
        body: dict[str, Any] = {"stopReason": stop_reason, "cascade": cascade}
        if error is not None:
            body["error"] = error
        return self._core.decode(self._request("POST", f"/v1/runs/{run_id}/end", json=body), SubagentResult)

    def result(self, run_id: str, *, turn: int | None = None) -> SubagentResult:
        params = {"turn": turn} if turn else {}
        return self._core.decode(self._request("GET", f"/v1/runs/{run_id}/result", params=params), SubagentResult)

    def wait_result(self, run_id: str, *, timeout: float = 300.0, turn: int | None = None) -> SubagentResult:
        """The turn's result once it has ended, or as it stands when ``timeout`` runs out."""
        deadline = time.monotonic() + timeout
        while True:
            wait = max(0.0, min(60.0, deadline - time.monotonic()))
            params: dict[str, Any] = {"wait": wait, **({"turn": turn} if turn else {})}
            response = self._request("GET", f"/v1/runs/{run_id}/result", params=params,
                                     timeout=wait + self._http.timeout.read if self._http.timeout.read else None)
            result = self._core.decode(response, SubagentResult)
            if result.status == "ended" or wait <= 0:
                return result

    def tool_result(self, run_id: str, *, wait: float = 0.0, turn: int | None = None) -> ToolResult | None:
        """The parent model's tool result; ``None`` while the turn still runs."""
        params: dict[str, Any] = {"wait": wait, **({"turn": turn} if turn else {})}
        response = self._request("GET", f"/v1/runs/{run_id}/tool-result", params=params,
                                 timeout=wait + 30)
        if response.status_code == 202:
            return None
        return self._core.decode(response, ToolResult)

    def stream(self, run_id: str, *, include_chunks: bool = False, after: int | None = None) -> Iterator[StreamMessage]:
        """The run's SSE messages; reconnects with ``Last-Event-ID`` after a dropped connection.

        Ends when the run's stream ends (after ``subagent/end`` of a oneshot run, or
        ``run/closed``); nothing is lost or repeated across reconnects.
        """
        oneshot = self.get_run(run_id).mode == "oneshot"
        resume = _Resume(after, self._core.retries, self._core.backoff)
        while True:
            try:
                with connect_sse(self._http, "GET", f"/v1/runs/{run_id}/stream",
                                 params=self._core.stream_params(include_chunks), headers=resume.headers(),
                                 timeout=STREAM_TIMEOUT) as source:
                    _raise_for_stream(source.response)
                    for event in source.iter_sse():
                        message = resume.take(event)
                        if message is not None:
                            yield message
                            if self._core.finished(message, oneshot):
                                return
                if resume.last is not None and self.get_run(run_id).status == "ended":
                    return  # the server closed a stream that had nothing more to say
            except httpx.TransportError as error:
                time.sleep(resume.failed(error))

    def stream_all(self, *, parent_run_id: str | None = None, after: int | None = None) -> Iterator[StreamMessage]:
        """Every run's lifecycle events (the firehose), resuming after a dropped connection."""
        resume = _Resume(after, self._core.retries, self._core.backoff)
        params = {"parentRunId": parent_run_id} if parent_run_id else {}
        while True:
            try:
                with connect_sse(self._http, "GET", "/v1/stream", params=params, headers=resume.headers(),
                                 timeout=STREAM_TIMEOUT) as source:
                    _raise_for_stream(source.response)
                    for event in source.iter_sse():
                        message = resume.take(event)
                        if message is not None:
                            yield message
            except httpx.TransportError as error:
                time.sleep(resume.failed(error))


class AsyncLastwordClient:
    """Asynchronous client with the same methods as :class:`LastwordClient`, awaited."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        retries: int = 5,
        backoff: float = 0.2,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._core = _Core(token, retries, backoff)
        self._http = httpx.AsyncClient(base_url=base_url, headers=self._core.headers, timeout=timeout,
                                       transport=transport)

    async def __aenter__(self) -> AsyncLastwordClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async for attempt in AsyncRetrying(**self._core.retry_policy()):
            with attempt:
                return self._core.check(await self._http.request(method, path, **kwargs))
        raise AssertionError("unreachable")  # pragma: no cover

    async def create_run(
        self, run_id: str | None = None, *, parent_run_id: str | None = None, agent: str | None = None,
        mode: str | None = None, metadata: Mapping[str, Any] | None = None, lease_seconds: float | None = None,
    ) -> Run:
        body = self._core.create_body(run_id, {"parentRunId": parent_run_id, "agent": agent, "mode": mode,
                                                "metadata": metadata, "leaseSeconds": lease_seconds})
        return self._core.decode(await self._request("POST", "/v1/runs", json=body), Run)

    async def get_run(self, run_id: str) -> Run:
        return self._core.decode(await self._request("GET", f"/v1/runs/{run_id}"), Run)

    async def push_events(self, run_id: str, events: Iterable[Mapping[str, Any]]) -> AppendResult:
        batch = self._core.with_event_ids(events)
        return self._core.decode(await self._request("POST", f"/v1/runs/{run_id}/events", json=batch), AppendResult)

    async def push_text(self, run_id: str, text: str, *, event_id: str | None = None) -> AppendResult:
        body = {"text": text, "eventId": event_id or uuid.uuid4().hex}
        return self._core.decode(await self._request("POST", f"/v1/runs/{run_id}/chunks", json=body), AppendResult)

    async def push_provider_stream(
        self, run_id: str, format: str, body_or_iterable: AsyncProviderBody, *, end: bool = False,
        idempotency_key: str | None = None, content_type: str | None = None,
    ) -> IngestResult:
        """Store a provider's own stream (SPEC §13); an async iterable is streamed as it yields."""
        body = body_or_iterable.encode() if isinstance(body_or_iterable, str) else body_or_iterable
        if isinstance(body, bytes):
            path, params, headers = self._core.provider_request(
                run_id, format, end, idempotency_key, content_type or _sniff(body))
            return self._core.decode(await self._request("POST", path, params=params, content=body, headers=headers),
                                     IngestResult)
        if isinstance(body, AsyncIterable):
            pieces, kind = await _apieces(body)
        else:
            sync_pieces, kind = _pieces(body)
            pieces = _async_of(sync_pieces)
        path, params, headers = self._core.provider_request(run_id, format, end, idempotency_key, content_type or kind)
        response = await self._http.post(path, params=params, content=pieces, headers=headers)
        return self._core.decode(response, IngestResult)

    async def end(self, run_id: str, stop_reason: str, *, error: Any = None, cascade: bool = False) -> SubagentResult:
        body: dict[str, Any] = {"stopReason": stop_reason, "cascade": cascade}
        if error is not None:
            body["error"] = error
        return self._core.decode(await self._request("POST", f"/v1/runs/{run_id}/end", json=body), SubagentResult)

    async def result(self, run_id: str, *, turn: int | None = None) -> SubagentResult:
        params = {"turn": turn} if turn else {}
        return self._core.decode(await self._request("GET", f"/v1/runs/{run_id}/result", params=params),
                                 SubagentResult)

    async def wait_result(self, run_id: str, *, timeout: float = 300.0, turn: int | None = None) -> SubagentResult:
        deadline = time.monotonic() + timeout
        while True:
            wait = max(0.0, min(60.0, deadline - time.monotonic()))
            params: dict[str, Any] = {"wait": wait, **({"turn": turn} if turn else {})}
            response = await self._request("GET", f"/v1/runs/{run_id}/result", params=params, timeout=wait + 30)
            result = self._core.decode(response, SubagentResult)
            if result.status == "ended" or wait <= 0:
                return result

    async def tool_result(self, run_id: str, *, wait: float = 0.0, turn: int | None = None) -> ToolResult | None:
        params: dict[str, Any] = {"wait": wait, **({"turn": turn} if turn else {})}
        response = await self._request("GET", f"/v1/runs/{run_id}/tool-result", params=params, timeout=wait + 30)
        if response.status_code == 202:
            return None
        return self._core.decode(response, ToolResult)

    async def stream(
        self, run_id: str, *, include_chunks: bool = False, after: int | None = None
    ) -> AsyncIterator[StreamMessage]:
        oneshot = (await self.get_run(run_id)).mode == "oneshot"
        resume = _Resume(after, self._core.retries, self._core.backoff)
        while True:
            try:
                async with aconnect_sse(self._http, "GET", f"/v1/runs/{run_id}/stream",
                                        params=self._core.stream_params(include_chunks), headers=resume.headers(),
                                        timeout=STREAM_TIMEOUT) as source:
                    if source.response.is_error:
                        await source.response.aread()
                        self._core.decode(source.response, Run)
                    async for event in source.aiter_sse():
                        message = resume.take(event)
                        if message is not None:
                            yield message
                            if self._core.finished(message, oneshot):
                                return
                if resume.last is not None and (await self.get_run(run_id)).status == "ended":
                    return
            except httpx.TransportError as error:
                await asyncio.sleep(resume.failed(error))


def _encode(item: Any) -> bytes:
    return item if isinstance(item, bytes) else item.encode() if isinstance(item, str) else _event_json(item)


def _pieces(items: Iterable[Any]) -> tuple[Iterator[bytes], str]:
    """The body pieces of an iterable, and its content type (taken from its first item)."""
    iterator = iter(items)
    first = next(iterator, None)
    kind = "text/event-stream" if isinstance(first, (bytes, str)) else "application/x-ndjson"

    def pieces() -> Iterator[bytes]:
        if first is not None:
            yield _encode(first)
        for item in iterator:
            yield _encode(item)

    return pieces(), kind


async def _apieces(items: AsyncIterable[Any]) -> tuple[AsyncIterator[bytes], str]:
    iterator = aiter(items)
    first = await anext(iterator, None)
    kind = "text/event-stream" if isinstance(first, (bytes, str)) else "application/x-ndjson"

    async def pieces() -> AsyncIterator[bytes]:
        if first is not None:
            yield _encode(first)
        async for item in iterator:
            yield _encode(item)

    return pieces(), kind


async def _async_of(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece
