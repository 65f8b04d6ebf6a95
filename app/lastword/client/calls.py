"""The requests both clients send: one :class:`_Call` per operation, built by one :class:`_Core`.

Both clients share one core (:class:`_Core`): every method's request is a :class:`_Call` the
core builds, with the function that decodes its answer (:mod:`lastword.client.answers`); the
clients only send and receive, one with blocking I/O and one awaiting it, so they cannot drift
apart (a test compares their public methods), and every operation of the REST API has a method
(``tests/test_client_coverage.py`` walks ``openapi/openapi.json``).

Retries are safe because nothing is ever sent twice under a new identity: events get an
``eventId`` before the first attempt (a retried batch is counted as duplicates, not stored
twice), runs get a ``runId`` before the first attempt (a retried create answers 200 with the
same run), and ending a turn and closing a run are idempotent on the server. Starting a turn is
not: ``next_turn`` is a ``_Call`` with ``once``, sent again only when it surely was not carried
out. What is retried and how long each pause is comes from :mod:`lastword.client.retry`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel
from tenacity import RetryCallState, retry_if_exception, stop_after_attempt

from lastword.client import retry
from lastword.client.answers import _decoder, _Retryable, _text, _tool_result_or_none
from lastword.client.pusher import with_event_ids
from lastword.client.retry import RetryWindow
from lastword.client.streams import _Resume, _Stream
from lastword.rules.ids import new_run_id
from lastword.schemas import (
    AppendResult,
    ChildrenJoin,
    DeliveryList,
    EventPage,
    Health,
    IngestResult,
    Run,
    RunList,
    SubagentResult,
    ToolResult,
    TranscriptPage,
)


T = TypeVar("T")


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


def _turn_params(turn: int | None) -> dict[str, Any]:
    return {"turn": turn} if turn else {}


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
