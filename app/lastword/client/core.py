"""Clients for parent agents and child runtimes: :class:`LastwordClient` and :class:`AsyncLastwordClient`.

Both share one core (:class:`_Core`): every method's request is a :class:`_Call` the core
builds, with the function that decodes its answer; the long polls of ``wait_result`` and
``join`` are a :class:`_Wait` and a :class:`_Join` and a stream's resume bookkeeping a
:class:`_Resume`, all beside the core. The two
classes only send and receive, one with blocking I/O and one awaiting it, so they cannot drift
apart (a test compares their public methods), and every operation of the REST API has a
method (``tests/test_client_coverage.py`` walks ``openapi/openapi.json``). The transport is
injectable (``transport=``), as in httpx.

Retries are safe because nothing is ever sent twice under a new identity: events get an
``eventId`` before the first attempt (a retried batch is counted as duplicates, not stored
twice), runs get a ``runId`` before the first attempt (a retried create answers 200 with the
same run), and ending a turn and closing a run are idempotent on the server. Starting a turn is
not: ``next_turn`` is a ``_Call`` with ``once``, sent again only when it surely was not carried
out. What is retried and how long each pause is comes from :mod:`lastword.client.retry`.

A child's output is the exception to counting tries: a CLI's lines (``ingest_cli_stream``) and
a stream pusher's deltas are sent again after a lost connection or a 502/503/504 for
``retry_seconds`` of failures in a row, the CLI's lines always whole from the first
(:mod:`lastword.client.replay`), so a rolling restart of the service never changes a child's answer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
import orjson
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse
from pydantic import BaseModel
from tenacity import AsyncRetrying, Retrying, RetryCallState, retry_if_exception, stop_after_attempt

from lastword.client import retry
from lastword.client.pusher import LINGER, MAX_EVENTS, AsyncPusher, Pusher, with_event_ids
from lastword.client.replay import AsyncReplay, Replay
from lastword.client.errors import LastwordAPIError, LastwordConnectionError, LastwordError
from lastword.client.retry import RETRIED_STATUSES, RETRY_SECONDS, RetryWindow
from lastword.client.stream_pusher import IDLE, ROLL_BYTES, ROLL_EVENTS, AsyncStreamPusher, StreamPusher
from lastword.rules.ids import new_run_id
from lastword.rules.lifecycle import closes_run_stream
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

__all__ = [
    "AsyncLastwordClient",
    "LastwordAPIError",
    "LastwordClient",
    "LastwordConnectionError",
    "LastwordError",
    "StreamMessage",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

#: Streams wait for their next message as long as it takes (keep-alives arrive meanwhile).
STREAM_TIMEOUT = httpx.Timeout(30.0, read=None)
#: ``wait_result`` asks for at most this long per request, so a connection that died silently
#: is noticed within a minute, whatever the caller's ``timeout``.
WAIT_PER_REQUEST = 60.0


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


@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
    """One request and how to read its answer: what both clients send for one method."""

    method: str
    path: str
    answer: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    #: A raw body (bytes, or an iterable of pieces streamed once) and its headers.
    content: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    #: The request's time-out; None: the client's own.
    timeout: float | None = None
    #: Not idempotent: sent again only when it surely was not carried out (the connection was
    #: never made, or the service answered 429 or 503 before doing anything).
    once: bool = False

    @property
    def retriable(self) -> bool:
        """A streamed body cannot be sent twice."""
        return self.content is None or isinstance(self.content, bytes)

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"params": self.params}
        if self.json is not None:
            options["json"] = self.json
        if self.content is not None:
            options["content"] = self.content
        if self.headers:
            options["headers"] = self.headers
        if self.timeout is not None:
            options["timeout"] = self.timeout
        return options


#: What ``ingest_cli_stream`` takes: an agent CLI's standard output as lines (str or bytes, with
#: or without their newline), each line written as the iterable yields it (the async client also
#: takes async iterables); after a failure the lines so far are sent again, then the rest.
CliLines = Iterable[str | bytes] | AsyncIterable[str | bytes]
#: What ``push_text_stream`` takes: pieces of text, written into one request as they come.
TextPieces = Iterable[str] | AsyncIterable[str]


async def _atext_body(pieces: AsyncIterable[str]) -> AsyncIterator[bytes]:
    async for piece in pieces:
        yield piece.encode()


def _cli_line(line: str | bytes) -> bytes:
    """One line of a CLI's output as NDJSON: bytes ending with a newline."""
    data = line.encode() if isinstance(line, str) else line
    return data if data.endswith(b"\n") else data + b"\n"


async def _acli_lines(lines: AsyncIterable[str | bytes]) -> AsyncIterator[bytes]:
    async for line in lines:
        yield _cli_line(line)


#: What ``push_provider_stream`` takes: a whole body (bytes or str, sent as is and retried on
#: failure), or an iterable of provider events (dicts or SDK models, sent as NDJSON) or of raw
#: body pieces (bytes, e.g. a provider response's ``iter_bytes()``), streamed once; the async
#: client also takes async iterables of either.
ProviderBody = bytes | str | Iterable[Any] | AsyncIterable[Any]


def _event_json(event: Any) -> bytes:
    """One provider event as NDJSON: a dict, or an SDK model serialised as its SDK does."""
    if hasattr(event, "to_dict"):  # the anthropic and openai SDKs' models
        event = event.to_dict()
    elif isinstance(event, BaseModel):  # e.g. agent-client-protocol's schema models
        event = event.model_dump(mode="json", by_alias=True, exclude_none=True)
    return orjson.dumps(event) + b"\n"


def _encode(item: Any) -> bytes:
    return item if isinstance(item, bytes) else item.encode() if isinstance(item, str) else _event_json(item)


def _sniff(body: bytes) -> str:
    """The content type of a whole body: a JSON array, NDJSON, or (otherwise) SSE."""
    head = body.lstrip()[:1]
    return {b"[": "application/json", b"{": "application/x-ndjson"}.get(head, "text/event-stream")


def _kind_of(first: Any) -> str:
    """An iterable's content type, from its first item: raw pieces are SSE, events NDJSON."""
    return "text/event-stream" if isinstance(first, (bytes, str)) else "application/x-ndjson"


def _pieces(items: Iterable[Any]) -> tuple[Iterator[bytes], str]:
    iterator = iter(items)
    first = next(iterator, None)

    def pieces() -> Iterator[bytes]:
        if first is not None:
            yield _encode(first)
        for item in iterator:
            yield _encode(item)

    return pieces(), _kind_of(first)


async def _apieces(items: AsyncIterable[Any]) -> tuple[AsyncIterator[bytes], str]:
    iterator = aiter(items)
    first = await anext(iterator, None)

    async def pieces() -> AsyncIterator[bytes]:
        if first is not None:
            yield _encode(first)
        async for item in iterator:
            yield _encode(item)

    return pieces(), _kind_of(first)


async def _async_of(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def check(response: httpx.Response) -> httpx.Response:
    """``response``, unless its status asks for another try (then raised as :class:`_Retryable`)."""
    if response.status_code in RETRIED_STATUSES:
        raise _Retryable(response)
    return response


def raise_for_problem(response: httpx.Response) -> None:
    """Raise a non-2xx answer as :class:`LastwordAPIError` (its problem document, or its text)."""
    if response.is_error:
        try:
            problem = response.json()
        except ValueError:
            problem = None
        if not isinstance(problem, dict):
            problem = {"detail": response.text}
        raise LastwordAPIError(response.status_code, problem)


def decode(response: httpx.Response, model: type[M]) -> M:
    """A 2xx answer's body as ``model``; a refusal raised."""
    raise_for_problem(response)
    return model.model_validate(response.json())


def _decoder(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: decode(response, model)


def _tool_result_or_none(response: httpx.Response) -> ToolResult | None:
    return None if response.status_code == 202 else decode(response, ToolResult)


def _turn_params(turn: int | None) -> dict[str, Any]:
    return {"turn": turn} if turn else {}


def _text(response: httpx.Response) -> str:
    raise_for_problem(response)
    return response.text


def _retried(error: BaseException) -> bool:
    return isinstance(error, (httpx.TransportError, _Retryable))


def _not_carried_out(error: BaseException) -> bool:
    """For a request that must not be carried out twice: only failures that say it was not."""
    if isinstance(error, _Retryable):
        return error.response.status_code in (429, 503)
    return isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))


def _wire(option: BaseModel | Mapping[str, Any] | None) -> Any:
    """``create_run``'s ``fork_of``, ``selection`` or ``webhook`` as sent: the wire model, or its
    fields as a mapping (camelCase, as on the wire)."""
    if isinstance(option, BaseModel):
        return option.model_dump(mode="json", exclude_none=True)
    return None if option is None else dict(option)


def _query(**params: Any) -> dict[str, Any]:
    """Query parameters without the ones not given."""
    return {key: value for key, value in params.items() if value is not None}


class _Core:
    """Everything the two clients share: requests, answers, retries, time-outs."""

    def __init__(
        self, token: str | None, retries: int, backoff: float, timeout: float, reconnects: int | None,
        retry_seconds: float,
    ) -> None:
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self.reconnects = retries if reconnects is None else reconnects
        self.retry_seconds = retry_seconds

    def retry_window(self) -> RetryWindow:
        """How long a child's output is sent again (see the module's docstring)."""
        return RetryWindow(self.retry_seconds, self.backoff)

    def retry_policy(self, call: _Call[Any]) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.retries + 1),
            "wait": self._pause,
            "retry": retry_if_exception(_not_carried_out if call.once else _retried),
            "reraise": True,
        }

    def _pause(self, state: RetryCallState) -> float:
        return retry.pause(self.backoff, state.attempt_number)

    def long_poll_timeout(self, wait: float) -> float:
        """A request the server may hold ``wait`` seconds gets that long plus the usual time-out."""
        return wait + self.timeout

    # The requests, one per public method.

    def create_run(self, run_id: str | None, fields: Mapping[str, Any]) -> _Call[Run]:
        body = {key: value for key, value in fields.items() if value is not None}
        body["runId"] = run_id or new_run_id()  # chosen before the first attempt: retries are safe
        return _Call("POST", "/v1/runs", _decoder(Run), json=body)

    def get_run(self, run_id: str) -> _Call[Run]:
        return _Call("GET", f"/v1/runs/{run_id}", _decoder(Run))

    def list_runs(self, filters: Mapping[str, Any], include_result: bool, limit: int | None,
                  cursor: str | None) -> _Call[RunList]:
        params = _query(**filters, limit=limit, cursor=cursor, include="result" if include_result else None)
        return _Call("GET", "/v1/runs", _decoder(RunList), params=params)

    def next_turn(self, run_id: str) -> _Call[Run]:
        # Not idempotent: a second start after a lost answer would be refused (the run is running).
        return _Call("POST", f"/v1/runs/{run_id}/turns", _decoder(Run), once=True)

    def close_run(self, run_id: str) -> _Call[Run]:
        return _Call("POST", f"/v1/runs/{run_id}/close", _decoder(Run))

    def events(self, run_id: str, after: int, limit: int | None) -> _Call[EventPage]:
        return _Call("GET", f"/v1/runs/{run_id}/events", _decoder(EventPage), params=_query(after=after, limit=limit))

    def messages(self, run_id: str, format: str, turn: int | None) -> _Call[TranscriptPage]:
        return _Call("GET", f"/v1/runs/{run_id}/messages", _decoder(TranscriptPage),
                     params={"format": format, **_turn_params(turn)})

    def deliveries(self, run_id: str) -> _Call[DeliveryList]:
        return _Call("GET", f"/v1/runs/{run_id}/deliveries", _decoder(DeliveryList))

    def probe(self, path: str) -> _Call[Health]:
        return _Call("GET", path, _decoder(Health))

    def metrics(self) -> _Call[str]:
        return _Call("GET", "/metrics", _text)

    def push_events(self, run_id: str, events: Iterable[Mapping[str, Any]]) -> _Call[AppendResult]:
        return _Call("POST", f"/v1/runs/{run_id}/events", _decoder(AppendResult), json=with_event_ids(events))

    def push_ndjson(self, run_id: str, body: Any) -> _Call[AppendResult]:
        """Events as NDJSON lines from ``body`` (an iterable of pieces, streamed once)."""
        return _Call("POST", f"/v1/runs/{run_id}/events", _decoder(AppendResult), content=body,
                     headers={"content-type": "application/x-ndjson"})

    def push_text(self, run_id: str, text: str, event_id: str | None) -> _Call[AppendResult]:
        body = {"text": text, "eventId": event_id or uuid.uuid4().hex}
        return _Call("POST", f"/v1/runs/{run_id}/chunks", _decoder(AppendResult), json=body)

    def push_text_stream(self, run_id: str, body: Any) -> _Call[AppendResult]:
        """Bare text as one ``text/plain`` request, written piece by piece (streamed once)."""
        return _Call("POST", f"/v1/runs/{run_id}/chunks", _decoder(AppendResult), content=body,
                     headers={"content-type": "text/plain; charset=utf-8"})

    def end(self, run_id: str, stop_reason: str, error: Any, cascade: bool) -> _Call[SubagentResult]:
        body: dict[str, Any] = {"stopReason": stop_reason, "cascade": cascade}
        if error is not None:
            body["error"] = error
        return _Call("POST", f"/v1/runs/{run_id}/end", _decoder(SubagentResult), json=body)

    def result(self, run_id: str, turn: int | None, wait: float | None = None,
               texts: bool = False) -> _Call[SubagentResult]:
        params: dict[str, Any] = {**_turn_params(turn), **({"include": "texts"} if texts else {})}
        if wait is None:
            return _Call("GET", f"/v1/runs/{run_id}/result", _decoder(SubagentResult), params=params)
        return _Call("GET", f"/v1/runs/{run_id}/result", _decoder(SubagentResult),
                     params={"wait": wait, **params}, timeout=self.long_poll_timeout(wait))

    def tool_result(self, run_id: str, turn: int | None, wait: float) -> _Call[ToolResult | None]:
        params: dict[str, Any] = {"wait": wait, **_turn_params(turn)}
        return _Call("GET", f"/v1/runs/{run_id}/tool-result", _tool_result_or_none, params=params,
                     timeout=self.long_poll_timeout(wait))

    def push_provider_stream(
        self, run_id: str, format: str, body: Any, kind: str, end: bool, idempotency_key: str | None
    ) -> _Call[IngestResult]:
        """An ingest of a provider's own stream (SPEC §13); ``body`` is bytes or pieces.

        An ACP stream has no ids of its own, so it gets an ``Idempotency-Key`` before the first
        attempt, as events get ``eventId``s: a retried body is then counted as duplicates.
        """
        headers = {"content-type": kind}
        if idempotency_key is None and format == "acp":
            idempotency_key = uuid.uuid4().hex
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return _Call("POST", f"/v1/runs/{run_id}/ingest/{format}", _decoder(IngestResult),
                     params={"end": "true" if end else "false"}, content=body, headers=headers)

    def ingest_cli_stream(self, run_id: str, format: str, body: Any, tool_use_id: str | None = None) -> _Call[IngestResult]:
        """An agent CLI's standard output (SPEC §16), or a transcript (§19; ``tool_use_id``: the
        call that ran the subagent whose transcript it is); ``body`` is bytes or pieces. Its lines
        carry the CLI's own ids, from which the service derives ``eventId``s: a body sent again
        from its first line stores nothing twice, so no ``Idempotency-Key`` is needed."""
        params = {"toolUseId": tool_use_id} if tool_use_id else {}
        return _Call("POST", f"/v1/runs/{run_id}/ingest/{format}", _decoder(IngestResult), content=body,
                     headers={"content-type": "application/x-ndjson"}, params=params)

    def join(self, run_id: str, wait: float, any_child: bool, expect: int) -> _Call[ChildrenJoin]:
        params: dict[str, float | int | str] = {"wait": wait, "any": "true" if any_child else "false"}
        if expect:
            params["expect"] = expect
        return _Call("GET", f"/v1/runs/{run_id}/children", _decoder(ChildrenJoin), params=params,
                     timeout=self.long_poll_timeout(wait))

    # Streams.

    def run_stream(self, run_id: str, include_chunks: bool, after: int | None) -> _Stream:
        params = {"include": "chunks"} if include_chunks else {}
        return _Stream(f"/v1/runs/{run_id}/stream", params, self._resume(after))

    def firehose(self, parent_run_id: str | None, after: int | None) -> _Stream:
        params = {"parentRunId": parent_run_id} if parent_run_id else {}
        return _Stream("/v1/stream", params, self._resume(after))

    def _resume(self, after: int | None) -> _Resume:
        return _Resume(after, self.retries, self.reconnects, self.backoff)


class _Wait:
    """The long poll of ``wait_result``: one request after another until the turn ends or the
    caller's time runs out, each asking the server to hold it up to ``WAIT_PER_REQUEST``."""

    def __init__(self, core: _Core, run_id: str, timeout: float, turn: int | None, texts: bool = False) -> None:
        self._core = core
        self._run_id = run_id
        self._deadline = time.monotonic() + timeout
        self._turn = turn
        self._texts = texts
        self._wait = 0.0

    def next_call(self) -> _Call[SubagentResult]:
        self._wait = max(0.0, min(WAIT_PER_REQUEST, self._deadline - time.monotonic()))
        return self._core.result(self._run_id, self._turn, self._wait, self._texts)

    def finished(self, result: SubagentResult) -> bool:
        # Without a turn asked for, the next polls ask for the turn the first answer was about:
        # a continuable run's next turn must not replace the one the caller is waiting for.
        if self._turn is None:
            self._turn = result.turn
        return result.status == "ended" or self._wait <= 0


class _Join:
    """The long poll of ``join``: one request after another until the children are done or the
    caller's time runs out, each asking the server to hold it up to ``WAIT_PER_REQUEST``."""

    def __init__(self, core: _Core, run_id: str, timeout: float, any_child: bool, expect: int) -> None:
        self._core = core
        self._run_id = run_id
        self._deadline = time.monotonic() + timeout
        self._any_child = any_child
        self._expect = expect
        self._wait = 0.0

    def next_call(self) -> _Call[ChildrenJoin]:
        self._wait = max(0.0, min(WAIT_PER_REQUEST, self._deadline - time.monotonic()))
        return self._core.join(self._run_id, self._wait, self._any_child, self._expect)

    def finished(self, joined: ChildrenJoin) -> bool:
        return joined.done or self._wait <= 0


class _Resume:
    """Where a stream stands, so that a reconnect continues right after the last message."""

    def __init__(self, after: int | None, retries: int, reconnects: int, backoff: float) -> None:
        self.last = after
        #: Whether a connection was ever opened: before that, failing to connect is an error to
        #: report soon (``retries``); after it, a server restart to wait out (``reconnects``).
        self.opened = False
        self._failures = 0
        self._retries = retries
        self._reconnects = reconnects
        self._backoff = backoff

    def headers(self) -> dict[str, str]:
        return {"Last-Event-ID": str(self.last)} if self.last is not None else {}

    def take(self, event: ServerSentEvent) -> StreamMessage | None:
        """The message an SSE event carries; None for ``server/reconnect`` (and anything without
        an id). The parser gives an event without an ``id`` line the last id seen, as the SSE
        specification says, so ``server/reconnect`` is told apart by its type."""
        if event.event == "server/reconnect":
            # The server ends this connection on purpose (a drain, the connection's lifetime):
            # coming back is the plan, not a failure, so the reconnects start afresh. A stream
            # that has had no message yet (a quiet firehose) resumes from where the server says
            # it stood, so what is said while the server restarts is not missed.
            self._failures = 0
            if self.last is None and event.data:
                stood = orjson.loads(event.data).get("lastEventId")
                if isinstance(stood, int) and not isinstance(stood, bool):
                    self.last = stood
            return None
        if not event.id:
            return None
        message = StreamMessage(int(event.id), event.event, orjson.loads(event.data) if event.data else {})
        self._failures = 0
        self.last = message.id
        return message

    def failed(self, error: Exception) -> float:
        """The pause before reconnecting after ``error`` (a lost connection, or a 503 from a
        draining replica: at least its ``Retry-After``); re-raises it once retries are spent."""
        self._failures += 1
        if self._failures > (self._reconnects if self.opened else self._retries):
            if isinstance(error, _Retryable):
                _problem_of_stream(error.response)
            raise error
        pause = retry.pause(self._backoff, self._failures)
        if isinstance(error, _Retryable):
            pause = max(pause, _retry_after(error.response))
        return pause


class _Stream:
    """One SSE subscription as both clients follow it: where to connect, how to resume, when to stop."""

    def __init__(self, path: str, params: dict[str, str], resume: _Resume) -> None:
        self.path = path
        self.params = params
        self.resume = resume
        #: A run stream's mode, once known: it decides whether ``subagent/end`` ends the stream.
        self.mode: str | None = None
        #: Set when a message ended the stream (as opposed to the server closing the connection).
        self.finished_by_message = False

    def connect_options(self) -> dict[str, Any]:
        return {"params": self.params, "headers": self.resume.headers(), "timeout": STREAM_TIMEOUT}

    def finished(self, message: StreamMessage) -> bool:
        """Whether this message ends the stream (it is then the last one given out)."""
        if self.mode is not None and closes_run_stream(message.event, self.mode):
            self.finished_by_message = True
        return self.finished_by_message

    def over(self, run: Run) -> bool:
        """After the server closed the connection: whether the stream has nothing more to say
        (else the server restarted or the connection's lifetime ran out: reconnect)."""
        return self.resume.last is not None and run.status == "ended"


def _problem_of_stream(response: httpx.Response) -> None:
    if response.is_error:
        decode(response, Run)


def _open_stream_refused(response: httpx.Response) -> None:
    """Raise for a refused stream: retryably for a replica that is draining or overloaded."""
    if response.status_code in RETRIED_STATUSES:
        raise _Retryable(response)
    _problem_of_stream(response)


def _retry_after(response: httpx.Response) -> float:
    """The ``Retry-After`` seconds of ``response`` (0 when it has none; at most a minute)."""
    try:
        return min(60.0, max(0.0, float(response.headers.get("retry-after", "0"))))
    except ValueError:
        return 0.0


Http = TypeVar("Http", httpx.Client, httpx.AsyncClient)
Transport = TypeVar("Transport", httpx.BaseTransport, httpx.AsyncBaseTransport)


class _Client(Generic[Http, Transport]):
    """What both clients are made of: their options, written once, and an httpx client of their kind.

    ``retries``: how often a request is retried after a transport error or a 429/502/503/504,
    with exponential ``backoff``; ``timeout``: seconds per request (long polls get their wait on
    top); ``reconnects``: how many failed reconnects in a row a stream that was open survives
    (default: ``retries``; a large number waits out a server restart of any length);
    ``retry_seconds``: how long a child's output (``ingest_cli_stream``, the stream pushers) is
    sent again after failures in a row, however many tries that takes.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        retries: int = 5,
        backoff: float = 0.2,
        timeout: float = 30.0,
        reconnects: int | None = None,
        retry_seconds: float = RETRY_SECONDS,
        transport: Transport | None = None,
    ) -> None:
        self._core = _Core(token, retries, backoff, timeout, reconnects, retry_seconds)
        self._http: Http = self._open(base_url, timeout, transport)

    def _open(self, base_url: str, timeout: float, transport: Transport | None) -> Http:
        raise NotImplementedError

    def _unreachable(self, error: httpx.TransportError) -> LastwordConnectionError:
        """``error``, met once the retries were spent, as the clients' own error."""
        if isinstance(error, LastwordConnectionError):
            return error
        unreachable = LastwordConnectionError(str(self._http.base_url).rstrip("/"), error)
        unreachable.__cause__ = error
        return unreachable

    def _reconnect_pause(self, stream: _Stream, error: Exception) -> float:
        """The pause before a stream reconnects; the clients' own error once there is to be none."""
        try:
            return stream.resume.failed(error)
        except httpx.TransportError as lost:
            raise self._unreachable(lost) from lost


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
